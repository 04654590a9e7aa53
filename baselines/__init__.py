"""The methods CoRe-Code is compared against, in the same harness (docs/baselines.md): skipped on a first
reading, which is about our own step (train.py). Each is `train.py --algo NAME` or `eval.py --modes collab`.

    baselines/ppo.py          PPOCoder: a value head, GAE, the clipped PPO loss, CodeBLEU-style match reward
    baselines/stepcoder.py    StepCoder: the curriculum of code completion (CCCS) and fine-grained optimisation (FGO)
    baselines/codedpo.py      CodeDPO: preference pairs from self-generated programs, the DPO loss
    baselines/collabcoder.py  CollabCoder: prompted plan-code co-evolution, training-free (eval.py --modes collab)

BASELINES is the one list of the training arms: `--algo` offers grpo (train.py's own step) and its names,
and train.py reads three things from each arm's module:
    step(policy, tok, problems, args, optimizer, corpus=None) -> (metrics, samples)
                           one training step, with train.grpo_step's signature and metrics keys
    setup(policy, args) -> list of tensors
                           what the arm adds to the policy before the optimizer is built; the tensors it
                           trains beside the LoRA adapters (PPO's critic), [] if none
    add_flags(parser)      its own flags, one argparse group named for it (python train.py --help)
A new arm is a module with these three and one line here.
"""
from baselines import codedpo, ppo, stepcoder

BASELINES = {"ppo": ppo, "stepcoder": stepcoder, "codedpo": codedpo}  # --algo NAME -> the module that trains it
