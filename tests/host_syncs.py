"""Count the calls that make the host wait for the device: .item(), .tolist(), a tensor's truth value (`if t`,
`t.any()` in an if), torch.nonzero and boolean-mask indexing (its result's size is data). On a CPU nothing waits,
but the same calls on CUDA each stall the host until the GPU has caught up."""
import torch
from torch.overrides import TorchFunctionMode


class HostSyncs(TorchFunctionMode):
    """with HostSyncs() as s: ...; s.count: how many such calls ran inside, s.calls: their names in order."""

    def __init__(self):
        super().__init__()
        self.calls, self.off = [], False

    def paused(self, fn):
        """fn wrapped so that what it calls is not counted (a caller's callback, e.g. a stop rule on host data)."""
        def run(*a, **k):
            self.off = True
            try:
                return fn(*a, **k)
            finally:
                self.off = False
        return run

    @property
    def count(self) -> int:
        return len(self.calls)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if self.off:
            pass
        elif name in ("item", "tolist", "__bool__", "nonzero", "argwhere", "masked_select") or func is torch.nonzero:
            self.calls.append(name)
        elif name in ("__getitem__", "__setitem__") and len(args) > 1 and bool_index(args[1]):
            self.calls.append(name + "[bool]")
        return func(*args, **kwargs)


def bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)
