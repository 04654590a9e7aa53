"""Train the Planner and the Coder together with collaboration-aware GRPO.

    python train.py                                   # embedded SmolLM2-135M on CPU (SFT + GRPO)
    python train.py --model Qwen2.5-Coder-1.5B        # one consumer GPU, 4-bit NF4 base
    python train.py --roles coder                     # single-agent GRPO baseline (no Planner)
    python train.py --roles retriever,planner,coder,debugger   # MapCoder's chain (roles.CHAINS)
    python train.py --grpo-steps 0                    # cold-start SFT only
    python train.py --resume runs/<time>              # go on from the latest checkpoint (a crash, a Ctrl-C)
    torchrun --nproc_per_node 2 train.py ...          # data parallel over 2 GPUs

0. optional cold-start SFT (--sft-steps) of each role on our reference plans / solutions (sft.py).
Then GRPO steps (grpo_step, five numbered calls): rollouts (tree.build: G plans per problem, M programs per
plan, each run in the sandbox) -> rewards -> credit (tree.advantages -> grpo.tree_advantages: Coder against
the codes of its plan, Planner against the other plans) -> one gradient step on both adapters (update.py)
-> metrics. Other chains (--roles: roles.CHAINS) add a Retriever above the Planner and a Debugger below the
Coder; the same tree builder and credit rule serve every chain (docs/roles.md).
Writes runs/<time>/: config.json, metrics.jsonl (one line per SFT / GRPO step / evaluation),
samples.jsonl, checkpoints/ (--resume goes on from the latest: infra/checkpoint.py), adapters/<role>/
(peft), curves.png. Ctrl-C or SIGTERM: the step in progress (SFT or GRPO) finishes, a checkpoint is saved
there, one line gives the command that resumes, status 130 / 143 (infra/interrupt.py); a second Ctrl-C stops at
once, keeping the last checkpoint (every --save-every GRPO steps, after each role's SFT). --eval-data: held-out
pass@1 while training, greedy or sampled (--eval-samples); torchrun: data parallel (infra/distributed.py);
--profile prints the seconds of each phase of a step.
Here: the GRPO step (grpo_step and its helpers), then the run's stages (main, load_policy, sft_stage,
grpo_stage); the run's plumbing around them (its folder, checkpoints, a signal's safe stop, Health) is
infra/training_run.py.
"""
import sys
import time
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

import data
import eval as evaluation
import reward
import roles
import sandbox
import sft
import tree
import update
from baselines import BASELINES
from infra import checkpoint, distributed, flags, interrupt, models, progress, trackers
from infra.training_run import Health, TrainingError, TrainingRun
from mapcoder import retriever
from measure import report
from release import sequential


def tree_sizes(args) -> dict:
    """Children per node of each role (tree.build): R retrievals, G plans, M codes per plan (G*M codes per
    problem for the single agent, --roles coder), D repairs per failing program."""
    planned = "planner" in args.roles
    return {"retriever": args.num_retrievals, "planner": args.num_plans,
            "coder": args.codes_per_plan if planned else args.num_plans * args.codes_per_plan,
            "debugger": args.num_repairs}


def grpo_step(policy, tok, problems, args, optimizer, corpus=None) -> tuple[dict, list]:
    """One GRPO step on a batch of B problems: the five numbered calls below, in this order.

    1. rollouts       tree.build: each role of --roles samples its completions (roles.sample) level by level with its
                      own adapter (Planner: G plans per problem; Coder: M programs per plan; a Retriever
                      above, a Debugger's D repairs below), and the sandbox runs every program: the
                      forest, one tree of rollouts per problem (a tree.Tree holding them all)
    2. rewards        reward.step_rewards: the sandbox's results -> r [B, 1, programs per problem] (Result.pass_rate),
                      written back into the forest's program nodes
    3. credit         tree.advantages -> grpo.tree_advantages: a node is worth the mean (or max) of the
                      valid programs below it, its advantage is normalised among its siblings;
                      --dynamic-sampling N (DAPO): of N x the problems drawn, only the first B / N whose programs'
                      rewards differ stay in the loss (reward.dynamic_keep, reward.only_problems)
    4. gradient step  update.gradient_step: each role's loss and backward (update.role_backward -> grpo.grpo_loss),
                      then one clipped AdamW step on every adapter (skipped when anything is non-finite)
    5. metrics        step_metrics: plain floats for metrics.jsonl, the first plan and program of each problem

    The single agent (--roles coder) writes G*M programs per problem from the problem alone: one group
    per problem. corpus: a retriever.Corpus for --retrieval corpus. Returns (metrics: plain floats, no
    tensors; samples: the first plan and code of each problem).
    """
    clock = progress.Clock(next(policy.parameters()).device, sync=getattr(args, "profile", False))  # --profile: CUDA waits
    t0 = time.perf_counter()
    forest = tree.build(problems, args.roles, tree_sizes(args), partial(roles.sample, policy, tok, args, clock),  # 1
                        partial(run_programs, args, clock), args.sandbox_timeout, debug_rounds=1, corpus=corpus,
                        k=args.retrieval_k)
    rewards = reward.step_rewards(forest, problems, args, clock)  # 2: [B, 1, programs per problem]
    credit = tree.advantages(forest, args.planner_credit, args.scale_rewards == "group",  # 3
                             args.coder_baseline, args.debug_reward, args.debug_gamma, args.credit_temperature)
    kept = None
    if getattr(args, "dynamic_sampling", 1) > 1:  # DAPO: only problems whose programs' rewards differ
        kept = reward.dynamic_keep(rewards, len(problems) // args.dynamic_sampling)
        credit = reward.only_problems(forest, credit, kept)
    frozen = getattr(args, "frozen_roles", ())  # --schedule sequential: the role its stage does not train
    update_metrics = update.gradient_step(policy, forest, {r: c for r, c in credit.items() if r not in frozen},  # 4
                                          args, optimizer, clock)
    step_s = time.perf_counter() - t0
    m, samples = step_metrics(forest, problems, rewards, credit, update_metrics, clock, step_s, args)  # 5
    if kept is not None:  # --dynamic-sampling: how many of the drawn problems entered the loss
        m["dynamic_kept"], m["dynamic_drawn"] = len(kept), len(problems)
    return m, samples


def run_programs(args, clock, jobs: list) -> list:
    """Step 1's run(jobs) for tree.build (bound with partial): sandbox.run_many on --workers processes,
    timed as the sandbox phase; with --efficiency-weight, each program's cost measured outside its run too."""
    with clock("sandbox"):
        if args.efficiency_weight > 0:  # the bonus reads each program's cost, measured outside its run
            jobs = [dict(job, cost=True) for job in jobs]
        return sandbox.run_many(jobs, workers=args.workers)


def mean_tokens(outputs: dict, role: str) -> float | None:
    """Mean completion length (tokens) of the role's first rollout of the step; None if it did not run."""
    return outputs[role][0].mask.sum(1).mean().item() if role in outputs else None


def neg_logp(outputs: dict, role: str) -> float | None:
    """Mean -log pi(token) of the role's sampled tokens this step (nats/token): a Monte Carlo estimate of the
    policy's entropy when sampled at temperature 1, a proxy for it below; a fall means a narrowing policy.
    None when the role did not sample."""
    rs = [r for r in outputs.get(role, []) if getattr(r, "logp", None) is not None]
    tokens = sum(r.mask.sum().item() for r in rs)
    return -sum((r.logp * r.mask).sum().item() for r in rs) / tokens if tokens else None


def step_metrics(forest, problems, rewards, credit, update_metrics, clock, step_s, args) -> tuple[dict, list]:
    """Step 5: the step's metrics (plain floats: a tensor kept here would keep its graph alive, step after
    step) and its samples (each problem's first plan, completion, program and verdict). forest: step 1's
    tree.Tree, scored (step 2); update_metrics: update.gradient_step's (per role, loss, grad norm, skipped)."""
    per_role, loss, grad_norm, skipped = update_metrics
    B = len(problems)
    coders = forest.of("coder")
    verdicts = [forest.nodes[i].result.verdict for i in coders]
    n = len(coders) // B  # programs per problem
    samples = []
    for b in range(B):
        first = forest.nodes[coders[b * n]]
        samples.append({"task_id": problems[b].task_id, "plan": forest.upstream(coders[b * n]).get("plan"),
                        "completion": first.text, "program": first.program, "verdict": first.result.verdict,
                        "detail": first.result.detail, **({"unsafe": True} if first.result.unsafe else {})})
    outputs = forest.outputs
    planned = "planner" in args.roles
    repairs = credit.get("debugger")
    active = [role for role in args.roles if role in credit]
    return {
        "reward": rewards.mean().item(),
        "pass_all": sum(v == "passed" for v in verdicts) / len(verdicts),
        "best_of_problem": rewards.flatten(1).amax(1).mean().item(),
        "plan_reward_std": rewards.view(B, len(forest.of("planner")) // B, -1).mean(-1).std(-1, unbiased=False)
        .mean().item() if planned else None,
        **{f"frac_zero_std_{role}": credit[role].frac_zero_std for role in active}, **per_role,
        "loss": loss, "grad_norm": grad_norm, "skipped_updates": skipped,
        "plan_tokens": mean_tokens(outputs, "planner") if planned else None,
        "code_tokens": mean_tokens(outputs, "coder"),
        "truncated_codes": outputs["coder"][0].truncated.float().mean().item(),
        **{f"neg_logp_{role}": neg_logp(outputs, role) for role in args.roles if role in outputs},
        **({"retrieval_tokens": mean_tokens(outputs, "retriever")} if "retriever" in outputs else {}),
        **({"repairs": len(repairs.adv), "repair_reward": repairs.reward.mean().item(),
            "repair_tokens": mean_tokens(outputs, "debugger")} if repairs is not None else {}),
        "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        **{f"time_{k}_s": v for k, v in clock.s.items()}, "time_step_s": step_s,
    }, samples


def get_args(argv=None):
    """train.py's command line (infra/flags.py), --algo offering grpo and every baseline with its own flags
    (baselines.BASELINES)."""
    return flags.get_args(argv, BASELINES)


def main(argv=None) -> Path:
    """python train.py: the run (infra/training_run.py), the policy, the cold-start SFT stage, the GRPO stage,
    the run's end. Returns the run folder."""
    args = get_args(argv)
    run = TrainingRun.setup(args, sequential.final_args(args))  # --schedule sequential ends after both stages
    if run.finished:  # --resume of a run that had reached its last step
        distributed.cleanup()
        return run.dir
    load_policy(run)
    with run.open_log() as log, interrupt.Stop("stopping after this step to save a checkpoint") as run.stop:
        sft_stage(run, log)
        if run.args.schedule == "sequential":  # the authors' release: the Planner, then the Coder on fixed plans
            sequential.run(run, log, grpo_stage)
        else:
            grpo_stage(run, log)
    if run.main_rank:
        run.finish(log.rows, report.plot_curves)
    distributed.cleanup()
    return run.dir


def adapter_roles(chain) -> list:
    """The LoRA adapters of a run: one per role of the chain, and always the Planner's and the Coder's
    (so --init and the checkpoints of two-role runs fit every chain)."""
    return [r for r in roles.ROLES if r in chain or r in models.ROLES]


def init_roles(chain: list[str], init: str) -> list[str]:
    """The adapters --init copies from an earlier run: each role of the chain with an adapter of its own
    (models.ROLES; models.init_role_adapters raises ModelError when the run lacks it), and every other adapter
    the policy has that the run saved. So a single-agent run from an SFT keeps the SFT's Planner, and its folder
    is still a whole Planner -> Coder system; a role the earlier run did not have (a new Debugger) starts fresh."""
    return [r for r in adapter_roles(chain)
            if r in chain and r in models.ROLES or (Path(init) / "adapters" / r).exists()]


def param_groups(policy, extra: list, args) -> list[dict]:
    """AdamW's parameter groups: every role's LoRA weights (and a baseline's own weights, e.g. PPO's critic)
    in one group at --lr; with --planner-lr, the Planner's adapter in a group of its own at that rate (our
    choice: a Planner credited by only --num-plans plans a problem gets advantages of about +-1 whatever the
    gap, so it can need a smaller step than the Coder; docs/experiments.md). Each group keeps its GRPO rate as
    "grpo_lr", which the cold-start SFT puts back after its own --sft-lr. The clip stays one norm over all."""
    lora = [(n, p) for n, p in policy.named_parameters() if "lora_" in n]
    if args.planner_lr is None or "planner" not in args.roles:  # a single agent: no Planner to step
        return [{"params": [p for _, p in lora] + extra, "lr": args.lr, "grpo_lr": args.lr}]
    planner = [p for n, p in lora if ".planner." in n]
    rest = [p for n, p in lora if ".planner." not in n]
    return [{"params": rest + extra, "lr": args.lr, "grpo_lr": args.lr},
            {"params": planner, "lr": args.planner_lr, "grpo_lr": args.planner_lr}]


def load_policy(run: TrainingRun) -> None:
    """The base model with one LoRA adapter per role (--init: an earlier run's), the same weights on every
    rank, AdamW on the adapters, and a checkpoint's adapters, optimizer and RNG (--resume)."""
    args = run.args
    base, run.tok = models.load_base(args.model, run.device, run.quant, args.dtype)
    run.policy = models.add_role_adapters(base, adapter_roles(args.roles), args.lora_r, args.lora_alpha,
                                          gradient_checkpointing=args.gradient_checkpointing)
    if args.init and not run.ckpt:
        models.init_role_adapters(run.policy, args.init, init_roles(args.roles, args.init))
    if "retriever" in args.roles and args.retrieval == "corpus":
        run.corpus = retriever.Corpus(run.problems, exclude=run.eval_problems)
    run.lora = [p for n, p in run.policy.named_parameters() if "lora_" in n]  # every role's adapter
    distributed.broadcast_params(run.lora)
    if run.world > 1:
        torch.manual_seed(args.seed + run.rank)  # each rank samples its own completions
    if args.algo != "grpo" and args.algo not in BASELINES:  # --resume of a run made by another version
        raise TrainingError(f"--algo {args.algo} is not part of this version")
    extra = BASELINES[args.algo].setup(run.policy, args) if args.algo in BASELINES else []  # e.g. PPO's critic
    run.optimizer = torch.optim.AdamW(param_groups(run.policy, extra, args), lr=args.lr, weight_decay=0.0)
    if run.ckpt:
        run.state = checkpoint.load(run.ckpt, run.policy, run.optimizer, run.rank, run.world)  # RNG last


def evaluate(run: TrainingRun, log: trackers.RunLog, step: int, last: bool = False) -> None:
    """Held-out pass@1 (--eval-data; eval.held_out) at step 0, every --eval-every steps and at the end: greedy, or
    --eval-samples n programs a problem at the rollout --temperature; its seconds go into the run's ETA as their
    own stage."""
    args = run.args
    if run.eval_problems and run.main_rank and (step == 0 or last or args.eval_every > 0 and step % args.eval_every == 0):
        a = getattr(args, "eval_args", args)  # --schedule sequential, stage 2: the run's own chain
        chain = [r for r in a.roles if not (r == "retriever" and a.retrieval == "corpus")]  # corpus: no model call
        sampled = {"n": a.eval_samples, "temperature": a.temperature} if a.eval_samples > 1 else {}
        settings = evaluation.Settings(a.max_plan_tokens, a.max_code_tokens, a.max_retrieval_tokens, a.workers,
                                       a.sandbox_timeout, **sampled)
        progress.pause()  # the GRPO bar's line ends here: the evaluation's bar is drawn below it, not inside it
        m = evaluation.held_out(run.policy, run.tok, run.eval_problems, chain, settings)
        progress.record_eval(m["eval_s"], len(run.eval_problems) * a.eval_samples)  # programs, as the ETA's
        log.log({"phase": "eval", "step": step, **m})


def sft_stage(run: TrainingRun, log: trackers.RunLog) -> None:
    """0. Cold-start SFT (--sft-steps) of each role on our reference plans / solutions (sft.py), one
    checkpoint after each role (a resume skips the roles done); a Ctrl-C saves one after the SFT step in
    progress (sft-<roles done>-<steps>: a resume goes on from that step)."""
    if run.args.sft_steps <= 0:
        return
    for role in roles.sft_roles(run.args.roles):
        if role in run.state["sft_done"]:
            continue
        try:
            done = sft.train(run.policy, run.tok, run.problems, role, run.args, run.optimizer,
                             log.metrics if run.main_rank else None, start=run.state.get("sft_step", 0),
                             stop=run.stopping)
        except ValueError as e:
            raise TrainingError(str(e)) from None
        log.metrics.flush()
        distributed.broadcast_params(run.lora, run.optimizer)  # torchrun: SFT ran on every rank (the same batches)
        if done < run.args.sft_steps:  # stopped at a safe point within the role
            run.state["sft_step"] = done
            run.stop_here(f"sft-{len(run.state['sft_done'])}-{done:06d}", f"{role} SFT step {done}")
        run.state["sft_done"].append(role)
        run.state["sft_step"] = 0
        run.save(f"sft-{len(run.state['sft_done'])}")
        if run.stopping():
            run.stop_here(None, f"{role} SFT")


def grpo_stage(run: TrainingRun, log: trackers.RunLog) -> None:
    """The GRPO steps, from the checkpoint's step on: a batch of problems (each rank its slice), one
    training step on it, its metrics and samples logged, evaluation and checkpoints on schedule; stops
    after --grpo-steps or --time-budget, or when the run cannot learn (Health)."""
    args, state, health = run.args, run.state, Health()
    training_step = BASELINES[args.algo].step if args.algo in BASELINES else grpo_step  # --algo
    if state["step"] == 0:
        evaluate(run, log, 0)
    for step in progress.bar(range(state["step"] + 1, args.steps + 1), "grpo", total=args.steps,
                             initial=state["step"], disable=not run.main_rank):  # a resume goes on
        drawn = args.problems_per_step * getattr(args, "dynamic_sampling", 1)  # --dynamic-sampling N: N x as many
        batch = checkpoint.batch_at(run.problems, state["consumed"], min(drawn, len(run.problems)), args.seed)
        k = len(batch) // run.world  # this rank's slice: whole groups, never split
        mine = batch[run.rank * k:(run.rank + 1) * k]
        m, samples = training_step(run.policy, run.tok, mine, args, run.optimizer, run.corpus)  # THE training step
        m, samples = distributed.merge_step(m, samples)  # torchrun: every rank's problems
        state["step"], state["consumed"] = step, state["consumed"] + len(batch)
        state["grpo_s"] = state.get("grpo_s", 0.0) + m["time_step_s"]  # equal on every rank (merge_step: max)
        log.step({"phase": "grpo", "step": step, **m, "peak_rss_gib": progress.peak_rss_gib()}, samples)
        if run.main_rank:
            tqdm.write(f"step {step}: reward {m['reward']:.3f}  passed {m['pass_all']:.2f}  {m['time_step_s']:.0f} s")
        health.check(run, step, m, samples)
        last = step == args.steps or checkpoint.budget_spent(args, state)
        evaluate(run, log, step, last)
        saved = last or (args.save_every > 0 and step % args.save_every == 0)
        if saved:
            run.save(f"step-{step:06d}")
        if not last and run.stopping():  # a Ctrl-C during the step: it finished; saved here, the run stops
            run.stop_here(None if saved else f"step-{step:06d}", f"GRPO step {step}")
        if last:
            if run.main_rank and step < args.steps:
                tqdm.write(f"--time-budget {args.time_budget:g} min spent after step {step}: stopping")
            break


def cli():
    try:
        main()
    except (models.ModelError, data.DataError, TrainingError, checkpoint.CheckpointError, trackers.TrackerError,
            sequential.PlanError) as e:
        sys.exit(f"error: {e}")
    except interrupt.Interrupted as e:  # stopped at a safe point: what is kept, the command that goes on
        print(e, file=sys.stderr, flush=True)
        sys.exit(e.status)
    except KeyboardInterrupt:  # before the first step (loading): nothing to keep yet
        print("\ninterrupted before the first training step: nothing new to keep", file=sys.stderr)
        sys.exit(130)  # 128 + SIGINT, as interrupt.status


if __name__ == "__main__":
    cli()
