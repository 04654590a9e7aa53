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
mapcoder for the four-role chain, ...: mode_of), and a run the others started from (their --init) in their
modes too (e.g. 'sft direct' beside a single-agent run: harness.load_runs), on every dataset, then
measure/report.py writes results.json, results.md (the paper-style table) and curves.png.
Each problem's reference solution (our records' `solution`, HumanEval's prompt + canonical solution,
MBPP's `code`) runs once in the sandbox, for the normalised efficiency figures (measure/scoring.py, measure/efficiency.py). The
JSON keeps one row per problem and system, so intervals and paired tests (measure/stats.py) can be recomputed.
Every finished (system, set, batch) is stored as it goes in a folder of this command's own (harness.default_cache:
runs/eval-cache/<set>-<hash of the flags and code>/, beside --out; --no-cache: nothing stored). Ctrl-C or
SIGTERM ends with one line saying so (status 130 / 143); the same command run again reads back what is
stored and goes on from the batch it was in.

Read here: generate_programs (a mode's programs through the one rollout tree), held_out (training's
evaluation), run_systems and main (the command). Its plumbing is measure/harness.py: the flags, the store's
folder, the cost guessed before any work, seeded subsets, the runs' adapters, the results file.
"""
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import torch
from tqdm import tqdm

import data
import roles
import rollout
import sandbox
import tree
from baselines import collabcoder
from infra import checkpoint, interrupt, models
from measure import cache, harness, scoring
from release import release_eval

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


def batch_plan(lengths: list, max_rows: int, max_tokens: int) -> list[list[int]]:
    """Consecutive batches of the positions 0..len(lengths)-1: each at most max_rows rows and at most max_tokens
    prompt tokens with its padding (rows x its longest prompt, every row is left-padded to it), so one long
    prompt does not pad a whole batch to its length (MBPP's test split has one of 1,739 tokens; the next is 200);
    a prompt longer than max_tokens gets a batch of its own. Our choice.

    >>> batch_plan([10, 10, 10, 50, 200], 4, 100)
    [[0, 1, 2], [3], [4]]
    """
    out, longest = [], 0
    for i, n in enumerate(lengths):
        if out and len(out[-1]) < max_rows and (len(out[-1]) + 1) * max(longest, n) <= max_tokens:
            out[-1].append(i)
            longest = max(longest, n)
        else:
            out.append([i])
            longest = n
    return out


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
    # order), each within --batch-tokens of padded prompt (batch_plan). Greedy decoding of a row does not depend
    # on the rows beside it (up to float rounding), so this only changes the speed; the programs go back into
    # the problems' order below.
    size = (lambda p: len(tok(p.prompt, add_special_tokens=False).input_ids)) if tok is not None else (lambda p: len(p.prompt))
    lengths = [size(p) for p in problems]
    order = sorted(range(len(problems)), key=lambda i: lengths[i]) \
        if args.batch_order == "length" else list(range(len(problems)))
    programs, calls, toks = {}, {}, {}
    with tqdm(total=len(problems), desc=f"eval {mode}", unit="problem", dynamic_ncols=True) as bar:  # with its ETA
        for at in batch_plan([lengths[i] for i in order], args.batch_size, args.batch_tokens):
            batch = [order[j] for j in at]
            ids = [problems[i].task_id for i in batch]
            done = batches.get(ids) if batches else None
            if done is None:
                before, seen = {r: len(tokens[r]) for r in chain}, len(truncated)
                t = tree.build([problems[i] for i in batch], chain, sizes, generate,
                               lambda jobs: sandbox.run_many(jobs, workers=args.workers),
                               args.sandbox_timeout, debug_rounds=args.debug_rounds, judge=False)
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
    batch_tokens: int = 8192  # prompt tokens of a batch with its padding, at most (batch_plan)


def held_out(policy, tok, problems, chain, settings: Settings) -> dict:
    """Held-out pass@1 of a training policy (train.py --eval-data), in the mode of its chain (mode_of: plan for a
    two-role run, direct for --roles coder), with its trained adapters: greedy (settings.n = 1, temperature 0), or
    sampled (train.py --eval-samples n: n programs a problem at the rollout temperature; pass@1 = the mean over
    problems of passed / n, the unbiased estimator at k = 1). Its own randomness: the RNG states are put back
    afterwards, so a run with evaluation trains exactly as one without.
    Returns {eval_pass@1, eval_problems, eval_samples (n), eval_<stat> for each stat generate_programs reports
    (mean plan / code tokens, share of truncated codes), eval_verdicts {verdict: count}, eval_solved [task ids
    whose every program passed] (for paired tests between checkpoints: measure/curves.py), eval_scores
    {task id: passed / n} (sampled only: the per-problem scores of its interval and paired bootstrap), eval_s}."""
    saved, t = checkpoint.rng_state(), time.perf_counter()
    try:
        programs, stats = generate_programs(policy, tok, problems, mode_of(chain), settings, {r: r for r in chain})
        res = scoring.score(problems, programs, [1], settings)
    finally:
        checkpoint.set_rng_state(saved)
    n = settings.n
    return {"eval_pass@1": res["pass@1"], "eval_problems": len(problems), "eval_samples": n,
            **{f"eval_{k}": v for k, v in stats.items()}, "eval_verdicts": res["verdicts"],
            "eval_solved": [r["task_id"] for r in res["problems"] if r["passed"] == n],
            **({"eval_scores": {r["task_id"]: r["passed"] / n for r in res["problems"]}} if n > 1 else {}),
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


def run_systems(model, tok, problems, systems, ks, args, refs: list | None = None, name: str = "",
                digests: dict | None = None) -> dict:
    """{system name: row} for systems [(name, adapters dict | None, mode)] on one problem set `name`;
    refs: the problems' reference costs (see score). With --multi-sample M, a system in a mode other than
    harness.SINGLE_PASS sees only `harness.subset(problems, M)`. With --cache, a result stored under the same key
    (cache.key: digests[system] = its adapters' digest) is read instead of computed; with --cached-only a
    system without one is left out of the rows (not computed)."""
    rows = {}
    for system, adapters, mode in systems:
        multi = args.multi_sample if mode not in harness.SINGLE_PASS else None
        idx = harness.subset(problems, multi, name)
        probs, prefs = [problems[i] for i in idx], [(refs or [None] * len(problems))[i] for i in idx]
        digest, store = (digests or {}).get(system, ""), args.cache
        k = cache.key(args, mode, digest, [p.task_id for p in probs])
        if store and (row := cache.get(store, system, name, k)) is not None:
            rows[system] = row
            print(f"  {system:24} cached ({cache.path(store, system, name)})", flush=True)
            continue
        if args.cached_only:  # the table so far of a comparison still running elsewhere
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


def get_args(argv=None):
    """eval.py's flags (measure/harness.py builds and checks them; --modes takes the names of MODES and collab)."""
    return harness.get_args(argv, MODES, {"n": release_eval.K, "temperature": release_eval.TEMPERATURE})


def systems_to_run(model, args) -> tuple:
    """What --modes, --adapters and --compare ask for: returns (model with every run's adapters, systems
    [(name, {role: adapter} | None for the base, mode)], against {system: what it is tested against},
    siblings {system: runs from the same --init}, run_dirs {system: its run folder}). --compare: the base
    model in base_modes and each run in its own mode; --adapters: the base and the run in each mode asked."""
    against, siblings, runs, run_dirs = {}, {}, [], {}
    if args.compare or args.adapters:
        model, runs, against, siblings, run_dirs = harness.load_runs(model, args.compare or [args.adapters], mode_of)
        if args.adapters:  # one run, in every mode asked for
            runs = [(f"trained {m}", runs[0][1], m) for m in args.modes
                    if m in ("direct", "collab") or "planner" in runs[0][1]]
            against, run_dirs = {s: [f"base {m}"] for s, _, m in runs}, {}
    asked = base_modes([m for _, _, m in runs] + args.modes) + [m for m in args.modes if m not in MODES]  # + collab
    systems = [(f"base {m}", None, m) for m in (asked if args.compare else args.modes)] + runs
    present = {s for s, _, _ in systems}
    run_dirs.update({s: args.adapters for s, _, _ in systems if args.adapters and s.startswith("trained ")})
    against = {s: [b for b in bs if b in present] for s, bs in against.items()}  # e.g. base plan not run
    return model, systems, against, siblings, run_dirs


STORE = None  # the store of the command in progress (main), for the line a Ctrl-C ends with (cli)


def main(argv=None):
    """python eval.py: the problem sets, the base model and the runs' adapters, the systems; its guessed cost;
    then per set: the reference solutions timed (scoring.reference_costs) and every system's programs
    generated and scored (run_systems); the results written (harness.write). Returns the results."""
    global STORE
    args = get_args(argv)
    STORE = args.cache
    if args.protocol == "release":
        return release_eval.main(args, harness.subset, partial(harness.load_runs, mode_of=mode_of), sample_as)
    torch.manual_seed(args.seed)
    datasets, set_sizes = harness.load_sets(args)  # the problems evaluated, and how many each set has
    isolation = sandbox.require(args.unsafe_sandbox, memory_mb=args.sandbox_memory)  # after loading: covers the sets
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    quant = models.default_quant(device) if args.quant == "auto" else args.quant
    args.dtype = harness.run_dtype(args, device)
    model, tok = models.load_base(args.model, device, quant, dtype=args.dtype)
    model, systems, against, siblings, run_dirs = systems_to_run(model, args)
    digests = {s: cache.adapters_digest(run_dirs.get(s)) for s, _, _ in systems} if args.cache else {}
    model.eval()
    for line in harness.cost_lines(datasets, systems, args, device,  # what will run, and about how long here
                                   lambda system, mode, name: harness.stored(args, datasets[name], system, mode, name,
                                                                             digests)):
        print(line, flush=True)
    results = harness.header(args, device, isolation, datasets, set_sizes, systems, against, siblings, run_dirs)
    t0 = time.perf_counter()
    for d, problems in datasets.items():
        print(f"{d}: {len(problems)} problems, n={args.n}, temperature={args.temperature}")
        refs = scoring.reference_costs(problems, args)
        results["references"][d] = {"with_solution": sum(bool(p.solution) for p in problems),
                                    "timed": sum(r is not None for r in refs)}
        print(f"  reference solutions: {results['references'][d]['timed']} of {len(problems)} passed with timing")
        results["results"][d] = run_systems(model, tok, problems, systems, args.ks, args, refs, d, digests)
    results["wall_s"], results["load_end"] = time.perf_counter() - t0, os.getloadavg()[0]
    print(f"wrote {harness.write(results, args)}")
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
