"""Gradescope's results.json from course/grade.py's rows, and a check of it against the format.

The format (Gradescope's "Autograder Specifications", gradescope-autograders.readthedocs.io/en/latest/specs/):
a top-level object with `score` (the total), `execution_time` (s), `output`, `visibility`,
`stdout_visibility` and `tests`, each test an object with `name`, `score`, `max_score`, `status`
('passed' | 'failed'), `output`, `visibility` ('hidden' | 'after_due_date' | 'after_published' |
'visible'). /autograder/results/stdout (what run_autograder printed) is for the instructor only here.

Ours: one scored entry per exercise (its points when ALL its public and hidden tests pass, else 0;
its output: the first failing public test's first line, or that a hidden test fails), visible at
once; and for an exercise with hidden tests one more entry of 0 points, `after_published`: which
hidden test failed and its message, shown when the grades are published.
"""
VISIBILITY = ("hidden", "after_due_date", "after_published", "visible")
TOP = {"score": float, "execution_time": int, "output": str, "visibility": str, "stdout_visibility": str,
       "tests": list, "extra_data": dict}
TEST = {"name": str, "number": str, "score": float, "max_score": float, "status": str, "output": str,
        "visibility": str}


def results(rows: list[dict], seconds: float, isolation: str) -> dict:
    """rows: course/grade.py's, one per exercise ({id, title, points, earned, output, hidden: {tests,
    output} | None}). Returns the results.json object (check() passes on it)."""
    tests = []
    for k, r in enumerate(rows, 1):
        tests.append({"name": f"{r['id']}: {r['title']}", "number": str(k), "score": float(r["earned"]),
                      "max_score": float(r["points"]), "status": "passed" if r["earned"] else "failed",
                      "output": r["output"], "visibility": "visible"})
        if r["hidden"] is not None:
            tests.append({"name": f"{r['id']}: hidden tests", "number": f"{k}.1", "score": 0.0, "max_score": 0.0,
                          "status": "passed" if r["hidden"]["passed"] else "failed", "output": r["hidden"]["output"],
                          "visibility": "after_published"})
    total, most = sum(r["earned"] for r in rows), sum(r["points"] for r in rows)
    return {"score": float(total), "execution_time": int(round(seconds)),
            "output": f"{total}/{most} points. An exercise earns its points when all its tests pass, the public ones "
                      f"(your handout's: python -m pytest -q -m <marker> tests) and the hidden ones (their details are "
                      f"shown when grades are published).",
            "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"max_score": most, "isolation": isolation}}


def check(obj) -> list[str]:
    """What is wrong with a results.json object (empty: nothing): the fields above with their
    types, visibilities from the list, scores within [0, max_score], and the top-level score equal
    to the sum of the tests' scores."""
    if not isinstance(obj, dict):
        return ["results.json is not an object"]
    bad = [f"top-level '{k}' missing or not a {t.__name__}" for k, t in TOP.items() if not isinstance(obj.get(k), t)]
    bad += [f"top-level '{k}' is not one of {VISIBILITY}" for k in ("visibility", "stdout_visibility")
            if obj.get(k) not in VISIBILITY]
    for i, t in enumerate(obj.get("tests") or []):
        if not isinstance(t, dict):
            bad.append(f"tests[{i}] is not an object")
            continue
        bad += [f"tests[{i}] '{k}' missing or not a {kind.__name__}" for k, kind in TEST.items()
                if not isinstance(t.get(k), kind)]
        if t.get("visibility") not in VISIBILITY or t.get("status") not in ("passed", "failed"):
            bad.append(f"tests[{i}] has visibility {t.get('visibility')!r}, status {t.get('status')!r}")
        if isinstance(t.get("score"), float) and isinstance(t.get("max_score"), float) \
                and not 0 <= t["score"] <= t["max_score"]:
            bad.append(f"tests[{i}] score {t['score']} outside [0, {t['max_score']}]")
    if not bad and sum(t["score"] for t in obj["tests"]) != obj["score"]:
        bad.append(f"score {obj['score']} is not the sum of the tests' scores")
    return bad
