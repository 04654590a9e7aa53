"""Evaluate systems on problem sets: pass@k, verdicts, efficiency of correct code, lengths, time.

    python eval.py --dataset humaneval                                # base model, direct Coder, greedy
    python eval.py --dataset val --modes direct,plan --adapters runs/<run>
    python eval.py --compare sft=runs/sft coder=runs/coder core=runs/core --datasets val,humaneval

A system is (adapters, mode). Adapters: none (the base model) or the roles a train.py run saved.
Mode 'direct': the Coder writes code from the problem alone; 'plan': the Planner writes a plan
and the Coder follows it; 'plan+debug', 'retrieve+plan' and 'mapcoder' (retriever, planner, coder,
debugger: MapCoder's chain) add a Retriever above the Planner and / or a Debugger that repairs each
program failing its visible test, up to --debug-rounds times (MODES; one tree builder, tree.py, as in
training). Mode 'collab' is CollabCoder (baselines/collabcoder.py): prompted plan-code co-evolution, training-free. --compare evaluates base direct, base plan (and the base in any other mode a run is in) and
each run in its own mode (plan for a Planner+Coder run, direct for a single-agent `--roles coder` run,
mapcoder for the four-role chain, ...: mode_of) on every dataset, then
measure/report.py writes results.json, results.md (the paper-style table) and curves.png.
Each problem's reference solution (our records' `solution`, HumanEval's prompt + canonical solution,
MBPP's `code`) runs once in the sandbox, for the normalised efficiency figures (measure/scoring.py, measure/efficiency.py). The
JSON keeps one row per problem and system, so intervals and paired tests (measure/stats.py) can be recomputed.
Every finished (system, set, batch) is stored as it goes in a folder of this command's own (default_cache:
runs/eval-cache/<set>-<hash of the flags and code>/, beside --out; --no-cache: nothing stored). Ctrl-C or
SIGTERM ends with one line saying so (status 130 / 143); the same command run again reads back what is
stored and goes on from the batch it was in.
"""
import argparse
import hashlib
import json
import os
import platform
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

import data
import roles
import rollout
import sandbox
import tree
from baselines import collabcoder
from infra import checkpoint, flags, interrupt, models
from measure import cache, report, scoring, stats
from measure.stats import pass_at_k  # noqa: F401  the unbiased estimator (Chen et al. 2021); tests import eval.pass_at_k
from release import release_eval
from sandboxing import checkers

MODES = {"direct": "coder", "plan": "planner,coder", "plan+debug": "planner,coder,debugger",
         "retrieve+plan": "retriever,planner,coder", "mapcoder": "retriever,planner,coder,debugger"}
# the chains `make frameworks` compares, one tree each (tree.py); 'mapcoder' is MapCoder's full chain
TOKENS = {"retriever": "retrieval_tokens", "planner": "plan_tokens", "coder": "code_tokens", "debugger": "repair_tokens"}


def mode_of(chain) -> str:
    """The eval mode of a train.py run's roles (its config's 'roles'), e.g. ['planner', 'coder'] -> 'plan'."""
    text = ",".join(chain)
    return next((m for m, c in MODES.items() if c == text), "plan" if "planner" in chain else "direct")


def base_modes(run_modes: list) -> list:
    """The base model's rows of a --compare: direct and plan, and every other mode a compared run is in
    (so a MapCoder-chain run is tested against the base in its own chain), in MODES order.

    >>> base_modes(["plan", "mapcoder", "direct"])
    ['direct', 'plan', 'mapcoder']
    """
    return [m for m in MODES if m in ("direct", "plan") or m in run_modes]


def sample_as(model, tok, adapters: dict | None, role: str | None, chats: list, n: int, max_tokens: int,
              temperature: float, stop: str | None) -> rollout.Rollout:
    """n completions per chat (rollout.sample) from the role's LoRA adapter when the run trained that role
    (adapters: {role: adapter name}), else from the base model with every adapter off (role None: the base)."""
    peft = sys.modules.get("peft")  # a PeftModel exists only once peft is imported (its import loads bitsandbytes)
    trained = adapters is not None and role in adapters
    if trained:
        model.set_adapter(adapters[role])
    off = peft is not None and isinstance(model, peft.PeftModel) and not trained
    with model.disable_adapter() if off else nullcontext():
        return rollout.sample(model, tok, chats, n, max_tokens, temperature, stop=stop)


def generate_programs(model, tok, problems, mode, args, adapters: dict | None, costs: list | None = None,
                      batches: cache.Batches | None = None) -> tuple[list, dict]:
    """n programs per problem for a mode of MODES, through the one rollout tree (tree.build).

    direct: n codes per problem; with a Planner: n plans, one program each (after one retrieval, when the
    mode has a Retriever); with a Debugger: each program failing its visible test is repaired, one repair
    a round, up to --debug-rounds rounds, stopping when the visible test passes; the last repair counts.
    adapters: {role: adapter name} of a trained run, or None for the base model (adapters off); a role the
    run did not train runs on the base model too.
    Returns (programs: one list of n str | None per problem, stats: mean tokens per role's completion,
    share of code completions truncated at --max-code-tokens). costs: a list, when given, gets one
    (model calls, generated tokens) pair per problem appended (tree_costs), in the problems' order.
    batches (eval --cache): each batch's programs and counts are stored as soon as it is done, and a batch
    stored before is read back instead of generated (a stopped evaluation resumes at its batch).
    """
    if mode == "collab":  # CollabCoder: its own loop of prompted stages (baselines/collabcoder.py), not a tree
        return collabcoder.programs(partial(sample_as, model, tok, adapters), problems, args, costs, batches)
    chain = roles.parse_chain(MODES[mode])
    planned = "planner" in chain
    sizes = {"retriever": 1, "planner": args.n, "coder": 1 if planned else args.n, "debugger": 1}
    tokens, truncated, out = {r: [] for r in chain}, [], []

    def generate(role, chats, n):
        r = sample_as(model, tok, adapters, role, chats, n, roles.max_tokens(args, role), args.temperature,
                      roles.ROLES[role].stop)
        tokens[role] += r.mask.sum(1).tolist()
        if role == "coder":
            truncated.extend(r.truncated.float().tolist())  # 1.0: the completion hit --max-code-tokens (no EOS)
        return r

    # Batches of problems with prompts of similar length in tokens (by default): less left padding in every
    # forward (MBPP's test split at 32 a batch: 1.57x the real prompt tokens instead of 2.19x in the set's
    # order). Greedy decoding of a row does not depend on the rows beside it (up to float rounding), so this
    # only changes the speed; the programs go back into the problems' order below.
    size = (lambda p: len(tok(p.prompt, add_special_tokens=False).input_ids)) if tok is not None else (lambda p: len(p.prompt))
    order = sorted(range(len(problems)), key=lambda i: size(problems[i])) \
        if getattr(args, "batch_order", "length") == "length" else list(range(len(problems)))
    programs, calls, toks = {}, {}, {}
    with tqdm(total=len(problems), desc=f"eval {mode}", unit="problem", dynamic_ncols=True) as bar:  # with its ETA
        for s in range(0, len(problems), args.batch_size):
            batch = order[s:s + args.batch_size]
            ids = [problems[i].task_id for i in batch]
            done = batches.get(ids) if batches else None
            if done is None:
                before, seen = {r: len(tokens[r]) for r in chain}, len(truncated)
                t = tree.build([problems[i] for i in batch], chain, sizes, generate,
                               lambda jobs: sandbox.run_many(jobs, workers=getattr(args, "workers", None)),
                               getattr(args, "sandbox_timeout", 4.0), debug_rounds=getattr(args, "debug_rounds", 3), judge=False)
                done = {"programs": t.final_programs(), "costs": tree_costs(t), "truncated": truncated[seen:],
                        "tokens": {r: tokens[r][before[r]:] for r in chain}}
                if batches:
                    batches.put(ids, done)
            else:  # this batch was generated by an earlier, stopped run
                truncated += done["truncated"]
                for r in chain:
                    tokens[r] += done["tokens"][r]
            programs.update(zip(batch, done["programs"]))
            for i, (c, n) in zip(batch, done["costs"]):
                calls[i], toks[i] = c, n
            bar.update(len(batch))
    out = [programs[i] for i in range(len(problems))]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    stats = {"plan_tokens": mean(tokens.get("planner", [])), "code_tokens": mean(tokens["coder"]),
             "truncated_codes": mean(truncated)}
    stats.update({TOKENS[r]: mean(tokens[r]) for r in chain if r in ("retriever", "debugger")})
    if costs is not None:
        costs += [(calls[i], toks[i]) for i in range(len(problems))]
    return out, stats


@dataclass
class Settings:
    """What generate_programs and scoring.score read, spelled out: eval.py's command line carries the same names
    (and more); held_out fills one for an evaluation during training."""
    max_plan_tokens: int
    max_code_tokens: int
    max_retrieval_tokens: int
    workers: int | None
    sandbox_timeout: float
    n: int = 1  # programs per problem
    temperature: float = 0.0  # 0: greedy
    batch_size: int = 16  # problems per generation batch
    debug_rounds: int = 3  # repairs of a program failing its visible test (modes with a Debugger)
    batch_order: str = "length"  # batches of similar prompt length ("given": the set's order)


def held_out(policy, tok, problems, chain, settings: Settings) -> dict:
    """Greedy pass@1 of a training policy on held-out problems (train.py --eval-data), in the mode of its chain
    (mode_of: plan for a two-role run, direct for --roles coder), with its trained adapters. Its own randomness:
    the RNG states are put back afterwards, so a run with evaluation trains exactly as one without.
    Returns {eval_pass@1, eval_problems, eval_<stat> for each stat generate_programs reports (mean plan / code
    tokens, share of truncated codes), eval_verdicts {verdict: count}, eval_solved [task ids passed] (for paired
    tests between checkpoints: measure/curves.py), eval_s (seconds)}."""
    saved, t = checkpoint.rng_state(), time.perf_counter()
    try:
        programs, stats = generate_programs(policy, tok, problems, mode_of(chain), settings, {r: r for r in chain})
        res = scoring.score(problems, programs, [1], settings)
    finally:
        checkpoint.set_rng_state(saved)
    return {"eval_pass@1": res["pass@1"], "eval_problems": len(problems), **{f"eval_{k}": v for k, v in stats.items()},
            "eval_verdicts": res["verdicts"], "eval_solved": [r["task_id"] for r in res["problems"] if r["passed"]],
            "eval_s": time.perf_counter() - t}


def tree_costs(t) -> list[tuple[int, int]]:
    """(model calls, generated tokens) of each problem of a rollout tree: every node below a root is one
    completion (one call's row for that problem), its tokens those of its completion mask."""
    out = [[0, 0] for _ in t.problems]
    for n in t.nodes:
        if n.role != "problem":
            r = t.outputs[n.role][n.call]
            out[n.problem][0] += 1
            out[n.problem][1] += int(r.mask[n.row].sum()) if hasattr(r, "mask") else 0
    return [tuple(x) for x in out]


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
            n = len(subset(problems, getattr(args, "multi_sample", None) if mode not in SINGLE_PASS else None, name))
            s = cost_s(mode, n, args, device)
            parts.append(f"{system} on {name} ({n} problems" + (f", ~{clock(s)})" if s is not None else ")"))
            total, unknown = total + (s or 0.0), unknown or s is None
            if s is not None and s > LONG_S:
                first = max(1, int(1200 // (s / n)))  # about 20 minutes
                long.append(f"note: {system} on {name} takes hours here (~{clock(s)}, {s / n:.0f} s a problem); "
                            f"--sample {first} gives a first look in about {clock(first * s / n)}")
    how = ("no time guess for this model, device or mode: the bars' ETA gives one after the first batch" if unknown
           and not total else f"about {clock(total)} on a 2-core CPU (eval.COSTS)" + (" + the modes without a guess"
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


def run_systems(model, tok, problems, systems, ks, args, refs: list | None = None, name: str = "",
                digests: dict | None = None) -> dict:
    """{system name: row} for systems [(name, adapters dict | None, mode)] on one problem set `name`;
    refs: the problems' reference costs (see score). With --multi-sample M, a system in a mode other than
    SINGLE_PASS sees only `subset(problems, M)`. With --cache, a result stored under the same key
    (cache.key: digests[system] = its adapters' digest) is read instead of computed; with --cached-only a
    system without one is left out of the rows (not computed)."""
    rows = {}
    for system, adapters, mode in systems:
        idx = subset(problems, getattr(args, "multi_sample", None) if mode not in SINGLE_PASS else None, name)
        probs, prefs = [problems[i] for i in idx], [(refs or [None] * len(problems))[i] for i in idx]
        digest, store = (digests or {}).get(system, ""), getattr(args, "cache", None)
        k = cache.key(args, mode, digest, [p.task_id for p in probs])
        if store and (row := cache.get(store, system, name, k)) is not None:
            rows[system] = row
            print(f"  {system:24} cached ({cache.path(store, system, name)})", flush=True)
            continue
        if getattr(args, "cached_only", False):  # the table so far of a comparison still running elsewhere
            print(f"  {system:24} not in the cache yet: left out", flush=True)
            continue
        t = time.perf_counter()
        costs = []  # (model calls, generated tokens) per problem
        batches = cache.Batches(store, system, name, args, mode, digest) if store else None
        programs, tokens = generate_programs(model, tok, probs, mode, args, adapters, costs, batches)
        gen_s = time.perf_counter() - t
        row = {"mode": mode, **scoring.score(probs, programs, ks, args, prefs), **tokens, "generation_s": gen_s}
        for r, (c, n) in zip(row["problems"], costs):
            r["calls"], r["tokens"] = c, n
        if costs:
            row["calls_per_problem"] = sum(c for c, _ in costs) / len(costs)
            if all(n is not None for _, n in costs):
                row["tokens_per_problem"] = sum(n for _, n in costs) / len(costs)
        rows[system] = row
        if store:
            cache.put(store, system, name, k, row)
        fb = tokens.get("fallback_rate")  # collab only
        extra = (f"  {row['calls_per_problem']:.1f} calls/problem, decisions by the default "
                 f"{'-' if fb is None else f'{fb:.0%}'}") if mode == "collab" else ""
        print(f"  {system:24} " + " ".join(f"pass@{k} {100 * row[f'pass@{k}']:5.1f}%" for k in ks)
              + f"  ({gen_s:.0f} s, {len(probs)} problems){extra}", flush=True)
    return rows


def stored(args, problems, system: str, mode: str, name: str, digests: dict) -> bool:
    """True when the store holds the whole result of `system` (in `mode`) on set `name`: run_systems reads it
    back instead of computing it (the same key)."""
    multi = getattr(args, "multi_sample", None) if mode not in SINGLE_PASS else None
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


def load_runs(model, runs: list) -> tuple:
    """Attach each run's adapters (names '<i>_<role>') to one base; returns (model, systems, against, siblings).

    against: {run system name: [names of the systems it is tested against]}: the base model in the same
    mode, and the run it started from (its config's --init) when that run is compared too.
    siblings: {run system name: [earlier runs of the list with the same --init]}: e.g. single-agent vs
    collaborative GRPO from one SFT (`make experiment`), tested against each other too.
    """
    systems, inits, paths = [], {}, {}
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
        inits[systems[-1][0]] = Path(cfg["init"]).resolve() if cfg.get("init") else None
    against = {s: [f"base {m}"] + ([paths[inits[s]]] if inits[s] in paths else []) for s, _, m in systems}
    names = [s for s, _, _ in systems]
    siblings = {s: [o for o in names[:i] if inits[s] is not None and inits[o] == inits[s]] for i, s in enumerate(names)}
    return model, systems, against, siblings


def get_args(argv=None):
    ap = flags.Parser(prog="eval.py", description=__doc__.split("\n")[0], allow_abbrev=False,
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
    a("--modes", default="direct", help="comma list of " + ", ".join(MODES) + ", collab (with --compare: base rows in these modes too): "
      + "; ".join(f"{m} = {c}" for m, c in MODES.items()) + "; collab = CollabCoder (baselines/collabcoder.py: understanding, "
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
    a("--batch-order", default="length", choices=["length", "given"],
      help="length: batch problems of similar prompt length together (less padding); given: the set's order")
    a("--limit", type=int, default=None, help="only the first N problems of each dataset")
    a("--sample", type=int, default=None, help="a fixed seeded sample of N problems of each dataset (eval.subset)")
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
        ap.set_defaults(n=release_eval.K, temperature=release_eval.TEMPERATURE)
        args = ap.parse_args(argv)
    args.ks = [int(k) for k in args.k.split(",")]
    args.modes = ["plan" if m == "planned" else m for m in args.modes.split(",")]
    if bad := [m for m in args.modes if m not in MODES and m != "collab"]:
        ap.error(f"unknown mode {bad[0]}: use {', '.join(MODES)}, collab")
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
    and of the project's code>, the flags that change no result left out (RUNTIME); <folder> is --out's (the
    folder itself for a folder or --compare), else runs/. The same command again finds it; another command, or
    the same after a change to the code (a sandbox fix), gets its own: a default store never serves stale results."""
    here = Path(__file__).resolve().parent
    code = hashlib.sha256(b"".join(f.read_bytes() for f in sorted([*here.glob("*.py"), *here.glob("sandboxing/*.py")])))
    what = json.dumps({k: v for k, v in sorted(vars(args).items()) if k not in RUNTIME}, default=str) + code.hexdigest()
    name = Path(args.datasets.split(",")[0].partition("#")[0]).stem.replace(":", "-")
    out = Path(args.out) if args.out else None
    folder = out if out and (args.compare or out.is_dir()) else out.parent if out else Path("runs")
    return folder / "eval-cache" / f"{name}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"


STORE = None  # the store of the command in progress (main), for the line a Ctrl-C ends with (cli)


def main(argv=None):
    global STORE
    args = get_args(argv)
    STORE = args.cache
    if args.protocol == "release":
        return release_eval.main(args, subset, load_runs, sample_as)
    torch.manual_seed(args.seed)
    datasets, set_sizes = {}, {}  # the problems evaluated, and how many the set has
    for spec in args.datasets.split(","):
        name, _, n = spec.partition("#")
        name += f"@{args.split}" if args.split and "@" not in name else ""
        problems = checkers.use(data.load(name)[:int(n) if n else args.limit], args.checker)
        datasets[spec] = [problems[i] for i in subset(problems, args.sample, spec)]
        set_sizes[spec] = len(problems)
    names = list(datasets)
    isolation = sandbox.require(args.unsafe_sandbox, memory_mb=args.sandbox_memory)  # after loading: the problem files are covered
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    quant = models.default_quant(device) if args.quant == "auto" else args.quant
    args.dtype = run_dtype(args, device)
    model, tok = models.load_base(args.model, device, quant, dtype=args.dtype)
    against, siblings, runs = {}, {}, []
    if args.compare or args.adapters:
        model, runs, against, siblings = load_runs(model, args.compare or [args.adapters])
        if args.adapters:  # one run, in every mode asked for
            runs = [(f"trained {m}", runs[0][1], m) for m in args.modes if m in ("direct", "collab") or "planner" in runs[0][1]]
            against = {s: [f"base {m}"] for s, _, m in runs}
    asked = base_modes([m for _, _, m in runs] + args.modes) + [m for m in args.modes if m not in MODES]  # + collab
    systems = [(f"base {m}", None, m) for m in (asked if args.compare else args.modes)]
    systems += runs
    present = {s for s, _, _ in systems}
    run_dirs = {(n or Path(p).name): p for n, _, p in (c.rpartition("=") for c in args.compare or [])}
    run_dirs.update({s: args.adapters for s, _, _ in systems if args.adapters and s.startswith("trained ")})
    digests = {s: cache.adapters_digest(run_dirs.get(s)) for s in present} if args.cache else {}
    against = {s: [b for b in bs if b in present] for s, bs in against.items()}  # e.g. base plan not run
    model.eval()
    for line in cost_lines(datasets, systems, args, device,  # what will run, and about how long here
                           lambda system, mode, name: stored(args, datasets[name], system, mode, name, digests)):
        print(line, flush=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.machine()}, {device}", "cpu": report.machine(),
               "sandbox": isolation, "model": args.model, "n": args.n, "temperature": args.temperature, "ks": args.ks,
               "max_code_tokens": args.max_code_tokens, "max_plan_tokens": args.max_plan_tokens,
               "sample": args.sample, "multi_sample": args.multi_sample, "set_sizes": set_sizes,
               "systems": [{"name": s, "mode": m, "adapters": a, "against": against.get(s, []),
                             "siblings": siblings.get(s, []), "run": run_dirs.get(s)} for s, a, m in systems],
               "load_start": os.getloadavg()[0],
               "results": {}, "references": {}, "checkers": {d: checkers.describe(p) for d, p in datasets.items()}}
    t0 = time.perf_counter()
    for d, problems in datasets.items():
        print(f"{d}: {len(problems)} problems, n={args.n}, temperature={args.temperature}")
        refs = scoring.reference_costs(problems, args)
        results["references"][d] = {"with_solution": sum(bool(p.solution) for p in problems),
                                    "timed": sum(r is not None for r in refs)}
        print(f"  reference solutions: {results['references'][d]['timed']} of {len(problems)} passed with timing")
        results["results"][d] = run_systems(model, tok, problems, systems, args.ks, args, refs, d, digests)
    results["wall_s"], results["load_end"] = time.perf_counter() - t0, os.getloadavg()[0]

    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.compare:
        out = Path(args.out or f"runs/compare-{stamp}")
        out.mkdir(parents=True, exist_ok=True)
        print("\n" + report.write(results, out, [p.rpartition("=")[2] for p in args.compare]))
    else:
        name = f"eval-{Path(names[0]).stem.replace(':', '-').replace('#', '-')}-{stamp}.json"  # no '#' in a file name
        out = Path(args.out or f"runs/{name}")
        out = out / name if out.is_dir() else out  # --out DIR: a file named as by default, inside it
        out.parent.mkdir(parents=True, exist_ok=True)
        report.write_text_atomic(out, json.dumps(results, indent=1))  # a crash never leaves half a results file
        print("\n" + report.markdown(results))
    print(f"wrote {out}")
    return results


def cli():
    """python eval.py: main, its errors as one line, Ctrl-C / SIGTERM as one line saying what is kept."""
    interrupt.on_term()
    try:
        main()
    except (models.ModelError, data.DataError, sandbox.SandboxError) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        kept = (f"every finished batch is kept in {STORE}; run the same command again to go on from there"
                if STORE else "nothing kept (--no-cache); the same command starts over")
        print(f"\ninterrupted: {kept}", file=sys.stderr, flush=True)
        sys.exit(interrupt.status(interrupt.last_signal))


if __name__ == "__main__":
    cli()
