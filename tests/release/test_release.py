"""The authors' release beside our reading (docs/algorithm.md#ours-and-the-authors-release): the softmax plan
credit, the shaped reward, and the sandbox verdicts that tell an error from a wrong answer. Hand values."""
import math

import pytest
import torch

import grpo
import reward
import sandbox
import train
import tree

E2 = math.e ** 2 / (math.e ** 2 + 1)  # softmax([1, 0] / 0.5)[0] = 0.880797


def result(*verdicts):
    """A sandbox Result with one verdict per test, as the sandbox reports them (passed/failed/error/timeout)."""
    passed = verdicts.count("passed")
    overall = "passed" if passed == len(verdicts) else next(v for v in verdicts if v != "passed")
    return sandbox.Result(overall, passed, len(verdicts), 0.01, 0.01, 9.0, "", tuple(verdicts))


def test_softmax_credit_hand_values():
    """One problem, plan 1's codes pass [1, 0] of their tests, plan 2's [0.5, 0.5], T = 0.5: weights
    e^2 / (e^2 + 1) = 0.880797 and 0.119203, so plan 1 is worth 0.880797 (the mean would say 0.5) and plan 2
    0.5; + 0.1 for plan 1 whose codes both ran every test to a verdict, none for plan 2 (one code errored).
    Catches: softmax of s without the temperature (0.731059), a weighted sum without normalising, the bonus
    given per code or when any code is clean."""
    parent = grpo.two_level_tree(1, 2, 2)  # [-1, 0, 0, 1, 1, 2, 2]
    s = torch.tensor([0, 0, 0, 1.0, 0.0, 0.5, 0.5])
    ok = torch.ones(7, dtype=torch.bool)
    R, _ = grpo.node_credit(s, ok, parent, "softmax", 0.5)
    assert R[1:3].tolist() == pytest.approx([0.880797, 0.5], abs=1e-6)
    assert R[1].item() == pytest.approx(E2, rel=1e-6) and R[3:].tolist() == s[3:].tolist()
    clean = torch.tensor([True] * 5 + [False, True])
    R, _ = grpo.node_credit(s, ok, parent, "softmax", 0.5, clean)
    assert R[1:3].tolist() == pytest.approx([E2 + 0.1, 0.5], rel=1e-6)
    R, _ = grpo.node_credit(s, ok, parent, "softmax", 1e6)  # T -> inf: the plain mean
    assert R[1:3].tolist() == pytest.approx([0.5, 0.5], abs=1e-6)
    # scores: the inner nodes weigh pass rates while each code keeps its own (shaped) reward
    shaped = torch.tensor([0, 0, 0, 1.3, 0.1, 0.6, 0.6])
    R, _, _ = grpo.tree_advantages(shaped, ok, parent, "softmax", temperature=0.5, scores=s)
    assert R[1:3].tolist() == pytest.approx([E2, 0.5], rel=1e-6) and R[3:].tolist() == shaped[3:].tolist()


def test_tree_softmax_credit_reads_pass_rates_and_errors_from_the_results():
    """tree.advantages with credit 'softmax': the scores are the programs' pass rates (not their shaped
    rewards) and the bonus comes from their per-test verdicts. Plan 1: 2/2 and 0/2 wrong answers (clean)
    -> 0.880797 + 0.1; plan 2: 1/2 + a timeout and 1/2 wrong -> 0.5. Advantages (population std):
    mean 0.740399, std 0.240399 -> +-0.240399 / 0.240499."""
    results = [result("passed", "passed"), result("failed", "failed"), result("passed", "timeout"),
               result("passed", "failed")]
    t = tree.Tree([None], ["planner", "coder"])
    t.nodes.append(tree.Node("problem", -1, 0))
    t.nodes += [tree.Node("planner", 0, 0, "plan", "plan", 0, i, valid=True) for i in range(2)]
    t.nodes += [tree.Node("coder", 1 + i // 2, 0, "code", "code", 0, i, valid=True, result=r,
                          reward=reward.program_reward(r, "shaped")) for i, r in enumerate(results)]
    c = tree.advantages(t, "softmax", temperature=0.5)
    assert c["planner"].reward.tolist() == pytest.approx([E2 + 0.1, 0.5], rel=1e-6)
    d = (E2 + 0.1 - 0.5) / 2
    assert c["planner"].adv.tolist() == pytest.approx([d / (d + 1e-4), -d / (d + 1e-4)], rel=1e-6)
    assert c["coder"].reward.tolist() == pytest.approx([1.3, 0.1, 0.5, 0.6])  # the Coder keeps its shaped reward


def test_shaped_reward_hand_values():
    """pass rate + 0.1 if no test errored or timed out + 0.2 if all passed: 4 of 4 -> 1.3; 2 of 4 with the
    other two wrong answers -> 0.6; 2 of 4 with one raising -> 0.5; 0 of 2, all timeouts -> 0; a program
    with no code -> 0. Catches: the all-pass bonus without the clean one (1.2), a wrong answer counted as an
    error (0.5 for the second), an empty test list counted clean."""
    assert reward.program_reward(result("passed", "passed", "passed", "passed"), "shaped") == pytest.approx(1.3)
    assert reward.program_reward(result("passed", "passed", "failed", "failed"), "shaped") == pytest.approx(0.6)
    assert reward.program_reward(result("passed", "passed", "failed", "error"), "shaped") == pytest.approx(0.5)
    assert reward.program_reward(result("timeout", "timeout"), "shaped") == 0.0
    assert reward.program_reward(sandbox.not_run("no_code", 3, "no code"), "shaped") == 0.0
    assert not reward.no_error(sandbox.Result("failed", 0, 0, 0, 0, 0))
    args = train.get_args(["--reward", "shaped"])
    rs = [result("passed", "passed"), result("passed", "failed"), result("passed", "error"), result("error", "error")]
    assert reward.rewards_of(rs, (2, 1, 2), args).flatten().tolist() == pytest.approx([1.3, 0.6, 0.5, 0.0])
    with pytest.raises(ValueError, match="unknown reward"):
        reward.program_reward(rs[0], "sum")


def test_sandbox_verdicts_tell_an_error_from_a_wrong_answer():
    """The real sandbox: per test, a wrong answer is 'failed', a raise 'error', an endless loop 'timeout'
    (Result.tests), which is what the shaped reward's and the plan credit's no-error bonus read."""
    program = "a = int(input())\nif a == 3:\n    raise ValueError(a)\nif a == 4:\n    while True: pass\nprint(a * 2)"
    r = sandbox.run_program(program, io_tests=[("1", "2"), ("2", "5"), ("3", "6"), ("4", "8")], timeout_s=0.5)
    assert r.tests == ("passed", "failed", "error", "timeout") and not reward.no_error(r)
    r = sandbox.run_program("print(int(input()) + 1)", io_tests=[("1", "2"), ("2", "5")], timeout_s=1.0)
    assert r.tests == ("passed", "failed") and reward.no_error(r)
    assert reward.program_reward(r, "shaped") == pytest.approx(0.6)


GENVERSE = {"question": "Read two integers and print their sum.", "test_time_limit": 1,
            "example_input": ["1 2\n"], "example_output": ["3\n"],
            "test_input": ["5 7\n", "-1 1\n"], "test_output": ["12\n", "0\n"]}


def test_genverse_loader_keeps_public_and_private_tests_apart(tmp_path, capsys):
    """A native-schema file (two records as the hub serves them, one without private tests): io_tests are
    the PRIVATE tests (the scored ones), public_tests the examples, the limit from test_time_limit, the
    release's checker; the Debugger sees the public tests only; a right program passes 2/2 in the sandbox.
    Catches: public and private tests merged (3 scored tests), the examples scored, the limit dropped."""
    import json

    import data
    from mapcoder import debugger

    path = tmp_path / "CodeContests_train.jsonl"
    second = {**GENVERSE, "test_time_limit": 2.5, "test_input": [], "test_output": []}
    path.write_text("\n".join(json.dumps(r) for r in (GENVERSE, second)) + "\n")
    problems = data.load(f"genverse:{path}")
    assert "1 problems; skipped 1 (1 no tests)" in capsys.readouterr().err
    p, = problems
    assert p.task_id == "genverse/CodeContests_train/0" and p.is_io and p.checker == "genverse"
    assert p.io_tests == (("5 7\n", "12\n"), ("-1 1\n", "0\n")) and p.public_tests == (("1 2\n", "3\n"),)
    assert p.time_limit_s == 1 and p.sandbox_job("x", 4.0)["timeout_s"] == 1
    assert debugger.visible_tests(p) == ([], [("1 2\n", "3\n")])
    r = sandbox.run_program(**p.sandbox_job("print(sum(map(int, input().split())))", 4.0))
    assert (r.passed, r.total) == (2, 2)


def test_genverse_malformed_record_is_one_line_naming_it(tmp_path):
    import json

    import data

    for bad, what in (({k: v for k, v in GENVERSE.items() if k != "question"}, "missing 'question'"),
                      ({**GENVERSE, "test_output": ["12\n"]}, "'test_input' / 'test_output' must be two lists"),
                      ({**GENVERSE, "test_time_limit": "1s"}, "'test_time_limit' must be a number")):
        path = tmp_path / "MBPP.jsonl"
        path.write_text(json.dumps(GENVERSE) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(data.DataError) as e:
            data.load(f"genverse:{path}")
        assert str(e.value).startswith(f"{path}:2: ") and what in str(e.value) and "\n" not in str(e.value)


def test_genverse_hub_ids_take_the_release_splits(monkeypatch):
    """The five hub ids go through the project's hub path (problem.records) with split train for
    CodeContests_train and test for the four evaluation sets; '@split' overrides."""
    import data
    from data import benchmarks

    asked = []
    monkeypatch.setattr(benchmarks, "records", lambda source, split: asked.append((source, split)) or
                        iter([(f"{source}[0]", GENVERSE)]))
    for name in ("CodeContests_train", "MBPP", "LiveBench", "CodeForces", "CodeContests"):
        p, = data.load(f"genverse:Gen-Verse/{name}")
        assert p.task_id == f"genverse/{name}/0"
    data.load("genverse:Gen-Verse/MBPP@train")
    assert [s for _, s in asked] == ["train", "test", "test", "test", "test", "train"]
    assert asked[0][0] == "Gen-Verse/CodeContests_train"


def _rates(pattern):
    """sandbox.run_many replaced by results with these pass rates (the loop's tests need no good model)."""
    def run_many(jobs, workers=None, progress=False):
        return [sandbox.Result("passed" if x == 1 else "failed", int(4 * x), 4, 0.01, 0.02, 10.0,
                               tests=("passed",) * int(4 * x) + ("failed",) * (4 - int(4 * x)))
                for x, _ in zip(pattern * len(jobs), jobs)]
    return run_many


def _lora(policy, role):
    return {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n and f".{role}." in n}


def test_sequential_stages_freeze_the_other_adapter(tiny_policy, tokenizer, monkeypatch):
    """--schedule sequential on the tiny Qwen2: in stage 1 a Planner step leaves the Coder's adapter
    bit-identical (though the Coder's programs had signal) and moves the Planner's; in stage 2 a Coder step
    on problem + fixed plan (the plan appended as <High-Level-Strategy>, no plan sampled) leaves the
    Planner's bit-identical and moves the Coder's. Catches: a frozen role still in the loss, AdamW stepping
    a parameter without gradient, stage 2 sampling plans."""
    import data
    import rollout
    from release import sequential

    problems = data.load("train")[:2]
    args = train.get_args(["--schedule", "sequential", "--num-plans", "2", "--codes-per-plan", "2",
                           "--max-plan-tokens", "8", "--max-code-tokens", "8", "--lr", "1e-2", "--coder-group", "3",
                           "--planner-credit", "softmax", "--reward", "shaped"])
    monkeypatch.setattr(sandbox, "run_many", _rates([1.0, 0.0, 0.5, 0.25]))  # signal for both roles
    opt = torch.optim.AdamW([p for n, p in tiny_policy.named_parameters() if "lora_" in n], lr=args.lr)
    coder0, planner0 = _lora(tiny_policy, "coder"), _lora(tiny_policy, "planner")
    m, _ = train.grpo_step(tiny_policy, tokenizer, problems, sequential.stage1_args(args), opt)
    assert m["frac_zero_std_coder"] == 0.0 and m["frac_zero_std_planner"] == 0.0  # both had signal
    assert all(torch.equal(p, coder0[n]) for n, p in _lora(tiny_policy, "coder").items())
    assert any(not torch.equal(p, planner0[n]) for n, p in _lora(tiny_policy, "planner").items())
    chats = []
    real = rollout.sample
    monkeypatch.setattr(rollout, "sample", lambda policy, tok, c, n, *a, **k: chats.append((c, n)) or
                        real(policy, tok, c, n, *a, **k))
    fixed = [sequential.with_plan(p, "1. Add them.") for p in problems]
    assert fixed[0].prompt.endswith("\n\n<High-Level-Strategy>\n1. Add them.\n</High-Level-Strategy>")
    planner1, coder1 = _lora(tiny_policy, "planner"), _lora(tiny_policy, "coder")
    m, _ = train.grpo_step(tiny_policy, tokenizer, fixed, sequential.stage2_args(args), opt)
    assert [n for _, n in chats] == [3]  # one call: the Coder, 3 programs per problem; no plan sampled
    assert "<High-Level-Strategy>" in chats[0][0][0][-1]["content"] and "Plan:" not in chats[0][0][0][-1]["content"]
    assert all(torch.equal(p, planner1[n]) for n, p in _lora(tiny_policy, "planner").items())
    assert any(not torch.equal(p, coder1[n]) for n, p in _lora(tiny_policy, "coder").items())


def test_sequential_flags_and_plans_file(tmp_path):
    from release import sequential

    args = train.get_args(["--schedule", "sequential", "--grpo-steps", "3", "--coder-steps", "2"])
    assert sequential.stage2_args(args).steps == 5 and sequential.final_args(args).steps == 5
    assert sequential.stage2_args(args).codes_per_plan == 8 and sequential.stage2_args(args).eval_args is args
    with pytest.raises(SystemExit):
        train.get_args(["--schedule", "sequential", "--roles", "coder"])
    path = tmp_path / "plans.jsonl"
    path.write_text('{"task_id": "a", "plan": "1. x"}\n\n{"task_id": "b"}\n')
    with pytest.raises(sequential.PlanError, match=r"plans.jsonl:3: a line must be"):
        sequential.read_plans(path)
    path.write_text('{"task_id": "a", "plan": "1. x"}\n')
    assert sequential.read_plans(path) == {"a": "1. x"}
    # plans are written for the problems stage 2's steps will draw, the ones grpo_stage's batches then hold
    import types

    import data
    from infra import checkpoint

    probs = data.load("train")[:5]
    args = train.get_args(["--schedule", "sequential", "--grpo-steps", "3", "--coder-steps", "2",
                           "--problems-per-step", "2"])
    run = types.SimpleNamespace(problems=probs, state={"step": 3, "consumed": 6})
    drawn = checkpoint.batch_at(probs, 6, 2, 0) + checkpoint.batch_at(probs, 8, 2, 0)  # steps 4 and 5
    assert [p.task_id for p in sequential.stage2_problems(run, args)] == list(dict.fromkeys(p.task_id for p in drawn))
    run.state = {"step": 4, "consumed": 8}  # a --resume after step 4: only step 5's problems are left
    assert [p.task_id for p in sequential.stage2_problems(run, args)] == [p.task_id for p in checkpoint.batch_at(probs, 8, 2, 0)]


def test_recipe_release_sets_the_released_values_and_explicit_flags_win():
    """--recipe release: every released value; a flag given explicitly keeps the user's value; ours stays
    the default (a recipe that overrode explicit flags, or leaked into the default run, fails here)."""
    from infra import flags

    a = train.get_args(["--recipe", "release"])
    want = {"schedule": "sequential", "planner_credit": "softmax", "credit_temperature": 0.5, "reward": "shaped",
            "num_plans": 5, "codes_per_plan": 2, "coder_group": 5, "temperature": 1.0, "top_p": 0.99, "beta": 0.01,
            "epsilon": 0.2, "epsilon_high": 0.3, "loss_type": "token", "lr": 1e-5, "num_iterations": 1}
    assert {k: getattr(a, k) for k in want} == want == flags.RECIPES["release"]
    b = train.get_args(["--recipe", "release", "--lr", "3e-4", "--num-plans", "2", "--schedule", "joint"])
    assert (b.lr, b.num_plans, b.schedule, b.reward) == (3e-4, 2, "joint", "shaped")
    ours = train.get_args([])
    assert (ours.schedule, ours.planner_credit, ours.reward, ours.lr, ours.num_plans) == ("joint", "mean", "pass_rate", 5e-5, 2)


def test_release_eval_protocol_first_of_k_and_unbiased_differ():
    """The released protocol on a scripted model: one plan per problem at T 0.2 (asked once, n = 1), then 5
    programs at T 0.2. Problem 1's first program is wrong and the four others right; problem 2's first three
    are right, the last two wrong. First-of-5 pass@1 = (0 + 1) / 2 = 0.5, unbiased pass@1 = (0.8 + 0.6) / 2 = 0.7,
    pass@5 = 1; with problem 2 all wrong: first 0, unbiased 0.4, pass@5 0.5. Catches: the first program taken
    as any of them, pass@1 computed on the first only, programs attached to the wrong problem."""
    import types

    from data.problem import Problem
    from measure import scoring
    from release import release_eval

    probs = [Problem(f"p{i}", "Print the input doubled.", "", (), io_tests=(("2", "4"), ("5", "10"))) for i in range(2)]
    right, wrong = "```python\nprint(2 * int(input()))\n```", "```python\nprint(int(input()))\n```"
    calls = []

    def scripted(codes):
        def sample(role, chats, n, max_tokens, temperature, stop):
            calls.append((role, len(chats), n, temperature))
            return ["1. Double it."] * len(chats) if role == "planner" else [c for _ in chats for c in codes.pop(0)]
        return sample
    args = types.SimpleNamespace(batch_size=1, max_plan_tokens=8, max_code_tokens=8, sandbox_timeout=2.0, workers=2)
    progs = release_eval.programs(scripted([[wrong] + [right] * 4, [right] * 3 + [wrong] * 2]), probs, args)
    assert calls[:2] == [("planner", 1, 1, 0.2), ("coder", 1, 5, 0.2)] and len(progs) == 2 and len(progs[0]) == 5
    s = release_eval.summary([r["verdicts"] for r in scoring.score(probs, progs, [1], args)["problems"]])
    assert (s["first_pass@1"]["value"], s["unbiased_pass@1"]["value"], s["pass@5"]["value"]) == (0.5, pytest.approx(0.7), 1.0)
    s = release_eval.summary([["failed"] + ["passed"] * 4, ["failed"] * 5])
    assert (s["first_pass@1"]["value"], s["unbiased_pass@1"]["value"], s["pass@5"]["value"]) == (0.0, pytest.approx(0.4), 0.5)
    assert s["unbiased_pass@1"]["ci"] == [0.0, pytest.approx(0.8)]  # bootstrap over the two problems: {0, 0.4, 0.8}


def test_eval_protocol_release_defaults():
    import eval as evaluation

    a = evaluation.get_args(["--protocol", "release"])
    assert (a.n, a.temperature) == (5, 0.2)
    b = evaluation.get_args(["--protocol", "release", "--n-samples", "3", "--temperature", "0.8"])
    assert (b.n, b.temperature) == (3, 0.8)
    assert evaluation.get_args([]).n == 1


def test_genverse_checker_is_the_release_token_comparison():
    """" ".join(out.split()) == " ".join(exp.split()) (evaluation/ours.py check_pass): whitespace of any kind
    and amount is one separator; numbers compare as text; case matters."""
    from sandboxing import checkers

    cases = [(b"1 2\n3\n", b"1  2 3", True), (b"  5\r\n", b"5", True), (b"1.0\n", b"1\n", False),
             (b"YES\n", b"yes\n", False), (b"", b"\n", True), (b"1 2", b"12", False)]
    assert [checkers.genverse(out, exp) for out, exp, _ in cases] == [want for _, _, want in cases]
