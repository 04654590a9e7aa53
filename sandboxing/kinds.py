"""What each test is: a value test judged by us, a statement test judged in the judge process, an I/O test.

    kind        example                              judged
    value       assert f(2) == 4                     by us (judge.py): the child sends f(2)'s value as
                                                     marshal data (builtin types only); it never sees 4
                check(f) whose check is only         the same: one value test (f(1), f(2), ...)
                `assert candidate(..) == ..` lines   == (e1, e2, ...); the setup stays with us
    statement   check(candidate), assert f(x),       in the judge process, forked from the runner
                assert math.isclose(f(1), 2.5)       before any program code ran; the program's
                                                     functions are stubs there that send their
                                                     arguments to the program's process and get
                                                     back plain data (runner.judge_process)
    I/O         stdin "1 2\\n" -> stdout "3\\n"       by us: the child sends the program's stdout;
                                                     it never sees the expected output

A value test's EXPR runs in the program's process. So it may only compute the program's own answer
(_programs_answer): what the program could have returned honestly, which is all a forged value can be;
the program then passes only by knowing the literal, as a correct program does. Anything where our code
or data meets the program's objects (a helper of the setup, a comparison, a method of a list of ours) is
a statement test (docs/sandbox.md#h9-helpers-in-the-programs-process).
"""
import ast
import contextlib
import functools


@functools.lru_cache(maxsize=16384)
def _plan(test):
    """("value", EXPR, LITERAL's value) for `assert EXPR == LITERAL`; else ("statement", test, None).

    >>> _plan("assert f([1, 2]) == (3, 'a')")
    ('value', 'f([1, 2])', (3, 'a'))
    >>> _plan("assert math.isclose(f(1), 2.5)")[0]
    'statement'
    """
    with contextlib.suppress(Exception):
        body = ast.parse(test).body
        if len(body) == 1 and isinstance(body[0], ast.Assert) and isinstance(body[0].test, ast.Compare):
            compare = body[0].test
            if len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq):
                left, right = compare.left, compare.comparators[0]
                for expr, literal in ((left, right), (right, left)):
                    with contextlib.suppress(Exception):
                        expected = ast.literal_eval(literal)
                        return "value", ast.unparse(expr), expected  # (get_source_segment: quadratic)
    return "statement", test, None


@functools.lru_cache(maxsize=4096)
def _program_defs(program):
    """(functions, classes): the names the program defines at its top level with `def` and with `class` (empty
    when it does not parse)."""
    with contextlib.suppress(Exception):
        body = ast.parse(program).body
        return (frozenset(n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
                frozenset(n.name for n in body if isinstance(n, ast.ClassDef)))
    return frozenset(), frozenset()


@functools.lru_cache(maxsize=4096)
def _setup_names(setup):
    """Every name the setup binds at its top level (def, class, =, import): a program function of the same name
    would stand in for the setup's, so a call of it is not the program's answer (plan_tests)."""
    names = set()
    with contextlib.suppress(Exception):
        for node in ast.parse(setup).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            else:
                names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return frozenset(names)


# What a value test's EXPR may hold besides the program's calls (_programs_answer). Around a call: only what
# passes on the program's values as they are (len, sum, int, list of them; an index; a lambda or a comprehension
# of calls, as stress tests make many), never an operation that meets our data (f(3) - 27 == 0 holds for an object
# whose __sub__ returns 0). Inside the arguments and indices: our own data, built from constants by SAFE_NODES.
SAFE_CALLS = frozenset({"len", "sum", "int", "list", "range"})
SAFE_NODES = (ast.Call, ast.Name, ast.Load, ast.Store, ast.Constant, ast.List, ast.Tuple, ast.BinOp, ast.UnaryOp,
              ast.operator, ast.unaryop, ast.Subscript, ast.Slice, ast.Lambda, ast.arguments, ast.arg,
              ast.GeneratorExp, ast.ListComp, ast.comprehension, ast.keyword)


def _programs_answer(expr, functions, classes) -> bool:
    """Whether EXPR's value is the program's own answer, so that a value test may compute it in the program's
    process: a call f(...) or C(...).m(...) of the program's own (whatever its arguments: the call decides), or
    len / sum / int / list of such an answer, an index of it by our data, a comprehension whose element is one,
    a lambda whose body is one called on our data. A name of the setup only inside a call's arguments (its
    input, such as MBPP's trees built by the setup: uses_setup)."""
    nodes = list(ast.walk(expr))
    bound = {n.arg for n in nodes if isinstance(n, ast.arg)} | {
        t.id for n in nodes if isinstance(n, ast.comprehension) for t in ast.walk(n.target) if isinstance(t, ast.Name)}

    def program_call(n):
        return isinstance(n, ast.Call) and (
            (isinstance(n.func, ast.Name) and n.func.id in functions - bound)
            or (isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Call)
                and isinstance(n.func.value.func, ast.Name) and n.func.value.func.id in classes - bound))

    def ours(n):  # data of ours: constants and the EXPR's own variables under SAFE_NODES, no call of the program's
        return all(isinstance(m, SAFE_NODES) and not program_call(m)
                   and (not isinstance(m, ast.Name) or m.id in (SAFE_CALLS - bound) | bound)
                   and (not isinstance(m, ast.Call) or isinstance(m.func, ast.Lambda)
                        or (isinstance(m.func, ast.Name) and m.func.id in SAFE_CALLS - bound))
                   and (not isinstance(m, ast.comprehension) or not (m.ifs or m.is_async)) for m in ast.walk(n))

    def answer(n):
        if program_call(n):
            return True
        if isinstance(n, ast.Subscript):
            return answer(n.value) and ours(n.slice)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in SAFE_CALLS - bound:
            return len(n.args) == 1 and not n.keywords and answer(n.args[0])
        if isinstance(n, (ast.GeneratorExp, ast.ListComp)):
            return answer(n.elt) and all(not (g.ifs or g.is_async) and ours(g.iter) for g in n.generators)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Lambda):
            return not n.keywords and all(ours(a) for a in n.args) and answer(n.func.body)
        return False

    return answer(expr)


def uses_setup(plans, setup) -> bool:
    """Whether a value test among `plans` names something the setup binds: then the setup runs in the program's
    process before each such test (launch.prepare); plan_tests allows it only when no statement or check test
    could have its expected values in the setup."""
    names = _setup_names(setup)
    return any(isinstance(n, ast.Name) and n.id in names for kind, src, _ in plans if kind == "value"
               for n in ast.walk(ast.parse(src, mode="eval")))


@functools.lru_cache(maxsize=4096)
def _check_as_values(setup, test):
    """HumanEval's `check(f)` as ONE value test when the setup's `def check(candidate)` is nothing
    but `assert candidate(LITERALS) == LITERAL` lines: ("check", "(f(a1), f(a2), ...)", (e1, e2,
    ...)), judged here like any value test (tuple ==: the same Python == per line, in order),
    without the judge process and its pipe round trip per call. Else None.

    >>> _check_as_values("def check(candidate):\\n    assert candidate(1) == 2\\n    assert True", "check(f)")
    ('check', '(f(1),)', (2,))
    """
    with contextlib.suppress(Exception):
        call = ast.parse(test, mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "check"
                and len(call.args) == 1 and isinstance(call.args[0], ast.Name) and not call.keywords):
            return None
        name = call.args[0].id
        defs = [node for node in ast.parse(setup).body if isinstance(node, ast.FunctionDef) and node.name == "check"]
        if len(defs) != 1 or len(defs[0].args.args) != 1 or defs[0].decorator_list:
            return None
        candidate, exprs, expected = defs[0].args.args[0].arg, [], []
        for node in defs[0].body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # a docstring
                continue
            if isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant) and node.test.value is True:
                continue  # `assert True, "..."`
            compare = node.test if isinstance(node, ast.Assert) else None
            if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq)):
                return None
            for side, other in ((compare.left, compare.comparators[0]), (compare.comparators[0], compare.left)):
                if (isinstance(side, ast.Call) and isinstance(side.func, ast.Name) and side.func.id == candidate
                        and all(isinstance(a, ast.expr) and not isinstance(a, ast.Starred) for a in side.args)):
                    args = [ast.literal_eval(a) for a in side.args]
                    kwargs = {k.arg: ast.literal_eval(k.value) for k in side.keywords if k.arg}
                    if len(kwargs) != len(side.keywords):
                        return None
                    exprs.append(f"{name}({', '.join([*map(repr, args), *(f'{k}={v!r}' for k, v in kwargs.items())])})")
                    expected.append(ast.literal_eval(other))
                    break
            else:
                return None
        if exprs:
            return "check", "(" + ", ".join(exprs) + ",)", tuple(expected)
    return None


def plan_tests(program, tests, io_tests=(), setup=""):
    """One plan per test, in order: ("value", EXPR, LITERAL) | ("check", EXPR, LITERALS) (a
    HumanEval check made of value lines) | ("statement", test, None) | ("io", input, expected
    output). EXPR runs in the program's process, so a test stays a value test only when the value we compare
    is the program's own answer, which is all a forged one can be (_programs_answer): a call of its function
    or its class's method, or its calls inside builtins that only pass its values on. A helper of the
    setup, a comparison or a method of our data around the call would run there too, where the program's
    objects decide what an == or a count says (an always-equal element makes `n_in_place(xs, f(xs)) == 4`
    true): such a test is a statement, judged in the judge process on plain data
    (docs/sandbox.md#h9-helpers-in-the-programs-process)."""
    functions, classes = (names - _setup_names(setup) for names in _program_defs(program))
    plans = []
    for test in tests:
        plan = _plan(test)
        if plan[0] == "statement" and "def check(" in setup:
            plan = _check_as_values(setup, test) or plan
        if plan[0] == "value" and not _programs_answer(ast.parse(plan[1], mode="eval").body, functions, classes):
            plan = ("statement", test, None)
        plans.append(plan)
    if any(kind in ("statement", "check") for kind, _, _ in plans):  # then the setup may hold what they expect:
        plans = [("statement", test, None) if uses_setup([plan], setup) else plan  # it stays out of the program's
                 for test, plan in zip(tests, plans)]  # process, with the value tests that need it
    return plans + [("io", str(given), str(expected)) for given, expected in io_tests]
