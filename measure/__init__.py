"""How the results are measured and reported, around eval.py: skipped on a first reading. Entry points
run as modules from the project root: `python -m measure.paper`, `python -m measure.decontam`,
`python -m measure.report`.

    scoring.py      every program judged in the sandbox: pass@k, verdicts, per-test time and memory
    harness.py      eval.py's flags, its result store's folder, the cost guessed before any work, seeded subsets,
                    the runs' adapters to load, the results file
    stats.py        pass@k (unbiased estimator), bootstrap intervals, McNemar's exact test, the paired bootstrap
    efficiency.py   EffiBench's ET / NET / MU / NMU
    report.py       results -> the Markdown comparison table and the training curves
    cache.py        each (system, benchmark) result cached, so that a rerun skips what is done
    paper.py        make paper's table with its decontamination report
    decontam.py     which training problems pair with an evaluated one
"""
