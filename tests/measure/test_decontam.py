"""measure/decontam.py: a planted 13-gram overlap and a shared test are found with their exact counts, a clean pair
is not, template phrases and chance-sized tests do not count, and the cleaned set drops the pairs."""
import json

import data
from data.problem import Problem
from measure import decontam

EVAL = ("Write a function that returns the number of vowels in a string counting both lower and upper "
        "case letters.")  # 19 words: 7 grams of 13


def fn(task_id, prompt, tests=None):
    """A function problem; by default its one test names its task id (no two share it)."""
    return Problem(task_id, prompt, "f", tuple(tests or [f"assert f({task_id!r}) == {task_id!r}"]),
                   solution="def f(x):\n    return x")


def test_words_and_grams():
    assert decontam.words("Sum_of(A, b)!  Done.") == ["sum", "of", "a", "b", "done"]
    assert len(decontam.grams(EVAL)) == 19 - 13 + 1
    assert decontam.grams("too short to have one") == {("too", "short", "to", "have", "one")}
    # MBPP's own wording before the first test is cut out: no gram spans it
    mbpp = "Add two numbers." + data.MBPP_TEST_INTRO + "assert add(1, 2) == 3\n"
    assert decontam.grams(mbpp) == {("add", "two", "numbers"), ("assert", "add", "1", "2", "3")}


def test_planted_overlap_found_clean_pair_not():
    """The training statement carries the evaluated one's first 14 words: exactly 2 shared 13-grams; the
    shorter statement (the training one: 14 + 3 words = 5 grams) has 2 of its 5 grams shared -> 40 %."""
    planted = fn("t/1", "Hint: " + " ".join(EVAL.split()[:14]) + " then stop.")  # 'hint' + 14 + 'then stop' = 17 words
    clean = fn("t/2", "Write a function that sorts a list of integers in descending order and removes duplicates first.",
               tests=("assert g([2, 1]) == [2, 1]",))
    report = decontam.check({"train": [planted, clean]}, {"val": [fn("e/1", EVAL)]})
    assert report["pairs"] == [{"train": "train/t/1", "eval": "val/e/1", "ngrams": 2, "tests": 0, "coverage": 0.4,
                                "duplicate": False,
                                "example": "a function that returns the number of vowels in a string counting both"}]
    assert (report["ngram_pairs"], report["test_pairs"], report["duplicates"]) == (1, 0, 0)
    assert report["train"] == {"train": 2} and report["eval"] == {"val": 1}


def test_shared_test_is_a_duplicate_chance_sized_tests_are_not():
    a = fn("t/1", "Add two numbers.", tests=("assert  add(2, 3) == 5", "assert add(0, 0) == 0"))
    b = fn("e/1", "Return the sum of a and b.", tests=("assert add(2, 3)  ==  5",))  # the same test, other spacing
    io_a = Problem("t/io", "Echo.", "", (), io_tests=(("0", "0"), ("hello world", "hello world")))
    io_b = Problem("e/io", "Copy the line.", "", (), io_tests=(("0\n", "0"),))  # 2 characters: by chance
    report = decontam.check({"train": [a, io_a]}, {"val": [b, io_b]})
    assert [(p["train"], p["eval"], p["ngrams"], p["tests"], p["duplicate"]) for p in report["pairs"]] == \
        [("train/t/1", "val/e/1", 0, 1, True)]
    assert report["pairs"][0]["example"] == "assert add(2, 3) == 5"


def test_template_phrase_does_not_count():
    """A 13-word phrase in 6 problems (more than COMMON = 5) is a template: no pair; with common=0 it
    makes a pair of each training problem with each evaluated one (3 x 3 = 9)."""
    phrase = "Input: the first line holds n and the second line holds n integers separated by spaces."
    train = [fn(f"t/{i}", f"Task {w} about lists. {phrase}") for i, w in enumerate(["alpha", "beta", "gamma"])]
    evald = [fn(f"e/{i}", f"Problem {w} about trees. {phrase}") for i, w in enumerate(["delta", "eps", "zeta"])]
    assert decontam.check({"train": train}, {"val": evald})["pairs"] == []
    assert len(decontam.check({"train": train}, {"val": evald}, common=0)["pairs"]) == 9


def test_clean_set_written_without_its_pairs(tmp_path):
    """measure/decontam.py --clean writes the training set less every problem in a pair, as our record."""
    rows = [{"task_id": 601, "text": EVAL, "code": "def f(x):\n    return x", "test_list": ["assert f(3) == 3"],
             "test_setup_code": ""},
            {"task_id": 602, "text": "Write a function that doubles a number given as its only argument.",
             "code": "def f(x):\n    return 2 * x", "test_list": ["assert f(2) == 4"], "test_setup_code": ""},
            {"task_id": 11, "text": EVAL + " Ignore digits.", "code": "def f(x):\n    return x",
             "test_list": ["assert f(7) == 7"], "test_setup_code": ""}]
    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "clean.jsonl"
    report = decontam.main(["--train", f"mbpp:{mbpp}@train", "--eval", f"mbpp:{mbpp}@test",
                            "--out", str(tmp_path / "r.json"), "--clean", f"mbpp:{mbpp}@train={out}"])
    assert [(p["train"], p["eval"], p["ngrams"], p["duplicate"]) for p in report["pairs"]] == \
        [("mbpp@train/mbpp/601", "mbpp@test/mbpp/11", 7, True)]
    kept = data.load(str(out))
    assert [p.task_id for p in kept] == ["mbpp/602"] and kept[0].tests == ("assert f(2) == 4",)
    assert json.loads((tmp_path / "r.json").read_text())["duplicates"] == 1
