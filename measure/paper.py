"""The paper's comparison table from eval.py's results.json (`make paper`, docs/results.md).

    python -m measure.paper runs/paper/compare/results.json --decontam runs/paper/decontam.json --out runs/paper/table.md

Rows in the paper's order (ORDER: base model direct and with plans; SFT direct and with plans; the RL-based
baselines PPOCoder, StepCoder, CodeDPO and single-agent GRPO; the multi-agent prompting baselines MapCoder and
CollabCoder; CoRe-Code, CoRe-Code with the efficiency reward and CoRe-Code as its authors released it (`make
learn-table`)); a system the results do not hold is listed as "not run".
One block per benchmark, columns:
    pass@1       greedy, percent of the problems the system saw, with its 95 % interval
                 (stats.bootstrap_ci: percentile bootstrap over problems)
    n            problems the system saw (multi-call systems may see a seeded subset: harness.subset)
    vs CoRe-Code difference in points and McNemar's exact p (stats.paired_test) on the problems both saw
    NET / NMU    EffiBench's normalised time / memory over the problems every system of the block solves
                 (efficiency.summary), the systems that saw a seeded subset left out of it (their NET / NMU: –);
                 from each program's cost measured outside its run (sandboxing/cost.py), never its own figures
    calls, tokens  model calls and generated tokens per problem (eval.tree_costs)
With more than one benchmark, one more block pools them (pooled: every problem of every set once, the paired test
over all of them). Then the paired tests eval.py asked for (pairs: each run against the base model and its start in
its own mode, and against the runs from the same start listed before it; pooled when there is more than one
benchmark) and the training steps each run made in its budget (its metrics.jsonl). The header states the date, the
machine (CPU model, cores), the load, the decontamination report and which systems saw which problems.
"""
import argparse
import json
from pathlib import Path

import data
from measure import decontam, efficiency, report, stats

REFERENCE = "core"  # CoRe-Code: every row is tested against it
ORDER = [("base direct", "base model, direct"), ("base plan", "base model, Planner -> Coder"),
         ("sft direct", "SFT, direct"), ("sft", "SFT, Planner -> Coder"),
         ("ppocoder", "PPOCoder"), ("stepcoder", "StepCoder"), ("codedpo", "CodeDPO"),
         ("coder", "single-agent GRPO"), ("base mapcoder", "MapCoder"), ("base collab", "CollabCoder"),
         ("core", "CoRe-Code"), ("core_eff", "CoRe-Code + efficiency reward"), ("release", "CoRe-Code as released")]
GROUPS = {"base direct": "base", "base plan": "base", "sft direct": "SFT", "sft": "SFT", "ppocoder": "RL-based",
          "stepcoder": "RL-based", "codedpo": "RL-based", "coder": "RL-based", "base mapcoder": "multi-agent",
          "base collab": "multi-agent", "core": "ours", "core_eff": "ours", "release": "authors' recipe"}


def step_lines(run_dir) -> list | None:
    """A run's training-step lines (GRPO, PPO or DPO: every metrics.jsonl line of a phase other than sft /
    eval), or None without a run folder."""
    f = Path(run_dir or "") / "metrics.jsonl"
    if not run_dir or not f.exists():
        return None
    lines = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return [m for m in lines if m.get("phase", "grpo") not in ("sft", "eval")]


def steps_made(run_dir) -> int | None:
    """Training steps a run made (step_lines), or None without a run folder."""
    lines = step_lines(run_dir)
    return None if lines is None else len(lines)


def training(run_dir) -> dict | None:
    """What a run's training steps show (step_lines): steps, the median seconds a step, the mean reward of
    its first and of its last three steps, and its peak RSS (GiB, the largest `peak_rss_gib` logged; None
    for runs written before train.py logged it). None without timed steps."""
    steps = [m for m in step_lines(run_dir) or [] if "time_step_s" in m and "reward" in m]
    if not steps:
        return None
    secs = sorted(m["time_step_s"] for m in steps)
    rss = [m["peak_rss_gib"] for m in steps if m.get("peak_rss_gib") is not None]
    mean = lambda ms: sum(m["reward"] for m in ms) / len(ms)  # noqa: E731
    return {"steps": len(steps), "s_per_step": secs[len(secs) // 2], "reward_start": mean(steps[:3]),
            "reward_end": mean(steps[-3:]), "peak_rss_gib": max(rss) if rss else None}


def pooled(results: dict) -> dict:
    """Every benchmark of the table as one set: {system: row} with the problems of all sets (task ids prefixed by
    their set, so the paired test matches a problem with itself only), pass@1 the fraction solved of all the
    problems the system saw, calls and tokens per problem averaged over them. Systems run on every set only.
    Our choice: one McNemar test over all the problems has the power a per-benchmark test lacks (with 664
    problems a 2-3 point difference can show; with 164 it cannot), at the cost of mixing benchmarks."""
    sets = results["results"]
    out = {}
    for s in set.intersection(*(set(rows) for rows in sets.values())):
        problems, calls, tokens = [], 0.0, 0.0
        for d, rows in sets.items():
            r, n = rows[s], len(rows[s]["problems"])
            problems += [{**p, "task_id": f"{d}::{p['task_id']}"} for p in r["problems"]]
            calls += (r.get("calls_per_problem") or 0.0) * n
            tokens += (r.get("tokens_per_problem") or 0.0) * n
        n = len(problems)
        known = lambda key: all(rows[s].get(key) is not None for rows in sets.values())  # noqa: E731
        out[s] = {"problems": problems, "pass@1": sum(stats.problem_scores(problems, 1)) / n,
                  "calls_per_problem": calls / n if known("calls_per_problem") else None,
                  "tokens_per_problem": tokens / n if known("tokens_per_problem") else None}
    return out


def block(rows: dict, title: str, names: list) -> list[str]:
    """One benchmark's rows {system: eval row} (module docstring, or pooled's) as Markdown lines under title."""
    present = [s for s in names if s in rows]
    most = max((len(rows[s]["problems"]) for s in present), default=0)
    whole = [s for s in present if len(rows[s]["problems"]) == most]  # a seeded subset shares too few problems
    eff, common = efficiency.summary({s: rows[s] for s in whole})
    eff.update({s: {"net": None, "nmu": None} for s in present if s not in whole})
    head = ["group", "system", "pass@1 %", "95 % CI", "n", f"vs {label(REFERENCE)}: diff, p", "NET", "NMU",
            "calls", "tokens"]
    out = [f"**{title}** (NET / NMU over the {common} problems every system that saw all of them solves)\n",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in names:
        if s not in rows:
            out.append(f"| {GROUPS.get(s, '')} | {label(s)} | not run | | | | | | | |")
            continue
        r = rows[s]
        scores = stats.problem_scores(r["problems"], 1)
        lo, hi = stats.bootstrap_ci(scores)
        test = "–"
        if s != REFERENCE and REFERENCE in rows:
            t = stats.paired_test(*report._aligned(rows, REFERENCE, s, 1))
            test = f"{100 * t['diff']:+.1f}, p = {t['p']:.3g}" + (" *" if t["significant"] else "")
        fmt = lambda v, f="{:.2f}": "–" if v is None else f.format(v)  # noqa: E731
        out.append(f"| {GROUPS.get(s, '')} | {label(s)} | {100 * r['pass@1']:.1f} | [{100 * lo:.1f}, {100 * hi:.1f}] | "
                   f"{len(r['problems'])} | {test} | {fmt(eff[s]['net'])} | {fmt(eff[s]['nmu'])} | "
                   f"{fmt(r.get('calls_per_problem'), '{:.1f}')} | {fmt(r.get('tokens_per_problem'), '{:.0f}')} |")
    return out


def pairs(rows: dict, systems: list, title: str) -> list[str]:
    """The paired tests eval.py asked for, as Markdown lines under title: each system B against every system A it
    is tested against (its results' 'against': the base model and its start in B's mode; 'siblings': the runs
    listed before it from the same start), McNemar's exact test on the problems both saw (stats.paired_test)."""
    head = ["B", "A", "problems", "only A", "only B", "B - A, points", "p"]
    out = [f"**Paired tests, {title}** (McNemar's exact test, * : p < {stats.ALPHA})\n",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in systems:
        for ref in s.get("against", []) + s.get("siblings", []):
            if s["name"] in rows and ref in rows:
                a, b = report._aligned(rows, ref, s["name"], 1)
                t = stats.paired_test(a, b)
                out.append(f"| {label(s['name'])} | {label(ref)} | {len(a)} | {t.get('b', '–')} | {t.get('c', '–')} | "
                           f"{100 * t['diff']:+.1f} | {t['p']:.3g}{' *' if t['significant'] else ''} |")
    return out if len(out) > 3 else []


def label(system: str) -> str:
    return dict(ORDER).get(system, system)


def markdown(results: dict, decontam_report: dict | None = None) -> str:
    """The whole page: header, one block per benchmark, the summary of pass@1, the training steps."""
    known = [s for s, _ in ORDER]
    names = known + [s["name"] for s in results["systems"] if s["name"] not in known]
    datasets = list(results["results"])
    sizes = {d: max(len(r["problems"]) for r in results["results"][d].values()) for d in datasets}
    whole = results.get("set_sizes", {})
    multi = results.get("multi_sample")
    sandbox = results.get("sandbox")
    lines = [f"Date {results['date']}; machine {results.get('cpu', results.get('machine', '?'))}; load (1-min average) "
             f"{results.get('load_start', float('nan')):.1f} at the start of evaluation, "
             f"{results.get('load_end', float('nan')):.1f} at its end; model {results['model']}, greedy "
             f"(temperature {results['temperature']}); sandbox "
             f"{sandbox.get('mode', '?') if isinstance(sandbox, dict) else sandbox}.\n",
             "Problems: " + ", ".join(f"{data.label(d)} {sizes[d]}" + (f" (a seeded sample of its {whole[d]})"
                                                                        if whole.get(d, sizes[d]) > sizes[d] else "")
                                      for d in datasets)
             + ". Every system in direct or plan mode (one program from at most two model calls) saw all of them"
             + (f"; the multi-call systems (MapCoder, CollabCoder: 4 to ~10 calls a problem) a fixed seeded subset "
                f"of {multi} of each (harness.subset), so their intervals are wider and their paired tests use those "
                "problems only." if multi else "; so did the multi-call systems.")]
    if decontam_report:
        lines.append("\n" + decontam.summary(decontam_report))
    for d in datasets:
        lines += ["", *block(results["results"][d], data.label(d), names)]
    both = pooled(results) if len(datasets) > 1 else {}
    if both:
        lines += ["", *block(both, "all sets pooled: " + " + ".join(f"{data.label(d)} ({sizes[d]})" for d in datasets)
                             + "; every problem counts once", names)]
    tested = pairs(both or results["results"][datasets[0]], results["systems"],
                   "all sets pooled" if both else data.label(datasets[0]))
    lines += ["", *tested] if tested else []
    lines += ["", f"pass@1 % by benchmark (* : p < {stats.ALPHA} against {label(REFERENCE)}, McNemar's exact test):\n",
              "| system | " + " | ".join(data.label(d) for d in datasets) + (" | pooled" if both else "")
              + " | training steps |", "|" + "---|" * (len(datasets) + 2 + bool(both))]
    runs = {s["name"]: s.get("run") for s in results["systems"]}
    for s in names:
        cells = []
        for rows in [results["results"][d] for d in datasets] + ([both] if both else []):
            if s not in rows:
                cells.append("not run")
                continue
            sig = ""
            if s != REFERENCE and REFERENCE in rows:
                sig = " *" if stats.paired_test(*report._aligned(rows, REFERENCE, s, 1))["significant"] else ""
            cells.append(f"{100 * rows[s]['pass@1']:.1f}{sig}")
        steps = steps_made(runs.get(s))
        lines.append(f"| {label(s)} | " + " | ".join(cells) + f" | {'–' if steps is None else steps} |")
    trained = [(s, t) for s in names if (t := training(runs.get(s)))]
    if trained:
        lines += ["", "Training from the same SFT (each run's metrics.jsonl; reward: the pass rate of its programs, "
                  "the mean of its first and of its last three steps):\n",
                  "| system | steps | s/step (median) | reward first 3 -> last 3 | peak RSS GiB |", "|---|---|---|---|---|"]
        for s, t in trained:
            rss = "–" if t["peak_rss_gib"] is None else f"{t['peak_rss_gib']:.2f}"
            lines.append(f"| {label(s)} | {t['steps']} | {t['s_per_step']:.0f} | {t['reward_start']:.3f} -> "
                         f"{t['reward_end']:.3f} | {rss} |")
    collab = [(d, results["results"][d]["base collab"]) for d in datasets if "base collab" in results["results"][d]]
    if collab:
        lines.append("\nCollabCoder's decisions (revise the plan or only the code) that fell back to the default "
                     "(a tie, or a scoring reply that did not parse): " + ", ".join(
                         f"{data.label(d)} {r['fallback_rate']:.0%}" if r.get("fallback_rate") is not None
                         else f"{data.label(d)} no decision" for d, r in collab) + ".")
    lines.append(f"\nTraining steps: those each run made (its metrics.jsonl: within its wall-time budget in `make paper`), "
                 f"from the same SFT. Evaluation took {results.get('wall_s', 0) / 60:.0f} min "
                 "(systems read back from the cache count their first computation's time in their rows only).")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("results", help="eval.py --compare's results.json")
    ap.add_argument("--decontam", default=None, help="measure/decontam.py's JSON report")
    ap.add_argument("--out", default=None, help="write the Markdown page here (atomically)")
    args = ap.parse_args(argv)
    results = json.loads(Path(args.results).read_text())
    dec = json.loads(Path(args.decontam).read_text()) if args.decontam else None
    md = markdown(results, dec)
    if args.out:
        report.write_text_atomic(Path(args.out), md + "\n")
    print(md)
    return md


if __name__ == "__main__":
    main()
