"""Same numbers, less time: each file is a faster path to what the reading path computes, with its off switch
(docs/speed.md). Skip on a first reading; the tests check each against the plain path.

    shared_prompt.py  the loss pass with each group's prompt forwarded once (--no-shared-prompt turns it off)
    cpu_linear.py     float32 on a CPU: the frozen base's products through oneDNN (CORE_CODE_MATMUL=mkl turns it off)
"""
