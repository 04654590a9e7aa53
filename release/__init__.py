"""The CoRe-Code authors' own recipe as they released it (GitHub AlbertZhaoCA/e1), beside our reading of the
paper (docs/algorithm.md#ours-and-the-authors-release): `train.py --recipe release`, `eval.py --protocol release`.
Skipped on a first reading, which is about our one joint step (train.py).

    release/sequential.py   --schedule sequential: GRPO of the Planner against a frozen Coder, then of the Coder on fixed plans
    release/release_eval.py --protocol release: one plan, then K programs at T 0.2; first-of-K pass@1, pass@K, unbiased pass@1
"""
