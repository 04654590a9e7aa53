"""The layout as a reader meets it: the project's modules import each other without a cycle, and one GRPO
step hands the policy only downward, along the import arrows (never back into a module that imports the
one it is in: a callback into the caller's caller is what makes a reader climb back up the files)."""
import ast
import sys
from pathlib import Path

import torch

import data
import sandbox
import train
from test_policy import fake_results

ROOT = Path(__file__).resolve().parent.parent
SKIP = {"tests", "bench", "course", "docs", ".venv", "runs"}


def module_name(path: Path) -> str:
    """ROOT/fast/chunked.py -> 'fast.chunked'; ROOT/data/__init__.py -> 'data'."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports} over the top level and its packages (not tests/bench/course):
    `import x`, `from x.y import z`, and `from x import y`: the module x/y.py when it exists (a package's
    __init__ that lists its modules does not count as imported by them), else x itself."""
    files = [p for p in ROOT.rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)]
    names = {module_name(p) for p in files}
    graph = {}
    for p in files:
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & names  # `from fast import chunked`
                if node.module in names and len(subs) < len(node.names):  # a name defined in the module itself
                    deps.add(node.module)
                deps |= subs
        graph[module_name(p)] = deps - {module_name(p)}
    return graph


def importers(graph: dict) -> dict[str, set[str]]:
    """{module: every module that imports it, directly or through others}."""
    above = {m: set() for m in graph}
    for m in graph:
        stack, seen = list(graph[m]), set()
        while stack:
            d = stack.pop()
            if d not in seen:
                seen.add(d)
                stack += graph.get(d, ())
        for d in seen:
            above.setdefault(d, set()).add(m)
    return above


def test_import_graph_sees_the_known_arrows_and_has_no_cycle():
    graph = import_graph()
    assert {"rollout", "decode", "grpo"} <= graph["update"] | graph["rollout"]  # the reader finds known arrows
    assert "fast.chunked" in graph["fast.shared_prompt"] and "sandbox" in graph["mapcoder.debugger"]
    cycles = [m for m, ups in importers(graph).items() if m in ups]
    assert cycles == []


def policy_walk(policy, step) -> list[tuple[str, str]]:
    """Run step() and list the calls that receive the policy (an argument, or an object holding it as
    .policy), as (calling module, called module) pairs between two different project modules, in order,
    each pair once. The calling module is the nearest project frame below (decorators and torch are skipped)."""
    def project(frame):
        f = frame.f_code.co_filename
        return f.startswith(str(ROOT)) and not SKIP & set(Path(f).relative_to(ROOT).parts)

    walk = []

    def profile(frame, event, arg):
        if event != "call" or not project(frame):
            return
        values = frame.f_locals.values()
        if not any(v is policy or getattr(v, "policy", None) is policy for v in values):
            return
        caller = frame.f_back
        while caller is not None and not project(caller):
            caller = caller.f_back
        if caller is None:
            return
        pair = (module_name(Path(caller.f_code.co_filename)), module_name(Path(frame.f_code.co_filename)))
        if pair[0] != pair[1] and pair not in walk:
            walk.append(pair)

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return walk


def test_one_grpo_step_hands_the_policy_only_down_the_import_arrows(tiny_policy, tokenizer, monkeypatch):
    """The walk of the policy through train.grpo_step: train -> tree -> roles.sample -> rollout -> decode
    (sampling, cpu_linear's fused products around it), then train -> update -> the shared-prompt forward ->
    the LM head in pieces. Catches a callback up into train.py (tree.build calling a train.py function with
    the policy: the step's sampling once lived there) or update.py's fast path calling back into update.py."""
    monkeypatch.setattr(sandbox, "run_many", fake_results([1.0, 0.0, 0.5, 0.5]))
    args = train.get_args(["--num-plans", "2", "--codes-per-plan", "2", "--max-plan-tokens", "8",
                           "--max-code-tokens", "8"])
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=1e-3)
    walk = policy_walk(tiny_policy, lambda: train.grpo_step(tiny_policy, tokenizer, data.load("train")[:2], args, opt))
    above = importers(import_graph())
    climbs = [(a, b) for a, b in walk if b in above[a]]  # b imports a: the policy went back up
    assert climbs == []
    assert walk == [("tree", "roles"), ("roles", "rollout"), ("rollout", "fast.cpu_linear"), ("rollout", "decode"),
                    ("train", "update"), ("update", "fast.shared_prompt"), ("fast.shared_prompt", "fast.chunked")]

