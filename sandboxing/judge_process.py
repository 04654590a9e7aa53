"""The judge process (runner.py step 3): statement tests, judged where no program code ran.

Forked from the runner before the program is compiled. HumanEval's check(candidate) and MBPP's
`assert math.isclose(f(1), 2.5)` run here; the program's functions are stubs that send their
arguments (plain data) to the program's process over a pipe (runner.serve) and return what
comes back -- plain data, or an Opaque stand-in with the truth of a C object such as a re.Match.
What the program's process can do: answer calls (that is what a program does), lie about its
timing, kill us (the tests then lose). What it cannot: read our memory or ptrace us (we are not
dumpable), know our token (our job arrives sealed; the key on a pipe that it closed unread).
"""
import builtins
import marshal
import sys
from builtins import (
    BaseException,
    Exception,
    RuntimeError,
    TypeError,
    ValueError,
    compile,
    dict,
    exec,
    getattr,
    isinstance,
    issubclass,
    list,
    str,
    type,
    vars,
    zip,
)
from marshal import dumps
from os import _exit, close, fork, pipe, write

from sandboxing.child import FAILURES, PR_SET_DUMPABLE, Verdict, guarded, is_plain, libc, read_all, receive, send


def start_judge(job, report_fd):
    """Fork the judge process before any program code runs -> (calls, answers) pipe ends here, its pid."""
    calls_r, calls_w = pipe()
    answers_r, answers_w = pipe()
    pid = fork()
    if pid == 0:
        close(calls_r)
        close(answers_w)
        judge_process(job, report_fd, calls_w, answers_r)
    close(calls_w)
    close(answers_r)
    return calls_r, answers_w, pid


def judge_process(job, report_fd, calls, answers):
    """Run each statement test (HumanEval's check(candidate), `assert math.isclose(f(1), 2.5)`)
    where no program code ever ran. Names the program defined are stubs here: calling one sends
    its arguments to the program's process and returns what came back, as plain data (or an
    opaque stand-in with the truth of a C object, such as a re.Match). The job (setup, tests, our
    token) arrives sealed; its key only on a pipe that the program's process closed unread, and
    this process is not dumpable: the program can neither read our memory nor ptrace us."""
    libc("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    key = read_all(job["key_fd"])
    close(job["key_fd"])
    import _sha3
    sealed = job["judge"]
    pad = _sha3.shake_256(key).digest(len(sealed))
    mine = marshal.loads((int.from_bytes(sealed, "little") ^ int.from_bytes(pad, "little")).to_bytes(len(sealed), "little"))
    del job, key, pad
    token = mine["token"].encode()

    def report(*message):
        line = b"%s 0 %s\n" % (token, dumps(message).hex().encode())  # < PIPE_BUF: one atomic write
        while line:
            line = line[write(report_fd, line):]

    budget = (mine["timeout_s"], mine["wall_s"] + 1.0)  # the program's process times its calls first
    try:
        _, names = receive(answers)
    except BaseException:
        _exit(0)  # the program never loaded: the parent has its report
    seq, current, spent = [0], [0], [0.0, 0.0, 0.0]

    def stub(name):
        def call(*args, **kwargs):
            seq[0] += 1
            args_list = list(args)
            try:
                send(calls, (seq[0], current[0], name, tuple(args), kwargs))
            except ValueError:
                raise TypeError(f"{name}(): an argument is not plain data") from None
            while True:
                answer = receive(answers)
                if answer[0] == seq[0]:
                    break
            _, kind, payload, after, cpu, wall, mem = answer
            spent[0], spent[1], spent[2] = spent[0] + cpu, spent[1] + wall, max(spent[2], mem)
            if kind == "verdict":  # the program's side may claim a failure, never a pass (docs/sandbox.md#h2-relayed-verdict)
                claimed = payload[0] if type(payload) is tuple and len(payload) == 2 else None
                raise Verdict(claimed if claimed in FAILURES else "error", str(payload[1])[:300]
                              if claimed in FAILURES else "a malformed verdict from the program's process")
            if after is not None and is_plain(after):
                for old, new in zip(args_list, after):
                    if type(old) is type(new) and type(old) in (list, dict, set):
                        old.clear()
                        old.update(new) if type(old) is not list else old.extend(new)
            if kind == "opaque":
                return Opaque(*payload)
            if kind == "raise":
                error = getattr(builtins, str(payload[0]), None)
                if not (isinstance(error, type) and issubclass(error, Exception)):
                    error = RuntimeError
                raise error(str(payload[1]))
            if not is_plain(payload):
                raise TypeError(f"{name} returned something that is not plain data")
            return payload
        call.__name__ = name
        return call

    # Builtins win (our choice; docs/sandbox.md#h6-shadowed-builtins): a program's `abs = lambda x: 0` or `range = ...` would
    # otherwise stand in for the builtin that the setup and tests call, and pass them unsolved.
    program = {name: stub(name) if kind == "call" else value for name, kind, value in names
               if name not in vars(builtins)}
    for name in mine["modules"]:  # `assert math.isclose(f(1), 2.5)` with `math` from the program's imports
        try:
            __import__(name)
            program.setdefault(name.partition(".")[0], sys.modules[name.partition(".")[0]])
        except BaseException:
            pass
    for i, src in mine["tests"]:
        current[0], spent[:] = i, [0.0, 0.0, 0.0]

        def run_test():
            ns = dict(program, __builtins__=builtins)
            exec(compile(mine["setup"], "<setup>", "exec", dont_inherit=True), ns)
            exec(compile(src, f"<test {i + 1}>", "exec", dont_inherit=True), ns)

        verdict, detail = guarded(run_test, *budget)
        report("test", i, verdict, str(detail or "")[:300], *spent)
    report("done")
    _exit(0)


class Opaque:
    """The judge's stand-in for a C object that is not data (a re.Match): its truth and repr."""

    def __init__(self, name, truth, text):
        self.name, self.truth, self.text = name, truth, text

    def __bool__(self):
        return bool(self.truth)

    def __repr__(self):
        return str(self.text)
