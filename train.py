"""Train the Planner and the Coder together with collaboration-aware GRPO.

    python train.py                                   # embedded SmolLM2-135M on CPU, ~15 min
    python train.py --model Qwen2.5-Coder-1.5B        # one consumer GPU, 4-bit NF4 base

One step, for P problems (--problems-per-step):
  1. Planner (adapter 'planner') samples G plans per problem            -> P*G plans
  2. Coder (adapter 'coder') samples M programs per plan                -> P*G*M programs
  3. the sandbox runs every program on the problem's tests              -> rewards r [P, G, M]
  4. advantages: Coder against the codes of its plan, Planner against the other plans (grpo.py)
  5. loss per role (clipped surrogate + beta * k3 KL to the base model = adapters off), summed;
     one AdamW step on both adapters' LoRA weights.
Writes runs/<time>/: config.json, metrics.jsonl (one line per step), adapters/<role>/ (peft).
"""
import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

import coder
import data
import grpo
import models
import planner
import rollout
import sandbox


def get_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = ap.add_argument
    a("--model", default=models.EMBEDDED, help="short name, hub id or local folder")
    a("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a("--quant", default="auto", choices=["auto", "4bit", "none"], help="auto: 4bit on CUDA, none on CPU")
    a("--train-data", default="train", help="train | val | <file.jsonl> | mbpp:<file>")
    a("--steps", type=int, default=8)
    a("--problems-per-step", type=int, default=2)
    a("--num-plans", type=int, default=4, help="G: plans per problem")
    a("--codes-per-plan", type=int, default=2, help="M: programs per plan")
    a("--max-plan-tokens", type=int, default=48)
    a("--max-code-tokens", type=int, default=128)
    a("--temperature", type=float, default=0.7)
    a("--top-p", type=float, default=0.95)
    a("--lr", type=float, default=2e-4)
    a("--beta", type=float, default=0.04, help="KL weight")
    a("--clip-low", type=float, default=0.2)
    a("--clip-high", type=float, default=0.28, help="DAPO clip-higher")
    a("--loss-type", default="token", choices=["token", "grpo", "dr_grpo"])
    a("--num-iterations", type=int, default=1, help="updates per batch of rollouts")
    a("--reward", default="pass_rate", choices=["pass_rate", "all_pass"])
    a("--efficiency-weight", type=float, default=0.0, help="lambda: bonus for faster fully-passing code")
    a("--coder-baseline", default="plan", choices=["plan", "problem"])
    a("--mask-truncated", action="store_true", help="leave completions without EOS out of the loss")
    a("--train-roles", default="planner,coder")
    a("--sft-steps", type=int, default=0, help="cold-start SFT steps per role before GRPO")
    a("--sft-batch", type=int, default=8)
    a("--sft-lr", type=float, default=2e-4)
    a("--lora-r", type=int, default=16)
    a("--lora-alpha", type=int, default=32)
    a("--micro-batch", type=int, default=8, help="rows per forward/backward")
    a("--max-grad-norm", type=float, default=1.0)
    a("--sandbox-timeout", type=float, default=4.0, help="CPU seconds per test")
    a("--workers", type=int, default=os.cpu_count() or 1, help="parallel sandbox processes")
    a("--seed", type=int, default=0)
    a("--out", default=None, help="run folder (default runs/<date-time>)")
    a("--save-every", type=int, default=10)
    args = ap.parse_args(argv)
    args.train_roles = [r for r in args.train_roles.split(",") if r]
    if not args.train_roles or not set(args.train_roles) <= {"planner", "coder"}:
        ap.error("--train-roles takes planner, coder or planner,coder")
    return args


def rewards_of(results, shape, args) -> torch.Tensor:
    """Sandbox results (flat, prompt-major) -> rewards [B, G, M] (README, "The algorithm").

    pass_rate: passed/total; all_pass: 1[verdict == passed]. Efficiency shaping (our choice):
    among the fully-passing programs of one problem, r += lambda * (1 - t / max t), t = CPU seconds.
    """
    r = torch.tensor([x.pass_rate if args.reward == "pass_rate" else float(x.verdict == "passed")
                      for x in results]).view(shape)
    if args.efficiency_weight > 0:
        t = torch.tensor([x.cpu_s if x.verdict == "passed" else 0.0 for x in results]).view(shape)
        ok = torch.tensor([x.verdict == "passed" for x in results]).view(shape)
        tmax = t.flatten(1).amax(1).clamp(min=1e-9)[:, None, None]  # [B, 1, 1]
        r = r + args.efficiency_weight * torch.where(ok, 1 - t / tmax, torch.zeros_like(t))
    return r


def policy_update(policy, role, r: rollout.Rollout, adv, valid, max_len, args, old_logp=None):
    """Backward of one role's GRPO loss over micro-batches; returns (loss, metrics).

    r: the role's rollout, N rows; adv: [N]; valid: [N] bool; max_len: the role's token budget
    (the constant of 'dr_grpo'). Rows with A = 0 carry no policy gradient and are skipped (their
    KL term too: our choice, it saves most of the compute while the model rarely solves a task);
    they still count in the loss normaliser.
    """
    policy.set_adapter(role)
    adv, valid = adv.to(r.seqs.device), valid.to(r.seqs.device)  # rewards live on the CPU
    mask = r.mask * valid[:, None].float()  # [N, T]
    if args.mask_truncated:
        mask = mask * (~r.truncated)[:, None].float()
    w = grpo.loss_weights(mask, args.loss_type, max_len)  # [N, T], sums to 1 for 'token'
    rows = [i for i in range(len(adv)) if adv[i] != 0 and mask[i].sum() > 0]
    total, stats = 0.0, []
    for k in range(0, len(rows), args.micro_batch):
        idx = torch.tensor(rows[k:k + args.micro_batch])
        with torch.no_grad(), policy.disable_adapter():
            ref = rollout.logprobs(policy, r, idx)  # [n, T] pi_ref = base model
        logp = rollout.logprobs(policy, r, idx)  # [n, T] with grad
        old = logp.detach() if old_logp is None else old_logp[idx]
        loss, m = grpo.grpo_loss(logp, old, ref, adv[idx], w[idx], args.clip_low, args.clip_high, args.beta)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite {role} loss")
        loss.backward()
        total += loss.item()
        stats.append((len(idx), m))
    n = sum(c for c, _ in stats) or 1
    metrics = {k: sum(c * m[k] for c, m in stats) / n if stats else None for k in ("kl", "clip_frac")}
    return total, metrics


def all_logprobs(policy, r: rollout.Rollout, micro_batch: int) -> torch.Tensor:
    """[N, T] log-probs of every row of r under the active adapter, without grad."""
    with torch.no_grad():
        return torch.cat([rollout.logprobs(policy, r, slice(i, i + micro_batch))
                          for i in range(0, r.seqs.shape[0], micro_batch)])


def grpo_step(policy, tok, problems, args, optimizer) -> tuple[dict, list]:
    """One GRPO step on a batch of problems.

    Returns (metrics: plain floats, no tensors; samples: the first plan and code of each problem).
    """
    B, G, M = len(problems), args.num_plans, args.codes_per_plan
    t0 = time.perf_counter()
    policy.set_adapter("planner")
    plans_r = rollout.sample(policy, tok, [planner.messages(p) for p in problems], G,
                             args.max_plan_tokens, args.temperature, args.top_p)  # B*G rows
    plans = [planner.parse(t) for t in plans_r.texts]
    policy.set_adapter("coder")
    code_chats = [coder.messages(problems[i // G], plans[i]) for i in range(B * G)]
    codes_r = rollout.sample(policy, tok, code_chats, M, args.max_code_tokens,
                             args.temperature, args.top_p, stop=coder.STOP)  # B*G*M rows
    t1 = time.perf_counter()
    jobs = []
    for i, text in enumerate(codes_r.texts):
        p = problems[i // (G * M)]
        jobs.append(dict(program=coder.program(p, coder.extract_code(text)), tests=list(p.tests),
                         setup=p.setup, timeout_s=args.sandbox_timeout))
    results = sandbox.run_many(jobs, workers=args.workers)
    t2 = time.perf_counter()

    rewards = rewards_of(results, (B, G, M), args)  # [B, G, M]
    code_valid = codes_r.valid.view(B, G, M)
    plan_valid = torch.tensor([bool(p.strip()) for p in plans]).view(B, G)  # empty after parse()
    adv_c, zero_c = grpo.coder_advantages(rewards, code_valid, args.coder_baseline)  # [B, G, M]
    adv_p, zero_p = grpo.planner_advantages(rewards, code_valid, plan_valid)  # [B, G]

    loss, metrics, olds = 0.0, {}, {}
    work = {"planner": (plans_r, adv_p.flatten(), plan_valid.flatten(), args.max_plan_tokens),
            "coder": (codes_r, adv_c.flatten(), code_valid.flatten(), args.max_code_tokens)}
    if args.num_iterations > 1:  # pi_old: the policy that sampled, scored before any update
        for role in args.train_roles:
            policy.set_adapter(role)
            olds[role] = all_logprobs(policy, work[role][0], args.micro_batch)
    grad_norm, skipped = 0.0, 0
    for it in range(args.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        try:
            for role in args.train_roles:
                r, adv, valid, max_len = work[role]
                l, m = policy_update(policy, role, r, adv, valid, max_len, args, olds.get(role))
                loss += l
                metrics.update({f"{role}_{k}": v for k, v in m.items()})
            params = [p for p in optimizer.param_groups[0]["params"] if p.grad is not None]
            if params:
                grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm).item()
                if not torch.isfinite(torch.tensor(grad_norm)):
                    raise FloatingPointError("non-finite gradient norm")
                optimizer.step()
        except FloatingPointError:  # known bug 5: nothing non-finite may reach the optimizer
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
    t3 = time.perf_counter()

    verdicts = [x.verdict for x in results]
    samples = [{"task_id": problems[b].task_id, "plan": plans[b * G], "completion": codes_r.texts[b * G * M],
                "program": jobs[b * G * M]["program"],
                "verdict": results[b * G * M].verdict, "detail": results[b * G * M].detail} for b in range(B)]
    return {
        "reward": rewards.mean().item(),
        "pass_all": sum(v == "passed" for v in verdicts) / len(verdicts),
        "best_of_problem": rewards.flatten(1).amax(1).mean().item(),
        "plan_reward_std": rewards.mean(-1).std(-1, unbiased=False).mean().item(),
        "frac_zero_std_coder": zero_c.float().mean().item(),
        "frac_zero_std_planner": zero_p.float().mean().item(),
        "loss": loss, "grad_norm": grad_norm, "skipped_updates": skipped, **metrics,
        "plan_tokens": plans_r.mask.sum(1).mean().item(), "code_tokens": codes_r.mask.sum(1).mean().item(),
        "truncated_codes": codes_r.truncated.float().mean().item(),
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        "time_sample_s": t1 - t0, "time_sandbox_s": t2 - t1, "time_update_s": t3 - t2,
    }, samples


def sft(policy, tok, problems, role, args, optimizer):
    """Cold-start SFT of one role: cross-entropy on the reference plan / solution tokens."""
    policy.set_adapter(role)
    for g in optimizer.param_groups:
        g["lr"] = args.sft_lr
    pool = [p for p in problems if p.plan and p.solution]
    for _ in tqdm(range(args.sft_steps), desc=f"sft {role}", dynamic_ncols=True):
        batch = random.sample(pool, min(args.sft_batch, len(pool)))
        chats = [planner.messages(p) if role == "planner" else coder.messages(p, p.plan) for p in batch]
        targets = [planner.sft_target(p) if role == "planner" else coder.sft_target(p) for p in batch]
        r = rollout.from_texts(tok, chats, targets, next(policy.parameters()).device)
        loss = -(rollout.logprobs(policy, r) * grpo.loss_weights(r.mask, "token")).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], args.max_grad_norm)
        optimizer.step()
    for g in optimizer.param_groups:  # AdamW moments carry over into GRPO: same weights, same scale
        g["lr"] = args.lr


def save_adapters(policy, run_dir: Path):
    """Write run_dir/adapters/<role>/ atomically: into a temp folder, then swapped in by rename."""
    tmp = run_dir / "adapters.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for role in models.ROLES:
        policy.save_pretrained(tmp, selected_adapters=[role])  # -> tmp/<role>/
    final, old = run_dir / "adapters", run_dir / "adapters.old"
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def main(argv=None):
    args = get_args(argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    quant = models.default_quant(device) if args.quant == "auto" else args.quant
    problems = data.load(args.train_data)
    try:
        sandbox.self_check()  # a sandbox that cannot tell right from wrong must not be a reward
    except RuntimeError as e:
        raise SystemExit(f"error: {e}") from None
    base, tok = models.load_base(args.model, device, quant)
    policy = models.add_role_adapters(base, models.ROLES, args.lora_r, args.lora_alpha)
    lora = [p for n, p in policy.named_parameters() if "lora_" in n]  # both roles' adapters
    optimizer = torch.optim.AdamW(lora, lr=args.lr, weight_decay=0.0)

    run_dir = Path(args.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({**vars(args), "device": device, "quant": quant}, indent=2))
    print(f"run folder {run_dir}  model {args.model}  device {device}  quant {quant}  "
          f"problems {len(problems)}  trainable LoRA params {sum(p.numel() for p in lora):,}")

    for role in args.train_roles if args.sft_steps > 0 else []:
        sft(policy, tok, problems, role, args, optimizer)

    bar = tqdm(range(1, args.steps + 1), desc="grpo", dynamic_ncols=True)
    with open(run_dir / "metrics.jsonl", "a") as metrics_file, open(run_dir / "samples.jsonl", "a") as samples_file:
        for step in bar:
            batch = random.sample(problems, min(args.problems_per_step, len(problems)))
            t = time.perf_counter()
            m, samples = grpo_step(policy, tok, batch, args, optimizer)
            m = {"step": step, **m, "time_s": time.perf_counter() - t}
            metrics_file.write(json.dumps(m) + "\n")
            metrics_file.flush()
            samples_file.write("".join(json.dumps({"step": step, **s}) + "\n" for s in samples))
            samples_file.flush()
            bar.set_postfix(reward=f"{m['reward']:.3f}", passed=f"{m['pass_all']:.2f}")
            if step % args.save_every == 0 or step == args.steps:
                save_adapters(policy, run_dir)
    print(f"done: adapters in {run_dir / 'adapters'}, metrics in {run_dir / 'metrics.jsonl'}")
    return run_dir


def cli():
    try:
        main()
    except (models.ModelError, data.DataError) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("interrupted")


if __name__ == "__main__":
    cli()
