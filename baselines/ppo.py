"""PPOCoder (Shojaee et al., TMLR 2023, arXiv 2301.13816): PPO from execution feedback, with a critic.

`python train.py --algo ppo` trains the Coder alone (as the paper does), from the same cold-start SFT.
What GRPO drops and PPO keeps is the critic: a value V(s_t) per token, learnt beside the policy, gives
each token its own advantage instead of one advantage per program. One step (`step`):

    1. rollouts   n = G*M programs per problem from the Coder (train.py's single-agent sizes), sandbox
    2. score      S = R_cs + R_ast + R_dfg per program                           (paper sec. 3, eq. 2-6)
                  R_cs: +1 all tests pass, -0.3 a test fails, -0.6 a runtime error (a timeout counts as
                  one, as in the APPS harness CodeRL reads), -1 it does not compile (or has no code);
                  R_ast / R_dfg: share of the reference solution's AST subtrees / data-flow edges found
                  in the program (CodeBLEU's syntax and data-flow match, the `codebleu` package)
    3. per-token reward, KL inside it (their baselines/ppo.py compute_rewards):
                  r_t = -beta (log pi_old(y_t) - log pi_ref(y_t))  + [t = last real token] S
                  pi_ref: the frozen SFT Coder (adapter `coder_ref`, a copy of the Coder as RL begins)
    4. GAE (Schulman et al. 2016), gamma = 1, lambda = 0.95 (their defaults), V = 0 after the last token:
                  delta_t = r_t + gamma V_{t+1} - V_t,   A_t = delta_t + gamma lambda A_{t+1},   R_t = A_t + V_t
                  A whitened over the step's tokens: (A - mean) / sqrt(var + 1e-8)
    5. loss       L = -sum_t w_t min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps_high) A_t)
                      + vf_coef sum_t w_t 1/2 max((V_t - R_t)^2, (clip(V_t, V_old_t -+ 0.2) - R_t)^2)
                  rho_t = pi(y_t) / pi_old(y_t); w from grpo.loss_weights (--loss-type); no KL term in the
                  loss (it is in the reward); --num-iterations optimizer steps on the same rollouts
    6. beta       their adaptive controller (Ziegler et al. 2019): e = clip(KL / target - 1, -0.2, 0.2),
                  beta <- beta (1 + e n / horizon), KL = mean over programs of sum_t (log pi_old - log pi_ref)

The critic is a linear head on the policy's last hidden state (shared backbone, as their
CodeT5HeadWithValueModel): V_t = head(h_{P-1+t}), the state that predicts token t.
Our choices (docs/baselines.md#ppocoder): the head starts at 0 (V = 0) and has no dropout (theirs: 0.1,
which makes V_old differ from V at the first iteration); advantages are whitened over the whole step, not per
program (their one-program minibatches make every program's advantages mean 0); a program without EOS
still gets S at its last token (their training cuts it at argmax(EOS) = 0); a row whose run the sandbox
could not judge (sandbox_error, judge_error) is left out of the loss.
"""
import math
import time

import torch

import coder
import grpo
import rollout
import sandbox
import update
from fast import chunked
from infra import distributed, progress

REF = "coder_ref"  # the frozen SFT Coder: the KL's reference
EXECUTION_REWARD = {"passed": 1.0, "failed": -0.3, "error": -0.6, "timeout": -0.6, "memory": -0.6,
                    "output_limit": -0.6, "no_code": -1.0}  # R_cs; "does not compile" is -1 too (compiles)
UNJUDGED = ("sandbox_error", "judge_error")  # not the program's doing: the row stays out of the loss
VALUE_CLIP = 0.2  # their cliprange_value
KL_HORIZON = 10000  # their AdaptiveKLController horizon


class Critic(torch.nn.Module):
    """The value head V(s) = w . h + b on the last hidden state h [..., H] -> [...], plus the run's PPO
    state as buffers (saved in every checkpoint: infra/checkpoint.py's critic.pt): beta (the adaptive KL weight),
    started (1 once the reference was copied), steps and seconds (PPO steps done and their wall seconds:
    StepCoder's curriculum clock, by steps or by --time-budget)."""

    def __init__(self, hidden: int, beta: float):
        super().__init__()
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)  # our choice: V = 0 before any update
        torch.nn.init.zeros_(self.head.bias)
        self.register_buffer("beta", torch.tensor(float(beta), dtype=torch.float64))
        self.register_buffer("started", torch.tensor(0))
        self.register_buffer("steps", torch.tensor(0))
        self.register_buffer("seconds", torch.tensor(0.0, dtype=torch.float64))  # wall s of the PPO steps done

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h.float()).squeeze(-1)  # [...]


def add_flags(parser) -> None:
    """--algo ppo's flags, one group of `train.py --help` (--algo stepcoder trains with them too)."""
    g = parser.add_argument_group("ppo", "PPOCoder (baselines/ppo.py): a critic, GAE, the KL in the reward; "
                                  "--algo ppo, and the PPO of --algo stepcoder")
    g.add_argument("--vf-coef", type=float, default=1e-3, help="weight of the clipped value loss (PPOCoder's)")
    g.add_argument("--kl-coef", type=float, default=0.05, help="initial beta of the KL in the per-token reward")
    g.add_argument("--kl-target", type=float, default=1.0, help="KL per program the adaptive beta steers to")
    g.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda (gamma is 1)")


def setup(policy, args) -> list:
    """PPO's additions to the policy, before the optimizer is built and a checkpoint is loaded: the
    critic (policy.critic) and the frozen reference adapter `coder_ref` (same LoRA shape as the Coder's;
    its weights are copied from the Coder at the first PPO step, `start`, so it is the Coder after
    cold-start SFT, whether that came from --init or from this run's --sft-steps). Returns the critic's
    parameters, for the optimizer (the reference is never trained: not returned, requires_grad False)."""
    policy.add_adapter(REF, policy.peft_config["coder"])
    for name, p in policy.named_parameters():
        if f".{REF}." in name:
            p.requires_grad_(False)
    policy.critic = Critic(policy.config.hidden_size, args.kl_coef).to(next(policy.parameters()).device)
    return list(policy.critic.parameters())


def start(policy):
    """At the first PPO step: the reference := the Coder (its LoRA weights copied into `coder_ref`)."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    if not policy.critic.started:
        set_peft_model_state_dict(policy, get_peft_model_state_dict(policy, adapter_name="coder"), adapter_name=REF)
        policy.critic.started.fill_(1)


# -- the score of a program ------------------------------------------------------------------------

def execution_reward(program: str | None, result: sandbox.Result) -> float | None:
    """R_cs of one program (module docstring), None for a run the sandbox could not judge. 'Does not
    compile' is decided here, by Python's own compile() on the trainer's side (never by what the program
    reports): a SyntaxError (IndentationError included) or a ValueError (a null byte) gives -1."""
    if result.verdict in UNJUDGED:
        return None
    if program is None:
        return EXECUTION_REWARD["no_code"]
    try:
        compile(program, "<program>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return -1.0
    return EXECUTION_REWARD.get(result.verdict, -0.6)


def code_match(code: str | None, reference: str | None) -> tuple[float, float]:
    """(R_ast, R_dfg) of code against a reference solution: CodeBLEU's syntax match (the share of the
    reference's AST subtrees that also occur in the code) and data-flow match (the share of the
    reference's normalised data-flow edges found in the code), both in [0, 1] (Ren et al. 2020, sec. 3.2,
    3.3; `codebleu` 0.7.0 with tree-sitter). (0, 0) without code or without a reference; a data-flow term of
    0 for a reference without data flow (as codebleu, without its warning).

    >>> code_match("def f(x):\\n    return x + 1\\n", "def f(x):\\n    y = x + 1\\n    return y\\n")
    (0.25, 0.4)
    """
    if not code or not reference:
        return 0.0, 0.0
    from codebleu import dataflow_match, syntax_match
    from codebleu.utils import get_tree_sitter_language

    lang = get_tree_sitter_language("python")
    ast = syntax_match.corpus_syntax_match([[reference]], [code], "python", lang)
    parser = syntax_match.Parser()
    parser.language = lang
    ref_flow = dataflow_match.get_data_flow(reference, [parser, dataflow_match.dfg_function["python"]])
    dfg = dataflow_match.corpus_dataflow_match([[reference]], [code], "python", lang) if ref_flow else 0.0
    return float(ast), float(dfg)


# -- the math: pure functions on tensors -----------------------------------------------------------

def token_rewards(score: torch.Tensor, logp_old: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor,
                  beta: float) -> torch.Tensor:
    """r [N, T] = -beta (logp_old - logp_ref) on every completion token, + score at each row's LAST REAL
    token (the last position of its mask: its EOS, or its last sampled token when it was truncated or
    stopped on the closing fence). score [N]; logp_old, logp_ref, mask [N, T] (mask: 1 from position 0 up
    to the row's end). A row with an empty mask gets nothing.

    >>> token_rewards(torch.tensor([1.0]), torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]]),
    ...               torch.ones(1, 2), 0.1)
    tensor([[-0.0500,  1.1000]])
    """
    r = -beta * (logp_old - logp_ref) * mask  # [N, T]
    last = (mask.sum(1).long() - 1).clamp(min=0)  # [N] position of the last real token
    has = (mask.sum(1) > 0).to(r.dtype)  # [N] 1: the row has a real token
    # every tensor on the inputs' device: no index made on the CPU (a CUDA mask cannot index a CPU tensor)
    return r.scatter_add(1, last[:, None], (score.to(r) * has)[:, None])  # [N, T]


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16), right to left over each row:
    delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lam A_{t+1}, returns R_t = A_t + V_t, with
    V and A = 0 after the row's last real token. rewards, values, mask [N, T] -> (A [N, T], R [N, T]),
    0 off the mask. Worked example (tests/baselines/test_ppo.py): r = [0, 0, 0, 1], V = [0.5, 0.4, 0.6, 0.8],
    gamma 1, lam 0.95: delta = [-0.1, 0.2, 0.2, 0.2], A_3 = 0.2, A_2 = 0.2 + 0.95 * 0.2 = 0.39,
    A_1 = 0.2 + 0.95 * 0.39 = 0.5705, A_0 = -0.1 + 0.95 * 0.5705 = 0.441975; R = A + V =
    [0.941975, 0.9705, 0.99, 1.0] (lam = 1 would give R_t = 1 = the reward to go)."""
    N, T = rewards.shape
    r, v = rewards * mask, values * mask
    adv = torch.zeros_like(r)
    next_v, next_a = torch.zeros(N, dtype=r.dtype, device=r.device), torch.zeros(N, dtype=r.dtype, device=r.device)
    for t in reversed(range(T)):
        delta = r[:, t] + gamma * next_v - v[:, t]  # [N]
        adv[:, t] = (delta + gamma * lam * next_a) * mask[:, t]
        next_v, next_a = v[:, t], adv[:, t]
    return adv, (adv + v) * mask


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the masked entries (var unbiased, as their utils.whiten);
    0 off the mask. x, mask [N, T]. Fewer than 2 entries: x - mean."""
    n = mask.sum()
    mean = (x * mask).sum() / n.clamp(min=1)
    var = (((x - mean) * mask) ** 2).sum() / (n - 1).clamp(min=1)
    return ((x - mean) * torch.rsqrt(var + eps) if n > 1 else x - mean) * mask


def ppo_loss(logp, logp_old, adv, values, values_old, returns, weights, value_weights, epsilon=0.2,
             epsilon_high=None, vf_coef=1e-3, value_clip=VALUE_CLIP) -> tuple[torch.Tensor, dict]:
    """PPO-clip with a clipped value loss (module docstring, step 5), all tensors [N, T]:
    logp (with grad), values (with grad), logp_old / values_old / adv / returns (no grad), weights (the
    policy loss's w, grpo.loss_weights; 0 off the mask and for FGO's masked tokens) and value_weights
    (the value loss's). Returns (loss, metrics: policy_loss, value_loss, clip_frac, value_clip_frac).
    No KL term: the KL to the reference is in the reward (token_rewards)."""
    eps_low, eps_high = epsilon, epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - logp_old)  # [N, T]
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    policy_loss = -(surrogate * weights).sum()
    v_clipped = values_old + torch.clamp(values - values_old, -value_clip, value_clip)
    v_err, v_err_clipped = (values - returns) ** 2, (v_clipped - returns) ** 2
    value_loss = 0.5 * (torch.maximum(v_err, v_err_clipped) * value_weights).sum()
    on, von = weights > 0, value_weights > 0
    with torch.no_grad():
        metrics = {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
                   "clip_frac": (((ratio < 1 - eps_low) | (ratio > 1 + eps_high)) & on).sum().item() / max(1, on.sum().item()),
                   "value_clip_frac": ((v_err_clipped > v_err) & von).sum().item() / max(1, von.sum().item())}
    return policy_loss + vf_coef * value_loss, metrics


def adaptive_beta(beta: float, kl: float, n: int, target: float, horizon: int = KL_HORIZON) -> float:
    """Their AdaptiveKLController.update: beta (1 + clip(kl / target - 1, -0.2, 0.2) n / horizon); n: the
    programs of the step (their batch_size).

    >>> round(adaptive_beta(0.05, 3.0, 16, 1.0, 10000), 8)
    0.050016
    """
    return beta * (1 + min(max(kl / target - 1, -0.2), 0.2) * n / horizon)


# -- one step of the arm ---------------------------------------------------------------------------

def forward(policy, r: rollout.Rollout, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [n, T], values [n, T]) of rows of r under the active adapter, in one forward: the logits
    at positions P-1 .. P+T-2 predict the completion tokens, and the same positions' last hidden states
    give V (the critic). Row by row, the prompt forwarded with each row (our choice: the shared-prompt
    pass of update.py returns log-probs only); the LM head in pieces of positions (fast/chunked.py)."""
    seqs, attn, P = r.seqs[rows], r.attn[rows], r.prompt_len
    T = seqs.shape[1] - P
    h = chunked.last_hidden(policy, input_ids=seqs, attention_mask=attn, use_cache=False)
    h = h[:, P - 1:P - 1 + T]  # [n, T, d] the states that predict the completion tokens
    logp = chunked.head_logprobs(policy.get_output_embeddings(), h, seqs[:, P:])  # [n, T]
    return logp, policy.critic(h)  # [n, T], [n, T]


def score_all(policy, r, adapter: str, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, values) [N, T] of every row under `adapter`, without grad, micro-batch by micro-batch."""
    policy.set_adapter(adapter)
    out = []
    with torch.no_grad():
        for k in range(0, r.seqs.shape[0], micro_batch):
            rows = torch.arange(k, min(k + micro_batch, r.seqs.shape[0]), device=r.seqs.device)
            out.append(forward(policy, r, rows))
    policy.set_adapter("coder")  # the trained adapter trainable again (set_adapter moves requires_grad)
    return torch.cat([lp for lp, _ in out]), torch.cat([v for _, v in out])


def step(policy, tok, problems, args, optimizer, corpus=None) -> tuple[dict, list]:
    """One PPOCoder step (train.py --algo ppo): run_step with the Coder's plain prompt."""
    return run_step(policy, tok, problems, args, optimizer)


def run_step(policy, tok, problems, args, optimizer, prefixes=None, loss_mask=None, match=True) -> tuple[dict, list]:
    """One PPO step on B problems (module docstring, steps 1-6); train.grpo_step's contract.

    prefixes: None, or [B] beginnings of the Coder's reply (StepCoder's curriculum: "```python\\n" + a
    prefix of the reference solution): part of the prompt, never of the loss; the program is the prefix +
    the completion. loss_mask(r, responses, programs, traced results) -> [N, T] 0/1 (StepCoder's FGO): which
    completion tokens enter the POLICY loss (the value loss keeps every token). match=False: S = R_cs alone
    (StepCoder's reward is the compiler's feedback only).
    Returns (metrics of plain floats, samples: the first program of each problem).
    """
    clock = progress.Clock(next(policy.parameters()).device, sync=getattr(args, "profile", False))  # --profile: CUDA waits
    t0 = time.perf_counter()
    critic = policy.critic
    start(policy)
    n = args.num_plans * args.codes_per_plan  # programs per problem: the single agent's G*M
    chats = [coder.messages(p) + ([{"role": "assistant", "content": prefixes[b]}] if prefixes else [])
             for b, p in enumerate(problems)]
    with clock("code_generation"):  # 1. rollouts
        policy.set_adapter("coder")
        r = rollout.sample(policy, tok, chats, n, args.max_code_tokens, args.temperature, args.top_p,
                           stop=r"```" if prefixes else coder.STOP)  # with a prefix the fence is open already
    responses = [(prefixes[i // n] if prefixes else "") + t for i, t in enumerate(r.texts)]
    codes = [coder.extract_code(t) for t in responses]
    programs = [coder.program(problems[i // n], c) for i, c in enumerate(codes)]
    jobs = [problems[i // n].sandbox_job(p, args.sandbox_timeout) for i, p in enumerate(programs)]
    with clock("sandbox"):
        results = sandbox.run_many(jobs, workers=args.workers)
        # FGO: a second, traced run for the lines alone (tracing slows a program: its verdict is not used)
        traced = sandbox.run_many(jobs, workers=args.workers, coverage=True) if loss_mask else None
    with clock("reward"):  # 2. the score S = R_cs + R_ast + R_dfg
        cs = [execution_reward(p, res) for p, res in zip(programs, results)]
        matches = [code_match(c, problems[i // n].solution) if match else (0.0, 0.0) for i, c in enumerate(codes)]
    judged = torch.tensor([x is not None for x in cs], device=r.seqs.device)
    score = torch.tensor([(x or 0.0) + a + d for x, (a, d) in zip(cs, matches)], device=r.seqs.device)  # [N]
    mask = r.mask * judged[:, None].float()  # [N, T]
    if args.mask_truncated:
        mask = mask * (~r.truncated)[:, None].float()
    with clock("old_logprobs"):  # pi_old and V_old (the sampling policy), then pi_ref
        logp_old, v_old = score_all(policy, r, "coder", args.micro_batch)
    with clock("reference_logprobs"):
        logp_ref, _ = score_all(policy, r, REF, args.micro_batch)
    beta = critic.beta.item()
    rewards = token_rewards(score, logp_old, logp_ref, mask, beta)  # 3. [N, T]
    adv, returns = gae(rewards, v_old, mask, 1.0, args.gae_lambda)  # 4.
    adv = whiten(adv, mask)
    keep = mask if loss_mask is None else mask * loss_mask(r, responses, programs, traced).to(mask)
    w = grpo.loss_weights(keep, args.loss_type, args.max_code_tokens) * distributed.normaliser_share(keep, args.loss_type)
    wv = grpo.loss_weights(mask, args.loss_type, args.max_code_tokens) * distributed.normaliser_share(mask, args.loss_type)
    rows = [i for i in range(len(mask)) if mask[i].sum() > 0]
    loss, grad_norm, skipped, stats = 0.0, 0.0, 0, []
    for _ in range(args.num_iterations):  # 5. optimizer steps on the same rollouts
        optimizer.zero_grad(set_to_none=True)
        loss, bad, stats = 0.0, False, []
        with clock("policy_forward_backward"):
            for k in range(0, len(rows), args.micro_batch):
                idx = torch.tensor(rows[k:k + args.micro_batch], dtype=torch.long, device=mask.device)
                logp, v = forward(policy, r, idx)
                l, m = ppo_loss(logp, logp_old[idx], adv[idx], v, v_old[idx], returns[idx], w[idx], wv[idx],
                                args.epsilon, args.epsilon_high, args.vf_coef)
                if not torch.isfinite(l):
                    bad = True  # the other micro-batches still run: every rank reaches the same collectives
                    continue
                l.backward()
                loss += l.item()
                stats.append((len(idx), m))
        with clock("optimizer"):
            params = update.params(optimizer)
            bad = distributed.reduce_grads(params, bad)
            with_grad = [p for p in params if p.grad is not None]
            grad_norm = torch.nn.utils.clip_grad_norm_(with_grad, args.max_grad_norm).item() if with_grad else 0.0
            if bad or not math.isfinite(grad_norm):
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
            else:
                optimizer.step()
    rows_kl = ((logp_old - logp_ref) * mask).sum(1)  # [N] sum_t KL estimate of each program
    kl = abs(rows_kl[judged].mean().item()) if judged.any() else 0.0  # their objective/kl (abs of the mean)
    critic.beta.fill_(adaptive_beta(beta, kl, int(judged.sum()), args.kl_target))  # 6.
    critic.steps.add_(1)
    critic.seconds.add_(time.perf_counter() - t0)
    per = {k: sum(c * m[k] for c, m in stats) / max(1, sum(c for c, _ in stats)) if stats else None
           for k in ("policy_loss", "value_loss", "clip_frac", "value_clip_frac")}
    verdicts = [res.verdict for res in results]
    compared = [res.pass_rate if args.reward == "pass_rate" else float(res.verdict == "passed") for res in results]
    samples = [{"task_id": p.task_id, "plan": None, "prefix": prefixes[b] if prefixes else None,
                "completion": r.texts[b * n], "program": programs[b * n], "verdict": results[b * n].verdict,
                "detail": results[b * n].detail, **({"unsafe": True} if results[b * n].unsafe else {})}
               for b, p in enumerate(problems)]
    on = mask.bool()
    return {
        "reward": sum(compared) / len(compared),  # the pass rate GRPO logs too, comparable across arms
        "pass_all": sum(v == "passed" for v in verdicts) / len(verdicts),
        "score": score[judged].mean().item() if judged.any() else None,  # S, what PPO maximises
        "execution_reward": sum(x for x in cs if x is not None) / max(1, sum(x is not None for x in cs)),
        "ast_match": sum(a for a, _ in matches) / len(matches), "dfg_match": sum(d for _, d in matches) / len(matches),
        "kl": kl, "kl_coef": beta, "value": v_old[on].mean().item() if on.any() else None,
        "advantage_std": adv[on].std().item() if on.sum() > 1 else None,
        "loss_tokens_kept": (keep.sum() / mask.sum().clamp(min=1)).item(),
        **per, "loss": loss, "grad_norm": grad_norm, "skipped_updates": skipped,
        "code_tokens": r.mask.sum(1).mean().item(), "truncated_codes": r.truncated.float().mean().item(),
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        **{f"time_{k}_s": v for k, v in clock.s.items()}, "time_step_s": time.perf_counter() - t0,
    }, samples
