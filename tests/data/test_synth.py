"""The generated task family (data/synth.py): its counts, its split by composition, its determinism, and that
its tests, plan and solution agree with the reference implementation."""
import pytest

import data
from data import synth


def test_the_module_docstrings_example_by_hand():
    """keep the even numbers, square them, sum: [1, 2, 3, 4] -> [2, 4] -> [4, 16] -> 20; the statement and plan
    are the primitives' clauses in order. Catches: primitives applied in reverse order, a clause lost."""
    names = ("evens", "squares", "sum")
    assert synth.run_chain(names, [1, 2, 3, 4]) == 20
    assert synth.statement(names) == ("Given a list of integers xs, keep only the even numbers, then square every "
                                      "number, then take their sum. Return the result.")
    assert synth.plan(names) == ("1. Keep only the even numbers.\n2. Square every number.\n3. Take their sum.\n"
                                 "4. Return the result.")
    assert synth.solution(names, "f") == ("def f(xs: list[int]) -> int:\n    result = [v for v in xs if v % 2 == 0]\n"
                                          "    result = [v * v for v in result]\n    result = sum(result)\n"
                                          "    return result\n")


def test_compositions_are_typed_chains_and_counted():
    """39 primitives, 31 of which take a start type (13 list->list + 4 list->int + 7 int + 7 str): 31 chains of depth
    1; depth 2 has 335 (each output type's successors, no primitive after itself), depth 3 3,912, depth 4 47,600.
    Catches: a chain whose types do not fit (list[str] fed to sum), a primitive repeated back to back."""
    assert len(synth.PRIMITIVES) == 39
    assert [len(synth.compositions(d)) for d in synth.DEPTHS] == [31, 335, 3912, 47600]
    for c in synth.compositions(3):
        assert all(synth.BY_NAME[a].tout == synth.BY_NAME[b].tin and a != b for a, b in zip(c, c[1:]))


def statement_of(p) -> str:
    """The problem's statement in words (its docstring before the example): one per composition, as every
    primitive's clause is its own."""
    return p.prompt.split('"""')[1].split("\n    >>>")[0]


def test_split_is_by_composition_and_no_held_out_one_is_in_train():
    """Every composition's split is its sha256 bucket (depth 1: 22 / 7 / 2 of 31); the compositions of synth:dev
    and synth:test (100 problems each) never occur among synth:train's 1,000, while every primitive's clause of
    dev and test does. Catches: a split by problem (the same composition with other numbers in train and dev),
    Python's salted hash()."""
    assert len({synth.BY_NAME[n].words for n in synth.BY_NAME}) == 39  # statement <-> composition is one to one
    d1 = [synth.split_of(c) for c in synth.compositions(1)]
    assert (d1.count("train"), d1.count("dev"), d1.count("test")) == (22, 7, 2)
    sets = {s: data.load(f"synth:{s}") for s in synth.SPLITS}
    assert [len(sets[s]) for s in ("train", "dev", "test")] == [1000, 100, 100]
    comps = {s: {statement_of(p) for p in ps} for s, ps in sets.items()}
    assert not comps["train"] & comps["dev"] and not comps["train"] & comps["test"] and not comps["dev"] & comps["test"]
    clauses = lambda s: {c for st in comps[s] for c in st.split(", ", 1)[1].removesuffix(". Return the result.")  # noqa: E731
                         .split(", then ")}
    assert clauses("dev") <= clauses("train") and clauses("test") <= clauses("train")


def test_same_seed_same_problems_other_seed_other_tests():
    """generate is a function of (split, depths, per_depth, seed): twice the same; seed 1 keeps the ids but
    draws other compositions or other random tests. Catches: a global random state, set iteration order."""
    a, b = synth.generate("dev", (2,), 5, seed=0), synth.generate("dev", (2,), 5, seed=0)
    assert a == b and [p.task_id for p in a] == [f"synth-dev/d2/{i:04d}" for i in range(5)]
    c = synth.generate("dev", (2,), 5, seed=1)
    assert [p.task_id for p in c] == [p.task_id for p in a] and [p.tests for p in c] != [p.tests for p in a]
    assert synth.generate("dev", (1, 2), 5, seed=0)[5:] == a  # adding a depth changes no other depth's problems


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_reference_solution_passes_its_tests_and_edge_cases_come_first(split):
    """Each problem's reference solution (exec'd here: our own generated code) passes its 6 tests, and the first
    three tests are the start type's edge cases (an empty list / 0 / an empty string first); the worked example in
    the docstring is the reference's output. Catches: a test computed on another input than the one asserted, a
    solution line out of step with the primitive's Python."""
    for p in data.load(f"synth:{split}")[::10]:
        env = {}
        exec(p.solution, env)
        for t in p.tests:
            exec(t, dict(env))
        assert len(p.tests) == 6 and p.tests[0].startswith(f"assert {p.entry_point}(" + ("[]" if "xs:" in p.prompt else
                                                                                      "0" if "n:" in p.prompt else "''"))
        call, want = p.prompt.split(">>> ")[1].split("\n")[:2]
        assert eval(call, dict(env)) == eval(want.strip())


def test_depth_selector_and_bad_names():
    """@1-2 keeps depths 1 and 2 (25 + 25 dev problems), @3 only 3, @1,3 both; a depth 5, a word, an unknown split:
    one DataError line each. Catches: '@1-2' read as depth 1 only, a traceback for a typo."""
    assert [synth.depth_of(p.task_id) for p in data.load("synth:dev@1-2")] == [1] * 25 + [2] * 25
    assert {synth.depth_of(p.task_id) for p in data.load("synth:test@3")} == {3}
    assert synth.parse_depths("1,3") == (1, 3) and synth.depth_of("mbpp/12") is None
    for bad, line in [("synth:dev@5", "synth: bad depth selector '5' (e.g. @1-4, @3, @1,3; depths 1-4)"),
                      ("synth:dev@x", "synth: bad depth selector 'x' (e.g. @1-4, @3, @1,3; depths 1-4)"),
                      ("synth:val", "synth has no split 'val' (use train, dev, test)")]:
        with pytest.raises(data.DataError) as e:
            data.load(bad)
        assert str(e.value) == line
