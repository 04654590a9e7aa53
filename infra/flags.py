"""train.py's command line: every flag, its default and its meaning (`python train.py --help`); each baseline
adds its own flags (baselines/__init__.py).

get_args also applies the defaults that depend on other flags (M = 2 codes per plan with a recall Retriever)
and, for --resume, takes the run's own config.json (checkpoint.resume_args).
"""
import argparse
import difflib
import json
import os
from pathlib import Path

import roles
from infra import checkpoint, models, trackers
from mapcoder import retriever
from sandboxing import checkers

# --recipe release: the CoRe-Code authors' released recipe (AlbertZhaoCA/e1: examples/higher-order.yaml,
# codegenwoc.yaml, reward_function/higher-order.py and code.py), as defaults that flags given explicitly override.
# Group 5 per prompt: 5 plans per problem in stage 1, each scored by n = 2 programs, and 5 programs per problem in
# stage 2. lr: the release's 1e-6 is for full fine-tuning; for our LoRA adapters we use 10x that, 1e-5 (our
# choice: LoRA's best lr is about 10x full fine-tuning's, Schulman et al. 2025, "LoRA Without Regret").
RECIPES = {"release": {"schedule": "sequential", "planner_credit": "softmax", "credit_temperature": 0.5,
                       "reward": "shaped", "num_plans": 5, "codes_per_plan": 2, "coder_group": 5, "temperature": 1.0,
                       "top_p": 0.99, "beta": 0.01, "epsilon": 0.2, "epsilon_high": 0.3, "loss_type": "token",
                       "lr": 1e-5, "num_iterations": 1}}


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line ends in one line (status 2), not the whole usage: a mistyped flag
    names the closest one (difflib, our choice). train.py and eval.py parse with it."""

    def error(self, message: str):
        flag = next((w for w in message.split(": ", 1)[1].split() if w.startswith("-")), None) \
            if message.startswith("unrecognized arguments: ") else None
        if flag:
            close = difflib.get_close_matches(flag.split("=")[0], list(self._option_string_actions), n=1)
            message = (f"unknown flag {flag}" + (f" (did you mean {close[0]}?)" if close else "")
                       + f"; every flag: python {self.prog} --help")
        self.exit(2, f"error: {message}\n")


def same_model(a: str, b: str) -> bool:
    """Whether two --model values name one base: a short name and its hub id are one (no download, no
    conversion: the names alone).

    >>> same_model("Qwen2.5-Coder-1.5B", "Qwen/Qwen2.5-Coder-1.5B-Instruct"), same_model("SmolLM2-135M-Instruct", "Qwen2.5-Coder-1.5B")
    (True, False)
    >>> same_model("Qwen/Qwen2.5-Coder-1.5B", "Qwen2.5-Coder-1.5B")   # the base model's hub id is not the Instruct one
    False
    >>> same_model("gemma3-270m", "google/gemma-3-270m"), same_model("gemma3-270m", "SmolLM2-135M-Instruct")
    (True, False)
    """
    def canonical(x):
        m = models.QWEN_CODER.match(x)
        shipped = [p.name for p in models.PACKAGED.values() if x == p.hub_id]
        return shipped[0] if shipped else f"Qwen/Qwen2.5-Coder-{m.group(1)}B-Instruct" if m else x
    return canonical(a) == canonical(b)


def base_model(runs: list, asked: str | None, flag: str) -> str:
    """The base model of a command that loads the adapters of train.py runs (train.py --init, eval.py
    --adapters / --compare): their own (config.json's 'model'), or --model when it is given and is theirs.
    Runs without a config.json are left to the loader's own error. Raises models.ModelError (one line) when
    --model names another base (the adapters would load onto the wrong model) or the runs' bases differ."""
    theirs = {}
    for run in runs:
        cfg = Path(run) / "config.json"
        if cfg.is_file():
            theirs[run] = json.loads(cfg.read_text()).get("model", models.EMBEDDED)
    bases = list(dict.fromkeys(theirs.values()))
    if any(not same_model(b, bases[0]) for b in bases):
        raise models.ModelError(f"{flag}: the runs have different base models ("
                                + ", ".join(f"{r}: {m}" for r, m in theirs.items()) + "); give runs of one base")
    if asked and bases and not same_model(asked, bases[0]):
        run = next(iter(theirs))
        raise models.ModelError(f"--model {asked}: {run} was trained on {bases[0]} (its config.json), and its "
                                "adapters fit only that base: leave out --model")
    return asked or (bases[0] if bases else models.EMBEDDED)


def positive(text: str) -> int:
    """argparse type: an integer >= 1 (else argparse's one-line error)."""
    if not text.lstrip("-").isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got '{text}'")
    return int(text)


def default_workers() -> int:
    """Sandbox processes per training process: all cores, shared by torchrun's ranks on this node (LOCAL_WORLD_SIZE):
    each rank runs its own sandbox pool, so all cores on every rank would oversubscribe them LOCAL_WORLD_SIZE times."""
    return max(1, (os.cpu_count() or 1) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def get_args(argv, baselines: dict):
    """Parse train.py's command line. baselines: {--algo name: its module} (baselines.BASELINES; train.get_args
    passes it): --algo offers grpo and these, each module adds its own group of flags (add_flags)."""
    ap = Parser(prog="train.py", description="Train the Planner and the Coder together with collaboration-aware GRPO.", allow_abbrev=False,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = ap.add_argument
    a("--recipe", default="ours", choices=["ours", *RECIPES],
      help="ours: every default below; release: the CoRe-Code authors' released recipe as defaults (flags given "
           "still win): --schedule sequential --planner-credit softmax --credit-temperature 0.5 --reward shaped "
           "--num-plans 5 --codes-per-plan 2 --coder-group 5 --temperature 1.0 --top-p 0.99 --beta 0.01 (k3) "
           "--epsilon 0.2 --epsilon-high 0.3 --loss-type token --num-iterations 1 --lr 1e-5 (the release's 1e-6 "
           "is for full fine-tuning; 10x for LoRA) (docs/algorithm.md#ours-and-the-authors-release)")
    a("--model", default=None, help="short name, hub id or local folder (default: --init's run's model, else "
      f"{models.EMBEDDED})")
    a("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: cuda when torch sees a GPU, else cpu")
    a("--quant", default="auto", choices=["auto", "4bit", "none"], help="auto: 4bit on CUDA, none on CPU")
    a("--dtype", default="auto", choices=models.DTYPES,
      help="compute dtype; autocast: fp32 weights, bf16 matmuls; auto: bfloat16 on a CUDA card with bf16, "
           "else float32 (models.choose_dtype)")
    a("--train-data", default="train", help="comma list of data.load names: train | io_train | <file.jsonl> | mbpp:<file> ...")
    a("--grpo-steps", "--steps", dest="steps", type=int, default=8, help="GRPO steps (0: SFT only)")
    a("--time-budget", type=float, default=None, metavar="MIN",
      help="also stop GRPO once its steps took MIN minutes (wall; evaluation and checkpoints not counted)")
    a("--problems-per-step", type=int, default=2, help="problems in one GRPO step (each gets its own tree of rollouts)")
    a("--num-plans", type=int, default=2, help="G: plans per node above (docs/experiments.md, 'Group sizes': chosen by measurement)")
    a("--codes-per-plan", type=int, default=None, help="M: programs per plan (default 4; 2 with a recall retriever)")
    a("--max-plan-tokens", type=int, default=48, help="token budget of a plan")
    a("--max-code-tokens", type=int, default=128, help="token budget of a program")
    a("--temperature", type=float, default=0.7, help="sampling temperature of the rollouts")
    a("--top-p", type=float, default=0.95, help="nucleus sampling of the rollouts (1: off)")
    a("--lr", type=float, default=5e-5, help="AdamW learning rate of the GRPO stage (LoRA weights only; chosen by held-out pass@1: docs/experiments.md)")
    a("--planner-lr", type=float, default=None,
      help="the Planner adapter's own GRPO learning rate (default: --lr; docs/experiments.md: its plans drift at 2e-4)")
    a("--beta", type=float, default=0.0, help="KL weight (k3 estimator, reference = adapters off)")
    a("--epsilon", type=float, default=0.2, help="clip eps_low")
    a("--epsilon-high", type=float, default=None, help="clip eps_high (default: = --epsilon; DAPO: 0.28)")
    a("--loss-type", default="token", choices=["token", "grpo", "dr_grpo"], help="how the loss is normalised (grpo.loss_weights; docs/algorithm.md)")
    a("--num-iterations", type=int, default=1, help="updates per batch of rollouts (old log-probs stored)")
    a("--scale-rewards", default="group", choices=["group", "none"], help="divide advantages by the group std")
    a("--reward", default="pass_rate", choices=["pass_rate", "all_pass", "shaped"],
      help="a program's reward: tests passed / tests, or 1 only when all pass, or the authors' shaped reward "
           "(pass rate + 0.1 if no test errored or timed out + 0.2 if all passed: reward.program_reward)")
    a("--efficiency-weight", type=float, default=0.0, help="lambda: bonus for faster fully-passing code")
    a("--efficiency-reward", default="net", choices=["net", "release"],
      help="the bonus's form: net (ours: lambda * min(1, 1/NET)) | release (the authors': lambda * (0.1 exp(-3 s) + "
           "0.1 exp(-0.1 MiB))); both on the cost measured outside the run (docs/algorithm.md#the-efficiency-reward)")
    a("--coder-baseline", default="plan", choices=["plan", "problem"], help="the Coder's group: the programs of the same plan, or of the whole problem")
    a("--planner-credit", "--credit", dest="planner_credit", default="mean", choices=["mean", "max", "softmax"],
      help="a node's reward (plan, retrieval): mean or best of the final programs below it, or the authors' "
           "softmax-weighted mean of their pass rates + 0.1 if none errored (grpo.softmax_credit)")
    a("--credit-temperature", type=float, default=0.5,
      help="T of --planner-credit softmax: sum_j softmax(s/T)_j s_j (0.5: the authors' release)")
    a("--mask-truncated", action="store_true", help="leave completions without EOS out of the loss")
    a("--dynamic-sampling", type=int, default=1, metavar="N",
      help="DAPO's dynamic sampling: draw N x --problems-per-step problems a step and train on the first "
           "problems-per-step whose programs' rewards differ (reward.dynamic_keep; 1: off)")
    a("--roles", "--train-roles", dest="roles", default=None,
      help="a chain of roles (roles.CHAINS): planner,coder (CoRe-Code, the default with --algo grpo) | coder "
           "(single-agent GRPO: G*M codes per problem; the only chain of the other --algo arms) | planner,coder,debugger "
           "| retriever,planner,coder | retriever,planner,coder,debugger")
    a("--algo", default="grpo", choices=["grpo", *baselines],
      help="training method (docs/baselines.md): grpo (collaboration-aware GRPO, CoRe-Code) or a baseline, each "
           "with its own group of flags below; all but grpo train the Coder alone")
    for baseline in baselines.values():  # each baseline's flags: an argparse group of its own (--help)
        baseline.add_flags(ap)
    a("--schedule", default="joint", choices=["joint", "sequential"],
      help="joint: one step updates Planner and Coder (ours); sequential: the authors' release, GRPO of the Planner "
           "with the Coder frozen (--grpo-steps), then of the Coder on problem + a fixed plan (--coder-steps; release/sequential.py)")
    a("--coder-steps", type=int, default=None, help="sequential: GRPO steps of stage 2, the Coder (default: --grpo-steps)")
    a("--coder-group", type=int, default=None,
      help="sequential: programs per problem in stage 2, one group (default G*M; the release: 5)")
    a("--plans", default=None, metavar="FILE",
      help="sequential: stage 2's fixed plans, JSONL {task_id, plan} per line (default: the trained Planner's, greedy)")
    a("--num-retrievals", type=int, default=2, help="R: retrievals per problem (with the retriever)")
    a("--num-repairs", type=int, default=2, help="D: repairs per program failing its visible test (with the debugger)")
    a("--max-retrieval-tokens", type=int, default=96, help="token budget of a Retriever completion")
    a("--retrieval", default="recall", choices=["recall", "corpus"],
      help="recall: the Retriever recalls problems (trained); corpus: BM25 over --train-data (bm25s; nothing trained)")
    a("--retrieval-k", type=int, default=retriever.K, help="examples per retrieval")
    a("--debug-reward", default="pass_rate", choices=["pass_rate", "gain"],
      help="a repair's reward: its pass rate on all tests, or that minus the repaired program's")
    a("--debug-gamma", type=float, default=0.0, help="Coder reward += gamma * mean(its repairs' rewards)")
    a("--unsafe-sandbox", action="store_true",
      help="where no namespace can be made (python sandbox.py --check), run programs anyway with what is left "
           "(rlimits, a temp dir; a leased uid as root); every verdict is then marked unsafe")
    a("--sandbox-memory", type=int, default=2048, help="MiB for all of one program's processes and files together "
      "(a cgroup per run where one can be made, else a watchdog: python sandbox.py --check)")
    a("--init", default=None, help="start from the adapters of an earlier run folder")
    a("--sft-steps", type=int, default=10, help="cold-start SFT steps per role before GRPO (0: none; chosen by held-out pass@1)")
    a("--sft-batch", type=int, default=8, help="pairs per cold-start SFT step")
    a("--sft-coder-prompts", default="chain", choices=["chain", "both"],
      help="the Coder's SFT prompts: chain (with the reference plan when the chain has a Planner, else without) | "
           "both (each problem with the plan and without: one SFT for CoRe-Code and the single agent; sft.pairs)")
    a("--sft-lr", type=float, default=2e-4, help="AdamW learning rate of the SFT stage")
    a("--sft-products", default="float32", choices=["float32", "bfloat16", "auto"],
      help="CPU, float32 model: the SFT stage's frozen products in bfloat16 (cpu_linear.bf16_products: 0.70x the "
           "SFT step, the same held-out pass@1, ~0.1-0.3 GiB more peak RSS after it: docs/speed.md); auto: bfloat16 "
           "where the CPU has native bf16 (AVX512-BF16, AMX), else float32")
    a("--lora-r", type=int, default=16, help="LoRA rank of every role's adapter")
    a("--lora-alpha", type=int, default=32, help="LoRA alpha (scale alpha / r)")
    a("--micro-batch", type=int, default=2, help="rows per forward/backward (gradient accumulation; memory ~ this)")
    a("--gradient-checkpointing", action="store_true",
      help="recompute the layers' activations in the backward: less memory for one more forward (4-bit on a "
           "small GPU); sampling keeps its KV cache")
    a("--shared-prompt", action=argparse.BooleanOptionalAction, default=True,
      help="loss pass: forward each group's prompt once for all its rows (fast/shared_prompt.py; same values and "
           "gradients as row by row); off under gradient checkpointing")
    a("--cuda-graph", action="store_true",
      help="CUDA: capture the sampler's one-token step as a CUDA graph (fast/fixed_decode.py; not yet run on a GPU)")
    a("--prompts-per-chunk", type=positive, default=2,
      help="shared-prompt loss pass: prompts whose graphs are held together (memory ~ this x their rows' tokens)")
    a("--logprob-chunk", type=positive, default=1024,
      help="loss pass: positions per piece of the LM head and log-softmax (fast/chunked.py: memory ~ this x vocabulary)")
    a("--max-grad-norm", type=float, default=1.0, help="gradient clipping of the LoRA weights (global norm)")
    a("--sandbox-timeout", type=float, default=4.0, help="CPU seconds per test")
    a("--checker", default="auto", choices=["auto", *checkers.RULES],
      help="output checker of I/O tests: auto = each set's own (sandboxing/checkers.py); a name = that rule for every set")
    a("--workers", type=int, default=default_workers(),
      help="parallel sandbox processes (default: the cores / torchrun's ranks on this node)")
    a("--seed", type=int, default=0, help="seeds torch and the order of the problems")
    a("--out", default=None, help="run folder (default runs/<date-time>)")
    a("--save-every", type=int, default=10, help="checkpoint every N GRPO steps (and at the end)")
    a("--keep-checkpoints", type=int, default=2, help="newest checkpoints kept (0: all)")
    a("--resume", default=None, metavar="RUN_DIR", help="go on from the run's latest checkpoint")
    a("--overwrite", action="store_true", help="start afresh in an --out folder that holds a run (erases it)")
    a("--eval-data", default=None, help="held-out set for pass@1 during training (e.g. val; --eval-samples)")
    a("--eval-samples", type=int, default=1,
      help="programs a held-out problem: 1 = greedy pass@1; n > 1 = sampled pass@1 at --temperature (n programs each)")
    a("--eval-every", type=int, default=10, help="evaluate at step 0, every N steps and at the end")
    a("--eval-limit", type=int, default=None, help="only the first N held-out problems")
    a("--report-to", default="none", choices=trackers.KINDS, help="also log to (JSONL is always written)")
    a("--profile", action="store_true", help="print seconds per phase of a step at the end (on CUDA each phase then waits for its kernels)")
    args = ap.parse_args(argv)
    if args.recipe in RECIPES:  # the recipe's values become the defaults: a flag given explicitly still wins
        ap.set_defaults(**RECIPES[args.recipe])
        args = ap.parse_args(argv)
    if args.resume:  # the run's own config.json; flags given again must agree
        return checkpoint.resume_args(ap, argv, args.resume)
    if args.out and not args.overwrite and checkpoint.holds_work(args.out):
        ap.exit(2, f"error: --out {args.out} already holds a run: --resume {args.out} to go on, "
                "--overwrite to start it over (erasing it), or another --out\n")  # one line, no usage block
    if args.algo != "grpo" and args.roles not in (None, "coder"):
        ap.error(f"--algo {args.algo} trains the Coder alone, as its paper: leave out --roles or give --roles coder")
    try:
        args.roles = roles.parse_chain(args.roles or ("planner,coder" if args.algo == "grpo" else "coder"))
    except ValueError as e:
        ap.error(str(e))
    if args.dynamic_sampling < 1 or args.dynamic_sampling > 1 and args.algo != "grpo":
        ap.error("--dynamic-sampling N: N >= 1 (1: off), and only with --algo grpo")
    if args.schedule == "sequential" and (args.algo != "grpo" or list(args.roles) != ["planner", "coder"]):
        ap.error("--schedule sequential trains a Planner, then a Coder: it needs --algo grpo and --roles planner,coder")
    args.model = base_model([args.init] if args.init else [], args.model, "--init")  # the run's own base
    if args.codes_per_plan is None:  # a Retriever multiplies the plans by R: keep 8 codes per problem
        args.codes_per_plan = 2 if "retriever" in args.roles and args.retrieval == "recall" else 4
    return args
