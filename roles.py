"""The role registry: every agent of the rollout tree, in tree order, as one small table.

A role is one short file with three pieces (planner.py is the model):
    messages(problem, upstream)  chat prompt; `upstream` holds what the roles above it produced,
                                 by key: {"examples": ..., "plan": ..., "program": ..., "feedback": ...}
    parse(text)                  completion -> what goes downstream (stored under the role's `key`)
    sft_target(problem)          cold-start SFT completion, or None
plus its place in the tree (tree.py builds it, grpo.tree_advantages credits it):
    "expand"  n children under every node of the level above (Retriever R, Planner G, Coder M);
    "repair"  n children under each program that fails its visible tests (Debugger D); the repairs of
              one program are one baseline group, rewarded on all tests. Such a role also says which
              tests are visible (visible_job) and what its prompt is told of them (feedback): tree.py
              reaches it only through this table.

Adding a fifth role: write its file (the three pieces), add ONE line to ROLES below at its place in the
order, and its tests (tests/test_<role>.py); `--roles` then accepts any chain that contains it
(`parse_chain`), models.add_role_adapters gives it its own LoRA adapter, tree.build places it.
"""
from dataclasses import dataclass
from typing import Callable

import coder
import planner
import rollout
from mapcoder import debugger, retriever


@dataclass(frozen=True)
class Role:
    name: str  # also its LoRA adapter's name
    place: str  # "expand" or "repair" (module docstring)
    messages: Callable  # (problem, upstream dict) -> chat messages
    parse: Callable  # completion text -> value for the roles below, upstream[key]
    key: str  # name of the parsed output in the upstream dict
    sft_target: Callable | None  # problem -> str | None; None: the role has no cold-start SFT
    stop: str | None = None  # generation stops at this pattern (a closed code block)
    program: bool = False  # its output is a program: the sandbox scores it (final reward)
    empty: str = "zero"  # an empty parse: "zero" (kept in its group with credit 0: an unparseable retrieval,
    #                      a completion without code) or "drop" (left out of its group: an empty plan, as before)
    budget: str = "max_code_tokens"  # the flag (args attribute) holding its completions' token budget
    sft_upstream: Callable | None = None  # problem -> upstream dict of its SFT prompt (None: no pair); default
    #                                      sft.pairs: the reference plan, when the chain has a Planner
    visible_job: Callable | None = None  # "repair" roles: (problem, program, timeout_s) -> the sandbox job of the
    #                                      program's visible tests alone, or None (no visible test: never repaired)
    feedback: Callable | None = None  # "repair" roles: (problem, visible sandbox.Result) -> what its prompt is told


def _planner_messages(problem, upstream: dict) -> list[dict]:
    return retriever.with_examples(planner.messages(problem), upstream.get("examples") or [])


def _coder_messages(problem, upstream: dict) -> list[dict]:
    return coder.messages(problem, upstream.get("plan"))


ROLES = {role.name: role for role in (  # tree order; one line per role
    Role("retriever", "expand", retriever.messages, retriever.parse, "examples", None,
         budget="max_retrieval_tokens"),  # recall has no reference: no SFT (mapcoder/retriever.py)
    Role("planner", "expand", _planner_messages, planner.parse, "plan", planner.sft_target, empty="drop",
         budget="max_plan_tokens"),
    Role("coder", "expand", _coder_messages, coder.extract_code, "code", coder.sft_target, coder.STOP, True),
    Role("debugger", "repair", debugger.messages, debugger.parse, "repair", debugger.sft_target, debugger.STOP, True,
         sft_upstream=debugger.sft_upstream, visible_job=debugger.visible_job, feedback=debugger.feedback),
)}

CHAINS = ("coder", "planner,coder", "planner,coder,debugger", "retriever,planner,coder",
          "retriever,planner,coder,debugger")  # the chains `make frameworks` compares (any valid chain is accepted)


PHASES = {"retriever": "retrieval_generation", "planner": "plan_generation", "coder": "code_generation",
          "debugger": "repair_generation"}  # each role's sampling as a --profile row (progress.PHASES)


def sample(policy, tok, args, clock, role: str, chats: list, n: int) -> rollout.Rollout:
    """n completions per chat from the role's LoRA adapter: rollout.sample with the role's token budget
    (max_tokens) and stop pattern, timed as the role's phase. Training hands it to tree.build as the tree's
    generate(role, chats, n) (bound with partial), so the tree's sampling goes down to rollout.py and never
    back up into train.py. Returns the Rollout of len(chats) * n rows."""
    with clock(PHASES.get(role, f"{role}_generation")):
        policy.set_adapter(role)
        return rollout.sample(policy, tok, chats, n, max_tokens(args, role), args.temperature, args.top_p,
                              stop=ROLES[role].stop)


def sft_roles(chain) -> list[str]:
    """The roles of a chain that cold-start SFT trains (sft.py): those with an sft_target, in tree order."""
    return [r for r in chain if ROLES[r].sft_target is not None]


def max_tokens(args, role: str) -> int:
    """The token budget of a role's completions (--max-<...>-tokens; the constant of 'dr_grpo')."""
    return getattr(args, ROLES[role].budget)


def parse_chain(text: str) -> list[str]:
    """'--roles' value -> role names in tree order. A chain names known roles, each once, in the order of
    ROLES, includes the coder, and puts every 'repair' role after it. Raises ValueError (one line).

    >>> parse_chain("retriever,planner,coder,debugger")
    ['retriever', 'planner', 'coder', 'debugger']
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    order = list(ROLES)
    if bad := [n for n in names if n not in ROLES]:
        raise ValueError(f"unknown role '{bad[0]}' in --roles {text!r}: roles are {', '.join(order)}")
    if len(set(names)) != len(names) or names != sorted(names, key=order.index):
        raise ValueError(f"--roles {text!r}: each role once, in tree order ({','.join(order)})")
    if "coder" not in names:
        raise ValueError(f"--roles {text!r}: every chain needs the coder (e.g. {' | '.join(CHAINS)})")
    if any(ROLES[n].place == "repair" and order.index(n) < order.index("coder") for n in names):
        raise ValueError(f"--roles {text!r}: a repair role comes after the coder")
    return names
