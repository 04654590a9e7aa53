"""Our problem sets, the loaders for HumanEval / MBPP, and clear errors for bad lines."""
import json

import pytest

import coder
import data
import sandbox


@pytest.fixture(scope="module")
def train():
    return data.load("train")


@pytest.fixture(scope="module")
def val():
    return data.load("val")


def test_sizes_and_records(train, val):
    assert len(train) >= 150 and len(val) >= 40
    for p in train + val:
        assert len(p.tests) >= 3 and p.solution and p.plan
        assert p.prompt.startswith(f"def {p.entry_point}(")
        assert all(f"{p.entry_point}(" in t for t in p.tests)
        assert "```" not in p.plan and "def " not in p.plan


def test_train_and_val_share_no_task(train, val):
    for field in ("task_id", "entry_point", "prompt", "solution"):
        assert not {getattr(p, field) for p in train} & {getattr(p, field) for p in val}, field


def test_every_reference_solution_passes_and_a_stub_fails(train, val):
    problems = train + val
    right = sandbox.run_many([dict(program=coder.program(p, p.solution), tests=list(p.tests)) for p in problems])
    bad = [(p.task_id, r.verdict, r.detail) for p, r in zip(problems, right) if r.verdict != "passed"]
    assert bad == []
    assert [r.passed for r in right] == [len(p.tests) for p in problems]
    wrong = sandbox.run_many([dict(program=f"def {p.entry_point}(*a, **k):\n    return None\n", tests=list(p.tests))
                              for p in problems])
    assert [p.task_id for p, r in zip(problems, wrong) if r.verdict == "passed"] == []


def test_malformed_line_names_file_and_line(tmp_path):
    good = {"task_id": "a", "prompt": "def f(): ...", "entry_point": "f", "tests": ["assert f() == 1"]}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:2: not valid JSON"):
        data.load_jsonl(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "task_id": "b", "tests": []}) + "\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:2: 'tests' must be a non-empty list"):
        data.load_jsonl(path)
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "entry_point"}) + "\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:1: field 'entry_point' missing"):
        data.load_jsonl(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(data.DataError, match=r"bad\.jsonl:2: duplicate task_id 'a'"):
        data.load_jsonl(path)


MBPP = [{"task_id": 7, "text": "Write a function to find the shared elements of two tuples.",
         "code": "def helper(x):\n    return set(x)\ndef similar(a, b):\n    return tuple(sorted(helper(a) & helper(b)))",
         "test_list": ["assert similar((3, 4, 5), (5, 4)) == (4, 5)", "assert set(similar((1,), (2,))) == set()",
                       "assert similar((1, 2), (2, 9)) == (2,)"],
         "test_setup_code": "", "challenge_test_list": []},
        {"task_id": 8, "text": "Write a function for the area of a circle.",
         "code": "import math\ndef area(r):\n    return math.pi * r * r",
         "test_list": ["assert math.isclose(area(1), 3.14159, rel_tol=1e-3)", "assert area(0) == 0",
                       "assert area(2) > 12"], "test_setup_code": "import math"}]


def test_mbpp_jsonl_and_sanitized_json(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MBPP))
    probs = data.load(f"mbpp:{path}")
    assert [p.task_id for p in probs] == ["mbpp/7", "mbpp/8"]
    assert [p.entry_point for p in probs] == ["similar", "area"]  # not the helper, not math.isclose
    assert probs[0].prompt.endswith("Your code should pass this test:\nassert similar((3, 4, 5), (5, 4)) == (4, 5)\n")
    assert probs[1].setup == "import math"
    results = sandbox.run_many([dict(program=coder.program(p, p.solution), tests=list(p.tests), setup=p.setup)
                                for p in probs])
    assert [(r.verdict, r.passed) for r in results] == [("passed", 3), ("passed", 3)]
    sanitized = [{"source_file": "x", "task_id": 8, "prompt": MBPP[1]["text"], "code": MBPP[1]["code"],
                  "test_imports": ["import math"], "test_list": MBPP[1]["test_list"]}]
    path2 = tmp_path / "sanitized.json"
    path2.write_text(json.dumps(sanitized))
    (p,) = data.load(f"mbpp:{path2}")
    assert (p.entry_point, p.setup, len(p.tests)) == ("area", "import math", 3)


def test_mbpp_bad_record_is_named(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(MBPP[0]) + "\n" + json.dumps({"task_id": 1, "text": "x"}) + "\n")
    with pytest.raises(data.DataError, match=r"m\.jsonl:2: not an MBPP record"):
        data.load(f"mbpp:{path}")


def test_humaneval_from_package():
    probs = data.load("humaneval")
    assert len(probs) == 164 and probs[0].task_id == "HumanEval/0"
    assert probs[0].tests == ("check(has_close_elements)",) and "def check(candidate)" in probs[0].setup
    r = sandbox.run_many([dict(program=p.solution, tests=list(p.tests), setup=p.setup) for p in probs[:3]])
    assert [x.verdict for x in r] == ["passed"] * 3
