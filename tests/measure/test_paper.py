"""The paper's comparison: eval.py's batching by length, calls / tokens per problem, seeded subsets and the
result cache; measure/paper.py's table; and `make paper`'s small mode end to end on the tiny model."""
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import data
import eval as ev
import rollout
import sandbox
from measure import cache, harness, paper
from test_eval import _result, _Rows

ROOT = Path(__file__).resolve().parents[2]


def _args(**kw):
    return types.SimpleNamespace(**{**dict(batch_size=2, n=1, max_plan_tokens=8, max_code_tokens=8, temperature=0.0,
                                           sandbox_timeout=1.0, workers=1, multi_sample=None, cache=None, model="m",
                                           batch_order="length", batch_tokens=8192, debug_rounds=3,
                                           cached_only=False), **kw})


def test_batches_by_prompt_length_programs_in_the_sets_order(monkeypatch):
    """Prompts of 30, 10, 20 characters: batches of 2 by length are (10, 20) then (30); every problem still
    gets its own program, and its (calls, tokens): 1 call of 3 tokens direct; plan: 1 plan + 1 code."""
    seen = []

    def fake_sample(model, tok, chats, n, *a, **k):
        names = [c[-1]["content"].split("`")[1] if "`" in c[-1]["content"] else "plan" for c in chats]
        seen.append(names)
        return _Rows([f"```python\ndef {name}(): return 0\n```" for name in names])

    monkeypatch.setattr(rollout, "sample", fake_sample)
    probs = [data.Problem(f"t/{i}", f"Write `f{i}`." + "." * w, f"f{i}", ("assert True",)) for i, w in enumerate([21, 1, 11])]
    costs = []
    out, _ = ev.generate_programs(None, None, probs, "direct", _args(batch_order="length"), None, costs)
    assert seen == [["f1", "f2"], ["f0"]]
    assert out == [[f"def f{i}(): return 0\n"] for i in range(3)] and costs == [(1, 3)] * 3
    seen.clear()
    ev.generate_programs(None, None, probs, "direct", _args(batch_order="given"), None)
    assert seen == [["f0", "f1"], ["f2"]]
    costs = []
    ev.generate_programs(None, None, probs, "plan", _args(batch_order="length"), None, costs)
    assert costs == [(2, 6)] * 3  # one plan and one program of 3 tokens each
    seen.clear()  # prompts of 11, 21, 31 characters within 40 padded: 2 x 21 = 42 > 40, so each alone
    ev.generate_programs(None, None, probs, "direct", _args(batch_tokens=40), None)
    assert seen == [["f1"], ["f2"], ["f0"]]


def test_batch_plan_keeps_a_long_prompt_from_padding_a_whole_batch():
    """Rows cap and padded-token cap (rows x longest prompt): lengths 10 10 10 10 | 50 | 200 at 4 rows and 100
    tokens: the first four fit (4 x 10 = 40), 50 joins nothing (it would start a 5th row; alone 50), 200 > 100 alone;
    MBPP's test split's tail (the 52 longest at 200 tokens or less and one of 1,739) at 64 rows and 8,192: 40 rows
    of 200 = 8,000, then 12, then the long one alone."""
    assert ev.batch_plan([10, 10, 10, 10, 50, 200], 4, 100) == [[0, 1, 2, 3], [4], [5]]
    assert ev.batch_plan([10, 50, 50], 4, 100) == [[0, 1], [2]]  # 3 x 50 = 150 > 100
    assert [len(b) for b in ev.batch_plan([200] * 52 + [1739], 64, 8192)] == [40, 12, 1]
    assert ev.batch_plan([], 4, 100) == []


def test_subset_is_seeded_fixed_and_nested():
    probs = list(range(50))
    a, b = harness.subset(probs, 10, "humaneval"), harness.subset(probs, 20, "humaneval")
    assert len(a) == 10 and a == sorted(a) and set(a) <= set(b) and a == harness.subset(probs, 10, "humaneval")
    assert a != harness.subset(probs, 10, "val")  # each set its own draw
    assert harness.subset(probs, None, "x") == harness.subset(probs, 80, "x") == probs


def test_cache_skips_a_done_result_and_recomputes_a_changed_one(monkeypatch, tmp_path):
    """run_systems with --cache: the second run generates nothing and returns the stored rows; another token
    budget (a different key) computes again. A multi-call mode sees the seeded --multi-sample subset only."""
    generated = []

    def fake_generate(model, tok, problems, mode, args, adapters, costs=None, batches=None):
        generated.append((mode, len(problems)))
        costs += [(1, 5)] * len(problems)
        return [["prog"] for _ in problems], {"plan_tokens": None, "code_tokens": 5.0, "truncated_codes": 0.0}

    monkeypatch.setattr(ev, "generate_programs", fake_generate)
    monkeypatch.setattr(sandbox, "run_many", lambda jobs, workers=None: [_result("passed")] * len(jobs))
    probs = [data.Problem(f"t/{i}", "Write f.", "f", ("assert f() == 0",)) for i in range(4)]
    systems = [("base direct", None, "direct"), ("base mapcoder", None, "mapcoder")]
    args = _args(cache=str(tmp_path / "cache"), multi_sample=2)
    first = ev.run_systems(None, None, probs, systems, [1], args, None, "val", {})
    assert generated == [("direct", 4), ("mapcoder", 2)]
    assert first["base direct"]["calls_per_problem"] == 1.0 and first["base direct"]["problems"][0]["tokens"] == 5
    assert [p["task_id"] for p in first["base mapcoder"]["problems"]] == \
        [probs[i].task_id for i in harness.subset(probs, 2, "val")]
    again = ev.run_systems(None, None, probs, systems, [1], args, None, "val", {})
    assert generated == [("direct", 4), ("mapcoder", 2)] and again == json.loads(json.dumps(first))
    args.cached_only = True  # the table so far: base mapcoder is stored, a new system is not
    partial = ev.run_systems(None, None, probs, systems + [("base plan", None, "plan")], [1], args, None, "val", {})
    assert list(partial) == ["base direct", "base mapcoder"] and len(generated) == 2
    args.cached_only, args.max_code_tokens = False, 16
    ev.run_systems(None, None, probs, systems[:1], [1], args, None, "val", {})
    assert generated[-1] == ("direct", 4) and len(generated) == 3


def test_a_stopped_set_resumes_at_its_batch(monkeypatch, tmp_path):
    """Five problems in batches of 2: the first run stops in its third batch (the sampler raises); the rerun
    with the same store generates that batch only, and its programs, (calls, tokens) and token means equal
    those of a run that never stopped. Another token budget (another key) reuses no batch."""
    calls = []

    def fake_sample(model, tok, chats, n, *a, **k):
        names = [c[-1]["content"].split("`")[1] for c in chats]
        calls.append(names)
        if names == ["f4"] and stop:
            raise KeyboardInterrupt
        return _Rows([f"```python\ndef {x}(): return {len(x) * 'x'!r}\n```" for x in names])

    monkeypatch.setattr(rollout, "sample", fake_sample)
    probs = [data.Problem(f"t/{i}", f"Write `f{i}`.", f"f{i}", ("assert True",)) for i in range(5)]
    args = _args(batch_order="given")
    store = lambda a: cache.Batches(tmp_path, "sys", "val", a, "direct", "d")  # noqa: E731
    stop = True
    with pytest.raises(KeyboardInterrupt):
        ev.generate_programs(None, None, probs, "direct", args, None, [], store(args))
    assert calls == [["f0", "f1"], ["f2", "f3"], ["f4"]]
    stop, costs = False, []
    calls.clear()
    resumed = ev.generate_programs(None, None, probs, "direct", args, None, costs, store(args))
    assert calls == [["f4"]]
    whole_costs = []
    whole = ev.generate_programs(None, None, probs, "direct", args, None, whole_costs)
    assert resumed == whole and costs == whole_costs == [(1, 3)] * 5 and whole[1]["code_tokens"] == 3.0
    calls.clear()
    ev.generate_programs(None, None, probs, "direct", _args(batch_order="given", max_code_tokens=16), None, [],
                         store(_args(batch_order="given", max_code_tokens=16)))
    assert len(calls) == 3


def _row(solved: list, calls=1.0, tokens=10.0) -> dict:
    return {"mode": "direct", "pass@1": sum(solved) / len(solved), "calls_per_problem": calls,
            "tokens_per_problem": tokens, "verdicts": {},
            "problems": [{"task_id": f"t/{i}", "passed": int(s), "verdicts": ["passed" if s else "failed"],
                          "et_ms": 1.0 if s else None, "net": 1.0 if s else None, "mu_mb": 1.0 if s else None,
                          "nmu": 1.0 if s else None, "timed": int(s), "net_gt2": 0, "ref_et_ms": 1.0}
                         for i, s in enumerate(solved)]}


def test_paper_table_order_paired_test_and_steps(tmp_path):
    """core solves problems 0-9 of 20, base direct 0-1 and sft 0-9 but 2: McNemar against core, discordant
    b = 8 (only core) and c = 0: p = 2 / 2^8 = 0.0078125 (significant), sft b = 1, c = 0: p = 1.
    Rows in the paper's order whatever order the results hold; arms not in the results are 'not run';
    steps from each run's metrics.jsonl (grpo lines; sft and eval lines are not steps)."""
    run = tmp_path / "core"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in
                                               [{"phase": "sft", "step": 1}, {"phase": "eval", "step": 0},
                                                {"phase": "grpo", "step": 1}, {"phase": "grpo", "step": 2}]))
    rows = {"core": _row([1] * 10 + [0] * 10, 2.0, 60.0), "sft": _row([1, 1, 0] + [1] * 7 + [0] * 10),
            "base direct": _row([1, 1] + [0] * 18)}
    results = {"date": "2026-12-03 08:00", "cpu": "AMD EPYC, 2 cores", "model": "m", "temperature": 0.0,
               "load_start": 1.5, "load_end": 2.0, "sandbox": {"mode": "root"}, "ks": [1], "n": 1,
               "results": {"val": rows}, "set_sizes": {"val": 20},
               "systems": [{"name": s, "mode": "direct", "run": str(run) if s == "core" else None} for s in rows]}
    md = paper.markdown(results)
    lines = md.splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("| group"))) + 2  # the val block, past its head
    order = [ln.split("|")[2].strip() for ln in lines[start:start + 13]]
    assert order == ["base model, direct", "base model, Planner -> Coder", "SFT, direct", "SFT, Planner -> Coder",
                     "PPOCoder", "StepCoder", "CodeDPO", "single-agent GRPO", "MapCoder", "CollabCoder", "CoRe-Code",
                     "CoRe-Code + efficiency reward", "CoRe-Code as released"]
    base = next(ln for ln in lines if ln.startswith("| base | base model, direct"))
    assert " | 10.0 | " in base and " | 20 | -40.0, p = 0.00781 * | " in base and base.endswith(" | 1.0 | 10 |")
    sft = next(ln for ln in lines if ln.startswith("| SFT | SFT, Planner -> Coder"))
    assert " | 45.0 | " in sft and "-5.0, p = 1 |" in sft
    assert "| CoRe-Code | 50.0 | 2 |" in md and "| base model, direct | 10.0 * | – |" in md
    assert "AMD EPYC, 2 cores" in lines[0] and "load (1-min average) 1.5" in lines[0]


def test_make_paper_small_mode_end_to_end(tmp_path):
    """`make paper PAPER_SMALL=1` on the tiny model (tests/tiny_model.py) and an MBPP file in its own schema:
    decontamination, SFT, the arms train.py offers, every system on two 2-problem sets, the table; then a
    rerun reads every (system, benchmark) result from the cache and trains nothing, and `make paper-so-far` gives
    the same table from the cache alone."""
    rows = [{"task_id": i, "text": f"Write a function to add {i} to a number.", "code": f"def add_{i}(x):\n    return x + {i}",
             "test_list": [f"assert add_{i}(1) == {1 + i}", f"assert add_{i}(0) == {i}"], "test_setup_code": "",
             "challenge_test_list": []} for i in (11, 12, 13)]
    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tiny = f"{sys.executable} tests/tiny_model.py"
    sets = f"PAPER_SETS=mbpp:{mbpp}@test#2,val#2"  # two of the small mode's four sets: half the evaluation
    cmd = ["make", "-s", "paper", "PAPER_SMALL=1", sets, f"PAPER={tmp_path / 'paper'}", f"MBPP={mbpp}",
           f"PY={sys.executable}", f"TRAIN={tiny} train.py", f"EVAL={tiny} eval.py", "VENV=" + str(tmp_path / "venv")]
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".installed").touch()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)  # a hang guard
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = (tmp_path / "paper" / "table.md").read_text()
    assert "**0 near-duplicate pairs**" in table and "mbpp@test#2" in table
    for name in ("base model, direct", "SFT, Planner -> Coder", "SFT, direct", "single-agent GRPO", "MapCoder",
                 "CoRe-Code"):
        assert f"| {name} | " in table
    res = json.loads((tmp_path / "paper" / "compare" / "results.json").read_text())
    assert len(res["results"]) == 2 and all(len(r["base direct"]["problems"]) == 2 for r in res["results"].values())
    assert len(res["results"]["val#2"]["base mapcoder"]["problems"]) == 1  # the multi-call subset
    steps = (tmp_path / "paper" / "core" / "metrics.jsonl").read_text()
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    assert again.returncode == 0 and (tmp_path / "paper" / "core" / "metrics.jsonl").read_text() == steps
    assert again.stdout.count(" cached (") == 2 * len(res["systems"])
    so_far = subprocess.run([*cmd[:2], "paper-so-far", *cmd[3:]], cwd=ROOT, capture_output=True, text=True, env=env,
                            timeout=600)  # the table of a run still going: here every result is done
    assert so_far.returncode == 0 and so_far.stdout.count(" cached (") == 2 * len(res["systems"])
    rows = lambda f: [ln for ln in (tmp_path / "paper" / f).read_text().splitlines() if ln.startswith("| ")]  # noqa: E731
    assert rows("table-so-far.md") == rows("table.md") and len(rows("table.md")) > 20


def test_pooled_block_counts_every_problem_once_and_pairs_within_a_set():
    """val: core solves 0-9 of 20 (2 calls each), base 0-1; io_val: core solves 1 of 5 (1 call), base 3 others.
    Pooled over 25 problems: core 11/25 = 44.0 %, base 5/25 = 20.0 %, calls (20 x 2 + 5 x 1) / 25 = 1.8;
    McNemar: only core 8 + 1 = 9, only base 0 + 3 = 3: p = 2 (1 + 12 + 66 + 220) / 2^12 = 0.146 (by hand).
    The same task id in two sets is two problems (t/0 of val is not t/0 of io_val); a system run on one set only
    has no pooled row."""
    val = {"core": _row([1] * 10 + [0] * 10, 2.0), "base direct": _row([1, 1] + [0] * 18), "sft": _row([1] * 20)}
    io = {"core": _row([1, 0, 0, 0, 0]), "base direct": _row([0, 1, 1, 1, 0])}
    results = {"date": "d", "cpu": "c", "model": "m", "temperature": 0.0, "sandbox": {"mode": "root"}, "ks": [1],
               "n": 1, "results": {"val": val, "io_val": io}, "set_sizes": {"val": 20, "io_val": 5},
               "systems": [{"name": s, "mode": "direct"} for s in val]}
    both = paper.pooled(results)
    assert sorted(both) == ["base direct", "core"] and len(both["core"]["problems"]) == 25
    assert both["core"]["pass@1"] == pytest.approx(0.44) and both["core"]["calls_per_problem"] == pytest.approx(1.8)
    md = paper.markdown(results)
    assert "**all sets pooled: val (20) + io_val (5); every problem counts once**" in md
    pooled_base = [ln for ln in md.splitlines() if ln.startswith("| base | base model, direct")][-1]
    assert " | 20.0 | " in pooled_base and " | 25 | -24.0, p = 0.146 | " in pooled_base
    assert "| system | val | io_val | pooled | training steps |" in md
    assert "| SFT, Planner -> Coder | 100.0 * | not run | not run | – |" in md and "| CoRe-Code | 50.0 | 20.0 | 44.0 | – |" in md


def test_paired_tests_pooled_each_run_against_its_start_in_its_own_mode_and_its_siblings():
    """Two sets of 4 and 2 problems, pooled (6). coder solves 1 1 0 0 | 1 0, its start 'sft direct' 1 0 0 0 | 0 0:
    only B 2, only A 0, +33.3 points, McNemar p = 2 / 2^2 = 0.5; core 1 1 1 1 | 1 1 against sft (plan) 0 0 0 0 | 0 0:
    only B 6, p = 2 / 2^6 = 0.03125 (significant); core against its sibling coder: only core 3, p = 2 / 2^3 = 0.25.
    Catches: the tests of one set only, a run tested against its start in the other mode, a sibling pair lost."""
    val = {"coder": _row([1, 1, 0, 0]), "sft direct": _row([1, 0, 0, 0]), "sft": _row([0] * 4), "core": _row([1] * 4)}
    io = {"coder": _row([1, 0]), "sft direct": _row([0, 0]), "sft": _row([0, 0]), "core": _row([1, 1])}
    results = {"date": "d", "cpu": "c", "model": "m", "temperature": 0.0, "sandbox": {"mode": "root"}, "ks": [1],
               "n": 1, "results": {"val": val, "io_val": io}, "set_sizes": {"val": 4, "io_val": 2},
               "systems": [{"name": "sft", "mode": "plan"}, {"name": "sft direct", "mode": "direct"},
                           {"name": "coder", "mode": "direct", "against": ["sft direct"]},
                           {"name": "core", "mode": "plan", "against": ["sft"], "siblings": ["coder"]}]}
    lines = paper.markdown(results).splitlines()
    start = lines.index("**Paired tests, all sets pooled** (McNemar's exact test, * : p < 0.05)")
    assert lines[start + 4:start + 7] == ["| single-agent GRPO | SFT, direct | 6 | 0 | 2 | +33.3 | 0.5 |",
                                          "| CoRe-Code | SFT, Planner -> Coder | 6 | 0 | 6 | +100.0 | 0.0312 * |",
                                          "| CoRe-Code | single-agent GRPO | 6 | 0 | 3 | +50.0 | 0.25 |"]


def test_paper_training_table_and_collab_fallbacks(tmp_path):
    """The training table from a run's grpo lines: 5 steps of 10, 30, 20, 50, 40 s -> median 30 s; rewards
    0.1 0.2 0.3 0.4 0.5 -> first three 0.200, last three 0.400; peak RSS the largest logged, 1.75 GiB.
    CollabCoder's fallback rate per benchmark: 3 of 4 decisions by the default -> 75 %."""
    run = tmp_path / "core"
    run.mkdir()
    steps = [{"phase": "grpo", "step": i + 1, "time_step_s": s, "reward": r, "peak_rss_gib": g}
             for i, (s, r, g) in enumerate(zip([10, 30, 20, 50, 40], [0.1, 0.2, 0.3, 0.4, 0.5],
                                               [1.5, 1.75, 1.6, 1.7, 1.7]))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in [{"phase": "sft", "step": 1}] + steps))
    t = paper.training(run)
    assert t["steps"] == 5 and t["s_per_step"] == 30 and t["peak_rss_gib"] == 1.75
    assert t["reward_start"] == pytest.approx(0.2) and t["reward_end"] == pytest.approx(0.4)
    assert paper.training(None) is None and paper.training(tmp_path / "none") is None
    rows = {"core": _row([1, 0, 0, 0]), "base collab": {**_row([0, 0, 1, 0]), "fallback_rate": 0.75}}
    results = {"date": "d", "cpu": "c", "model": "m", "temperature": 0.0, "sandbox": {"mode": "root"}, "ks": [1],
               "n": 1, "results": {"val": rows}, "set_sizes": {"val": 4},
               "systems": [{"name": "core", "mode": "plan", "run": str(run)}, {"name": "base collab", "mode": "collab"}]}
    md = paper.markdown(results)
    assert "| CoRe-Code | 5 | 30 | 0.200 -> 0.400 | 1.75 |" in md
    assert "fell back to the default (a tie, or a scoring reply that did not parse): val 75%." in md


STUB_TRAIN = """#!/bin/bash
if [ "$1" = "--help" ]; then echo "--algo {grpo,ppo,stepcoder,codedpo}"; exit 0; fi
echo start >> "$STUB_LOG"; sleep 1; echo end >> "$STUB_LOG"
"""


@pytest.mark.parametrize("side", ["no", "yes"])
def test_make_paper_without_an_mbpp_file_and_its_arms_in_turn_on_a_gpu(tmp_path, side):
    """A fresh clone has no MBPP file and no hub: the small mode's sets leave MBPP out (no `datasets` asked for).
    PAPER_SIDE=no (what a GPU machine picks: torch sees CUDA) trains the six arms one after another: the stub
    trainer's log alternates start / end; yes (a CPU) starts all six before any ends. The SFT stage runs first
    either way. Catches: the hub id `mbpp` as the fallback, six arms at once on one GPU."""
    stub, log = tmp_path / "train.sh", tmp_path / "log"
    stub.write_text(STUB_TRAIN)
    stub.chmod(0o755)
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".installed").touch()
    cmd = ["make", "-s", "paper", "PAPER_SMALL=1", "MBPP=", f"PAPER={tmp_path / 'paper'}", f"PY={sys.executable}",
           f"TRAIN={stub}", "EVAL=false", f"PAPER_SIDE={side}", "VENV=" + str(tmp_path / "venv")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "STUB_LOG": str(log)},
                         timeout=120)
    assert "against evaluated [humaneval#2 (2), val#2 (2), io_val#2 (2)]" in out.stdout  # no MBPP set
    assert out.returncode != 0  # EVAL=false: the table step fails after the arms, as meant
    steps = log.read_text().split()
    assert len(steps) == 14 and steps[:2] == ["start", "end"]  # the SFT, then six arms
    assert steps[2:] == (["start", "end"] * 6 if side == "no" else ["start"] * 6 + ["end"] * 6)
