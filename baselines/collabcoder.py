"""CollabCoder (Doan et al., ACL 2026 Findings, arXiv 2604.13946): training-free plan-code co-evolution,
`eval.py --modes collab`. Read beside their code, github.com/ihbkaiser/CollabCoder, src/promptings/CollabCoder.py.

Per problem (all problems move in lock-step, so each stage is ONE batched model call over the problems
still open; `generate` counts every prompt as one call):
    understanding   requirements and edge cases of the problem, no code                1 call
    plan            a step-by-step plan from problem + understanding + the visible test  1 call
    code            the program from the plan; run on the VISIBLE tests only           1 call
    then, while the visible tests fail, up to `rounds` times (theirs 5, ours --collab-rounds 2):
    analysis        one reply, three analyses: of the plan, of the code, of their alignment ("content")  1
    scoring         a JSON reply: per decision d in {update plan, update code only} a confidence
                    conf_d(a) per analysis a and a consistency cons_d(a, b) per pair of analyses      1
    decision        score(d) = sum_a w_a conf_d(a) prod_{b != a} cons_d(a, b),   w = plan 0.3, code 0.4,
                    content 0.3 (their repository's trust_weights; `decide`); the larger wins; a tie or a
                    reply that does not parse -> "update code only" (their default), counted as a fallback
    strategy        the reasoning trajectory R(t): updated from R(t-1), the chosen analysis and the test
                    log (their AnalysisReflection, "paper Eq. 7")                                       1
    revise          update plan: a new plan, then a new program from it                               2
                    update code only: a corrected program                                             1
    run the new program on the visible tests; stop at the first pass
The answer: the first program that passes its visible tests, else the best-scored one (visible pass
rate, ties to the earliest, as their max over (code, score)). A problem without a visible test keeps its
first program (nothing to test it on). The hidden tests are never in a prompt.

What we changed and why (each our choice): the understanding is asked once per problem (their loop asks
it again every round, unused); the scoring reply is a flat JSON of numbers without their reasoning
strings (a small model's token budget; the decision never reads them), and their nested form is read too;
every model call is counted (their counter misses the strategy and revision calls); prompts are theirs,
shortened for a 135M model's context. Which LoRA adapter answers which call (`programs`): plan and
plan-revision calls the Planner's, code and code-revision calls the Coder's, the rest the base model.
"""
import json
import re

from tqdm import tqdm

import coder
import roles
import sandbox
from mapcoder import debugger

WEIGHTS = {"plan": 0.3, "code": 0.4, "content": 0.3}  # their trust_weights
ANALYSES = tuple(WEIGHTS)
PAIRS = [("plan", "code"), ("plan", "content"), ("code", "content")]
DECISIONS = ("update plan", "update code only")
DEFAULT = "update code only"
STAGES = ("understanding", "plan", "code", "analysis", "scoring", "strategy", "revise_plan", "revise_code")
ROLE_OF = {"plan": "planner", "revise_plan": "planner", "code": "coder", "revise_code": "coder"}  # adapters (eval.py)


def decide(reply: str) -> tuple[str, bool, dict]:
    """Scoring reply -> (decision, fell_back, {decision: score}). fell_back: the reply did not parse as
    JSON with scores, or both decisions scored the same (then DEFAULT, as in their code). A missing or
    non-numeric score counts 0 (theirs).

    >>> decide('{"update plan": {"plan": 1, "code": 0, "content": 1, "plan-code": 1, "plan-content": 1, "code-content": 1},'
    ...        ' "update code only": {"plan": 0, "code": 1, "content": 0, "plan-code": 0.5, "plan-content": 1, "code-content": 0.5}}')
    ('update plan', False, {'update plan': 0.6, 'update code only': 0.1})
    """
    data = _json(reply)
    if data is None:
        return DEFAULT, True, {}
    scores = {}
    for d in DECISIONS:
        conf, cons = _scores_of(data, d)
        total = 0.0
        for a in ANALYSES:
            prod = 1.0
            for x, y in PAIRS:
                if a in (x, y):
                    prod *= cons.get(f"{x}-{y}", cons.get(f"{y}-{x}", 0.0))
            total += WEIGHTS[a] * conf.get(a, 0.0) * prod
        scores[d] = round(total, 12)
    if scores[DECISIONS[0]] == scores[DECISIONS[1]]:
        return DEFAULT, True, scores
    return max(DECISIONS, key=scores.get), False, scores


def _json(text: str) -> dict | None:
    """The first {...} object of a reply (inside a ```json fence or bare), or None."""
    m = re.search(r"```(?:json)?\s*({.*?})\s*```", text, re.S) or re.search(r"({.*})", text, re.S)
    if not m:
        return None
    try:
        data = json.loads(re.sub(r"\\(?![\"\\/bfnrtu])", r"\\\\", m.group(1)))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _scores_of(data: dict, d: str) -> tuple[dict, dict]:
    """({analysis: confidence}, {"a-b": consistency}) of decision d, from our flat form
    {d: {"plan": 0.8, ..., "plan-code": 0.5, ...}} or their nested one {"confidence_scores": {d: {a:
    {"confidence": x}}}, "consistency_scores": {d: {"a-b": {"consistency": x}}}}."""
    def num(v, key):
        v = v.get(key) if isinstance(v, dict) else v
        try:
            return float(v)
        except (TypeError, ValueError):
            return 0.0
    if "confidence_scores" in data or "consistency_scores" in data:
        conf = (data.get("confidence_scores") or {}).get(d) or {}
        cons = (data.get("consistency_scores") or {}).get(d) or {}
        return ({k: num(v, "confidence") for k, v in conf.items()} if isinstance(conf, dict) else {},
                {k: num(v, "consistency") for k, v in cons.items()} if isinstance(cons, dict) else {})
    flat = data.get(d) if isinstance(data.get(d), dict) else {}
    return ({a: num(flat, a) for a in ANALYSES if a in flat},
            {k: num(flat, k) for k in flat if "-" in k})


def sections(reply: str) -> dict:
    """The analysis reply -> {"plan": ..., "code": ..., "content": ...} (the text under each '... Analysis'
    heading; "" for a missing one)."""
    out = {}
    for a, title in (("plan", "Plan"), ("code", "Code"), ("content", "Content")):
        m = re.search(rf"#*\s*{title} Analysis\s*:?(.*?)(?=#*\s*(?:Plan|Code|Content) Analysis|\Z)", reply, re.S | re.I)
        out[a] = m.group(1).strip() if m else ""
    return out


def _plan_of(reply: str) -> str:
    """A plan reply -> the text under its last 'Plan' heading, or all of it (their parse_key_from_md)."""
    m = re.split(r"#+\s*(?:New )?Plan\s*:?\s*\n", reply, flags=re.I)
    return (m[-1] if len(m) > 1 else reply).strip()


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _visible(problem) -> str:
    tests, io = debugger.visible_tests(problem)
    if io:
        return f"Input:\n{io[0][0].rstrip()}\nExpected output:\n{io[0][1].rstrip()}"
    return "\n".join(tests)


def _code_ask(problem) -> str:
    return coder.IO_ASK if problem.is_io else (
        f"Write the complete Python function `{problem.entry_point}` in one ```python code block."
        if problem.entry_point else "Write the complete Python code in one ```python code block.")


def prompt(stage: str, problem, s: dict) -> list[dict]:
    """The chat of one stage for one problem; s: the problem's state (understanding, plan, code, log,
    analyses, strategy). Their prompts, shortened (module docstring)."""
    P, vis = problem.prompt.strip(), _visible(problem)
    if stage == "understanding":
        return _user(f"Analyse this programming problem.\n## Problem\n{P}\n## Sample test\n{vis}\n"
                     "Say what it asks, its requirements and edge cases, in a few lines. Do not write code.")
    if stage == "plan":
        return _user(f"## Problem\n{P}\n## Understanding\n{s['understanding']}\n## Sample test\n{vis}\n"
                     "Write a short step-by-step plan to solve the problem, under a '## Plan' heading. No code.")
    if stage == "code":
        return [{"role": "system", "content": coder.SYSTEM},
                {"role": "user", "content": f"Problem:\n{P}\n\nPlan:\n{s['plan']}\n\nSample test:\n{vis}\n\n"
                 f"Follow the plan. {_code_ask(problem)}"}]
    if stage == "analysis":
        return _user(f"## Problem\n{P}\n## Plan\n{s['plan']}\n## Code\n```python\n{s['code'] or ''}\n```\n"
                     f"## Test log (always true)\n{s['log']}\n"
                     "Answer with three sections: '### Plan Analysis' (is the plan wrong, or its code?), "
                     "'### Code Analysis' (the bug in the code), '### Content Analysis' (do plan and code "
                     "agree; update the plan or the code?). Do not write code.")
    if stage == "scoring":
        keys = ", ".join(f'"{a}"' for a in ANALYSES) + ", " + ", ".join(f'"{x}-{y}"' for x, y in PAIRS)
        return _user(f"Three analyses of a failing program:\n{json.dumps(s['analyses'])}\n"
                     "Decisions: 'update plan' (the approach is wrong) or 'update code only' (the plan is right, "
                     "the code is wrong). For each decision give the confidence (0-1) with which each analysis "
                     "supports it and the consistency (0-1) of each pair of analyses on it. Answer JSON only: "
                     f'{{"update plan": {{{keys}: numbers}}, "update code only": {{...the same keys}}}}')
    if stage == "strategy":
        target = "plan" if s["decision"] == DECISIONS[0] else "code"
        return _user(f"## Problem\n{P}\n## Target: {target}\n{s[target] or ''}\n## Test log\n{s['log']}\n"
                     f"## Diagnosis\n{s['analyses'][target]}\n## Previous strategy\n{s['strategy'] or 'None.'}\n"
                     "Write the updated debugging strategy: what to try next, in a few lines. No code, no plan.")
    if stage == "revise_plan":
        return _user(f"## Problem\n{P}\n## Current strategy\n{s['strategy']}\n## Plan critique\n"
                     f"{s['analyses']['plan']}\n## Test log\n{s['log']}\n"
                     "The plan was wrong. Write a corrected step-by-step plan under '## New Plan'. No code.")
    if stage == "revise_code":
        return [{"role": "system", "content": coder.SYSTEM},
                {"role": "user", "content": f"Problem:\n{P}\n\nPlan:\n{s['plan']}\n\nStrategy:\n{s['strategy']}\n\n"
                 f"Buggy code:\n```python\n{s['code'] or ''}\n```\n\nTest log:\n{s['log']}\n\nCode critique:\n"
                 f"{s['analyses']['code']}\n\nCorrect the code. {_code_ask(problem)}"}]
    raise ValueError(f"unknown CollabCoder stage {stage!r}")


def solve(problems, generate, run, rounds: int = 2, timeout_s: float = 4.0) -> tuple[list, dict]:
    """CollabCoder on a batch of problems (module docstring).

    generate(stage, chats) -> replies: one model reply per chat (stage in STAGES: the harness picks the
    adapter, budget and stop pattern); run(jobs) -> sandbox.Result per job (sandbox.run_many).
    Returns (programs: one str | None per problem, as the sandbox runs it (coder.program), stats: {'calls': model calls per problem [B],
    'decisions': decisions taken, 'fallbacks': of them by the default, 'plan_updates', 'rounds': rounds run
    per problem [B], 'passed_visible': [B] bool, True also for a problem without a visible test}).
    """
    B = len(problems)
    st = [{"understanding": "", "plan": "", "code": None, "log": "", "analyses": {}, "strategy": "",
           "decision": DEFAULT, "tried": [], "done": False} for _ in problems]
    calls, used_rounds = [0] * B, [0] * B
    counts = {"decisions": 0, "fallbacks": 0, "plan_updates": 0}

    def ask(stage, ids):
        replies = generate(stage, [prompt(stage, problems[i], st[i]) for i in ids]) if ids else []
        for i in ids:
            calls[i] += 1
        return replies

    def test(ids):  # run each new program on the visible tests; a pass ends its problem
        progs = {i: coder.program(problems[i], st[i]["code"]) for i in ids}  # what the sandbox runs
        jobs = {i: debugger.visible_job(problems[i], progs[i], timeout_s) for i in ids}
        todo = [i for i in ids if jobs[i] is not None]
        for i in ids:
            if jobs[i] is None:  # no visible test: keep the first program
                st[i]["tried"].append((1.0, progs[i]))
                st[i]["done"] = True
        for i, r in zip(todo, run([jobs[i] for i in todo]) if todo else []):
            st[i]["tried"].append((r.pass_rate, progs[i]))
            st[i]["log"] = debugger.feedback(problems[i], r) or f"{r.verdict}: {r.detail}"[:debugger.FEEDBACK_CHARS]
            st[i]["done"] = r.verdict == "passed"

    everyone = list(range(B))
    for i, text in zip(everyone, ask("understanding", everyone)):
        st[i]["understanding"] = text.strip()
    for i, text in zip(everyone, ask("plan", everyone)):
        st[i]["plan"] = _plan_of(text)
    for i, text in zip(everyone, ask("code", everyone)):
        st[i]["code"] = coder.extract_code(text)
    test(everyone)
    for _ in range(rounds):
        open_ = [i for i in everyone if not st[i]["done"]]
        if not open_:
            break
        for i in open_:
            used_rounds[i] += 1
        for i, text in zip(open_, ask("analysis", open_)):
            st[i]["analyses"] = sections(text)
        for i, text in zip(open_, ask("scoring", open_)):
            st[i]["decision"], fell, _ = decide(text)
            counts["decisions"] += 1
            counts["fallbacks"] += fell
        for i, text in zip(open_, ask("strategy", open_)):
            st[i]["strategy"] = text.strip()
        plan_ids = [i for i in open_ if st[i]["decision"] == DECISIONS[0]]
        code_ids = [i for i in open_ if st[i]["decision"] != DECISIONS[0]]
        counts["plan_updates"] += len(plan_ids)
        for i, text in zip(plan_ids, ask("revise_plan", plan_ids)):
            st[i]["plan"] = _plan_of(text)
        for i, text in zip(plan_ids, ask("code", plan_ids)):
            st[i]["code"] = coder.extract_code(text)
        for i, text in zip(code_ids, ask("revise_code", code_ids)):
            st[i]["code"] = coder.extract_code(text)
        test(open_)
    programs = []
    for s in st:
        best = max(range(len(s["tried"])), key=lambda k: (s["tried"][k][0], -k))  # ties: the earliest
        programs.append(s["tried"][best][1])
    return programs, {**counts, "calls": calls, "rounds": used_rounds, "passed_visible": [s["done"] for s in st]}


def stored_batch(batches, problems: list, j: int, tokens: dict, generated: list, compute) -> tuple[list, dict]:
    """One batch of `programs` (solve's (programs, stats)): read back from `batches` (eval's store, cache.Batches)
    when an earlier run stored it, else computed and stored; the tokens it generated are added to `tokens`
    and `generated` either way. j: the sample (--n), part of the batch's key."""
    ids = [p.task_id for p in problems] + ([f"sample {j}"] if j else [])
    done = batches.get(ids) if batches else None
    if done is None:
        before, g = {r: len(t) for r, t in tokens.items()}, generated[0]
        progs, st = compute()
        done = {"programs": progs, "stats": {k: st[k] for k in ("calls", "decisions", "fallbacks", "plan_updates")},
                "tokens": {r: t[before[r]:] for r, t in tokens.items()}, "generated": generated[0] - g}
        if batches:
            batches.put(ids, done)
        return progs, st
    for r, t in tokens.items():
        t += done["tokens"][r]
    generated[0] += done["generated"]
    return done["programs"], done["stats"]


def programs(sample, problems, args, costs: list | None = None, batches=None) -> tuple[list, dict]:
    """eval.generate_programs for mode 'collab' (solve): --n runs of CollabCoder per problem, --batch-size
    problems in lock-step. Plan calls answer with the Planner's adapter, code calls with the Coder's (when
    the run trained them), every other call with the base model; budgets --max-plan-tokens,
    --max-code-tokens, --collab-tokens (twice that for the scoring JSON). Stats add calls_per_problem (every model call) and fallback_rate
    (the share of decisions that fell back to 'update code only': a tie or a reply that did not parse).
    costs: as generate_programs', with the tokens of a problem None (a call serves the problems still in
    play together); stats then add tokens_per_problem (every call's generated tokens / problems).
    sample(role, chats, n, max_tokens, temperature, stop) -> rollout.Rollout: eval.sample_as bound to the
    model and the run's adapters (role None: the base model). batches: eval's store (cache.Batches), each
    finished batch kept as generate_programs keeps its own (stored_batch)."""
    tokens = {"planner": [], "coder": []}

    def generate(stage, chats):
        role = ROLE_OF.get(stage)  # planner, coder or None (the base model)
        budget = roles.max_tokens(args, role) if role else args.collab_tokens * (2 if stage == "scoring" else 1)
        r = sample(role, chats, 1, budget, args.temperature, coder.STOP if role == "coder" else None)
        if role:
            tokens[role] += r.mask.sum(1).tolist()
        generated[0] += int(r.mask.sum())
        return r.texts

    run = lambda jobs: sandbox.run_many(jobs, workers=getattr(args, "workers", None))  # noqa: E731
    out, calls, counts = [[] for _ in problems], [], {"decisions": 0, "fallbacks": 0, "plan_updates": 0}
    per_problem, generated = [0] * len(problems), [0]  # model calls of each problem; tokens of every call
    with tqdm(total=args.n * len(problems), desc="collab", unit="problem", dynamic_ncols=True) as bar:
        for j, s in ((j, s) for j in range(args.n) for s in range(0, len(problems), args.batch_size)):
            progs, st = stored_batch(batches, problems[s:s + args.batch_size], j, tokens, generated, lambda: solve(
                problems[s:s + args.batch_size], generate, run, args.collab_rounds, getattr(args, "sandbox_timeout", 4.0)))
            bar.update(len(progs))
            for i, prog in enumerate(progs):
                out[s + i].append(prog)
            calls += st["calls"]
            for i, c in enumerate(st["calls"]):
                per_problem[s + i] += c
            for k in counts:
                counts[k] += st[k]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    if costs is not None:
        costs += [(c, None) for c in per_problem]
    return out, {**({"tokens_per_problem": generated[0] / len(problems)} if costs is not None and problems else {}),
                 "plan_tokens": mean(tokens["planner"]), "code_tokens": mean(tokens["coder"]), "truncated_codes": None,
                 "calls_per_problem": mean(calls), "decisions": counts["decisions"],
                 "plan_updates": counts["plan_updates"],
                 "fallback_rate": counts["fallbacks"] / counts["decisions"] if counts["decisions"] else None}
