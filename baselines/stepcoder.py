"""StepCoder (Dou et al., ACL 2024, arXiv 2402.01391): PPO with a critic (baselines/ppo.py) plus its two parts.

`python train.py --algo stepcoder` trains the Coder alone, from the same cold-start SFT, with PPO's step
(ppo.run_step; its reward is the compiler's feedback R_cs alone, as theirs: no AST / data-flow terms).

CCCS, a Curriculum of Code Completion Subtasks (paper sec. 3.2). The reference solution is split at its
conditional statements, found in its AST (`split_points`: the lines of its `if` / `elif` statements,
p_1 < ... < p_S). At curriculum stage k of K the Coder's reply begins with the reference's lines before
split point p_g, and the Coder writes the rest:
    g = floor(S (K - 1 - k) / (K - 1))        stage 0: g = S (the last conditional), stage K - 1: g = 0
    prompt = problem + "```python\\n" + reference lines 1 .. p_g - 1       (g = 0: "```python\\n" alone)
    stage k = min(K - 1, floor(K * max(steps done / --steps, seconds of steps / --time-budget)))
                                                              (--cccs-stages K; our choice, below)
so the part the model writes grows toward the start until it writes everything. The prefix is prompt:
its tokens are never in the loss (the Rollout's mask covers the sampled tokens only); the program the
sandbox runs is the prefix + the completion.

FGO, Fine-Grained Optimisation (sec. 3.3): the unit tests run with line coverage (the sandbox child
traces which lines of the program ran and reports them as data, `Result.coverage`), and every completion
token whose line no test executed is left out of the policy loss (`fgo_weights`):
    keep_t = 0  if every program line under token t is executable and none of them ran, else 1
    w      = grpo.loss_weights(mask * keep, --loss-type)      (the kept tokens normalise as --loss-type says)
A token's lines come from its characters' offsets in the decoded completion (a token over several lines
counts if any of them ran). Our choices: a line is "executable" when Python's compiler gives it bytecode
(what coverage tools call a statement: blank lines, comments, `else:`, `try:` and docstrings have none,
so they keep their tokens); tokens outside the program (the closing fence, text after it, EOS) keep
theirs; a program that does not compile keeps all its tokens, and so does a run with no coverage report
(killed, or a sandbox error). Coverage is what the program's process says: it only chooses which tokens
are trained, never a verdict or a reward (a program that hides its lines only loses its own gradient).

Our choices beyond the paper (its release has no schedule): K equal stages over --steps (default 4), or
over --time-budget when it is set (the share of the budget spent, if larger: `make paper` gives its arms
--steps 100000 and 15 minutes, and a clock by steps alone would stay at stage 0 for the whole run);
split points are `if` / `elif` statements (not loops); a problem without a reference or without a
conditional is always written whole.
"""
import ast

import torch

import coder
from baselines import ppo

FENCE = "```python\n"  # every StepCoder reply begins with it: the prefix ends inside the open block


def split_points(solution: str) -> list[int]:
    """Line numbers (1-based, in solution.strip()) of the conditional statements (`if`, `elif`) of a
    reference solution, ascending, without duplicates; [] when it has none or does not parse.

    >>> split_points("def f(x):\\n    if x:\\n        return 1\\n    elif x < 0:\\n        return 2\\n    return 3")
    [2, 4]
    """
    try:
        tree = ast.parse(solution.strip())
    except (SyntaxError, ValueError):
        return []
    return sorted({node.lineno for node in ast.walk(tree) if isinstance(node, ast.If)})


def stage(steps_done: int, total_steps: int, stages: int, seconds: float = 0.0, budget_s: float | None = None) -> int:
    """The curriculum stage k in 0 .. K-1 after steps_done PPO steps of total_steps (K equal stages), or after
    `seconds` of steps of a budget of budget_s seconds (--time-budget), whichever has gone further."""
    done = steps_done / max(1, total_steps)
    if budget_s:
        done = max(done, seconds / budget_s)
    return min(stages - 1, int(done * stages + 1e-9))


def reply_prefix(solution: str | None, k: int, stages: int) -> str:
    """The beginning of the Coder's reply at stage k of K (module docstring): the open fence, then the
    reference's lines before split point p_g, without the newline that ends the last of them (the
    completion then starts with it, as the reference tokenizes)."""
    points = split_points(solution) if solution else []
    g = len(points) * (stages - 1 - k) // (stages - 1) if stages > 1 else 0
    if g == 0:
        return FENCE
    return FENCE + "\n".join(solution.strip().split("\n")[:points[g - 1] - 1])


def executable_lines(program: str) -> set[int] | None:
    """The lines of a program that Python compiles to bytecode (co_lines of its code objects, nested
    functions and classes included); None when it does not compile."""
    try:
        code = compile(program, "<program>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return None
    lines, todo = set(), [code]
    while todo:
        c = todo.pop()
        lines |= {line for _, _, line in c.co_lines() if line is not None}
        todo += [k for k in c.co_consts if hasattr(k, "co_lines")]
    return lines


def token_spans(tok, ids: list[int]) -> list[tuple[int, int]]:
    """[(start, end)] character span of each token in the decoded text of ids (specials skipped, as
    Rollout.texts): end_j = len(decode(ids[:j+1])), start_j = end_{j-1} (a special token: an empty span)."""
    ends = [len(t) for t in tok.batch_decode([ids[:j + 1] for j in range(len(ids))], skip_special_tokens=True)]
    return list(zip([0] + ends[:-1], ends))


def fgo_weights(spans: list, prefix: str, response: str, program: str | None, code: str | None,
                executed) -> list[float]:
    """FGO's keep_t (0 or 1) for each completion token of one row (module docstring).

    spans: the completion tokens' (start, end) in the completion text (token_spans); response = prefix +
    completion; code: coder.extract_code(response) (a substring of it), program: what the sandbox ran (code
    at its end, after the problem's stub lines); executed: the program lines the tests ran (a set), or
    None when the run reported none (then every token is kept, as for a program that does not compile).
    """
    keep = [1.0] * len(spans)
    executable = executable_lines(program) if program is not None and code else None
    if executable is None or executed is None:
        return keep
    start = response.rfind(code)  # the code extract_code took (its last block)
    head = program[:len(program) - len(code)].count("\n")  # program lines before the code
    for j, (s, e) in enumerate(spans):
        a, b = max(s + len(prefix), start), min(e + len(prefix), start + len(code))  # chars in the code
        if a >= b:
            continue  # not code (fence, prose, EOS): kept
        first, last = code.count("\n", 0, a - start), code.count("\n", 0, b - 1 - start)
        lines = range(head + 1 + first, head + 2 + last)  # the program lines under the token
        if all(line in executable and line not in executed for line in lines):
            keep[j] = 0.0
    return keep


def loss_mask(tok, prefixes: list, n: int):
    """ppo.run_step's loss_mask: FGO's keep [N, T] of a rollout from each row's coverage report."""
    def mask(r, responses, programs, results):
        keep = torch.ones_like(r.mask)
        for i in range(len(responses)):
            T_i = int(r.mask[i].sum())
            ids = r.seqs[i, r.prompt_len:r.prompt_len + T_i].tolist()
            code = coder.extract_code(responses[i])
            cov = getattr(results[i], "coverage", None)
            row = fgo_weights(token_spans(tok, ids), prefixes[i // n], responses[i], programs[i], code,
                              None if cov is None else set(cov))
            keep[i, :T_i] = torch.tensor(row, dtype=keep.dtype)
        return keep
    return mask


def add_flags(parser) -> None:
    """--algo stepcoder's own flag, one group of `train.py --help` (its PPO reads the ppo group's flags)."""
    g = parser.add_argument_group("stepcoder", "StepCoder (baselines/stepcoder.py): PPO (the ppo group's flags) + a "
                                  "curriculum of completion subtasks + the loss on executed lines only")
    g.add_argument("--cccs-stages", type=int, default=4,
                   help="K curriculum stages over --steps, from the last conditional of each reference to no prefix")


setup = ppo.setup  # the same critic and frozen reference as PPO's


def step(policy, tok, problems, args, optimizer, corpus=None) -> tuple[dict, list]:
    """One StepCoder step (train.py --algo stepcoder): the stage's prefixes (CCCS), then ppo.run_step with
    FGO's loss mask and the execution reward alone. Adds `cccs_stage` and `prefix_lines` to the metrics."""
    budget = getattr(args, "time_budget", None)
    k = stage(int(policy.critic.steps), args.steps, args.cccs_stages, float(policy.critic.seconds),
              60 * budget if budget else None)
    prefixes = [reply_prefix(p.solution, k, args.cccs_stages) for p in problems]
    n = args.num_plans * args.codes_per_plan
    metrics, samples = ppo.run_step(policy, tok, problems, args, optimizer, prefixes, loss_mask(tok, prefixes, n),
                                    match=False)
    lines = [len(p[len(FENCE):].split("\n")) if p != FENCE else 0 for p in prefixes]  # reference lines given
    return {**metrics, "cccs_stage": k, "prefix_lines": sum(lines) / len(lines)}, samples
