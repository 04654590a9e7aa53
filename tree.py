"""The rollout tree: ONE builder for training and evaluation, for every chain of roles (roles.py).

One tree per problem (a batch is a forest), levels in the order of the chain:

    problem --Retriever x R--> examples --Planner x G--> plan --Coder x M--> program --sandbox--> r
                                                                   | fails a visible test
                                                                   +--Debugger x D--> repair --sandbox--> r'

'expand' roles give n children to every node of the level above; a 'repair' role gives n children to
every program that fails its visible tests (the role's visible_job, roles.py), for `debug_rounds` rounds (training
1; evaluation up to 3, each round repairing the repairs that still fail). Every level but the Coder is
optional: the chains train.py and eval.py run are roles.CHAINS.

    tree = build(problems, ["planner", "coder"], {"planner": G, "coder": M}, generate)  # each program's Result
    reward.step_rewards(tree, problems, args)  # each program node's reward, written once (reward.py)
    credit = advantages(tree)              # {role: Credit(adv [N], valid [N], reward [N], frac_zero_std)}

`generate(role, chats, n)` samples n completions per chat (prompt-major, len(chats) * n of them) and
returns their texts, or an object with `.texts` (a rollout.Rollout: kept in tree.outputs[role], in
call order, so the trainer finds each node's row there). Credit: grpo.tree_advantages on the
Retriever/Planner/Coder levels (a node's reward = mean or max of the final rewards below it,
normalised among its siblings); grpo.debugger_advantages on the repairs of each failing program.
The Coder keeps its pre-repair reward (our choice: its job is a correct program, not a repairable one;
crediting it with its repairs would also reward wrong programs within a group where the right ones get
no repairs); `debug_gamma` > 0 adds gamma x mean(its valid repairs' rewards) (our choice to offer; 0 by
default).
"""
from dataclasses import dataclass, field

import torch

import coder
import grpo
import roles
import sandbox
from reward import no_error


@dataclass
class Node:
    role: str  # a role name, or "problem" for a root
    parent: int  # node id of the parent; -1 for a root
    problem: int  # index into tree.problems
    text: str = ""  # the completion
    out: object = None  # role.parse(text); for a root: {"examples": ...} in corpus mode, else {}
    call: int = -1  # which generate() call of its role made it (tree.outputs[role][call])
    row: int = -1  # its row in that call's output
    valid: bool = False  # enters its sibling group (a non-empty completion, and for 'drop' roles a parse)
    fixed: bool = False  # its credit is 0 whatever lies below (an empty parse of a 'zero' role)
    program: str | None = None  # program roles: what the sandbox ran
    result: sandbox.Result | None = None  # program roles: the run on all tests
    visible: sandbox.Result | None = None  # the run on the visible tests (programs checked for repair)
    reward: float = 0.0  # program roles: written once, by reward.step_rewards (0 until then)


@dataclass
class Tree:
    problems: list
    chain: list
    nodes: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)  # role -> [what generate returned, per call]

    def of(self, role: str) -> list[int]:
        """Node ids of a role in generation order (call, then row)."""
        return sorted((i for i, n in enumerate(self.nodes) if n.role == role),
                      key=lambda i: (self.nodes[i].call, self.nodes[i].row))

    def upstream(self, i: int) -> dict:
        """What the roles above node i (and i itself) produced, by key: the input of the role below."""
        chain = []
        while i >= 0:
            chain.append(self.nodes[i])
            i = self.nodes[i].parent
        up = {}
        for n in reversed(chain):  # root first, so a nearer node wins
            if n.role == "problem":
                up.update(n.out or {})
            else:
                up[roles.ROLES[n.role].key] = n.out
                if n.program is not None:
                    up["program"] = n.program
        return up

    def final_programs(self) -> list[list]:
        """Per problem, one program per Coder node: the last repair along its first repair child of each
        round (what evaluation scores), or the Coder's own program."""
        children = {}
        for i, n in enumerate(self.nodes):
            if n.parent >= 0 and roles.ROLES.get(n.role, None) and roles.ROLES[n.role].place == "repair":
                children.setdefault(n.parent, []).append(i)
        out = [[] for _ in self.problems]
        for i in self.of("coder"):
            j = i
            while j in children:
                j = children[j][0]
            out[self.nodes[i].problem].append(self.nodes[j].program)
        return out


def _texts(out) -> list:
    return list(out.texts) if hasattr(out, "texts") else list(out)


def _expand(tree, role, parents, chats, n, generate):
    """n children of role under each node of `parents` (chats: one per parent): generate, parse, add."""
    out = generate(role.name, chats, n)
    texts = _texts(out)
    if len(texts) != len(chats) * n:
        raise ValueError(f"generate('{role.name}') returned {len(texts)} completions for {len(chats)} chats x {n}")
    call = len(tree.outputs.setdefault(role.name, []))
    tree.outputs[role.name].append(out)
    made = []
    for row, text in enumerate(texts):
        parsed = role.parse(text)
        empty = not role.program and not parsed  # a program role's empty parse (no code) scores 0 in the sandbox
        tree.nodes.append(Node(role.name, parents[row // n], tree.nodes[parents[row // n]].problem, text, parsed,
                               call, row, valid=bool(text.strip()) and not (empty and role.empty == "drop"),
                               fixed=empty and role.empty == "zero"))
        made.append(len(tree.nodes) - 1)
    return made


def _score(tree, ids, run, timeout_s, judge=True):
    """Programs of nodes `ids` -> sandbox on all tests -> result (judge=False: programs only). The reward is
    not written here: reward.step_rewards writes every program node's reward from its result."""
    for i in ids:
        n = tree.nodes[i]
        code = coder.extract_code(n.text)
        n.program = coder.program(tree.problems[n.problem], code)
    if not judge:
        return
    results = run([tree.problems[tree.nodes[i].problem].sandbox_job(tree.nodes[i].program, timeout_s) for i in ids])
    for i, res in zip(ids, results):
        tree.nodes[i].result = res


def _failing_visible(tree, ids, run, timeout_s, role) -> list[int]:
    """Of the program nodes `ids`, those that fail a visible test (run on the visible tests alone, the repair
    role's visible_job; a program that passed every test passes the visible one and is not run again)."""
    todo = [i for i in ids if tree.nodes[i].result is None or tree.nodes[i].result.verdict != "passed"]
    jobs = [role.visible_job(tree.problems[tree.nodes[i].problem], tree.nodes[i].program, timeout_s) for i in todo]
    todo = [i for i, job in zip(todo, jobs) if job is not None]  # no visible test: never repaired
    for i, res in zip(todo, run([job for job in jobs if job is not None]) if todo else []):
        tree.nodes[i].visible = res
    return [i for i in todo if tree.nodes[i].visible.verdict != "passed"]


def build(problems, chain, sizes: dict, generate, run=None, timeout_s: float = 4.0,
          debug_rounds: int = 1, corpus=None, k: int | None = None, judge: bool = True) -> Tree:
    """The forest of rollouts for `problems` (one tree each) under the roles `chain` (roles.parse_chain).

    sizes: {role: children per node} (R, G, M, D); generate(role, chats, n): module docstring;
    run(jobs) -> [sandbox.Result] (default sandbox.run_many);
    debug_rounds: rounds of repair for a 'repair' role; corpus: a retriever.Corpus for `--retrieval
    corpus` (the roots carry its k examples; no Retriever node is made even if the chain names it);
    judge=False (evaluation, which scores the final programs itself): programs are not run on all tests,
    only on the visible one where a repair role needs it. Every node's reward stays 0: reward.step_rewards
    writes the programs' (training, between build and advantages).
    """
    run = run or sandbox.run_many
    tree = Tree(list(problems), list(chain))
    for b, p in enumerate(problems):
        examples = corpus.search(p, k or 2) if corpus is not None else None
        tree.nodes.append(Node("problem", -1, b, out={"examples": examples} if examples is not None else {}))
    level = list(range(len(problems)))
    for name in chain:
        role = roles.ROLES[name]
        if name == "retriever" and corpus is not None:
            continue
        if role.place == "expand":
            chats = [role.messages(problems[tree.nodes[i].problem], tree.upstream(i)) for i in level]
            level = _expand(tree, role, level, chats, sizes[name], generate)
            if role.program:
                _score(tree, level, run, timeout_s, judge)
        else:  # repair: the programs of the level above that fail a visible test, round after round
            for _ in range(debug_rounds):
                failing = _failing_visible(tree, level, run, timeout_s, role)
                if not failing:
                    break
                chats = []
                for i in failing:
                    up = tree.upstream(i)
                    up["feedback"] = role.feedback(problems[tree.nodes[i].problem], tree.nodes[i].visible)
                    chats.append(role.messages(problems[tree.nodes[i].problem], up))
                level = _expand(tree, role, failing, chats, sizes[name], generate)
                _score(tree, level, run, timeout_s, judge)
                for i in level:  # a repair with no program (its reward stays 0) leaves the program as it was:
                    if tree.nodes[i].program is None:  # the next round repairs that one, evaluation scores it
                        tree.nodes[i].program = tree.nodes[tree.nodes[i].parent].program
    return tree


@dataclass
class Credit:
    adv: torch.Tensor  # [N] one advantage per node of the role, in tree.of(role) order (= rollout rows)
    valid: torch.Tensor  # [N] bool: the node enters the loss
    reward: torch.Tensor  # [N] its credit R (tree roles) or reward (repairs)
    frac_zero_std: float  # fraction of the role's sibling groups without signal (grpo's zero_std: per group)


def advantages(tree: Tree, credit: str = "mean", scale: bool = True, coder_baseline: str = "plan",
               debug_reward: str = "pass_rate", debug_gamma: float = 0.0, temperature: float = 0.5) -> dict:
    """{role: Credit} for every role of the tree (module docstring). coder_baseline 'problem': all Coder
    nodes of a problem form one group (as grpo.coder_advantages); debug_reward: pass_rate | gain.
    credit 'softmax' (the authors' release, grpo.softmax_credit at `temperature`): a node weighs the PASS
    RATES of the programs below it (whatever --reward gives the programs themselves) and earns the
    no-error bonus when every one of them ran all its tests to a verdict (reward.no_error)."""
    if coder_baseline not in ("plan", "problem"):
        raise ValueError(f"unknown coder baseline '{coder_baseline}': use plan or problem")
    nodes = tree.nodes
    repairs = {i for i, n in enumerate(nodes) if n.role != "problem" and roles.ROLES[n.role].place == "repair"}
    # The tree rule credits every node but the repairs: the problems (roots), retrievals, plans, programs.
    credited = [i for i in range(len(nodes)) if i not in repairs]
    place = {node: k for k, node in enumerate(credited)}  # node id -> its place in `credited`
    parent = torch.tensor([place.get(nodes[i].parent, -1) for i in credited])  # [N], -1 for a root
    reward = torch.tensor([nodes[i].reward for i in credited], dtype=torch.float32)  # [N], read at the programs
    if debug_gamma:
        for k, i in enumerate(credited):
            its_repairs = [c for c in repairs if nodes[c].parent == i and nodes[c].valid]
            if its_repairs:
                reward[k] += debug_gamma * sum(nodes[c].reward for c in its_repairs) / len(its_repairs)
    group = parent.clone()  # siblings: the same parent
    if coder_baseline == "problem":
        for k, i in enumerate(credited):
            if nodes[i].role == "coder":
                group[k] = len(credited) + nodes[i].problem  # an id of its own: not the plans' group
    valid = torch.tensor([nodes[i].valid for i in credited])
    fixed = torch.tensor([nodes[i].fixed for i in credited])
    soft = {}
    if credit == "softmax":  # a program never run (evaluation) has no result: pass rate 0, not clean
        results = [nodes[i].result for i in credited]
        soft = {"temperature": temperature,
                "scores": torch.tensor([r.pass_rate if r else 0.0 for r in results], dtype=torch.float32),
                "clean": torch.tensor([bool(r) and no_error(r) for r in results])}
    node_reward, node_adv, zero_std = grpo.tree_advantages(reward, valid, parent, credit, scale, group, fixed,
                                                           **soft)
    out = {}
    for name in tree.chain:
        ids = tree.of(name)
        if not ids or name not in roles.ROLES or roles.ROLES[name].place == "repair":
            continue
        places = [place[i] for i in ids]  # the role's nodes, in rollout-row order
        zero_of_group = {group[k].item(): zero_std[k].item() for k in places}
        out[name] = Credit(node_adv[places], valid[places], node_reward[places],
                           sum(zero_of_group.values()) / len(zero_of_group))
    for name in tree.chain:
        ids = tree.of(name)
        if not ids or roles.ROLES[name].place != "repair":
            continue
        failing = sorted({nodes[i].parent for i in ids})  # the programs that were repaired
        D = len(ids) // len(failing)  # repairs per program
        repairs_of = {q: [i for i in ids if nodes[i].parent == q] for q in failing}
        repaired = torch.tensor([[nodes[i].reward for i in repairs_of[q]] for q in failing],
                                dtype=torch.float32).view(-1, D)  # [K, D]
        repair_valid = torch.tensor([[nodes[i].valid for i in repairs_of[q]] for q in failing]).view(-1, D)
        original = torch.tensor([nodes[q].reward for q in failing], dtype=torch.float32)  # [K]
        repair_reward, repair_adv, repair_zero = grpo.debugger_advantages(repaired, repair_valid, original,
                                                                          debug_reward, scale)
        grouped = [i for q in failing for i in repairs_of[q]]  # the repairs, program by program
        position = {i: k for k, i in enumerate(grouped)}
        back = torch.tensor([position[i] for i in ids])  # grouped order -> rollout-row order
        out[name] = Credit(repair_adv.flatten()[back], repair_valid.flatten()[back], repair_reward.flatten()[back],
                           repair_zero.float().mean().item())
    return out
