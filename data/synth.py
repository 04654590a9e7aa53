"""A generated task family a small model can learn: compositions of primitive operations (our choice, in the
spirit of Countdown for TinyZero: a family whose difficulty is a dial, here the depth).

A problem is a chain of 1 to 4 primitives, each typed (list of integers, integer, string, list of words):

    keep the even numbers  ->  square every number  ->  take their sum          (depth 3, list -> int)
    [1, 2, 3, 4]              [2, 4]                   [4, 16]            20

Every problem carries its statement in words (a function stub with a docstring and one worked example),
tests computed by running the reference implementation on fixed and random inputs (edge cases first: an
empty list, one element, negative numbers, an empty string), a reference plan (one numbered step per
primitive) and a reference solution (one line per primitive), the cold-start SFT targets.

The split is by COMPOSITION: a composition (the tuple of primitive names) belongs to train, dev or test
by a hash of its names alone, so a dev or test composition never occurs in train, while every primitive
does (primitives are shared; only their combinations are held out).

    load("synth:train")          the train split, depths 1-4, TRAIN_PER_DEPTH problems a depth
    load("synth:dev@1-2")        the dev split at depths 1 and 2 (also: @3, @1,3)
    load("synth:test")           the test split
    generate("dev", depths=(2,), per_depth=10, seed=0)   the same, as a function

Deterministic: the same (split, depths, per_depth, seed) gives the same problems, text and tests, on any
machine (random.Random(seed) and sha256, never Python's salted hash()).
"""
import hashlib
import random
import re
from dataclasses import dataclass

from data.problem import DataError, Problem

LIST, INT, STR, WORDS = "list[int]", "int", "str", "list[str]"
ARG = {LIST: "xs", INT: "n", STR: "s", WORDS: "words"}  # the parameter's name, by the input's type
START = {LIST: "a list of integers xs", INT: "an integer n", STR: "a string s of lowercase words"}


@dataclass(frozen=True)
class Primitive:
    name: str  # short, for function names and ids
    tin: str  # input type
    tout: str  # output type
    words: str  # the statement's clause ("keep only the even numbers")
    code: str  # the expression, {} for the input variable
    fn: object  # the same operation in Python, to compute the tests


P = Primitive
PRIMITIVES = [
    # list of integers -> list of integers
    P("evens", LIST, LIST, "keep only the even numbers", "[v for v in {} if v % 2 == 0]", lambda x: [v for v in x if v % 2 == 0]),
    P("odds", LIST, LIST, "keep only the odd numbers", "[v for v in {} if v % 2 != 0]", lambda x: [v for v in x if v % 2 != 0]),
    P("positives", LIST, LIST, "keep only the numbers greater than 0", "[v for v in {} if v > 0]", lambda x: [v for v in x if v > 0]),
    P("squares", LIST, LIST, "square every number", "[v * v for v in {}]", lambda x: [v * v for v in x]),
    P("doubled", LIST, LIST, "double every number", "[2 * v for v in {}]", lambda x: [2 * v for v in x]),
    P("plus_one", LIST, LIST, "add 1 to every number", "[v + 1 for v in {}]", lambda x: [v + 1 for v in x]),
    P("negated", LIST, LIST, "negate every number", "[-v for v in {}]", lambda x: [-v for v in x]),
    P("absolute", LIST, LIST, "replace every number by its absolute value", "[abs(v) for v in {}]", lambda x: [abs(v) for v in x]),
    P("sorted", LIST, LIST, "sort the numbers in increasing order", "sorted({})", sorted),
    P("reversed", LIST, LIST, "reverse the order of the numbers", "{}[::-1]", lambda x: x[::-1]),
    P("unique", LIST, LIST, "remove repeated numbers, keeping the first of each", "list(dict.fromkeys({}))", lambda x: list(dict.fromkeys(x))),
    P("tail", LIST, LIST, "drop the first number", "{}[1:]", lambda x: x[1:]),
    P("first3", LIST, LIST, "keep the first three numbers", "{}[:3]", lambda x: x[:3]),
    # list of integers -> integer
    P("sum", LIST, INT, "take their sum", "sum({})", sum),
    P("count", LIST, INT, "count how many numbers there are", "len({})", len),
    P("max", LIST, INT, "take the largest number (0 if there is none)", "max({}, default=0)", lambda x: max(x, default=0)),
    P("min", LIST, INT, "take the smallest number (0 if there is none)", "min({}, default=0)", lambda x: min(x, default=0)),
    # integer -> integer, integer -> list of integers
    P("inc", INT, INT, "add 1 to it", "{} + 1", lambda n: n + 1),
    P("twice", INT, INT, "double it", "2 * {}", lambda n: 2 * n),
    P("square", INT, INT, "square it", "{} * {}", lambda n: n * n),
    P("neg", INT, INT, "negate it", "-{}", lambda n: -n),
    P("half", INT, INT, "divide it by 2, rounding down", "{} // 2", lambda n: n // 2),
    P("last_digit", INT, INT, "take its last digit", "abs({}) % 10", lambda n: abs(n) % 10),
    P("digits", INT, LIST, "make the list of its digits", "[int(c) for c in str(abs({}))]", lambda n: [int(c) for c in str(abs(n))]),
    # string -> string, string -> words, string -> integer
    P("upper", STR, STR, "convert it to upper case", "{}.upper()", str.upper),
    P("reverse_text", STR, STR, "reverse the string", "{}[::-1]", lambda s: s[::-1]),
    P("no_vowels", STR, STR, "remove the vowels (a, e, i, o, u)", "''.join(c for c in {} if c not in 'aeiou')",
      lambda s: "".join(c for c in s if c not in "aeiou")),
    P("no_spaces", STR, STR, "remove the spaces", "{}.replace(' ', '')", lambda s: s.replace(" ", "")),
    P("split", STR, WORDS, "split it into words at the spaces", "{}.split()", str.split),
    P("length", STR, INT, "take its length", "len({})", len),
    P("vowels", STR, INT, "count its vowels (a, e, i, o, u)", "sum(c in 'aeiou' for c in {})", lambda s: sum(c in "aeiou" for c in s)),
    # words -> words, words -> string, words -> integer
    P("long_words", WORDS, WORDS, "keep only the words longer than 3 letters", "[w for w in {} if len(w) > 3]", lambda x: [w for w in x if len(w) > 3]),
    P("flip_words", WORDS, WORDS, "reverse every word", "[w[::-1] for w in {}]", lambda x: [w[::-1] for w in x]),
    P("capitalized", WORDS, WORDS, "capitalize every word", "[w.capitalize() for w in {}]", lambda x: [w.capitalize() for w in x]),
    P("sort_words", WORDS, WORDS, "sort the words alphabetically", "sorted({})", sorted),
    P("reverse_words", WORDS, WORDS, "reverse the order of the words", "{}[::-1]", lambda x: x[::-1]),
    P("join", WORDS, STR, "join the words with single spaces", "' '.join({})", " ".join),
    P("concat", WORDS, STR, "join the words with nothing between them", "''.join({})", "".join),
    P("word_count", WORDS, INT, "count the words", "len({})", len),
]
BY_NAME = {p.name: p for p in PRIMITIVES}
DEPTHS = (1, 2, 3, 4)
SPLITS = {"train": (0, 80), "dev": (80, 90), "test": (90, 100)}  # hash bucket 0-99 of a composition
TRAIN_PER_DEPTH, EVAL_PER_DEPTH = 250, 25  # problems a depth: the train split, and dev / test
WORDS_POOL = ("apple tree sun go blue river cat code plan lamp sky up zebra moon red ox echo idea "
              "orange stone far kite bird a at data").split()


def split_of(names: tuple) -> str:
    """train, dev or test for a composition: sha256 of its names, bucket 0-99 (SPLITS). Stable across machines."""
    bucket = int(hashlib.sha256("|".join(names).encode()).hexdigest(), 16) % 100
    return next(s for s, (lo, hi) in SPLITS.items() if lo <= bucket < hi)


def compositions(depth: int) -> list[tuple]:
    """Every typed chain of `depth` primitives from a start type (START), in a fixed order: each primitive's
    input type is the previous one's output type, and no primitive follows itself (reverse twice, say, would
    be the identity)."""
    chains = [(p.name,) for p in PRIMITIVES if p.tin in START]
    for _ in range(depth - 1):
        chains = [c + (p.name,) for c in chains for p in PRIMITIVES if p.tin == BY_NAME[c[-1]].tout and p.name != c[-1]]
    return chains


def random_input(typ: str, rng: random.Random):
    """One random input of a start type: 3-8 integers in [-9, 12], an integer in [-50, 999], 2-6 words."""
    if typ == LIST:
        return [rng.randint(-9, 12) for _ in range(rng.randint(3, 8))]
    if typ == INT:
        return rng.randint(-50, 999)
    return " ".join(rng.choice(WORDS_POOL) for _ in range(rng.randint(2, 6)))


EDGE = {LIST: [[], [7], [-3, 0, 4]], INT: [0, 7, -15], STR: ["", "zebra", "a be sea"]}  # first tests: edge cases


def run_chain(names: tuple, x):
    """The reference implementation: apply the chain's primitives in order."""
    for name in names:
        x = BY_NAME[name].fn(x)
    return x


def solution(names: tuple, fname: str) -> str:
    """The reference solution, one line per primitive (the SFT target)."""
    first = BY_NAME[names[0]]
    lines, var = [], ARG[first.tin]
    for name in names:
        lines.append(f"    result = {BY_NAME[name].code.replace('{}', var)}")
        var = "result"
    return f"{signature(names, fname)}\n" + "\n".join(lines) + "\n    return result\n"


def signature(names: tuple, fname: str) -> str:
    first, last = BY_NAME[names[0]], BY_NAME[names[-1]]
    return f"def {fname}({ARG[first.tin]}: {first.tin}) -> {last.tout}:"


def statement(names: tuple) -> str:
    """The problem in words: 'Given a list of integers xs, keep only the even numbers, then square every number,
    then take their sum. Return the result.'"""
    clauses = [BY_NAME[n].words for n in names]
    return f"Given {START[BY_NAME[names[0]].tin]}, " + ", then ".join(clauses) + ". Return the result."


def plan(names: tuple) -> str:
    """The reference plan: one numbered step per primitive, then the return."""
    steps = [BY_NAME[n].words[0].upper() + BY_NAME[n].words[1:] + "." for n in names]
    return "\n".join(f"{i}. {s}" for i, s in enumerate(steps + ["Return the result."], 1))


def problem(names: tuple, split: str, index: int, rng: random.Random, n_tests: int = 6) -> Problem:
    """One problem of the composition `names`: the stub with its statement and one worked example, the tests
    (edge cases, then random inputs; each expected value from the reference implementation), plan, solution."""
    depth, typ = len(names), BY_NAME[names[0]].tin
    fname = "get_" + "_".join(names[:3]) + ("_etc" if depth > 3 else "")  # get_: never a builtin's name (sorted, max)
    inputs = list(EDGE[typ])
    while len(inputs) < n_tests:
        x = random_input(typ, rng)
        if x not in inputs:
            inputs.append(x)
    example = inputs[-1]  # a random input: more telling than an edge case
    doc = (f'{signature(names, fname)}\n    """{statement(names)}\n    >>> {fname}({example!r})\n'
           f'    {run_chain(names, example)!r}\n    """\n')
    tests = tuple(f"assert {fname}({x!r}) == {run_chain(names, x)!r}" for x in inputs)
    return Problem(f"synth-{split}/d{depth}/{index:04d}", doc, fname, tests, "", solution(names, fname), plan(names))


def generate(split: str, depths=DEPTHS, per_depth: int | None = None, seed: int = 0) -> list[Problem]:
    """per_depth problems of `split` at each depth (default TRAIN_PER_DEPTH for train, EVAL_PER_DEPTH else), each
    a distinct composition of that split while there are enough, then repeats with new tests. Raises DataError
    for an unknown split or depth."""
    if split not in SPLITS:
        raise DataError(f"synth has no split {split!r} (use {', '.join(SPLITS)})")
    if any(d not in DEPTHS for d in depths):
        raise DataError(f"synth depths are {DEPTHS[0]}-{DEPTHS[-1]}, got {list(depths)}")
    per_depth = per_depth or (TRAIN_PER_DEPTH if split == "train" else EVAL_PER_DEPTH)
    out = []
    for depth in depths:
        rng = random.Random(f"{seed}/{split}/{depth}")  # one stream a (seed, split, depth): adding a depth changes no other
        mine = [c for c in compositions(depth) if split_of(c) == split]
        rng.shuffle(mine)
        for i in range(per_depth):
            out.append(problem(mine[i % len(mine)], split, i, rng))
    return out


def parse_depths(text: str) -> tuple:
    """'1-4' | '3' | '1,3' -> (1, 2, 3, 4) | (3,) | (1, 3); DataError otherwise."""
    m = re.fullmatch(r"(\d)-(\d)", text)
    try:
        depths = tuple(range(int(m.group(1)), int(m.group(2)) + 1)) if m else tuple(int(d) for d in text.split(","))
    except ValueError:
        depths = ()
    if not depths or any(d not in DEPTHS for d in depths):
        raise DataError(f"synth: bad depth selector {text!r} (e.g. @1-4, @3, @1,3; depths {DEPTHS[0]}-{DEPTHS[-1]})")
    return depths


def load(spec: str) -> list[Problem]:
    """data.load's 'synth:<split>[@depths]' (the part after 'synth:'): 'train', 'dev@1-2', 'test@4'."""
    split, _, depths = spec.partition("@")
    return generate(split, parse_depths(depths) if depths else DEPTHS)


def depth_of(task_id: str) -> int | None:
    """The depth in a synth task id ('synth-dev/d3/0007' -> 3); None for any other id."""
    m = re.match(r"synth-\w+/d(\d)/", task_id)
    return int(m.group(1)) if m else None
