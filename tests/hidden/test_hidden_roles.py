"""Hidden tests of coder.extract_code (course/exercises.toml `hidden`): other completions than the
public tests, each expected program written out by hand from the rules in the docstring."""
import coder


def test_hidden_extract_fenced_blocks():
    """Rule 1: the LAST python/py/untagged block ('py' then 'python': the second); python, py and
    python3 over a later bash or text block; rule 2: no python block, the last of any tag (sql after
    text); tags in any case."""
    assert coder.extract_code("```py\nA = 1\n```\nthen\n```python\nB = 2\n```") == "B = 2\n"
    assert coder.extract_code('```python\nprint("hi")\n```\n```bash\nls\n```') == 'print("hi")\n'
    assert coder.extract_code("```py\nq = 1\n```\n```text\nnote\n```") == "q = 1\n"
    assert coder.extract_code("```python3\nimport os\n```\nor\n```sh\nrm x\n```") == "import os\n"
    assert coder.extract_code("```text\nfirst\n```\n```sql\nSELECT 1;\n```") == "SELECT 1;\n"
    assert coder.extract_code("```PY\ny = 3\n```\n```\nz = 4\n```\nok") == "z = 4\n"


def test_hidden_extract_empty_blocks_give_none():
    """An empty (or blank) chosen block is no code: None, also when a later block of another tag
    holds text (the python block is the one chosen)."""
    assert coder.extract_code("```\n\n```") is None
    assert coder.extract_code("a\n```python\n  \n```\n```text\nz\n```") is None
    assert coder.extract_code("Thanks!") is None


def test_hidden_extract_without_a_closed_block():
    """Rule 3: an unclosed fence with a tag line; rules 4 and 5: no fence, from the first import/def
    line, or from the first statement of a script (an I/O program)."""
    assert coder.extract_code("Answer:\n```Python3\nimport sys\nprint(1)") == "import sys\nprint(1)"
    assert coder.extract_code("Use this.\nfrom math import sqrt\ndef g(x):\n    return sqrt(x)\n") == \
        "from math import sqrt\ndef g(x):\n    return sqrt(x)\n"
    assert coder.extract_code("Program:\nx = int(input())\nprint(x + 1)") == "x = int(input())\nprint(x + 1)"
    assert coder.extract_code("We print it:\nprint(len(input()))") == "print(len(input()))"
