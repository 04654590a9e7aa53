"""Judging: what the run's reports say, and each test's verdict (what kind each test is: kinds.py).

The parent half of the truth (sandbox.py runs the processes; runner.py is the child). Every test kind is
judged where the program cannot reach the judgement: value and I/O tests here, on what the child sends
(a value as marshal data, an output as bytes), against the expected values and outputs that only we hold;
statement tests in the judge process, whose reports alone can pass them.

Reports. Each report line is `TOKEN PEAK_KIB hex(marshal(message))`. The program's process and
the judge process have a token each; the program may know its own (it runs in that process) but
never the judge's, so only the judge's token makes a statement test pass. What the program can
still forge with its own token is a value or an I/O report: a claim that f(2) returned 4, or that
it printed "3" -- which it could have done honestly. Its advantage is nil; it passes a value test
only by knowing the literal, which is why a value test's EXPR may compute only the program's own
answer (kinds.py). Decoding a report is bounded in objects, containers, depth and hash collisions
(loads_plain), for all of a run's reports together.

The I/O checker: the problem's rule from checkers.py (one per benchmark; `strict` for our own
sets), applied here to each I/O test's stdout as it arrives; a problem's own checker program
(special_checker.py) judges the outputs once the program's run is over.
"""
import contextlib
import marshal
import re
import reprlib

from sandboxing import checkers

VERDICTS = ("passed", "failed", "error", "timeout", "memory", "output_limit", "no_code", "sandbox_error",
            "judge_error")  # judge_error: the problem's own checker program failed (special_checker.py)
FAILURES = ("failed", "error", "timeout", "memory", "output_limit")  # what the program's side may claim
PEAK = re.compile(rb"\d{1,12}")


# -- decoding what the child sends: bounded (docs/sandbox.md#h4-costly-report-decoding) -------------

MAX_ITEMS = 1 << 18  # objects decoded from one run, all its reports together (an honest report: a few to a
# few thousand); 2**18 ints cost ~10 MB and ~0.5 s here, outside the run's memory budget
MAX_CONTAINERS = 1 << 16  # of them containers: an empty set costs 216 bytes here for 5 bytes sent
MAX_DEPTH = 100  # nesting of containers
MAX_SAME_HASH = 8  # keys of one set or dict with one hash: more is a collision attack (k * (2**61 - 1))
LEAVES = {ord(c): c for c in "NFTSilgysuatAzZ."}
CONTAINERS = {ord("("): tuple, ord(")"): tuple, ord("["): list, ord("<"): set, ord(">"): frozenset}
FLAG_REF = 0x80


def loads_plain(data: bytes, budget: list | None = None):
    """marshal.loads for the plain-data subset, with its cost bounded before anything is built:
    at most MAX_ITEMS objects, MAX_CONTAINERS of them containers, and MAX_DEPTH levels (budget: [objects,
    containers] still allowed, shared by the calls that pass it and spent by each: Reports gives one per
    run, so many reports cost no more than one); marshal's back-references ('r') only to leaves
    (a reference to a tuple makes a DAG whose hash costs 2**depth); no code objects; at most
    MAX_SAME_HASH keys of one hash in a set or dict (60k ints of hash 0 cost minutes to insert).
    Leaves are decoded by marshal itself, one at a time. ValueError for anything else.

    >>> loads_plain(marshal.dumps(("value", 1, [2.5, 10**30], {1: (b"x",)}, {3}, "é" * 2)))
    ('value', 1, [2.5, 1000000000000000000000000000000], {1: (b'x',)}, {3}, 'éé')
    """
    refs, pos = [], [0]
    budget = [MAX_ITEMS, MAX_CONTAINERS] if budget is None else budget

    def take(n):
        if pos[0] + n > len(data):
            raise ValueError("truncated")
        pos[0] += n
        return data[pos[0] - n:pos[0]]

    def size(n=4):
        return int.from_bytes(take(n), "little", signed=n == 4)

    def keyed(keys):
        seen = {}
        for key in keys:
            h = hash(key)
            seen[h] = seen.get(h, 0) + 1
            if seen[h] > MAX_SAME_HASH:
                raise ValueError("too many keys of one hash")

    def item(depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise ValueError("too large")
        code = take(1)[0]
        flag, code = code & FLAG_REF, code & ~FLAG_REF
        slot = len(refs)
        if flag:
            refs.append(None)
        start = pos[0]
        if code in LEAVES:
            char = LEAVES[code]
            if char == "i":
                take(4)
            elif char == "l":  # n 15-bit digits, the sign of n the number's
                take(2 * abs(size()))
            elif char in "gy":
                take(8 if char == "g" else 16)
            elif char in "suatA":
                take(size())
            elif char in "zZ":
                take(size(1))
            value = marshal.loads(bytes([code]) + data[start:pos[0]])
        elif code == ord("r"):
            value = refs[size()]
            if value is None:  # a reference to a container (or to one not yet built)
                raise ValueError("a back-reference to a container")
            return value
        elif code in CONTAINERS or code == ord("{"):
            budget[1] -= 1
            if budget[1] < 0:
                raise ValueError("too many containers")
            if code == ord("{"):
                pairs = []
                while data[pos[0]:pos[0] + 1] != b"0":
                    pairs.append((item(depth + 1), item(depth + 1)))
                take(1)
                keyed(k for k, _ in pairs)
                value = dict(pairs)
            else:
                n = size(1) if code == ord(")") else size()
                if n < 0 or n > budget[0]:
                    raise ValueError("too large")
                items = [item(depth + 1) for _ in range(n)]
                if code in (ord("<"), ord(">")):
                    keyed(items)
                value = CONTAINERS[code](items)
        else:
            raise ValueError(f"marshal code {code:#x} is not plain data")
        if flag and (code in LEAVES or value == () and type(value) in (tuple, frozenset)):
            refs[slot] = value  # a leaf, or the empty tuple (one shared object in CPython): harmless
        return value

    value = item(0)
    if pos[0] != len(data):
        raise ValueError("trailing bytes")
    return value


# -- reading the reports --------------------------------------------------------------------------

class Reports:
    """Consumes the child's output line by line (process.read_until_exit calls `feed`), so
    that an I/O test's stdout is judged as soon as it arrives and then dropped: memory stays at one
    report, whatever 50 tests print. Keeps [(sender, peak KiB, message)] and the last stray line
    (the runner's own traceback, when it crashed).
    checker: the name of the problem's rule (checkers.rule). keep: the problem has a checker
    program of its own; then each output is kept, {i: (input, expected, stdout)} in `kept`, its
    test "judge_error" until `settle` gives the checker's verdicts."""

    def __init__(self, plans, tokens, checker="strict", keep=False):
        self.plans, self.messages, self.stray = plans, [], b""
        self.budget = [MAX_ITEMS, MAX_CONTAINERS]  # what all of the run's reports may decode into (loads_plain)
        self.over_budget = False  # spent: the run's verdict is output_limit (judge)
        self.prefixes = {sender: token.encode() + b" " for sender, token in tokens.items()}
        self.rule, self.kept = checkers.rule(checker), {} if keep else None

    def feed(self, line):
        for sender, prefix in self.prefixes.items():
            if line.startswith(prefix):
                with contextlib.suppress(Exception):
                    peak, payload = line[len(prefix):].split(b" ")
                    if not PEAK.fullmatch(peak):  # KiB: at most 12 digits, no 10**400 (docs/sandbox.md#h5-malformed-report-fields)
                        return
                    message = loads_plain(bytes.fromhex(payload.decode()), self.budget)  # bounded cost (docs/sandbox.md#h4-costly-report-decoding)
                    if type(message) is tuple and message and type(message[0]) is str:
                        self.messages.append((sender, int(peak), self._digest(message)))
                self.over_budget = min(self.budget) < 0  # spent: nothing more decodes, and the run is output_limit
                return
        if line.strip():
            self.stray = line[-300:]

    def _digest(self, message):
        """("io", i, status, stdout, stderr tail, cpu, wall, mem) -> ("io", i, verdict, detail,
        cpu, wall, mem): the output compared here, with the expected output that only we hold."""
        if message[0] != "io":
            return message
        _, i, status, stdout, stderr_tail, *timing = message
        if type(i) is not int or not 0 <= i < len(self.plans):
            return ("malformed",)
        kind, given, expected = self.plans[i]
        if kind != "io":
            return ("malformed",)
        if status == "exited 0" and type(stdout) is not bytes:
            return ("malformed",)
        if status == "exited 0" and self.kept is not None:  # the problem's checker program decides
            self.kept.setdefault(i, (given, expected, stdout))
            verdict, detail = "judge_error", "the problem's checker did not run"
        elif status == "exited 0":
            said = self.rule(stdout, expected.encode())  # a rule's bool, or a verdict (checker_verdict)
            verdict = said if type(said) is str else "passed" if said else "failed"
            detail = "" if verdict == "passed" else f"wrong output: got {reprlib.repr(stdout.decode(errors='replace'))}"
        elif status in FAILURES:  # never "passed": only our own comparison passes an I/O test
            verdict, detail = status, stderr_tail or status
        else:  # "exited 3", "killed by SIGSEGV": an error, even when the output was right
            verdict, detail = "error", stderr_tail or status
        return ("io", i, verdict, detail[:300], *timing)

    def settle(self, verdicts):
        """The checker program's verdicts {i: (verdict, detail)} (special_checker.verdicts) in place of the
        "judge_error" that each kept output's test holds until then."""
        self.messages = [(sender, peak, ("io", m[1], *verdicts[m[1]], *m[4:])
                          if m[0] == "io" and m[1] in verdicts and m[2] == "judge_error" else m)
                         for sender, peak, m in self.messages]


def _timing(values):
    """(cpu s, wall s, mem MiB) as the child claimed them, each a finite int or float in [0, 1e9)
    (exact types: a forged 10**400 or "x" must not raise here), else None."""
    values = tuple(values) + (None,) * (3 - len(values))
    return tuple(float(v) if type(v) in (int, float) and -1 < v < 1e9 and v == v and v >= 0 else None
                 for v in values[:3])


def judge(tests, plans, reports, ended, judged_by):
    """(verdict, per-test verdicts, detail, per-test (cpu, wall, mem)) from the reports and how the
    child ended. A test without a report gets the verdict of the child's end; the run's verdict is
    that of its first test that did not pass; "passed" needs every test and the end markers.
    judged_by: the sender whose reports count for statement tests ("judge")."""
    names = list(tests) + [f"I/O test {i + 1}" for i in range(len(plans) - len(tests))]
    n = len(plans)
    verdicts, details, timing, phases = [None] * n, [""] * n, [(None, None, None)] * n, set()
    if reports.over_budget:  # never "passed": its reports were refused once they cost us too much (loads_plain)
        return "output_limit", ("output_limit",) * n, (f"output_limit: the program's reports decode into more than "
                                                        f"{MAX_ITEMS} objects or {MAX_CONTAINERS} containers"), timing
    for sender, _, (kind, *args) in reports.messages:
        with contextlib.suppress(IndexError, TypeError, ValueError, RecursionError):  # malformed: ignored
            if sender == "program" and kind == "sandbox_error" and ("program", "started") not in phases:
                return "sandbox_error", ("sandbox_error",) * n, f"sandbox: {args[0]}", timing
            if sender == "program" and kind == "load_failed":  # never "passed": forged (docs/sandbox.md#h1-forged-load-report)
                verdict = args[0] if args[0] in FAILURES else "error"
                return verdict, (verdict,) * n, str(args[1])[:500], timing
            phases.add((sender, kind))
            i = args[0] if kind in ("test", "value", "io") else None
            if type(i) is not int or not 0 <= i < n or verdicts[i] is not None:
                continue
            plan_kind, _, expected = plans[i]
            if kind == "value" and plan_kind in ("value", "check") and sender == "program":
                verdicts[i] = "passed" if args[1] == expected else "failed"
                details[i] = f"test {i + 1} failed: {names[i]} (got {reprlib.repr(args[1])})"
                timing[i] = _timing(args[2:5])
            elif kind == "io" and plan_kind == "io" and sender == "program" and args[1] in VERDICTS:
                verdicts[i] = args[1]
                details[i] = f"{names[i]}: {args[2]}" if args[2] else f"{names[i]}: {args[1]}"
                timing[i] = _timing(args[3:6])
            elif kind == "test":  # "passed" only from the judge, for a statement test; else a failure
                judged = args[1] == "passed" and plan_kind == "statement" and sender == judged_by
                verdicts[i] = args[1] if judged or args[1] in FAILURES else "error"
                message = str(args[2])
                details[i] = (f"test {i + 1} failed: {names[i]}" + (f" ({message})" if message else "")
                              if verdicts[i] == "failed" else f"test {i + 1}: {message or verdicts[i]}")
                timing[i] = _timing(args[3:6]) if len(args) >= 6 else timing[i]
    timing = [tuple(None if v is None else round(v, 6) for v in t) for t in timing]
    if ("program", "started") not in phases:
        tail = reports.stray.decode(errors="replace").strip() or ended[1]
        return "sandbox_error", ("sandbox_error",) * n, f"sandbox: {tail[:300]}", timing
    if ("program", "loaded") not in phases:
        return ended[0], (ended[0],) * n, f"while loading the program: {ended[1]}", timing
    done = ("program", "done") in phases and (
        judged_by is None or (judged_by, "done") in phases)
    for i in range(n):
        if verdicts[i] is None:
            verdicts[i] = ended[0]
            details[i] = f"test {i + 1}: {'no report' if done else ended[1]}"
    if done and all(v == "passed" for v in verdicts):
        return "passed", tuple(verdicts), "", timing
    first = next((i for i, v in enumerate(verdicts) if v != "passed"), None)
    if first is None:  # every test passed, then an end marker never came
        return ended[0], tuple(verdicts), f"after the last test: {ended[1]}", timing
    return verdicts[first], tuple(verdicts), details[first][:500], timing
