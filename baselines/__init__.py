"""The methods CoRe-Code is compared against, in the same harness (docs/baselines.md): skipped on a first
reading, which is about our own step (train.py). Each is `train.py --algo NAME` or `eval.py --modes collab`.

    baselines/ppo.py          PPOCoder: a value head, GAE, the clipped PPO loss, CodeBLEU-style match reward
    baselines/stepcoder.py    StepCoder: the curriculum of code completion (CCCS) and fine-grained optimisation (FGO)
    baselines/codedpo.py      CodeDPO: preference pairs from self-generated programs, the DPO loss
    collabcoder.py  CollabCoder: prompted plan-code co-evolution, training-free (eval.py --modes collab)
"""
