"""Delayed fp8 scaling for ``optimize(model, dtype="fp8", scaling="delayed")``.

A conv whose every reader is an fp8 conv (reading it as its input, directly or past a max
pool, or as the identity of a conv that writes fp8 too; the 16-bit stem included) writes
float8_e4m3fn with a scale taken from the amax its epilogue measured on the last
``AMAX_HISTORY`` calls, and its readers read it with that scale (an identity's through the
kernel's ``source_scale``): no 16-bit output and no quantize pass in between, with no
calibration input. Values past the history's amax saturate to +-448 (the kernel converts with
``satfinite``), so an input far larger than those seen before loses its largest values.

The scales live on the device and are updated by the model itself at the start of each call
(``DelayedScales.forward``, a handful of small kernels for all convs: ~15 us on an H100), so
the model replays from a CUDA graph and traces under ``torch.compile`` with the scales
moving. The first call (or the calibration input) only measures: the writers write 16 bits
and their readers quantize with the writers' epilogue amax, as the dynamic scaling does
(``seed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import fx, nn

from .fp8 import scale_from_amax
from .nn import Conv2d

__all__ = ["AMAX_HISTORY", "DelayedScales", "seed", "seed_on_first_call"]

# Calls whose amax a scale covers: long enough that batch-to-batch variation rarely saturates,
# short enough that a drifting input is followed.
AMAX_HISTORY = 16


class DelayedScales(nn.Module):
    """The amax history of the convs that write fp8 under delayed scaling, and the update of
    their scales from it.

    Args:
        writers: the names of those convs (fused ``cute_conv.nn.Conv2d`` modules), in the
            order ``forward`` takes their amax and scale tensors.
        device: where the history lives (the convs' device).
        history: calls per scale (``AMAX_HISTORY``).

    Attributes:
        history: float32 ``[len(writers), history]``, the newest call's amax first.
        scales: each writer's scale (0-dim float32), which the writer takes as its
            ``out_scale`` and its readers as their ``x_scale``: updated in place.
        seeded: whether a measuring call has filled the history (see ``seed``).
    """

    def __init__(
        self, writers: Sequence[str], device: torch.device, history: int = AMAX_HISTORY
    ) -> None:
        super().__init__()
        if history < 1:
            raise ValueError(f"history must be at least 1 call, got {history}")
        self.writers = tuple(writers)
        self.register_buffer("history", torch.zeros(len(self.writers), history, device=device))
        for index in range(len(self.writers)):
            self.register_buffer(f"scale{index}", torch.ones((), device=device), persistent=False)
        self.seeded = False

    @property
    def scales(self) -> list[torch.Tensor]:
        return [getattr(self, f"scale{index}") for index in range(len(self.writers))]

    def forward(self, *amax: torch.Tensor) -> None:
        """At the start of a call: the last call's ``amax`` (each writer's ``out_amax``, a
        one-element tensor, in ``writers``' order) into the history, and ``scales`` set in
        place to the history's amax over 448."""
        if not self.writers:
            return
        newest = torch.stack([a.reshape(()) for a in amax])[:, None]
        self.history.copy_(torch.cat([newest, self.history[:, :-1]], dim=1))
        new_scales = scale_from_amax(self.history.amax(dim=1))
        torch._foreach_copy_(self.scales, list(new_scales.unbind()))

    def extra_repr(self) -> str:
        return f"{len(self.writers)} writers, history={self.history.shape[1]} calls"


# What dynamo reports when torch.compile(fullgraph=True) reaches the measuring first call.
_EAGER_FIRST_CALL = (
    "an fp8 model with delayed scaling measures its scales on its first call, eagerly: call "
    "it once before torch.compile(..., fullgraph=True) traces it (or pass calibration= to "
    "optimize)"
)


def _runs_eagerly(fn):
    """``torch.compiler.disable``, with the reason dynamo reports where torch takes one."""
    try:
        return torch.compiler.disable(fn, reason=_EAGER_FIRST_CALL)
    except TypeError:  # torch before 2.7: no reason
        return torch.compiler.disable(fn)


@_runs_eagerly
def seed(gm: fx.GraphModule, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run ``gm`` once on ``args`` to measure: its fp8 writers write 16 bits and raise their
    ``out_amax``, their readers quantize with it; the next call's ``DelayedScales.forward``
    takes those amax as the first history entry. Marks the history seeded.

    Runs eagerly: ``torch.compile`` breaks the graph here (with ``fullgraph=True`` dynamo
    refuses, naming ``_EAGER_FIRST_CALL``), so a seeded model traces whole.

    Raises:
        RuntimeError: inside a CUDA graph capture (the measuring call would be captured).
    """
    delayed: DelayedScales = gm.fp8_delayed_scales
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "an fp8 model with delayed scaling measures its scales on its first call, which "
            "cannot be captured: call it once before capturing a CUDA graph (or pass "
            "calibration= to optimize)"
        )
    modules = dict(gm.named_modules())
    writers = [modules[name] for name in delayed.writers]
    # Those reading a writer's output (directly or past a max pool) with the writer's scale.
    scales = {id(scale) for scale in delayed.scales}
    readers = [
        module
        for module in modules.values()
        if isinstance(module, Conv2d) and id(module.x_scale) in scales
    ]
    saved = [(m, m.out_scale, m.x_scale) for m in writers + readers]
    try:
        for module in writers:
            module.out_scale = None  # write 16 bits
        for module in readers:
            module.x_scale = None  # quantize with the writer's out_amax
        with torch.no_grad():
            gm.forward(*args, **kwargs)  # forward, not __call__: no hook, no recursion
    finally:
        for module, out_scale, x_scale in saved:
            module.out_scale, module.x_scale = out_scale, x_scale
    delayed.seeded = True


def seed_on_first_call(gm: fx.GraphModule, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``gm``'s forward pre-hook: seed the delayed scales on the first call."""
    if not gm.fp8_delayed_scales.seeded:
        seed(gm, args, kwargs)
