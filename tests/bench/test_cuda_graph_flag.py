"""--cuda-graph reaches the sampler in the benches as it does in train.py, and the GRPO bench times the sampler that
training runs on CUDA (fast/fixed_decode.py), checked on a CPU by stand-ins for the CUDA parts."""
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


class Reached(Exception):
    """Raised by a stand-in once it has recorded what it was called with: the rest of the run is not needed."""


def graph_seen(seen: list):
    """A stand-in that records fixed_decode.GRAPH when it is called, then stops the run (Reached)."""
    from fast import fixed_decode

    def stand_in(*a, **k):
        seen.append(fixed_decode.GRAPH)
        raise Reached
    return stand_in


def test_gpu_memory_honours_cuda_graph(monkeypatch):
    """Catches: bench/gpu_memory.py accepting --cuda-graph (a train.py flag) but sampling eagerly: the flag was set
    only by TrainingRun.setup, so the GPU check's memory row never measured the graph sampler."""
    import decode
    import gpu_memory
    import rollout
    import train
    import update
    from fast import fixed_decode

    # main() replaces these module attributes for its one step (fix_lengths, spread_results, the counters): the
    # monkeypatch puts them back after the test
    for module, name in ((rollout, "sample"), (decode, "next_tokens"), (decode, "decode"), (fixed_decode, "next_tokens"),
                         (fixed_decode, "decode_fixed"), (train, "run_programs"), (update, "scorer"),
                         (update, "gradient_step")):
        monkeypatch.setattr(module, name, getattr(module, name))
    seen = []
    monkeypatch.setattr(train, "grpo_step", graph_seen(seen))
    monkeypatch.setattr(fixed_decode, "GRAPH", False)
    for flags, graph in ((["--cuda-graph"], True), ([], False)):
        monkeypatch.setattr(sys, "argv", ["gpu_memory.py", "--device", "cpu", "--small", "--problems-per-step", "1",
                                          *flags])
        with pytest.raises(Reached):
            gpu_memory.main()
        assert seen.pop() is graph


def test_grpo_bench_passes_cuda_graph_to_its_workers(monkeypatch):
    """Catches: --cuda-graph not handed to the worker processes (each system runs in its own), or not set there."""
    import grpo_bench
    from fast import fixed_decode
    from infra import models

    cmds = []
    monkeypatch.setattr(grpo_bench.subprocess, "run", lambda cmd, **k: cmds.append(cmd) or SimpleNamespace(
        returncode=0, stdout='{"step_s": []}\n', stderr=""))
    a = Namespace(trl_python=sys.executable, before=None, model="m", dtype="bfloat16", device="cuda", steps=1, warmup=0,
                  code_tokens=8, plan_tokens=8, quick=False, cuda_graph=True)
    grpo_bench.launch("ours", "forced", a)
    grpo_bench.launch("trl", "forced", a)
    assert "--cuda-graph" in cmds[0] and "--cuda-graph" not in cmds[1]  # TRL has no such sampler

    seen = []
    monkeypatch.setattr(models, "load_base", graph_seen(seen))
    monkeypatch.setattr(fixed_decode, "GRAPH", False)
    with pytest.raises(Reached):
        grpo_bench.worker_ours(Namespace(**{**vars(a), "device": "cpu"}), two_roles=False)
    assert seen == [True]


def test_grpo_bench_times_the_fixed_shape_sampler_on_cuda(monkeypatch):
    """Catches: the decode row timing decode.decode on CUDA, where rollout.sample runs fixed_decode.decode_fixed."""
    import decode
    import grpo_bench
    import rollout
    from data import problem
    from fast import fixed_decode

    calls = []
    enc = SimpleNamespace(input_ids=SimpleNamespace(is_cuda=True), attention_mask="mask")
    monkeypatch.setattr(rollout, "encode_prompts", lambda *a: enc)
    monkeypatch.setattr(fixed_decode, "decode_fixed", lambda *a: calls.append(("fixed", a[3:5])))
    monkeypatch.setattr(decode, "decode", lambda *a: calls.append(("decode", a[3:5])))
    policy = SimpleNamespace(parameters=lambda: iter([SimpleNamespace(device="cuda")]), modules=lambda: iter(()))
    tok = SimpleNamespace(eos_token_id=2)
    add = problem.Problem("x/add", "def add(a, b):\n    pass\n", "add", ("assert add(1, 2) == 3",))
    run, _ = grpo_bench.our_decode(policy, tok, add)
    run(12)
    assert calls == [("fixed", (grpo_bench.GROUP, 12))]
