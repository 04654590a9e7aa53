"""`python tests/tiny_eval.py <eval.py flags>`: eval.py's command line (eval.cli) in a real process, which a
test can send a signal, on the tiny random Qwen2 of conftest, with the sandbox replaced by a verdict fixed by
each job's text (program and tests: CRC-32 even, passed), so a run takes seconds and its table does not depend on timing.

Environment: TINY_CALLS=F        at exit (a signal's too), write the number of model calls (rollout.sample) to F
             TINY_SIGNAL=N:SIG   send signal SIG (INT, TERM) to this process right after its N-th batch is stored
"""
import atexit
import json
import os
import signal
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import eval as evaluation  # noqa: E402
import rollout  # noqa: E402
import sandbox  # noqa: E402
from conftest import tiny_base  # noqa: E402
from infra import models
from measure import cache

torch.set_num_threads(1)
# A shell without job control (a CI script, `cmd &`) starts its background commands with SIGINT ignored, and
# Python keeps it so: put back the handler a terminal's Ctrl-C meets, so TINY_SIGNAL=N:INT reaches eval.py.
signal.signal(signal.SIGINT, signal.default_int_handler)
tok = models.load_tokenizer(str(models.embedded_folder()))
models.load_base = lambda *a, **k: (tiny_base(tok), tok)


def run_many(jobs, workers=None, progress=False, **kwargs):
    passed = [zlib.crc32(json.dumps(job, sort_keys=True, default=str).encode()) % 2 == 0 for job in jobs]
    return [sandbox.Result("passed" if x else "failed", 4 * x, 4, 0.01, 0.02, 10.0) for x in passed]


sandbox.run_many = run_many
calls = [0]
real_sample = rollout.sample


def counted_sample(*a, **k):
    calls[0] += 1
    return real_sample(*a, **k)


rollout.sample = counted_sample
if os.environ.get("TINY_CALLS"):
    atexit.register(lambda: Path(os.environ["TINY_CALLS"]).write_text(str(calls[0])))
stored = [0]
real_put = cache.Batches.put


def put(self, task_ids, value):
    real_put(self, task_ids, value)
    stored[0] += 1
    at, _, sig = os.environ.get("TINY_SIGNAL", "").partition(":")
    if at and stored[0] == int(at):
        os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))


cache.Batches.put = put
evaluation.cli()
