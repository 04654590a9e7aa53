"""Every (system, benchmark) result of eval.py on disk, so a long comparison resumes where it stopped.

    eval.py --compare ... --cache runs/paper/cache      # a result already there is read, not recomputed

A result is stored under a key: the SHA-256 of everything that decides it (the base model, the system's
mode and the bytes of its adapter files, the problems' task ids, the sampling and token budgets, the sandbox's
limit, the checker). Change any of them and the key changes, so a stale result is never reused; the file
name only says what it holds. Files are written atomically (a stopped run never leaves half a result).

A long set (MBPP's 500 problems: most of an hour for one system on 2 cores) is also stored batch by batch as
its programs are generated (Batches, under <cache>/batches/), so a run stopped inside a set resumes at the
batch it was in instead of at the set's start.
"""
import hashlib
import json
import re
from pathlib import Path

# eval.py's flags that change a result (the base model, sampling, budgets, sandbox, checker)
FLAGS = ("model", "n", "ks", "temperature", "seed", "max_plan_tokens", "max_code_tokens", "max_retrieval_tokens",
         "debug_rounds", "collab_rounds", "collab_tokens", "sandbox_timeout", "sandbox_memory", "checker", "dtype",
         "quant")


def adapters_digest(run_dir) -> str:
    """SHA-256 over the adapter files of a train.py run (names and bytes, in sorted order); '' for None."""
    if run_dir is None:
        return ""
    h = hashlib.sha256()
    for f in sorted((Path(run_dir) / "adapters").rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(run_dir)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def key(args, mode: str, digest: str, task_ids: list) -> str:
    """The key of one system's result on one problem list (module docstring)."""
    what = {f: getattr(args, f, None) for f in FLAGS}
    what.update(mode=mode, adapters=digest, tasks=list(task_ids))
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def path(cache_dir, system: str, dataset: str) -> Path:
    """Where a result lives: <cache>/<system>__<dataset>.json, unsafe characters replaced."""
    safe = lambda s: re.sub(r"[^A-Za-z0-9._@#+-]+", "-", s)  # noqa: E731
    return Path(cache_dir) / f"{safe(system)}__{safe(dataset)}.json"


def get(cache_dir, system: str, dataset: str, k: str) -> dict | None:
    """The stored result row under key k, or None (no file, another key, or an unreadable file)."""
    f = path(cache_dir, system, dataset)
    try:
        stored = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return stored["row"] if stored.get("key") == k else None


def put(cache_dir, system: str, dataset: str, k: str, row: dict):
    """Store a result row under key k (atomically)."""
    from measure import report

    f = path(cache_dir, system, dataset)
    f.parent.mkdir(parents=True, exist_ok=True)
    report.write_text_atomic(f, json.dumps({"key": k, "system": system, "dataset": dataset, "row": row}))


class Batches:
    """The generated programs of one system on one set, one file per batch of problems (eval.generate_programs).

    A batch is keyed as a whole result is (key(), with the batch's task ids), so a batch is reused only by the
    same system, settings and problems; its value is whatever the caller stores (JSON)."""

    def __init__(self, cache_dir, system: str, dataset: str, args, mode: str, digest: str):
        self.dir, self.system, self.dataset = Path(cache_dir) / "batches", system, dataset
        self.args, self.mode, self.digest = args, mode, digest

    def _where(self, task_ids: list) -> tuple[str, str]:
        k = key(self.args, self.mode, self.digest, task_ids)
        return f"{self.dataset}__{k[:16]}", k

    def get(self, task_ids: list):
        """The stored value of the batch of these problems, or None."""
        name, k = self._where(task_ids)
        return get(self.dir, self.system, name, k)

    def put(self, task_ids: list, value):
        name, k = self._where(task_ids)
        put(self.dir, self.system, name, k, value)
