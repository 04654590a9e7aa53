"""A problem's own checker program (open-r1/codeforces' generated_checker: problems with several
right answers), run as untrusted code in the sandbox to judge what a program printed.

    program's run (sandbox.run_program)          checker's run (one more sandbox.run_program)
    each I/O test: stdout kept, test held        each kept output: input, expected output and
      at "judge_error" (judge.Reports)   ----->    stdout as three files, prepared as open-r1's
                                                   runner does; `python3 checker.py IN ANS OUT`
    each test: the checker's verdict     <-----  stdout "1" / "100": passed; another number:
      (judge.Reports.settle)                       failed; anything else: judge_error

The calling convention is open-r1's: huggingface/open-r1 src/open_r1/utils/competitive_programming/
cf_scoring.py (score_single_test_case sends checker.py, input.txt and correct_output.txt to
piston) and guipenedo/piston packages/codeforces/1.0.0/run (the script that prepares the files,
runs `python3 checker.py "$SOLUTION_INPUT" correct_output.txt "$SOLUTION_OUTPUT"` under a 10 s
timeout, and reads its stdout). The checker comes from a dataset: here it is a program like any
other, with the sandbox's limits; it sees the expected output (that is its job), never our
reports' tokens (its stdout is a file we read), and it can pass a test only by printing 1 or 100
and exiting 0. A crash, a timeout, a memory or output overflow, or output that is no verdict is
"judge_error" for that test: never "passed".
"""
import re

CHECKER_TIMEOUT_S = 10.0  # the piston run script: `run_with_timeout 10 python3 checker.py ...`
CHECKER_FILES = ("input.txt", "correct_output.txt", "solution_output.txt")
# The program the sandbox runs for a checker: it writes its stdin's three hex lines to the three
# files of its working dir, then runs the checker as `python3 checker.py INPUT CORRECT SOLUTION`.
CHECKER_MAIN = """import sys
for _name, _hex in zip({files!r}, sys.stdin.read().split("\\n")):
    with open(_name, "wb") as _file:
        _file.write(bytes.fromhex(_hex))
sys.argv = ["checker.py", *{files!r}]
exec(compile({code!r}, "checker.py", "exec"), {{"__name__": "__main__", "__builtins__": __builtins__}})
"""


def verdicts(checker_program: str, cases: dict, run_program) -> dict:
    """{test index: (verdict, detail)} for cases {test index: (input, expected output, the
    program's stdout bytes)}: the checker's judgement of each output, "passed", "failed" or
    "judge_error" (module docstring). run_program: sandbox.run_program in the program's own
    isolation mode (passed in: the sandbox calls this). All cases go to one run of the checker, a fork of it per case, each with
    CHECKER_TIMEOUT_S CPU seconds; its stdout is read by checkers.checker_verdict."""
    order = sorted(cases)
    inputs = ["\n".join(part.hex() for part in piston_files(*cases[i])) for i in order]
    r = run_program(CHECKER_MAIN.format(files=CHECKER_FILES, code=checker_program),
                    io_tests=[(given, "") for given in inputs], timeout_s=CHECKER_TIMEOUT_S, checker="verdict")
    first = next((i for i, v in zip(order, r.tests) if v != "passed"), None)
    out = {}
    for i, verdict in zip(order, r.tests):
        if verdict in ("passed", "failed"):
            out[i] = (verdict, "" if verdict == "passed" else "wrong answer (the problem's checker)")
        else:
            out[i] = ("judge_error", f"the problem's checker: {verdict}" + (f" ({r.detail})" if i == first else ""))
    return out


def piston_files(given: str, expected: str, output: bytes) -> tuple:
    """(input, correct output, solution output) as the piston run script hands them to checker.py:
    the input with a \\r ending a line removed (sed 's/\\r$//'); the solution's output with its
    empty lines removed (sed '/^$/d'); the correct output through $(cat ...) (trailing newlines and
    NUL bytes dropped) and echo (one newline added), then \\r at line ends and empty lines removed.

    >>> piston_files("3\\r\\n", "1\\r\\n\\n2\\n\\n", b"1\\n\\n2")
    (b'3\\n', b'1\\n2\\n', b'1\\n2')
    """
    correct = expected.encode().replace(b"\0", b"").rstrip(b"\n") + b"\n"
    return _no_cr(given.encode()), _no_empty_lines(_no_cr(correct)), _no_empty_lines(output)


def _no_cr(data):
    """sed 's/\\r$//': a \\r that ends a line is removed."""
    return re.sub(rb"\r$", b"", data, flags=re.M)


def _no_empty_lines(data):
    """sed '/^$/d': a final line without a newline stays as it is."""
    *lines, last = data.split(b"\n")
    return b"".join(line + b"\n" for line in lines if line) + last

