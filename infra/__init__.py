"""What a run needs around the step, not the step itself: skipped on a first reading.

    flags.py        train.py's command line: every flag with its default and meaning
    training_run.py a training run around its steps: its start, logs, checkpoints, safe stop, health, end
    models.py       --model names -> model + tokenizer, 4-bit NF4, --dtype, a LoRA adapter per role
    checkpoint.py   checkpoints and --resume
    distributed.py  the torchrun add-on: ranks, each rank's problems, one all-reduce of the LoRA gradients
    trackers.py     the run's logs and --report-to tensorboard|wandb|trackio
    progress.py     the start line and the bars with their ETA, the --profile table, the summary line
"""
