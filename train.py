"""Train the Planner and the Coder together with collaboration-aware GRPO.

    python train.py                                   # embedded SmolLM2-135M on CPU (SFT + GRPO)
    python train.py --model Qwen2.5-Coder-1.5B        # one consumer GPU, 4-bit NF4 base
    python train.py --roles coder                     # single-agent GRPO baseline (no Planner)
    python train.py --roles retriever,planner,coder,debugger   # MapCoder's chain (roles.CHAINS)
    python train.py --grpo-steps 0                    # cold-start SFT only
    python train.py --resume runs/<time>              # go on after a crash, nothing lost
    torchrun --nproc_per_node 2 train.py ...          # data parallel over 2 GPUs

0. optional cold-start SFT (--sft-steps) of each role on our reference plans / solutions (sft.py).
Then GRPO steps (grpo_step, five numbered calls): rollouts (tree.build: G plans per problem, M programs per
plan, each run in the sandbox) -> rewards -> credit (tree.advantages -> grpo.tree_advantages: Coder against
the codes of its plan, Planner against the other plans) -> one gradient step on both adapters (update.py)
-> metrics. Other chains (--roles: roles.CHAINS) add a Retriever above the Planner and a Debugger below the
Coder; the same tree builder and credit rule serve every chain (docs/roles.md).
Writes runs/<time>/: config.json, metrics.jsonl (one line per SFT / GRPO step / evaluation),
samples.jsonl, checkpoints/ (--resume goes on from the latest: checkpoint.py), adapters/<role>/
(peft), curves.png. --eval-data: greedy held-out pass@1 while training (progress.py); torchrun:
data parallel (distributed.py); --profile prints the seconds of each phase of a step.
"""
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

import checkers
import checkpoint
import coder
import data
import distributed
from flags import get_args
import efficiency
import eval as evaluation
import grpo
import models
import planner  # noqa: F401 (train.planner: the roles' modules stay reachable)
import progress
import rollout
import sandbox
import report
import retriever
import roles
import sft
import trackers
import update
import tree
from checkpoint import save_adapters  # noqa: F401 (train.save_adapters)
from progress import print_profile  # noqa: F401 (bench/grpo_bench.py)


def adapter_roles(chain) -> list:
    """The LoRA adapters of a run: one per role of the chain, and always the Planner's and the Coder's
    (so --init and the checkpoints of two-role runs fit every chain)."""
    return [r for r in roles.ROLES if r in chain or r in models.ROLES]


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. three non-finite steps in a row); the message is one line."""


GEN_PHASE = {"retriever": "retrieval_generation", "planner": "plan_generation", "coder": "code_generation",
             "debugger": "repair_generation"}  # --profile rows (progress.PHASES)


def tree_sizes(args) -> dict:
    """Children per node of each role (tree.build): R retrievals, G plans, M codes per plan (G*M codes per
    problem for the single agent, --roles coder), D repairs per failing program."""
    planned = "planner" in args.roles
    return {"retriever": args.num_retrievals, "planner": args.num_plans,
            "coder": args.codes_per_plan if planned else args.num_plans * args.codes_per_plan,
            "debugger": args.num_repairs}


def grpo_step(policy, tok, problems, args, optimizer, corpus=None) -> tuple[dict, list]:
    """One GRPO step on a batch of B problems: the five numbered calls below, in this order.

    1. rollouts       tree.build: each role of --roles samples its completions level by level with its
                      own adapter (Planner: G plans per problem; Coder: M programs per plan; a Retriever
                      above, a Debugger's D repairs below), and the sandbox runs every program
    2. rewards        step_rewards: the sandbox's results -> r [B, 1, programs per problem] (rewards_of),
                      written back into the tree's program nodes
    3. credit         tree.advantages -> grpo.tree_advantages: a node is worth the mean (or max) of the
                      valid programs below it, its advantage is normalised among its siblings
    4. gradient step  gradient_step: each role's loss and backward (update.policy_update -> grpo.grpo_loss),
                      then one clipped AdamW step on every adapter (skipped when anything is non-finite)
    5. metrics        step_metrics: plain floats for metrics.jsonl, the first plan and program of each problem

    The single agent (--roles coder) writes G*M programs per problem from the problem alone: one group
    per problem. corpus: a retriever.Corpus for --retrieval corpus. Returns (metrics: plain floats, no
    tensors; samples: the first plan and code of each problem).
    """
    clock = progress.Clock(next(policy.parameters()).device)
    t0 = time.perf_counter()
    rollouts = tree.build(problems, args.roles, tree_sizes(args), role_sampler(policy, tok, args, clock),  # 1
                          program_runner(args, clock), args.sandbox_timeout, debug_rounds=1, corpus=corpus,
                          k=args.retrieval_k)
    rewards = step_rewards(rollouts, problems, args, clock)  # 2: [B, 1, programs per problem]
    credit = tree.advantages(rollouts, args.planner_credit, args.scale_rewards == "group",  # 3
                             args.coder_baseline, args.debug_reward, args.debug_gamma)
    update_metrics = gradient_step(policy, rollouts, credit, args, optimizer, clock)  # 4
    step_s = time.perf_counter() - t0
    return step_metrics(rollouts, problems, rewards, credit, update_metrics, clock, step_s, args)  # 5


def role_sampler(policy, tok, args, clock):
    """Step 1's generate(role, chats, n) for tree.build: n completions per chat from the role's LoRA
    adapter (rollout.sample with the role's token budget and stop pattern), timed as its generation phase."""
    def generate(role, chats, n):
        with clock(GEN_PHASE.get(role, f"{role}_generation")):
            policy.set_adapter(role)
            return rollout.sample(policy, tok, chats, n, roles.max_tokens(args, role), args.temperature, args.top_p,
                                  stop=roles.ROLES[role].stop)
    return generate


def program_runner(args, clock):
    """Step 1's run(jobs) for tree.build: sandbox.run_many on --workers processes, timed as the sandbox phase."""
    def run(jobs):
        with clock("sandbox"):
            return sandbox.run_many(jobs, workers=args.workers)
    return run


def step_rewards(rollouts, problems, args, clock) -> torch.Tensor:
    """Step 2: rewards r [B, 1, programs per problem] of the step's programs (rewards_of), in tree order, each
    also written into its program's node, so that --reward all_pass and the efficiency bonus reach the credit.

    With --efficiency-weight > 0 the problems' reference solutions run too: their tests' CPU time is the
    efficiency bonus's yardstick (ref_times [B] seconds, NaN for a problem without one).
    """
    B = len(problems)
    coders = rollouts.of("coder")
    results = [rollouts.nodes[i].result for i in coders]
    ref_times = None
    if args.efficiency_weight > 0:
        with clock("sandbox"):
            costs = evaluation.reference_costs(problems, args)
        ref_times = torch.tensor([c[0] if c else float("nan") for c in costs])  # [B]
    rewards = rewards_of(results, (B, 1, len(coders) // B), args, ref_times)  # [B, 1, programs per problem]
    for i, r in zip(coders, rewards.flatten().tolist()):
        rollouts.nodes[i].reward = r
    return rewards


def rewards_of(results, shape, args, ref_times=None) -> torch.Tensor:
    """Sandbox results (flat, prompt-major) -> rewards [B, G, M] (docs/algorithm.md#the-reward).

    pass_rate: passed/total; all_pass: 1[verdict == passed]. --efficiency-weight lambda > 0 adds
    grpo.efficiency_bonus: lambda * min(1, 1 / NET) for a program that passes every test, NET = its
    tests' CPU time (ET) over the reference's (ref_times: [B] seconds, NaN where a problem has none)
    or, without one, over the fastest fully-passing program of the same problem.
    """
    r = torch.tensor([x.pass_rate if args.reward == "pass_rate" else float(x.verdict == "passed")
                      for x in results]).view(shape)
    if args.efficiency_weight > 0:
        costs = [efficiency.program_cost(x) for x in results]  # (ET s, MU MiB) of a passing program, else None
        t = torch.tensor([c[0] if c else 0.0 for c in costs]).view(shape)
        ok = torch.tensor([c is not None for c in costs]).view(shape)
        r = r + grpo.efficiency_bonus(t, ok, ref_times, args.efficiency_weight)
    return r


def gradient_step(policy, rollouts, credit, args, optimizer, clock) -> tuple[dict, float, float, int]:
    """Step 4: the backward of every role's GRPO loss (update.policy_update; the gradients of all roles
    add up), then one AdamW step on all adapters after clipping the gradient norm to --max-grad-norm;
    --num-iterations times over the same rollouts, with pi_old's log-probs scored once before the first.

    A non-finite loss or gradient norm skips that optimizer step: nothing non-finite may reach the
    optimizer (docs/algorithm.md#non-finite-values-reach-the-optimizer). Every role still runs, so that
    under torchrun every rank reaches the same collectives. Returns (per-role metrics {<role>_kl,
    <role>_clip_frac}, loss of the last iteration, gradient norm, skipped optimizer steps): plain numbers.
    """
    active = [role for role in args.roles if role in credit]  # a debugger with no failing program: no rows
    work = {role: (rollouts.outputs[role][0], credit[role].adv, credit[role].valid, roles.max_tokens(args, role))
            for role in active}
    olds = {}
    if args.num_iterations > 1:  # pi_old: the policy that sampled, scored before any update
        with clock("old_logprobs"):
            for role in active:
                policy.set_adapter(role)
                olds[role] = update.all_logprobs(policy, work[role][0], args.micro_batch)
    per_role, grad_norm, skipped, loss = {}, 0.0, 0, 0.0
    for _ in range(args.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        loss, bad = 0.0, False
        try:
            for role in active:
                r, adv, valid, max_len = work[role]
                try:
                    l, m = update.policy_update(policy, role, r, adv, valid, max_len, args, clock, olds.get(role))
                except FloatingPointError:
                    bad = True  # the other roles still run: every rank must reach the same collectives
                    continue
                loss += l
                per_role.update({f"{role}_{k}": v for k, v in m.items()})
            with clock("optimizer"):
                if distributed.reduce_grads(optimizer.param_groups[0]["params"], bad):  # torchrun: sum
                    raise FloatingPointError("non-finite loss")
                params = [p for p in optimizer.param_groups[0]["params"] if p.grad is not None]
                if params:
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm).item()
                    if not math.isfinite(grad_norm):
                        raise FloatingPointError("non-finite gradient norm")
                    optimizer.step()
        except FloatingPointError:
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
    return per_role, loss, grad_norm, skipped


def step_metrics(rollouts, problems, rewards, credit, update_metrics, clock, step_s, args) -> tuple[dict, list]:
    """Step 5: the step's metrics (plain floats: a tensor kept here would keep its graph alive, step after
    step) and its samples (each problem's first plan, completion, program and verdict)."""
    per_role, loss, grad_norm, skipped = update_metrics
    B = len(problems)
    coders = rollouts.of("coder")
    verdicts = [rollouts.nodes[i].result.verdict for i in coders]
    n = len(coders) // B  # programs per problem
    samples = []
    for b in range(B):
        first = rollouts.nodes[coders[b * n]]
        samples.append({"task_id": problems[b].task_id, "plan": rollouts.upstream(coders[b * n]).get("plan"),
                        "completion": first.text, "program": first.program, "verdict": first.result.verdict,
                        "detail": first.result.detail, **({"unsafe": True} if first.result.unsafe else {})})
    outputs = rollouts.outputs
    tokens = lambda role: outputs[role][0].mask.sum(1).mean().item() if role in outputs else None  # noqa: E731
    planned = "planner" in args.roles
    repairs = credit.get("debugger")
    active = [role for role in args.roles if role in credit]
    return {
        "reward": rewards.mean().item(),
        "pass_all": sum(v == "passed" for v in verdicts) / len(verdicts),
        "best_of_problem": rewards.flatten(1).amax(1).mean().item(),
        "plan_reward_std": rewards.view(B, len(rollouts.of("planner")) // B, -1).mean(-1).std(-1, unbiased=False)
        .mean().item() if planned else None,
        **{f"frac_zero_std_{role}": credit[role].zero_std for role in active}, **per_role,
        "loss": loss, "grad_norm": grad_norm, "skipped_updates": skipped,
        "plan_tokens": tokens("planner") if planned else None,
        "code_tokens": tokens("coder"),
        "truncated_codes": outputs["coder"][0].truncated.float().mean().item(),
        **({"retrieval_tokens": tokens("retriever")} if "retriever" in outputs else {}),
        **({"repairs": len(repairs.adv), "repair_reward": repairs.reward.mean().item(),
            "repair_tokens": tokens("debugger")} if repairs is not None else {}),
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        **{f"time_{k}_s": v for k, v in clock.s.items()}, "time_step_s": step_s,
    }, samples


def main(argv=None):
    args = get_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    quant = models.default_quant(device) if args.quant == "auto" else args.quant
    rank, world, device = distributed.setup(device)  # (0, 1, device) without torchrun
    main_rank = rank == 0  # writes every file
    if args.problems_per_step % world:
        raise TrainingError(f"--problems-per-step {args.problems_per_step} does not split over {world} processes")
    run_dir = Path(args.out or distributed.gather(f"runs/{time.strftime('%Y%m%d-%H%M%S')}")[0])
    ckpt, state = (checkpoint.latest(run_dir) if args.resume else None), checkpoint.fresh_state()
    if ckpt and checkpoint.finished(args, run_dir, ckpt, main_rank):
        distributed.cleanup()
        return run_dir
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # the same on every rank: the same initial LoRA weights
    problems = checkers.use(data.load(args.train_data), args.checker)  # --checker: one rule for every set
    eval_problems = checkers.use(data.load(args.eval_data)[:args.eval_limit] if args.eval_data else [], args.checker)
    progress.start(args, device, len(eval_problems), show=main_rank)  # what will run, and for how long
    try:
        isolation = sandbox.require(args.unsafe_sandbox, show=main_rank)  # refuses when nothing isolates
        sandbox.self_check()  # a sandbox that cannot tell right from wrong must not be a reward
    except (RuntimeError, sandbox.SandboxError) as e:
        raise SystemExit(f"error: {e}") from None
    base, tok = models.load_base(args.model, device, quant, args.dtype)
    policy = models.add_role_adapters(base, adapter_roles(args.roles), args.lora_r, args.lora_alpha)
    if args.init and not ckpt:  # a role the earlier run did not have (a new Debugger) starts fresh
        models.init_role_adapters(policy, args.init, [r for r in args.roles if r in models.ROLES or
                                                      (Path(args.init) / "adapters" / r).exists()])
    corpus = retriever.Corpus(problems, exclude=eval_problems) if "retriever" in args.roles and \
        args.retrieval == "corpus" else None
    lora = [p for n, p in policy.named_parameters() if "lora_" in n]  # both roles' adapters
    distributed.broadcast_params(lora)
    if world > 1:
        torch.manual_seed(args.seed + rank)  # each rank samples its own completions
    optimizer = torch.optim.AdamW(lora, lr=args.lr, weight_decay=0.0)
    if ckpt:
        state = checkpoint.load(ckpt, policy, optimizer, rank, world)  # adapters, optimizer, RNG last
    tracker = None
    if main_rank:
        dtype = models.choose_dtype(device, args.dtype)  # what auto chose here
        config = {**vars(args), "device": device, "quant": quant, "dtype": dtype, "sandbox": isolation}
        checkpoint.prepare(run_dir, config, ckpt, state)  # config.json; logs cut back to the checkpoint
        tracker = trackers.make(args.report_to, run_dir, config)
        print(f"run folder {run_dir}  model {args.model}  device {device}  quant {quant}  dtype {dtype}  "
              f"processes {world}  problems {len(problems)}  trainable LoRA params {sum(p.numel() for p in lora):,}"
              + (f"\nresumed from {ckpt} (step {state['step']})" if ckpt else
                 f"\n{run_dir} has no checkpoint yet: starting it over" if args.resume else ""))

    rows, bad, broken, t_start = [], 0, 0, time.perf_counter()
    with (open(run_dir / "metrics.jsonl", "a") if main_rank else open(os.devnull, "w")) as metrics_file, \
         (open(run_dir / "samples.jsonl", "a") if main_rank else open(os.devnull, "w")) as samples_file:
        def log(m: dict):
            metrics_file.write(json.dumps(m) + "\n")
            metrics_file.flush()
            if tracker:
                tracker.log(m)

        def save(name: str):  # every rank's RNG; rank 0 writes
            rngs = distributed.gather(checkpoint.rng_state())
            if main_rank:
                s = {**state, "wall_s": state["wall_s"] + time.perf_counter() - t_start}
                checkpoint.save(run_dir, name, policy, optimizer, s, rngs, args.keep_checkpoints)

        def maybe_eval(step: int, last: bool = False):
            if eval_problems and main_rank and (step == 0 or last or args.eval_every > 0 and step % args.eval_every == 0):
                log({"phase": "eval", "step": step, **progress.evaluate(policy, tok, eval_problems, args)})

        for role in roles.sft_roles(args.roles) if args.sft_steps > 0 else []:
            if role not in state["sft_done"]:
                try:
                    sft.train(policy, tok, problems, role, args, optimizer, metrics_file if main_rank else None)
                except ValueError as e:
                    raise TrainingError(str(e)) from None
                metrics_file.flush()
                state["sft_done"].append(role)
                distributed.broadcast_params(lora)  # torchrun: SFT ran on every rank (the same batches)
                save(f"sft-{len(state['sft_done'])}")
        if state["step"] == 0:
            maybe_eval(0)
        for step in progress.bar(range(state["step"] + 1, args.steps + 1), "grpo", total=args.steps,
                                 initial=state["step"], disable=not main_rank):  # a resume goes on
            batch = checkpoint.batch_at(problems, state["consumed"], min(args.problems_per_step, len(problems)), args.seed)
            k = len(batch) // world  # this rank's slice: whole groups, never split
            m, samples = grpo_step(policy, tok, batch[rank * k:(rank + 1) * k], args, optimizer, corpus)
            m, samples = distributed.merge_step(m, samples)  # torchrun: every rank's problems
            state["step"], state["consumed"] = step, state["consumed"] + len(batch)
            m = {"phase": "grpo", "step": step, **m}
            rows.append(m)
            log(m)
            samples_file.write("".join(json.dumps({"step": step, **s}) + "\n" for s in samples))
            samples_file.flush()
            if main_rank:
                tqdm.write(f"step {step}: reward {m['reward']:.3f}  passed {m['pass_all']:.2f}  "
                           f"{m['time_step_s']:.0f} s")
            state["grpo_s"] = state.get("grpo_s", 0.0) + m["time_step_s"]  # equal on every rank (merge_step: max)
            last = step == args.steps or checkpoint.budget_spent(args, state)
            broken = broken + 1 if set(m["verdicts"]) == {"sandbox_error"} else 0
            if broken == 2:  # no program could be judged: rewards of 0 would teach nothing, only use time
                save(f"step-{step:06d}")
                raise TrainingError(f"steps {step - 1}-{step}: the sandbox failed on every program "
                                    f"({samples[0]['detail'] if samples else 'no detail'}); stopped at a checkpoint, "
                                    f"--resume {run_dir} once it works (python -c 'import sandbox; sandbox.self_check()')")
            bad = bad + 1 if m["skipped_updates"] else 0
            if bad == 3:  # a diverged run: keep what it had, say so, stop
                if main_rank:
                    save_adapters(policy, run_dir)
                raise TrainingError(f"steps {step - 2}-{step} all had a non-finite loss or gradient norm; "
                                    f"stopped, adapters saved in {run_dir / 'adapters'} (try a lower --lr)")
            maybe_eval(step, last)
            if last or (args.save_every > 0 and step % args.save_every == 0):
                save(f"step-{step:06d}")
            if last:
                if main_rank and step < args.steps:
                    tqdm.write(f"--time-budget {args.time_budget:g} min spent after step {step}: stopping")
                break
    if main_rank:
        save_adapters(policy, run_dir)
        if tracker:
            tracker.close()
        if args.profile and rows:
            print_profile(rows)
        print(report.plot_curves([run_dir], run_dir / "curves.png"))
        print(progress.summary(run_dir, state["wall_s"] + time.perf_counter() - t_start))
    distributed.cleanup()
    return run_dir


def cli():
    try:
        main()
    except (models.ModelError, data.DataError, TrainingError, checkpoint.CheckpointError, trackers.TrackerError) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("interrupted")


if __name__ == "__main__":
    cli()
