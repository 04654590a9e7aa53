"""eval.py's plumbing, skipped on a first reading: its command line (get_args, each flag with its default),
the folder of its result store (default_cache), the guess of its cost printed before any work (cost_lines),
the seeded subsets of problems (subset), the runs whose adapters it loads (load_runs, run_dtype), the problem
sets (load_sets) and the results file with its table (header, write).

Nothing here imports eval.py (the entry script above it): what needs eval's modes gets them as an argument
(MODES, mode_of).
"""
import argparse
import hashlib
import json
import os
import platform
import random
import time
from pathlib import Path

import data
from infra import flags, models
from measure import cache, report, stats
from sandboxing import checkers

DESCRIPTION = "Evaluate systems on problem sets: pass@k, verdicts, efficiency of correct code, lengths, time."
ROOT = Path(__file__).resolve().parent.parent  # the project's folder


SINGLE_PASS = ("direct", "plan")  # one program from at most two calls; every other mode makes more

# Seconds per problem of each mode: the embedded SmolLM2-135M in float32 on a 2-core CPU, greedy, one sample,
# the default budgets (256 code, 48 plan tokens). direct, plan: `python eval.py --dataset val#8 --modes M --no-cache`
# (one batch of 8; generation 21 s and 55 s), 2-core AMD EPYC, load 12.5 (other jobs running), 2026-12-04: an
# idle machine is faster, HumanEval's longer programs slower (~6.6 s a problem direct, docs/experiments.md).
# collab: docs/baselines.md (8 val problems in 1,260 s, --collab-rounds 2). A first guess only; the bars' ETA is
# the run's own. The other modes are not measured (no guess).
COSTS = {"direct": 2.6, "plan": 6.9, "collab": 158.0}
LONG_S = 3600  # a (system, set) that costs more is announced with a --sample suggestion


def cost_s(mode: str, problems: int, args, device: str) -> float | None:
    """The guessed seconds of one system on `problems` problems (COSTS x samples, the code budget scaled
    from 256 tokens for direct / plan); None: no guess (another model, device or dtype, or mode)."""
    guess = args.model in ("SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct") and device == "cpu" \
        and args.dtype in ("auto", "float32") and mode in COSTS
    scale = args.max_code_tokens / 256 if mode in SINGLE_PASS else 1.0
    return COSTS[mode] * problems * args.n * scale if guess else None


def cost_lines(datasets: dict, systems: list, args, device: str, done=lambda system, mode, name: False) -> list[str]:
    """What the command will run and about how long, before it starts: one line, and one more for each
    (system, set) of over an hour, with the --sample that gives a first look in about twenty minutes.
    done(system, mode, set): True when its whole result is stored already (it costs nothing)."""
    parts, total, unknown, long = [], 0.0, False, []
    for name, problems in datasets.items():
        for system, _, mode in systems:
            if done(system, mode, name):
                parts.append(f"{system} on {name}: stored")
                continue
            n = len(subset(problems, args.multi_sample if mode not in SINGLE_PASS else None, name))
            s = cost_s(mode, n, args, device)
            parts.append(f"{system} on {name} ({n} problems" + (f", ~{clock(s)})" if s is not None else ")"))
            total, unknown = total + (s or 0.0), unknown or s is None
            if s is not None and s > LONG_S:
                first = max(1, int(1200 // (s / n)))  # about 20 minutes
                long.append(f"note: {system} on {name} takes hours here (~{clock(s)}, {s / n:.0f} s a problem); "
                            f"--sample {first} gives a first look in about {clock(first * s / n)}")
    how = ("no time guess for this model, device or mode: the bars' ETA gives one after the first batch" if unknown
           and not total else f"about {clock(total)} on a 2-core CPU (harness.COSTS)" + (" + the modes without a guess"
                                                                                      if unknown else ""))
    return [f"will run: {', '.join(parts)}; {how}"] + long


def clock(s: float) -> str:
    """Seconds -> 'h:mm:ss' or 'm:ss'."""
    h, m, sec = int(s) // 3600, int(s) % 3600 // 60, int(s) % 60
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def subset(problems: list, size: int | None, name: str) -> list[int]:
    """Indices of a fixed seeded sample of `size` problems of set `name` (all for None / 0 / size >= len),
    in the set's order. The sample of a smaller size lies inside that of a larger one (the first indices
    of one seeded permutation), so systems on fewer problems are paired with the others on those."""
    order = list(range(len(problems)))
    if not size or size >= len(problems):
        return order
    random.Random(f"{stats.SEED}:{name}").shuffle(order)
    return sorted(order[:size])



def stored(args, problems, system: str, mode: str, name: str, digests: dict) -> bool:
    """True when the store holds the whole result of `system` (in `mode`) on set `name`: run_systems reads it
    back instead of computing it (the same key)."""
    multi = args.multi_sample if mode not in SINGLE_PASS else None
    k = cache.key(args, mode, digests.get(system, ""), [problems[i].task_id for i in subset(problems, multi, name)])
    return bool(args.cache) and cache.get(args.cache, system, name, k) is not None


def run_dtype(args, device: str) -> str:
    """--dtype auto with runs to load: the compute dtype they were trained in (config.json's 'dtype') when they
    ran on this kind of device (a GPU run's bfloat16 on a GPU), else auto (models.choose_dtype)."""
    if args.dtype != "auto":
        return args.dtype
    runs = [c.rpartition("=")[2] for c in args.compare or []] + ([args.adapters] if args.adapters else [])
    cfgs = [json.loads((Path(r) / "config.json").read_text()) for r in runs if (Path(r) / "config.json").is_file()]
    dtypes = {c.get("dtype") for c in cfgs if c.get("device") == device}
    return dtypes.pop() if len(dtypes) == 1 and None not in dtypes else "auto"


def load_runs(model, runs: list, mode_of) -> tuple:
    """Attach each run's adapters (names '<i>_<role>') to one base; returns (model, systems, against, siblings,
    dirs), a system (name, {role: adapter name}, mode): mode_of(its config's roles) (eval.mode_of).

    A run that others of the list started from (their config's --init) also gets a row '<name> <mode>' in each
    of their modes its adapters cover (e.g. 'sft direct': the SFT's Coder alone, beside a single-agent run from
    it), so that every run is tested against its start in its own mode.
    against: {run system name: [names of the systems it is tested against]}: the base model in the same
    mode, and the run it started from (its config's --init) in that mode when that run is compared too.
    siblings: {run system name: [earlier runs of the list with the same --init]}: e.g. single-agent vs
    collaborative GRPO from one SFT (`make experiment`), tested against each other too.
    dirs: {system name: its run folder} (an extra row: its run's).
    """
    systems, inits, paths, dirs = [], {}, {}, {}
    for i, spec in enumerate(runs):
        name, _, path = spec.rpartition("=")
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise models.ModelError(f"{path} is not a train.py run folder (no config.json)")
        cfg = json.loads(cfg_file.read_text())
        roles = cfg.get("roles", models.ROLES)  # its chain: the trained adapters (corpus retrieval has none)
        trained = [r for r in roles if not (r == "retriever" and cfg.get("retrieval") == "corpus")]
        model = models.load_role_adapters(model, path, trained, prefix=f"{i}_")
        mode = mode_of(roles)
        systems.append((name or path.name, {r: f"{i}_{r}" for r in trained}, mode))
        paths[path.resolve()] = systems[-1][0]
        dirs[systems[-1][0]] = str(path)
        inits[systems[-1][0]] = Path(cfg["init"]).resolve() if cfg.get("init") else None
    names = [s for s, _, _ in systems]
    siblings = {s: [o for o in names[:i] if inits[s] is not None and inits[o] == inits[s]] for i, s in enumerate(names)}
    against, own = {}, {s: (a, m) for s, a, m in systems}
    for s, adapters, m in list(systems):
        start = paths.get(inits[s])
        against[s] = [f"base {m}"]
        if start is None:
            continue
        start_adapters, start_mode = own[start]
        if m != start_mode and set(adapters) <= set(start_adapters):  # the start in this run's mode
            extra = f"{start} {m}"
            if extra not in dirs:
                systems.insert(names.index(start) + 1, (extra, {r: start_adapters[r] for r in adapters}, m))
                names = [x for x, _, _ in systems]
                dirs[extra], against[extra] = dirs[start], [f"base {m}"]
            start = extra
        against[s].append(start)
    return model, systems, against, siblings, dirs


def get_args(argv, modes: dict, release_defaults: dict):
    """eval.py's flags, checked (a bad combination: argparse's one-line error, status 2); modes: {name: chain}
    of --modes (eval.modes; collab besides); release_defaults: the defaults --protocol release sets
    ({n: K, temperature: T} of release/release_eval.py; flags given still win). Adds args.ks (the k of pass@k) and fills --model (the runs' base)
    and --cache (default_cache)."""
    ap = flags.Parser(prog="eval.py", description=DESCRIPTION, allow_abbrev=False,
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = ap.add_argument
    a("--dataset", "--datasets", dest="datasets", default="val",
      help="comma list of data.load names: train | val | io_train | io_val | humaneval | <file.jsonl> | "
           "mbpp:, code_contests:, apps:, taco:, livecodebench:, codeforces:<file or hub id>[@split]; "
           "NAME#N keeps the first N problems of that one")
    a("--split", default=None, help="split of a hub dataset (same as mbpp:<id>@<split>)")
    a("--model", default=None, help="short name, hub id or local folder (the base of every system; default: the "
      f"runs' own, config.json, else {models.EMBEDDED})")
    a("--adapters", default=None, help="a train.py run folder: adds its rows ('trained')")
    a("--compare", nargs="+", default=None, metavar="[NAME=]RUN",
      help="train.py runs to compare with base direct and base plan (writes results.json/.md, curves.png)")
    a("--modes", default="direct", help="comma list of " + ", ".join(modes) + ", collab (with --compare: base rows in these modes too): "
      + "; ".join(f"{m} = {c}" for m, c in modes.items()) + "; collab = CollabCoder (baselines/collabcoder.py: understanding, "
      "plan, code, then rounds of plan / code / alignment analyses, a scored decision to revise the plan or "
      "the code, and a strategy carried across rounds; training-free, docs/baselines.md)")
    a("--collab-rounds", type=int, default=2, help="collab: revision rounds after a failing visible test (paper 5)")
    a("--collab-tokens", type=int, default=96,
      help="collab: token budget of its understanding, analysis and strategy replies (the scoring JSON: twice that)")
    a("--debug-rounds", type=int, default=3, help="repair rounds of the debugger modes (stop once the visible test passes)")
    a("--max-retrieval-tokens", type=int, default=96, help="token budget of a Retriever completion")
    a("--n-samples", "--n", dest="n", type=int, default=1, help="samples per problem")
    a("--k", default="1", help="comma list of k for pass@k (each <= n)")
    a("--temperature", type=float, default=0.0, help="0 = greedy")
    a("--seed", type=int, default=0, help="seeds the sampling (with --temperature > 0)")
    a("--max-plan-tokens", type=int, default=48, help="as in training")
    a("--max-code-tokens", type=int, default=256, help="token budget of a program")
    a("--batch-size", type=int, default=32, help="problems per generate call")
    a("--batch-tokens", type=int, default=8192, help="prompt tokens of a generate call with its padding (rows x "
      "its longest prompt), at most: a long prompt gets a smaller batch (a longer one, a batch of its own)")
    a("--batch-order", default="length", choices=["length", "given"],
      help="length: batch problems of similar prompt length together (less padding); given: the set's order")
    a("--limit", type=int, default=None, help="only the first N problems of each dataset")
    a("--sample", type=int, default=None, help="a fixed seeded sample of N problems of each dataset (harness.subset)")
    a("--multi-sample", type=int, default=None, help="systems in a mode other than direct / plan (several calls a "
      "problem) see only a fixed seeded sample of N problems of each dataset, inside --sample's")
    a("--cache", default=None, help="a folder: every (system, dataset, batch) result is stored there as it is done, "
      "and read back instead of recomputed when everything that decides it is unchanged (measure/cache.py); default: this "
      "command's own folder, runs/eval-cache/<set>-<hash of the flags and code>/ (beside --out when given)")
    a("--no-cache", action="store_true", help="store nothing (a stopped evaluation then starts over)")
    a("--cached-only", action="store_true", help="with --cache: compute nothing, the table of the results stored so far "
      "(a system without one is left out): e.g. the table of a `make paper` still running")
    a("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: cuda when torch sees a GPU, else cpu")
    a("--quant", default="auto", choices=["auto", "4bit", "none"], help="auto: 4bit on CUDA, none on CPU")
    a("--dtype", default="auto", choices=models.DTYPES,
      help="compute dtype; autocast: fp32 weights, bf16 matmuls; auto: bfloat16 on a CUDA card with bf16, "
           "else float32 (models.choose_dtype)")
    a("--sandbox-timeout", type=float, default=4.0, help="CPU seconds per test")
    a("--unsafe-sandbox", action="store_true", help="run programs even where no namespace can be made "
      "(python sandbox.py --check); every verdict is then marked unsafe")
    a("--sandbox-memory", type=int, default=2048, help="MiB for all of one program's processes and files together")
    a("--checker", default="auto", choices=["auto", *checkers.RULES],
      help="output checker of I/O tests: auto = each set's own (sandboxing/checkers.py); a name = that rule for every set")
    a("--workers", type=int, default=None, help="sandbox runs at a time (default: the CPU count)")
    a("--protocol", default="ours", choices=["ours", "release"],
      help="release: the CoRe-Code authors' protocol (release/release_eval.py): one plan, then --n-samples 5 programs, both "
           "at --temperature 0.2 (its defaults); first-of-K pass@1, unbiased pass@1 and pass@K, with intervals")
    a("--out", default=None, help="the JSON file to write, or an existing folder to write it into (named as by default); the folder with --compare (default under runs/)")
    args = ap.parse_args(argv)
    if args.protocol == "release":  # its K and temperature as defaults; flags given still win
        ap.set_defaults(**release_defaults)
        args = ap.parse_args(argv)
    args.ks = [int(k) for k in args.k.split(",")]
    args.modes = ["plan" if m == "planned" else m for m in args.modes.split(",")]
    if bad := [m for m in args.modes if m not in modes and m != "collab"]:
        ap.error(f"unknown mode {bad[0]}: use {', '.join(modes)}, collab")
    if max(args.ks) > args.n:
        ap.error(f"pass@{max(args.ks)} needs --n-samples >= {max(args.ks)}")
    if args.n > 1 and args.temperature <= 0:
        ap.error("--n-samples > 1 needs sampling: set --temperature > 0")
    if args.cached_only and args.no_cache:
        ap.error("--cached-only reads the results stored before: leave out --no-cache")
    runs = [c.rpartition("=")[2] for c in args.compare or []] + ([args.adapters] if args.adapters else [])
    args.model = flags.base_model(runs, args.model, "--compare" if args.compare else "--adapters")  # the runs' base
    if args.cache is None and not args.no_cache:
        args.cache = str(default_cache(args))
    elif args.no_cache:
        args.cache = None
    if args.compare and args.adapters:
        ap.error("use either --adapters or --compare")
    return args


RUNTIME = ("out", "cache", "no_cache", "cached_only", "workers")  # flags that change no result (default_cache)


def default_cache(args) -> Path:
    """This command's own store (our choice): <folder>/eval-cache/<first set>-<12 hex of SHA-256 of its flags
    and of the project's code (code_files)>, the flags that change no result left out (RUNTIME); <folder> is --out's (the
    folder itself for a folder or --compare), else runs/. The same command again finds it; another command, or
    the same after a change to the code (a sandbox fix), gets its own: a default store never serves stale results."""
    code = hashlib.sha256(b"".join(f.read_bytes() for f in code_files()))
    what = json.dumps({k: v for k, v in sorted(vars(args).items()) if k not in RUNTIME}, default=str) + code.hexdigest()
    name = Path(args.datasets.split(",")[0].partition("#")[0]).stem.replace(":", "-")
    out = Path(args.out) if args.out else None
    folder = out if out and (args.compare or out.is_dir()) else out.parent if out else Path("runs")
    return folder / "eval-cache" / f"{name}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"



def code_files() -> list[Path]:
    """The project's code a result may depend on: every .py file of the top level and of its packages (folders
    with an __init__.py), but the course's, in a fixed order."""
    packages = [p.parent for p in ROOT.glob("*/__init__.py") if p.parent.name != "course"]
    return sorted([*ROOT.glob("*.py"), *(f for d in packages for f in d.glob("*.py"))])


def load_sets(args) -> tuple[dict, dict]:
    """--datasets (NAME#N: the first N; --split, --limit, --sample, --checker) -> ({spec: [Problem]} evaluated,
    {spec: problems in the set}). Raises data.DataError for a set that does not load."""
    datasets, set_sizes = {}, {}
    for spec in args.datasets.split(","):
        name, _, n = spec.partition("#")
        name += f"@{args.split}" if args.split and "@" not in name else ""
        problems = checkers.use(data.load(name)[:int(n) if n else args.limit], args.checker)
        datasets[spec] = [problems[i] for i in subset(problems, args.sample, spec)]
        set_sizes[spec] = len(problems)
    return datasets, set_sizes


def header(args, device: str, isolation: str, datasets: dict, set_sizes: dict, systems: list, against: dict,
           siblings: dict, run_dirs: dict) -> dict:
    """The results' record before any result: when, where, the sandbox's isolation, the flags that decide the
    numbers, each system (name, mode, adapters, what it is tested against, its run folder), each set's checker;
    'results' and 'references' filled per set by eval.main."""
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.machine()}, {device}",
            "cpu": report.machine(), "sandbox": isolation, "model": args.model, "n": args.n,
            "temperature": args.temperature, "ks": args.ks, "max_code_tokens": args.max_code_tokens,
            "max_plan_tokens": args.max_plan_tokens, "sample": args.sample, "multi_sample": args.multi_sample,
            "set_sizes": set_sizes,
            "systems": [{"name": s, "mode": m, "adapters": a, "against": against.get(s, []),
                         "siblings": siblings.get(s, []), "run": run_dirs.get(s)} for s, a, m in systems],
            "load_start": os.getloadavg()[0],
            "results": {}, "references": {}, "checkers": {d: checkers.describe(p) for d, p in datasets.items()}}


def write(results: dict, args) -> Path:
    """The results where --out says: with --compare a folder (measure/report.py: results.json, results.md,
    curves.png), else one JSON file (a folder given: a file named as by default inside it); prints the table.
    Returns what was written."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.compare:
        out = Path(args.out or f"runs/compare-{stamp}")
        out.mkdir(parents=True, exist_ok=True)
        print("\n" + report.write(results, out, [p.rpartition("=")[2] for p in args.compare]))
        return out
    first = args.datasets.split(",")[0]
    name = f"eval-{Path(first).stem.replace(':', '-').replace('#', '-')}-{stamp}.json"  # no '#' in a file name
    out = Path(args.out or f"runs/{name}")
    out = out / name if out.is_dir() else out  # --out DIR: a file named as by default, inside it
    out.parent.mkdir(parents=True, exist_ok=True)
    report.write_text_atomic(out, json.dumps(results, indent=1))  # a crash never leaves half a results file
    print("\n" + report.markdown(results))
    return out
