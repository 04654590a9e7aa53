"""CodeDPO (Zhang et al., ACL 2025, arXiv 2410.05605): preference learning on code the model wrote AND
checked itself. One training arm of train.py (`--algo codedpo`), the Coder alone, from the same SFT.

Per problem, one step (`step`):
  1. self-generation   the Coder writes N programs (--dpo-programs, default G*M) and N tests
                       (--dpo-tests completions, each its first `assert <entry_point>(...)` line) at
                       --dpo-temperature
  2. self-validation   every program runs against every self-written test in the sandbox: the pass
                       graph A [N_c, N_t], A_ij = 1 when program i passes test j (a bad test is simply one
                       that nothing passes); then the mutual-verification scores (`mutual_scores`)
  3. pairs             correctness: the highest- against the lowest-scored program; efficiency: among the
                       top-scored programs, the faster against the slower on the trusted tests (`choose_pairs`)
  4. loss              DPO against the frozen reference + a weighted NLL of the chosen program (`dpo_loss`)
The hidden (ground-truth) tests never build a pair (the paper's own ablation: pairs from ground truth are
another method); they run only for the logged reward and for `score_spearman`, the rank correlation of the
self-validation score with the hidden pass rate (how far a small model's own tests can be trusted).

Self-validation score (paper sec. 3.2, "PageRank-inspired"; damping d = 0.85 and T = 10 rounds are theirs),
every score starting at 1, then for t = 1..T, both updates from the scores of round t - 1:
    s_c(i) <- (1 - d) s_c(i) + d * sum_j A_ij s_t(j)      a program is worth the tests it passes
    s_t(j) <- (1 - d) s_t(j) + d * sum_i A_ij s_c(i)      a test is worth the programs that pass it
    s_c <- s_c / sum(s_c),  s_t <- s_t / sum(s_t)          normalised every round
The paper writes the program update and says the tests' is symmetric and that scores are normalised;
which norm, and whether the two updates run in turn or at once, it leaves open: ours the sum (L1) and at
once (Jacobi), so the result does not depend on which side goes first.

Loss (DPO: Rafailov et al. 2023, eq. 7; the NLL term: RPO, Pang et al. 2024, eq. 1), per pair (c, r), with
logp the summed token log-probs of a completion under the policy and ref under the frozen reference:
    z = beta * ((logp_c - ref_c) - (logp_r - ref_r))
    L = -log sigmoid(z) + alpha * (-logp_c / |c|)           averaged over the step's pairs
beta (--dpo-beta, 0.1) is not in the paper: ours, DPO's usual value; alpha (--nll-weight, 1.0) is RPO's.
The reference: the --init run's Coder adapter, frozen (its weights swapped in for the reference pass:
`reference`), as the paper trains from an SFT model; without --init, the base with adapters disabled (the
project's reference policy), since nothing else is frozen then: an SFT run inside the same run
(--sft-steps) has no copy kept, and a copy taken at step 1 would be wrong after a --resume.
"""
import ast
import math
import time
from contextlib import contextmanager
from pathlib import Path

import torch

import coder
import rollout
import sandbox
import update
from infra import distributed, progress

TEST_SYSTEM = "You are an expert Python tester. You answer with one ```python code block of assert statements."
EFFICIENCY_RATIO = 1.5  # the slower program must take >= 1.5x the faster's CPU time ...
EFFICIENCY_MIN_S = 5e-3  # ... and >= 5 ms more (efficiency.ET_FLOOR_S: a run's cost spreads by a few ms)
TRUSTED = 0.5  # trusted tests: score >= 0.5 x the best test's (our choice; the paper says "top-scored")


def mutual_scores(passes: torch.Tensor, rounds: int = 10, d: float = 0.85) -> tuple[torch.Tensor, torch.Tensor]:
    """The self-validation scores of the module docstring. passes: [N_c, N_t] bool/0-1, A_ij = program i
    passes test j. Returns (program scores [N_c], test scores [N_t]), each summing to 1 (uniform with no
    edge at all; a side with no member is an empty tensor).

    >>> c, t = mutual_scores(torch.tensor([[1, 1], [0, 0]]), rounds=1)
    >>> [round(x, 4) for x in c.tolist()], [round(x, 4) for x in t.tolist()]
    ([0.925, 0.075], [0.5, 0.5])
    """
    A = passes.float()
    n_c, n_t = A.shape
    s_c, s_t = torch.full((n_c,), 1.0 / max(n_c, 1)), torch.full((n_t,), 1.0 / max(n_t, 1))
    for _ in range(rounds):
        c = (1 - d) * s_c + d * (A @ s_t)  # [N_c]
        t = (1 - d) * s_t + d * (A.T @ s_c)  # [N_t]
        s_c, s_t = c / c.sum().clamp_min(1e-12), t / t.sum().clamp_min(1e-12)
    return s_c, s_t


def choose_pairs(s_c: torch.Tensor, s_t: torch.Tensor, passes: torch.Tensor, cpu: torch.Tensor,
                 has_code: list) -> list:
    """Preference pairs of one problem: [(chosen, rejected, kind)], kind "correct" or "efficient".

    s_c [N_c], s_t [N_t] from mutual_scores; passes [N_c, N_t]; cpu [N_c, N_t] CPU seconds of each run
    per test (the run's cost measured outside it, split evenly over its tests: sandboxing/cost.py)
    (NaN: not timed); has_code [N_c] bool (a completion without code may be rejected, never chosen).
    correct:   chosen = the highest-scored program with code that passes a test, rejected = the lowest-
               scored; none when their scores are equal (nothing tells them apart).
    efficient: trusted tests = those passed at least once with s_t >= TRUSTED x max s_t; top programs =
               those passing every trusted test; chosen = the fastest on them (summed CPU s), rejected = the
               slowest, when it took >= EFFICIENCY_RATIO x as long and EFFICIENCY_MIN_S more. Ties: the lower index.

    >>> A = torch.tensor([[1, 1], [1, 0], [0, 0]])
    >>> c, t = mutual_scores(A)
    >>> choose_pairs(c, t, A, torch.full((3, 2), float("nan")), [True, True, True])
    [(0, 2, 'correct')]
    """
    A = passes.bool()
    pairs = []
    ok = [i for i in range(len(s_c)) if has_code[i] and A[i].any()]
    if ok:
        best = max(ok, key=lambda i: (s_c[i].item(), -i))
        worst = min(range(len(s_c)), key=lambda i: (s_c[i].item(), i))
        if s_c[best] > s_c[worst] + 1e-9:
            pairs.append((best, worst, "correct"))
    trusted = A.any(0) & (s_t >= TRUSTED * s_t.max()) if len(s_t) else A.any(0)  # [N_t]
    if trusted.any():
        top = [i for i in ok if A[i, trusted].all()]
        times = {i: cpu[i, trusted].sum().item() for i in top}
        timed = [i for i in top if math.isfinite(times[i])]
        if len(timed) >= 2:
            fast = min(timed, key=lambda i: (times[i], i))
            slow = max(timed, key=lambda i: (times[i], -i))
            if times[slow] >= EFFICIENCY_RATIO * times[fast] and times[slow] - times[fast] >= EFFICIENCY_MIN_S:
                pairs.append((fast, slow, "efficient"))
    return pairs


def dpo_loss(logp_c, logp_r, ref_c, ref_r, beta: float, n_c, alpha: float) -> tuple[torch.Tensor, dict]:
    """The loss of the module docstring, averaged over n pairs. logp_c, logp_r, ref_c, ref_r: [n] summed
    log-probs (nats) of the chosen and rejected completions under the policy and the reference; n_c: [n]
    the chosen completions' token counts. Returns (scalar loss, {'margin': mean z / beta, 'accuracy':
    share of pairs with z > 0}). -log sigmoid(z) is computed as softplus(-z) (finite for any z)."""
    z = beta * ((logp_c - ref_c) - (logp_r - ref_r))  # [n]
    loss = torch.nn.functional.softplus(-z) + alpha * (-logp_c / n_c)  # [n]
    return loss.mean(), {"margin": (z / beta).mean().item(), "accuracy": (z > 0).float().mean().item()}


def spearman(x: list, y: list) -> float | None:
    """Spearman's rank correlation (ties get their mean rank); None when either side has no spread."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    rx, ry = torch.tensor(ranks(x)), torch.tensor(ranks(y))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = (rx.norm() * ry.norm()).item()
    return (rx @ ry).item() / den if den > 0 else None


def test_messages(problem) -> list[dict]:
    """The chat that asks the Coder for one test of the problem's function."""
    ask = (f"Problem:\n{problem.prompt.strip()}\n\nWrite a test of the function `{problem.entry_point}`: "
           f"one line `assert {problem.entry_point}(...) == ...` with an input and its correct output, "
           "in one ```python code block.")
    return [{"role": "system", "content": TEST_SYSTEM}, {"role": "user", "content": ask}]


def parse_test(text: str, entry_point: str) -> str | None:
    """The first line of a completion (inside its code block, if any) that parses as one `assert`
    statement calling the entry point; None when there is none. Never raises.

    >>> parse_test("```python\\nassert f(1) == 2  # one\\nassert f(2) == 3\\n```", "f")
    'assert f(1) == 2'
    >>> parse_test("assert g(1) == 2\\nassert f(1 ==", "f") is None
    True
    """
    body = coder.extract_code(text) or text
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("assert"):
            continue
        try:
            tree = ast.parse(line)
        except (SyntaxError, ValueError):
            continue
        if len(tree.body) == 1 and isinstance(tree.body[0], ast.Assert) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == entry_point
                for n in ast.walk(tree.body[0])):
            return ast.unparse(tree.body[0])  # comments and spacing gone: duplicates compare equal
    return None


def reference_weights(run_dir) -> dict | None:
    """{'<module>.lora_A.weight': tensor, ...} of the --init run's Coder adapter (peft's file keys), or None."""
    if not run_dir:
        return None
    from safetensors.torch import load_file

    return load_file(Path(run_dir) / "adapters" / "coder" / "adapter_model.safetensors")


@contextmanager
def reference(policy, ref: dict | None):
    """The frozen reference for the block: the --init Coder adapter's weights swapped into the Coder's
    LoRA modules and the trained ones put back after (exact copies, no grad), or, with ref None, the base
    with adapters disabled."""
    if ref is None:
        with policy.disable_adapter():
            yield
        return
    params = {n: p for n, p in policy.named_parameters() if ".coder." in n and "lora_" in n}
    key = lambda n: n.replace(".coder.", ".")  # noqa: E731  peft's name -> its file key
    missing = [n for n in params if key(n) not in ref]
    if missing:
        raise ValueError(f"--init Coder adapter lacks {key(missing[0])} (another LoRA shape?)")
    saved = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(ref[key(n)].to(p.device, p.dtype))
    try:
        yield
    finally:
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(saved[n])


_REF = {}  # --init folder -> its Coder weights, read once per process


def add_flags(parser) -> None:
    """--algo codedpo's flags, one group of `train.py --help` ("paper": the value Zhang et al. 2025 use)."""
    g = parser.add_argument_group("codedpo", "CodeDPO (baselines/codedpo.py): DPO on self-verified pairs")
    a = g.add_argument
    a("--dpo-programs", type=int, default=None, help="programs per problem (default G*M, the GRPO group; paper 8)")
    a("--dpo-tests", type=int, default=4, help="test completions per problem, one assert each (paper 8)")
    a("--max-test-tokens", type=int, default=48, help="token budget of a test completion")
    a("--dpo-temperature", type=float, default=1.0, help="sampling temperature of programs and tests (paper: high)")
    a("--dpo-rounds", type=int, default=10, help="rounds T of the self-validation score (paper 10)")
    a("--dpo-damping", type=float, default=0.85, help="damping d of the self-validation score (paper 0.85)")
    a("--dpo-beta", type=float, default=0.1, help="DPO beta (not in the paper: ours)")
    a("--nll-weight", type=float, default=1.0, help="weight alpha of the chosen program's NLL (RPO form)")


def setup(policy, args) -> list:
    """Nothing trained beside the Coder's adapter (the reference is --init's Coder or the base: `reference`)."""
    return []


def step(policy, tok, problems, args, optimizer, corpus=None) -> tuple[dict, list]:
    """One CodeDPO step on B problems (module docstring: self-generation, self-validation, pairs, loss);
    train.grpo_step's signature and metrics keys. Function problems only: an I/O problem has no
    `assert` tests to write, so it gives no pair (its programs still count in the reward)."""
    clock = progress.Clock(next(policy.parameters()).device, sync=getattr(args, "profile", False))  # --profile: CUDA waits
    t0 = time.perf_counter()
    n_c, n_t = args.dpo_programs or args.num_plans * args.codes_per_plan, args.dpo_tests
    policy.set_adapter("coder")
    with clock("code_generation"):  # 1. self-generation
        codes = rollout.sample(policy, tok, [coder.messages(p) for p in problems], n_c, args.max_code_tokens,
                               args.dpo_temperature, args.top_p, stop=coder.STOP)
    with clock("test_generation"):
        tests = rollout.sample(policy, tok, [test_messages(p) for p in problems], n_t, args.max_test_tokens,
                               args.dpo_temperature, args.top_p, stop=coder.STOP)
    programs = [coder.program(p, coder.extract_code(codes.texts[b * n_c + i]))
                for b, p in enumerate(problems) for i in range(n_c)]
    self_tests = []
    for b, p in enumerate(problems):
        parsed = [parse_test(t, p.entry_point) for t in tests.texts[b * n_t:(b + 1) * n_t]] if not p.is_io else []
        self_tests.append(list(dict.fromkeys(t for t in parsed if t)))  # unique, in order
    jobs = [p.sandbox_job(programs[b * n_c + i], args.sandbox_timeout) for b, p in enumerate(problems) for i in range(n_c)]
    own = [(b, i) for b in range(len(problems)) for i in range(n_c) if self_tests[b]]
    jobs += [dict(program=programs[b * n_c + i], tests=self_tests[b], timeout_s=args.sandbox_timeout, cost=True)
             for b, i in own]  # cost: measured outside each run, for the efficiency pairs
    with clock("sandbox"):  # 2. the hidden tests (reward, Spearman) and the pass graph, in one batch
        results = sandbox.run_many(jobs, workers=args.workers)
    hidden, graph = results[:len(programs)], dict(zip(own, results[len(programs):]))
    pairs, spearmans, kinds = [], [], {"correct": 0, "efficient": 0}
    for b in range(len(problems)):
        if not self_tests[b]:
            continue
        rows = [graph[(b, i)] for i in range(n_c)]
        n = len(self_tests[b])  # a run that never reached its tests (no code, a crash) reports fewer
        A = torch.tensor([[j < len(r.tests) and r.tests[j] == "passed" for j in range(n)] for r in rows])  # [N_c, N_t]
        cpu = torch.tensor([[r.cost_s / n if j < len(r.tests) and r.cost_s is not None else float("nan")
                             for j in range(n)] for r in rows])  # [N_c, N_t] CPU s: the run's cost split evenly
        s_c, s_t = mutual_scores(A, args.dpo_rounds, args.dpo_damping)
        has_code = [programs[b * n_c + i] is not None for i in range(n_c)]
        for c, r, kind in choose_pairs(s_c, s_t, A, cpu, has_code):  # 3.
            if programs[b * n_c + c] == programs[b * n_c + r]:
                continue  # the same program twice (timing noise): nothing to prefer
            pairs.append((b * n_c + c, b * n_c + r))
            kinds[kind] += 1
        rho = spearman(s_c.tolist(), [hidden[b * n_c + i].pass_rate for i in range(n_c)])
        if rho is not None:
            spearmans.append(rho)
    loss, grad_norm, skipped, stats = pair_update(policy, codes, pairs, args, optimizer, clock)  # 4.
    step_s = time.perf_counter() - t0
    verdicts = [r.verdict for r in hidden]
    rewards = torch.tensor([r.pass_rate for r in hidden]).view(len(problems), n_c)
    samples = [{"task_id": p.task_id, "plan": None, "completion": codes.texts[b * n_c],
                "program": programs[b * n_c], "verdict": hidden[b * n_c].verdict, "detail": hidden[b * n_c].detail,
                "self_tests": self_tests[b]} for b, p in enumerate(problems)]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return {
        "reward": rewards.mean().item(), "pass_all": verdicts.count("passed") / len(verdicts),
        "best_of_problem": rewards.amax(1).mean().item(),
        "dpo_pairs": len(pairs), "dpo_correct_pairs": kinds["correct"], "dpo_efficient_pairs": kinds["efficient"],
        "self_tests": mean([len(t) for t in self_tests]), "score_spearman": mean(spearmans),
        "dpo_margin": stats.get("margin"), "dpo_accuracy": stats.get("accuracy"),
        "loss": loss, "grad_norm": grad_norm, "skipped_updates": skipped,
        "code_tokens": codes.mask.sum(1).mean().item(), "truncated_codes": codes.truncated.float().mean().item(),
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        **{f"time_{k}_s": v for k, v in clock.s.items()}, "time_step_s": step_s,
    }, samples


def pair_update(policy, r: rollout.Rollout, pairs: list, args, optimizer, clock) -> tuple[float, float, int, dict]:
    """Step 4: backward of dpo_loss over the pairs [(chosen row, rejected row)] of rollout r, --micro-batch
    rows (half as many pairs) per forward, then one clipped AdamW step. No pair: no update (every rank
    still reaches the all-reduce). Returns (loss, grad norm, skipped optimizer steps, {margin, accuracy})."""
    if args.init and args.init not in _REF:
        _REF[args.init] = reference_weights(args.init)
    ref_weights = _REF.get(args.init) if args.init else None
    optimizer.zero_grad(set_to_none=True)
    per = max(1, args.micro_batch // 2)
    total, bad, stats = 0.0, False, []
    for k in range(0, len(pairs), per):
        chunk = pairs[k:k + per]
        idx = torch.tensor([c for c, _ in chunk] + [j for _, j in chunk])  # [2n]: chosen, then rejected
        mask = r.mask[idx]  # [2n, T]
        with clock("reference_logprobs"), torch.no_grad(), reference(policy, ref_weights):
            ref = (rollout.logprobs(policy, r, idx) * mask).sum(1)  # [2n]
        with clock("policy_forward_backward"):
            lp = (rollout.logprobs(policy, r, idx) * mask).sum(1)  # [2n] with grad
            n = len(chunk)
            loss, m = dpo_loss(lp[:n], lp[n:], ref[:n], ref[n:], args.dpo_beta, mask[:n].sum(1).clamp_min(1),
                               args.nll_weight)
            loss = loss * n / len(pairs) / distributed.world()  # the mean over all pairs (of every rank)
            if not torch.isfinite(loss):
                bad = True
                break
            loss.backward()
        total += loss.item()
        stats.append((n, m))
    grad_norm, skipped = 0.0, 0
    with clock("optimizer"):
        params = update.params(optimizer)
        bad = distributed.reduce_grads(params, bad)
        with_grad = [p for p in params if p.grad is not None]
        if with_grad and not bad:
            grad_norm = torch.nn.utils.clip_grad_norm_(with_grad, args.max_grad_norm).item()
            bad = not math.isfinite(grad_norm)
            if not bad:
                optimizer.step()
        if bad:
            skipped = 1
        optimizer.zero_grad(set_to_none=True)
    n = sum(c for c, _ in stats)
    return total, grad_norm, skipped, ({k: sum(c * m[k] for c, m in stats) / n for k in ("margin", "accuracy")}
                                       if n else {})

