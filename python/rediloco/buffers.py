"""buffers.py: a model's buffers are not part of the run; say so when it matters.

A run holds parameters only: what DiLoCo averages (the pseudo-gradients), what the shard-servers step
and what checkpoints hold. Buffers (BatchNorm's running_mean and running_var, counters, masks) stay
each worker's own. DDP broadcasts them; averaging them here would take a second kind of shard (a plain
average, no outer step) on the shard-servers, which ReDiLoCo does not have. Most buffers never change
(masks, position tables), so warning for every buffer at join would cry wolf: BufferWatch keeps a copy of
the floating-point buffers at join and, at the first sync, warns once (BuffersNotSynced) naming those
that training changed, since those now differ between workers and are not in checkpoints.
"""
import warnings

import torch

from .checks import quoted
from .errors import user_stacklevel


class BuffersNotSynced(UserWarning):
    """Floating-point buffers that training changes (e.g. BatchNorm's running statistics) are not synced
    between workers nor checkpointed. warnings.filterwarnings("error", category=...) makes it an error."""


class BufferWatch:
    def __init__(self, model):
        self.model = model
        self.start = {n: b.detach().clone() for n, b in model.named_buffers() if torch.is_floating_point(b)}

    def after_sync(self, run):
        """At the first sync: warn naming the floating-point buffers that changed since join."""
        if self.start is None:
            return
        now = dict(self.model.named_buffers())
        changed = [n for n, b in self.start.items()
                   if n in now and (now[n].shape != b.shape or not torch.equal(now[n].detach().cpu(), b.cpu()))]
        self.start = None
        if changed:
            warnings.warn(BuffersNotSynced(
                "the model's buffers %s changed during training, but run %r syncs parameters only: each worker "
                "keeps its own (they are not averaged, not in checkpoints). For BatchNorm, recompute the "
                "statistics on the final weights before evaluating, or use a normalisation without running "
                "statistics (LayerNorm, GroupNorm); docs/python.md, Buffers" % (quoted(changed), run)),
                stacklevel=user_stacklevel())  # the user's inner.step() or dl.sync()

