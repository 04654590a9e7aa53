"""Ctrl-C (SIGINT) and SIGTERM as a request to stop at the next safe point, not at once.

    with interrupt.Stop("stopping after this step to save a checkpoint") as stop:
        for step in steps:
            ...one whole step...
            if stop.requested:      # a safe point: save, then leave
                save(); raise interrupt.Interrupted(stop.signum, "checkpoint saved", "python train.py --resume RUN")

The first signal only sets `requested` (and prints one line saying so); the work in progress finishes, the
caller saves at its next safe point and raises Interrupted, which the command line turns into one line and
the shell's status for that signal (128 + signal: 130 for SIGINT, 143 for SIGTERM; our choice, the shell's
convention). A second signal stops at once (os._exit, nothing more is written; the files written so far are
whole: infra/checkpoint.py writes atomically). eval.py needs no safe point (each finished batch is stored as it
goes): `on_term` makes SIGTERM raise KeyboardInterrupt there, as Ctrl-C does.
"""
import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The command stopped at a safe point after a signal. status: 128 + the signal number; line: what is
    kept and the command that goes on (one line for the user)."""

    def __init__(self, signum: int, kept: str, again: str):
        super().__init__(f"interrupted: {kept}; to go on: {again}")
        self.status = 128 + signum


def status(signum: int) -> int:
    """The exit status of a command stopped by signal `signum` (SIGINT 2 -> 130, SIGTERM 15 -> 143)."""
    return 128 + signum


class Stop:
    """Context manager: while inside it, SIGINT / SIGTERM set `requested` (the first) or end the process at
    once with status 128 + signal (the second). `notice` is printed (stderr) at the first signal. Outside
    the main thread (where Python cannot install handlers) it does nothing and signals act as usual."""

    def __init__(self, notice: str):
        self.notice, self.signum, self.old = notice, None, {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.signum is not None:  # the second signal: at once
            print(f"\nstopped at once by a second {signal.Signals(signum).name}: the last checkpoint is kept",
                  file=sys.stderr, flush=True)
            os._exit(status(signum))
        self.signum = signum
        print(f"\n{signal.Signals(signum).name}: {self.notice} (press Ctrl-C again to stop at once)",
              file=sys.stderr, flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.old = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)
        return False


def on_term() -> None:
    """SIGTERM raises KeyboardInterrupt (as Ctrl-C does), so one handler serves both; the signal is kept in
    `last_signal` for the exit status."""
    def handle(signum, frame):
        global last_signal
        last_signal = signum
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handle)


last_signal = signal.SIGINT  # what on_term's handler last saw (SIGINT unless SIGTERM came)
