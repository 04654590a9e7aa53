"""Output checkers: does what a program printed answer an I/O test? One rule per benchmark, each
written from that benchmark's own evaluation code, so that a pass@k computed here can stand beside
the published one and a reward never calls a right program wrong by another benchmark's rule.

    rule            follows                                                       set by
    strict          ours: tokens, an integer exact, else 1e-6 absolute-or-relative  data/io_*.jsonl
    code_contests   google-deepmind/code_contests execution/tester_sandboxer.cc   code_contests:
    livecodebench   LiveCodeBench lcb_runner/evaluation/testing_util.py           livecodebench:
    apps            hendrycks/apps eval/testing_util.py run_test                   apps:
    taco            FlagOpen/TACO metrics/testing_util.py compare_std_results      taco:
    codeforces      testlib's wcmp / rcmp6, open-r1's piston run script           codeforces:
    genverse        the CoRe-Code release's evaluation/ours.py check_pass          genverse:

Every rule is `rule(output: bytes, expected: bytes) -> bool`: the program's stdout as it printed it,
the test's expected output as the dataset holds it (UTF-8); it never raises. judge.Reports calls
the problem's rule on each I/O test's stdout as it arrives. A Codeforces problem may bring a
checker program of its own (open-r1/codeforces' generated_checker, for problems with several
right answers): special_checker.py runs it in the sandbox, as untrusted code, on what the program
printed, and `checker_verdict` below reads what it says.
The cases where each rule and `strict` disagree are listed in docs/checkers.md.
"""
import dataclasses
import math
import re
from decimal import Decimal, InvalidOperation

TOLERANCE = 1e-6
INTEGER = re.compile(rb"[+-]?\d+")
DECIMAL = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


# -- strict: ours, for our own sets ---------------------------------------------------------------

def strict(output: bytes, expected: bytes) -> bool:
    """Our rule (our choice, for data/io_*.jsonl and `--checker strict`):
      - both outputs split on whitespace (bytes.split: space, \\t, \\n, \\r, \\v, \\f), so trailing
        spaces, blank lines and a missing final newline do not matter; equal tokens match;
      - an expected token that is an integer wants an integer token of the same value, exactly (any
        length, as text: "-007" is -7; "1e17" is not 100000000000000001, "3.0" is not 3);
      - an expected token with a '.' or an exponent, and a decimal token, match when
        |out - expected| <= 1e-6 * max(1, |expected|): the wording of Codeforces statements
        ("absolute or relative error does not exceed 1e-6");
      - case matters; nan, inf and other words are compared as words.

    >>> strict(b"0.30000000000000004  \\n\\n", b"0.3"), strict(b"YES", b"yes")
    (True, False)
    """
    got, want = output.split(), expected.split()
    if got == want:
        return True
    return len(got) == len(want) and all(tokens_match(a, b) for a, b in zip(got, want))


def tokens_match(token: bytes, expected: bytes) -> bool:
    """One token against the expected one, by `strict`'s rule. An integer expected token wants an
    integer token of the same value: no 1e17 for 100000000000000001 (a float would round it).

    >>> tokens_match(b"1e17", b"100000000000000001"), tokens_match(b"-007", b"-7"), tokens_match(b"3", b"3.0")
    (False, True, True)
    """
    if token == expected:
        return True
    if INTEGER.fullmatch(expected):
        return INTEGER.fullmatch(token) is not None and _integer_text(token) == _integer_text(expected)
    if DECIMAL.fullmatch(token) and DECIMAL.fullmatch(expected):
        a, b = float(token), float(expected)
        return abs(a - b) <= TOLERANCE * max(1.0, abs(b))
    return False


def _integer_text(token):
    """An integer token in one spelling: no "+", no leading zeros, "-0" is "0". Compared as text,
    not int(): int() refuses more than 4300 digits (sys.int_info.str_digits_check_threshold)."""
    negative, digits = token.startswith(b"-"), token.lstrip(b"+-").lstrip(b"0") or b"0"
    return b"-" + digits if negative and digits != b"0" else digits


# -- CodeContests ---------------------------------------------------------------------------------

CC_SEPARATORS = re.compile(rb"[ \n\t\r\v]+")  # absl::ByAnyChar(" \n\t\r\v"), SkipEmpty: not \f
ASCII_SPACE = b" \t\n\v\f\r"  # absl::ascii_isspace, stripped by SimpleAtoi / SimpleAtod
K_DOUBLE_PRECISION = 1e-5
# absl::from_chars (chars_format::general) after SimpleAtod's one optional '+': inf, infinity,
# nan, nan(chars), or digits with an optional '.' and exponent (not a bare '.')
ABSL_DOUBLE = re.compile(rb"[+-]?(inf|infinity|nan(\([0-9a-z_]*\))?|(\d+\.?\d*|\.\d+)(e[+-]?\d+)?)", re.I)


def code_contests(output: bytes, expected: bytes) -> bool:
    """CodeContests' own checker: google-deepmind/code_contests, execution/tester_sandboxer.cc,
    OutputsMatch. Both sides split on " \\n\\t\\r\\v" (not \\f) and lowercased (SplitAndLowercase);
    equal token lists match; else the counts must be equal and every pair pass ValuesMatch.

    >>> code_contests(b"Yes\\r\\n5.0\\n", b"YES\\n5"), code_contests(b"1 2", b"1 2 3")
    (True, False)
    """
    got, want = _cc_tokens(output), _cc_tokens(expected)
    if got == want:
        return True
    if len(got) != len(want):
        return False
    return all(_values_match(a, b) for a, b in zip(got, want))


def _cc_tokens(text):
    """SplitAndLowercase: absl::StrSplit on any of " \\n\\t\\r\\v", empty parts skipped,
    absl::AsciiStrToLower (A-Z only: bytes.lower)."""
    return [token.lower() for token in CC_SEPARATORS.split(text) if token]


def _values_match(a, b):
    """tester_sandboxer.cc, ValuesMatch, line for line: a token that is neither an int32 nor a
    double on either side -> string equality; else a double on either side -> |a - b| < 1e-5
    (absolute; nan and inf never pass: their difference is nan); else two int32 -> equality.
    Every int32 token parses as a double too, so the last line is never reached: two numbers
    always meet the 1e-5 line (and 10000000000000001 = 10000000000000000, one double)."""
    a_is_int, ai = _simple_atoi(a)
    b_is_int, bi = _simple_atoi(b)
    a_is_double, ad = _simple_atod(a)
    b_is_double, bd = _simple_atod(b)
    if (not a_is_int and not a_is_double) or (not b_is_int and not b_is_double):
        return a == b
    if a_is_double or b_is_double:
        return abs(ad - bd) < K_DOUBLE_PRECISION
    return ai == bi


def _simple_atoi(token):
    """absl::SimpleAtoi into an int32 (numbers.cc, safe_strto32_base, base 10): ASCII whitespace
    stripped, one sign, decimal digits, within [-2**31, 2**31 - 1] -> (True, value); else (False, 0)."""
    token = token.strip(ASCII_SPACE)
    if INTEGER.fullmatch(token) and len(token.lstrip(b"+-").lstrip(b"0")) <= 10:  # int() only on short text
        value = int(token)
        if -2**31 <= value <= 2**31 - 1:
            return True, value
    return False, 0


def _simple_atod(token):
    """absl::SimpleAtod (numbers.cc): ASCII whitespace stripped, one '+' allowed (not "+-"), then
    absl::from_chars must take the whole token -> (True, value; out of range: +-inf or 0); else
    (False, 0.0)."""
    token = token.strip(ASCII_SPACE)
    if not ABSL_DOUBLE.fullmatch(token):
        return False, 0.0
    if b"nan" in token.lower():
        return True, math.nan
    return True, float(token)


# -- LiveCodeBench --------------------------------------------------------------------------------

def livecodebench(output: bytes, expected: bytes) -> bool:
    """LiveCodeBench's stdio grading: lcb_runner/evaluation/testing_util.py, grade_stdio. Both
    sides through get_stripped_lines (the whole text strip()ped, split on "\\n", each line
    strip()ped: so trailing blank lines and \\r\\n do not matter, inner blank lines do); the line
    counts must be equal; each pair of lines matches when equal (CASE 1), else when both are
    whitespace-split lists of Decimals and those lists are equal (CASE 2: Decimal("0.10") ==
    Decimal("0.1"), 5.0 = 5, but no tolerance). A line that is not all numbers fails. A signalling
    NaN ("sNaN") makes their comparison raise, outside any try: their run fails, so it fails here.
    The functional (LeetCode) problems are value tests, judged as every value test.

    >>> livecodebench(b"0.10 2\\r\\n\\n", b"0.1 2.0"), livecodebench(b"yes", b"Yes")
    (True, False)
    """
    got, want = _stripped_lines(output.decode(errors="replace")), _stripped_lines(expected.decode(errors="replace"))
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if a == b:
            continue
        try:
            if [Decimal(x) for x in a.split()] != [Decimal(x) for x in b.split()]:
                return False
        except (InvalidOperation, ValueError):  # convert_line_to_decimals' bare except; sNaN's ==
            return False
    return True


def _stripped_lines(text):
    """testing_util.py, get_stripped_lines."""
    return [line.strip() for line in text.strip().split("\n")]


# -- APPS and TACO --------------------------------------------------------------------------------

def apps(output: bytes, expected: bytes) -> bool:
    """APPS' stdin grading: hendrycks/apps, eval/testing_util.py, run_test (the standard_input
    branch), its fallbacks in their order; the first that holds passes. The program's output is
    `Capturing`'s list of lines (str.splitlines), the expected output one string (a list of lines
    is joined with "\\n" by the loader, as run_test does):
      1. custom_compare_: the lines joined with "\\n", stripped, equal the stripped expected text;
         or the same with each line stripped first;
      2. the output is the expected text as its one line;
      3. the expected text split on "\\n", empty lines dropped, each stripped: equal to the output
         lines, then to the output lines with empty ones dropped;
      4. every line one float (float(): "5.0" = "5", "1e-9" = "0"), as many on both sides, and
         np.allclose (|a - b| <= 1e-8 + 1e-5 |b|);
      5. each line as the SET of its whitespace tokens, and the output as the SET of those sets
         (empty lines dropped): equal -- line order, token order and repeats do not count;
      6. the same with every token as round(float(t), 3) (any non-number: this one fails).
    Call-based problems are value tests (benchmarks.load_apps), judged as every value test.

    >>> apps(b"2 1\\n", b"1 2"), apps(b"0.1234\\n", b"0.1231"), apps(b"YES", b"yes")
    (True, True, False)
    """
    output, gt = output.decode(errors="replace").splitlines(), expected.decode(errors="replace")
    if "\n".join(output).strip() == gt.strip() or "\n".join(o.strip() for o in output).strip() == gt.strip():
        return True  # 1
    if output == [gt]:
        return True  # 2
    gt = [x.strip() for x in gt.split("\n") if len(x)]  # "try one more time without \n"
    if output == gt:
        return True  # 3
    output = [o for o in output if len(o)]
    if output == gt:
        return True  # 3, empty output lines dropped
    if _floats_close(output, gt):
        return True  # 4
    return _as_sets(output, [set(line.split()) for line in gt], lambda line: line.split())  # 5, 6


def taco(output: bytes, expected: bytes) -> bool:
    """TACO's stdin grading: FlagOpen/TACO, metrics/testing_util.py, compare_std_results. It
    keeps APPS' chain but is handed subprocess.run(text=True)'s stdout, ONE string (universal
    newlines: \\r\\n and \\r become \\n; not UTF-8: the run fails), where APPS has a list of lines;
    so the list branches never apply, and iterating that string walks its characters:
      1. stdout stripped equals the expected text stripped;
      2. (APPS' 2 and 3 compare a str with a list: never equal)
      3. every CHARACTER of stdout a float (so only a stdout without newline, "5" for "5.0") and
         np.allclose with the expected lines as floats;
      4. the set of the CHARACTER sets of stdout's tokens equals the set of the expected lines'
         token sets: "ab" passes for "a b", "12" for "2 1", "2\\n1" for "1\\n2";
      5. the same with every character, and every expected token, as round(float(x), 3).

    >>> taco(b"2\\n1\\n", b"1\\n2"), taco(b"ab\\n", b"a b"), taco(b"1 2\\n", b"2 1")
    (True, True, False)
    """
    try:
        out = output.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:  # subprocess.run raises; execute_std_code's except: not passed
        return False
    gt = expected.decode(errors="replace")
    if out.strip() == gt.strip():
        return True  # 1
    gt = [x.strip() for x in gt.split("\n") if len(x)]
    if _floats_close(list(out), gt):
        return True  # 3
    return _as_sets(set(out.split()), [set(line.split()) for line in gt], lambda token: token)  # 4, 5


def _floats_close(output, gt):
    """APPS/TACO: every item a float, as many on both sides, and np.allclose."""
    try:
        a, b = [float(e) for e in output], [float(e) for e in gt]
    except ValueError:
        return False
    return len(a) == len(b) and all(_isclose(x, y) for x, y in zip(a, b))


def _isclose(a, b):
    """numpy.isclose(a, b) with its defaults (rtol 1e-5, atol 1e-8, equal_nan False): finite
    |a - b| <= atol + rtol * |b|; infinities equal only to themselves; nan to nothing."""
    if math.isfinite(a) and math.isfinite(b):
        return abs(a - b) <= 1e-8 + 1e-5 * abs(b)
    return a == b


def _as_sets(output, gt_sets, parts):
    """APPS' / TACO's last two fallbacks: {frozenset(parts(item))} == {frozenset(line tokens)},
    then the same through round(float(x), 3) (ValueError: not all numbers, that one fails)."""
    out_sets = [set(p) for p in map(parts, output) if len(p)]
    if {frozenset(s) for s in out_sets} == {frozenset(s) for s in gt_sets}:
        return True
    try:
        return ({frozenset(round(float(t), 3) for t in s) for s in out_sets}
                == {frozenset(round(float(t), 3) for t in s) for s in gt_sets})
    except ValueError:
        return False


# -- Codeforces -----------------------------------------------------------------------------------

TESTLIB_BLANKS = re.compile(rb"[ \t\r\n]+")  # testlib.h isBlanks: LF, CR, SPACE, TAB
YES_NO = re.compile(rb"\b(yes|no)\b", re.I)


def codeforces(output: bytes, expected: bytes) -> bool:
    """A Codeforces problem without a checker of its own: testlib's token comparison.
      - tokens split on testlib's blanks (space, \\t, \\r, \\n; testlib.h isBlanks), compared one
        by one as checkers/wcmp.cpp does (readWordTo; extra or missing tokens fail);
      - where the expected token is a real number (a '.' or an exponent), the output token must
        be a double (testlib.h stringToDouble) within doubleCompare(expected, found, 1e-6): the
        rule of checkers/rcmp6.cpp, for outputs that are real (our choice: decided per token);
      - the words yes and no match in any case, as open-r1 runs Codeforces problems without a
        checker (guipenedo/piston packages/codeforces/1.0.0/run, normalize_output: sed
        's/\\b(yes)\\b/YES/ig; s/\\b(no)\\b/NO/ig').
    A problem with a generated_checker is judged by that program instead (special_checker.py).

    >>> codeforces(b"Yes\\n0.5000004\\n", b"YES\\n0.5"), codeforces(b"3.0", b"3"), codeforces(b"-007", b"-7")
    (True, False, False)
    """
    got, want = _cf_tokens(output), _cf_tokens(expected)
    return len(got) == len(want) and all(_cf_token_match(p, j) for p, j in zip(got, want))


def _cf_tokens(text):
    return [t for t in TESTLIB_BLANKS.split(YES_NO.sub(lambda m: m.group(0).upper(), text)) if t]


def _cf_token_match(found, expected):
    if DECIMAL.fullmatch(expected) and not INTEGER.fullmatch(expected):  # a real number
        return DECIMAL.fullmatch(found) is not None and double_compare(float(expected), float(found), TOLERANCE)
    return found == expected


def double_compare(expected: float, result: float, max_double_error: float) -> bool:
    """testlib.h doubleCompare, line for line: absolute or relative error <= max_double_error
    (+ 1e-15); an "infinite" number is one past +-1e300 (__testlib_isInfinite).

    >>> double_compare(1e9, 1e9 + 999, 1e-6), double_compare(1e9, 1e9 + 1001, 1e-6), double_compare(0.0, 1e-6, 1e-6)
    (True, False, True)
    """
    max_double_error += 1e-15
    if math.isnan(expected):
        return math.isnan(result)
    if _infinite(expected):
        return (result > 0 if expected > 0 else result < 0) and _infinite(result)
    if math.isnan(result) or _infinite(result):
        return False
    if abs(result - expected) <= max_double_error:
        return True
    low, high = sorted((expected * (1.0 - max_double_error), expected * (1.0 + max_double_error)))
    return low <= result <= high


def _infinite(r):
    return r > 1e300 or r < -1e300


def genverse(output: bytes, expected: bytes) -> bool:
    """The CoRe-Code authors' comparison on the Gen-Verse sets (AlbertZhaoCA/e1, evaluation/ours.py check_pass
    and examples/reward_function/higher-order.py): " ".join(r.strip().split()) == " ".join(e.strip().split()),
    i.e. the same whitespace-separated tokens, compared as text (no number tolerance).

    >>> genverse(b"1  2\n3\n", b"1 2 3"), genverse(b"1.0", b"1")
    (True, False)
    """
    return output.decode("utf-8", "replace").split() == expected.decode("utf-8", "replace").split()


# -- the table, and --checker ---------------------------------------------------------------------

RULES = {"strict": strict, "code_contests": code_contests, "livecodebench": livecodebench, "apps": apps,
         "taco": taco, "codeforces": codeforces, "genverse": genverse}


def rule(name: str):
    """The function of a checker name: one of RULES, or "verdict" (what a checker program printed,
    `checker_verdict`: special_checker.py's runs). ValueError, one line, for any other name."""
    if name == "verdict":
        return checker_verdict
    if name not in RULES:
        raise ValueError(f"unknown output checker {name!r}: use one of {', '.join(RULES)}")
    return RULES[name]


def use(problems: list, name: str | None) -> list:
    """`--checker NAME`: every I/O problem judged by RULES[NAME], its own checker program dropped;
    None or "auto": each problem keeps the rule its loader gave it. ValueError for an unknown name."""
    if name in (None, "auto"):
        return problems
    rule(name)
    return [dataclasses.replace(p, checker=name, checker_program=None) if p.is_io else p for p in problems]


def describe(problems: list) -> dict:
    """{rule: I/O problems judged by it, "special": those with a checker program of their own}:
    what results.json records for a problem set ({} when it has no I/O problem)."""
    out = {}
    for p in problems:
        if p.is_io:
            out[p.checker] = out.get(p.checker, 0) + 1
            out["special"] = out.get("special", 0) + bool(p.checker_program)
    if not out.get("special"):
        out.pop("special", None)
    return out


# -- a checker program's own output ------------------------------------------------------------

WHITESPACE = re.compile(rb"[ \t\n\v\f\r]")  # tr -d '[:space:]'


def checker_verdict(output: bytes, expected: bytes = b"") -> str:
    """A checker program's stdout -> its verdict (the piston run script: `tr -d '[:space:]'`, then
    "100" or "1" is correct): "passed"; any other number (a score below full marks) "failed";
    anything else, empty output included, is no verdict: "judge_error". (NUL bytes, which bash's
    $(...) would drop, are no verdict here.)

    >>> checker_verdict(b"1\\n"), checker_verdict(b" 100 "), checker_verdict(b"0"), checker_verdict(b"ok")
    ('passed', 'passed', 'failed', 'judge_error')
    """
    said = WHITESPACE.sub(b"", output)
    if said in (b"1", b"100"):
        return "passed"
    return "failed" if DECIMAL.fullmatch(said) else "judge_error"
