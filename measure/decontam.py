"""Decontamination: is any training problem also one we evaluate on? Every training problem is checked
against every evaluated one, two ways, before any table is computed:

1. n-gram overlap of the normalised statement (N = 13), as GPT-3's contamination study does (Brown et al.
   2020, "Language Models are Few-Shot Learners", Appendix C: 13-gram collisions of lower-cased text with
   punctuation removed); the StarCoder report (Li et al. 2023, "StarCoder: may the source be with you!",
   its decontamination step) removes training files that contain a benchmark's prompt or solution, which
   a shared 13-word span of the statement finds too:
       words(t) = lower-case t, every run of characters other than letters and digits -> one space, split
       grams(t) = { (w_i, ..., w_{i+N-1}) : 1 <= i <= len(words) - N + 1 }   (a text under N words: one gram, itself)
       (train a, evaluated b) overlap  <=>  grams(a) & grams(b) is not empty
   The statement is the prompt (MBPP's carries its first test). Solutions are not compared (our choice):
   13 words of code such as `for i in range(len(arr)): for j in range(i + 1, len(arr))` are shared
   by unrelated programs.
2. Exact test-case overlap: a function test (whitespace collapsed) or an I/O test (input, expected output,
   each stripped) that both problems have.

    python -m measure.decontam --train train,io_train --eval humaneval,val,io_val --out runs/decontam.json

The report (`check`) lists every pair found; the paper table prints its counts in its header.
"""
import argparse
import json
import re
import sys
from pathlib import Path

import data

N = 13  # words per gram (GPT-3, Appendix C)
COMMON = 5  # a gram in more problems than this is a template phrase, not a problem's own text (our choice)
MIN_TEST_CHARS = 8  # shorter test cases are shared by chance (our choice)
DUPLICATE = 0.5  # a pair sharing this share of the shorter statement's grams (or a test) is a near-duplicate


def words(text: str) -> list[str]:
    """Lower-cased runs of letters and digits.

    >>> words("Write a function: `max_of(a, b)`!")
    ['write', 'a', 'function', 'max', 'of', 'a', 'b']
    """
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).split()  # '_' is punctuation too: max_of -> max of


def grams(text: str, n: int = N) -> set[tuple]:
    """Every n consecutive words of the normalised text; a shorter text is one gram of all its words.
    MBPP's own wording between a statement and its first test (data.MBPP_TEST_INTRO) is cut out, and
    no gram spans the cut."""
    out = set()
    for part in text.split(data.MBPP_TEST_INTRO):
        w = words(part)
        out |= {tuple(w[i:i + n]) for i in range(len(w) - n + 1)} if len(w) >= n else ({tuple(w)} if w else set())
    return out


def tests_of(p) -> set:
    """A problem's tests in a comparable form: function tests with whitespace collapsed, I/O tests as
    (input, expected output) stripped; a test under MIN_TEST_CHARS characters (without whitespace), such
    as input `0` / output `0`, is left out: unrelated problems share those by chance."""
    cases = ({("test", " ".join(t.split())) for t in p.tests}
             | {("io", i.strip(), o.strip()) for i, o in p.io_tests})
    return {c for c in cases if len("".join("".join(c[1:]).split())) >= MIN_TEST_CHARS}


def keys_of(p, n: int) -> set:
    return {("g", g) for g in grams(p.prompt, n)} | {("t", t) for t in tests_of(p)}


def check(train: dict, evaluated: dict, n: int = N, common: int = COMMON) -> dict:
    """Every training problem against every evaluated one.

    train, evaluated: {set name: [Problem]}. A gram found in more than `common` problems of all the sets
    together is a template phrase (our I/O sets' "the first line holds n, the second line holds n
    integers") and does not count (our choice; common=0 counts every gram). Returns {'n', 'common',
    'train': {set: problems}, 'eval': {set: problems}, 'pairs': [{'train': 'set/task_id', 'eval': 'set/task_id'
    (sets named by data.label),
    'ngrams': shared grams, 'tests': shared tests, 'coverage': shared grams / grams of the shorter statement,
    'duplicate': coverage >= DUPLICATE or a shared test, 'example': one shared gram or test}], 'ngram_pairs',
    'test_pairs', 'duplicates'} (pairs of each kind). An index from gram / test to the evaluated problems keeps it
    linear in the total text.
    """
    keys = {(side, name, i): keys_of(p, n) for side, sets in (("t", train), ("e", evaluated))
            for name, probs in sets.items() for i, p in enumerate(probs)}
    size = {key: sum(k[0] == "g" for k in ks) for key, ks in keys.items()}  # grams per statement
    df = {}  # gram -> number of problems that have it
    for ks in keys.values():
        for k in ks:
            df[k] = df.get(k, 0) + 1
    usable = lambda k: k[0] == "t" or not common or df[k] <= common  # noqa: E731
    index = {}  # gram or test -> [(eval set, i)]
    for (side, name, i), ks in keys.items():
        if side == "e":
            for k in filter(usable, ks):
                index.setdefault(k, []).append((name, i))
    pairs = []
    for (side, tname, j), ks in keys.items():
        if side != "t":
            continue
        hits = {}  # (eval set, i) -> [shared keys]
        for k in filter(usable, ks):
            for e in index.get(k, ()):
                hits.setdefault(e, []).append(k)
        for (ename, i), shared in sorted(hits.items()):
            shared_g = [k[1] for k in shared if k[0] == "g"]
            shared_t = [k[1] for k in shared if k[0] == "t"]
            example = " ".join(min(shared_g)) if shared_g else " | ".join(min(shared_t)[1:])
            cover = len(shared_g) / max(min(size["t", tname, j], size["e", ename, i]), 1)
            pairs.append({"train": f"{data.label(tname)}/{train[tname][j].task_id}",
                          "eval": f"{data.label(ename)}/{evaluated[ename][i].task_id}",
                          "ngrams": len(shared_g), "tests": len(shared_t), "coverage": round(cover, 3),
                          "duplicate": bool(shared_t) or cover >= DUPLICATE, "example": example[:120]})
    return {"n": n, "common": common, "train": {k: len(v) for k, v in train.items()},
            "eval": {k: len(v) for k, v in evaluated.items()}, "pairs": pairs,
            "ngram_pairs": sum(p["ngrams"] > 0 for p in pairs), "test_pairs": sum(p["tests"] > 0 for p in pairs),
            "duplicates": sum(p["duplicate"] for p in pairs)}


def clean(problems: list, report: dict, name: str) -> list:
    """The problems of training set `name` (a data.load name) that are in no pair of the report (a
    near-duplicate or not: when in doubt, a problem is not trained on)."""
    hit = {p["train"] for p in report["pairs"]}
    return [p for p in problems if f"{data.label(name)}/{p.task_id}" not in hit]


def summary(report: dict, limit: int = 20) -> str:
    """The report in Markdown for a table's header: the sets, the counts, the pairs (the first `limit`)."""
    sets = lambda d: ", ".join(f"{data.label(k)} ({v})" for k, v in d.items())  # noqa: E731
    head = (f"Decontamination (measure/decontam.py: {report['n']}-gram overlap of the normalised statements, exact "
            f"test-case overlap), training [{sets(report['train'])}] against evaluated [{sets(report['eval'])}]: "
            f"**{report['duplicates']} near-duplicate pairs** (a shared test, or at least {DUPLICATE:.0%} of the shorter "
            f"statement's {report['n']}-grams shared); {len(report['pairs'])} pairs share anything "
            f"({report['ngram_pairs']} a {report['n']}-gram, {report['test_pairs']} a test; grams found in more than "
            f"{report['common']} problems are template phrases and not counted).")
    pairs = sorted(report["pairs"], key=lambda p: (not p["duplicate"], -p["coverage"]))  # duplicates first
    lines = [head] + [f"- {'**duplicate** ' if p['duplicate'] else ''}{p['train']} ~ {p['eval']}: "
                      f"{p['ngrams']} grams ({p['coverage']:.0%}), {p['tests']} tests (\"{p['example']}\")"
                      for p in pairs[:limit]]
    if len(report["pairs"]) > limit:
        lines.append(f"- ... and {len(report['pairs']) - limit} more, none a duplicate"
                     if not any(p["duplicate"] for p in pairs[limit:]) else
                     f"- ... and {len(report['pairs']) - limit} more (the JSON report lists all)")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--train", default="train,io_train", help="comma list of data.load names trained on")
    ap.add_argument("--eval", default="humaneval,val,io_val", help="comma list of data.load names evaluated on")
    ap.add_argument("--n", type=int, default=N, help="words per gram")
    ap.add_argument("--common", type=int, default=COMMON, help="a gram in more problems than this is a template; 0: count all")
    ap.add_argument("--out", default=None, help="write the JSON report here (atomically)")
    ap.add_argument("--clean", nargs="*", default=[], metavar="SET=FILE",
                    help="write training set SET without its problems in any pair to FILE (our JSONL record), "
                         "e.g. mbpp:mbpp.jsonl@train=runs/paper/mbpp_train.jsonl (outside the repository)")
    args = ap.parse_args(argv)
    load = lambda names: {s: data.load(s) for s in names.split(",") if s}  # noqa: E731
    train = load(args.train)
    report = check(train, load(args.eval), args.n, args.common)
    from measure import report as rep  # the table's module: its atomic write

    for spec in args.clean:
        name, _, path = spec.rpartition("=")
        if name not in train:
            raise data.DataError(f"--clean {spec}: {name!r} is not one of --train")
        kept = clean(train[name], report, name)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        rep.write_text_atomic(Path(path), "".join(json.dumps(data.to_record(p)) + "\n" for p in kept))
        print(f"{data.label(name)}: {len(kept)} of {len(train[name])} problems in no pair -> {path}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        rep.write_text_atomic(Path(args.out), json.dumps(report, indent=1))
    print(summary(report))
    return report


if __name__ == "__main__":
    try:
        main()
    except data.DataError as e:
        sys.exit(f"error: {e}")
