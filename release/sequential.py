"""--schedule sequential: the CoRe-Code authors' schedule (AlbertZhaoCA/e1), two GRPO runs one after the other,
on our one base + one LoRA adapter per role:

    stage 1  GRPO of the Planner against a frozen Coder        (examples/higher-order.yaml,
             (--grpo-steps steps; the Coder's adapter samples    examples/reward_function/higher-order.py)
             the programs that score each plan, never updated)
    plans    one plan per problem stage 2 will draw, written    (agent2_dataset.py: there by a larger model,
             once: --plans FILE, or the trained Planner's,        for every training problem)
             greedy
    stage 2  GRPO of the Coder on problem + its fixed plan     (examples/codegenwoc.yaml)
             (--coder-steps steps, --coder-group programs per problem, the Planner's adapter untouched)

The plan reaches the Coder as the release puts it: appended to the problem statement,
"\\n\\n<High-Level-Strategy>\\n{plan}</High-Level-Strategy>" (agent2_dataset.py, process_entry), and the Coder
is asked plainly (coder.messages without a plan). The fixed plans are written to <run>/plans.jsonl, so a
--resume in stage 2 trains on the same ones. Evaluation during stage 2 stays Planner -> Coder (the chain the
run was given): the release too prompts differently at evaluation ("High-level Strategy:" inside its code
prompt, evaluation/ours.py) than in stage 2's training data.

Which adapters move: train.grpo_step hands update.gradient_step the credit of the roles NOT in
args.frozen_roles; a role without credit gets no gradient, and AdamW skips a parameter without one, so its
weights stay bit-identical (tests/release/test_release.py checks both stages).
"""
import argparse
import dataclasses
import json
from pathlib import Path

import roles
import rollout
from infra import checkpoint, trackers

STRATEGY = "\n\n<High-Level-Strategy>\n{plan}</High-Level-Strategy>"  # agent2_dataset.py, process_entry


class PlanError(ValueError):
    """A plans file that cannot be used; the message is one line naming the file and line or the problem."""


def stage1_args(args) -> argparse.Namespace:
    """Stage 1: the run's own flags, the Coder's adapter frozen (it still samples the programs)."""
    return argparse.Namespace(**{**vars(args), "frozen_roles": {"coder"}})


def stage2_args(args) -> argparse.Namespace:
    """Stage 2: the Coder alone on problem + plan, K = --coder-group programs per problem (one group; G*M when
    not given), --coder-steps more steps after stage 1's; evaluation keeps the run's own chain (eval_args)."""
    k = args.coder_group or args.num_plans * args.codes_per_plan
    return argparse.Namespace(**{**vars(args), "roles": ["coder"], "num_plans": 1, "codes_per_plan": k,
                                 "steps": args.steps + coder_steps(args), "frozen_roles": {"planner"},
                                 "eval_args": args})


def final_args(args):
    """The flags the run ends under (its last step: --grpo-steps + --coder-steps when sequential): what
    checkpoint.finished compares a --resume with."""
    if getattr(args, "schedule", "joint") != "sequential":
        return args
    return argparse.Namespace(**{**vars(args), "steps": args.steps + coder_steps(args)})


def coder_steps(args) -> int:
    return args.steps if args.coder_steps is None else args.coder_steps


def with_plan(problem, plan: str):
    """The problem with its plan appended to the statement, as the release's stage-2 data."""
    return dataclasses.replace(problem, prompt=problem.prompt.rstrip("\n") + STRATEGY.format(plan=plan.strip() + "\n"))


def read_plans(path) -> dict:
    """A plans file: JSONL, one {"task_id": str, "plan": str} per line -> {task_id: plan}. PlanError (one line)."""
    plans = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise PlanError(f"--plans {path}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlanError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not (isinstance(rec, dict) and isinstance(rec.get("task_id"), str) and isinstance(rec.get("plan"), str)):
            raise PlanError(f"{path}:{n}: a line must be {{\"task_id\": str, \"plan\": str}}")
        plans[rec["task_id"]] = rec["plan"]
    return plans


def write_plans(policy, tok, problems, args, batch: int = 8) -> dict:
    """The trained Planner's plan for every problem, greedy (our choice: one deterministic plan; the release's
    were sampled at temperature 1.0 from a larger model), parsed as in training (planner.parse)."""
    role = roles.ROLES["planner"]
    policy.set_adapter("planner")
    plans = {}
    for i in range(0, len(problems), batch):
        chunk = problems[i:i + batch]
        r = rollout.sample(policy, tok, [role.messages(p, {}) for p in chunk], 1, args.max_plan_tokens, 0.0,
                           stop=role.stop)
        plans.update({p.task_id: role.parse(text) for p, text in zip(chunk, r.texts)})
    return plans


def stage2_problems(run, args) -> list:
    """The problems stage 2's remaining steps will draw (checkpoint.batch_at: the run's problem stream goes on
    from where stage 1 left it), each once, in order: the only ones that need a plan."""
    k = min(args.problems_per_step, len(run.problems))
    steps = final_args(args).steps - max(run.state["step"], args.steps)
    drawn = checkpoint.batch_at(run.problems, run.state["consumed"], k * steps, args.seed) if steps > 0 else []
    return list({p.task_id: p for p in drawn}.values())


def run(run, log: trackers.RunLog, grpo_stage) -> None:
    """Both stages on `run`, an infra.training_run.TrainingRun (grpo_stage: train.grpo_stage); run.args and
    run.problems are put back."""
    args, problems = run.args, run.problems
    try:
        run.args = stage1_args(args)
        grpo_stage(run, log)
        todo = stage2_problems(run, args)
        saved = run.dir / "plans.jsonl"
        if saved.exists():  # a --resume in stage 2: the plans it trained on
            plans = read_plans(saved)
        elif args.plans:
            plans = read_plans(args.plans)
        else:
            plans = write_plans(run.policy, run.tok, todo, args)
        missing = [p.task_id for p in todo if p.task_id not in plans]
        if missing:
            raise PlanError(f"--plans {args.plans}: no plan for {len(missing)} of stage 2's problems, e.g. {missing[0]}")
        if run.main_rank and not saved.exists():
            saved.write_text("".join(json.dumps({"task_id": p.task_id, "plan": plans[p.task_id]}) + "\n"
                                     for p in todo), encoding="utf-8")
        run.problems = [with_plan(p, plans[p.task_id]) if p.task_id in plans else p for p in problems]
        run.args = stage2_args(args)
        grpo_stage(run, log)
    finally:
        run.args, run.problems = args, problems
