"""What ``cute_conv.optimize`` did to a model: the chains it fused, the convs it left to torch
and why, and (``dtype="fp8"``) which fused convs run and write fp8."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["FusedChain", "LeftConv", "OptimizeReport"]


@dataclass(frozen=True)
class FusedChain:
    """One chain of torch ops now run by one ``cute_conv.nn.Conv2d``."""

    module: str  # its name in the returned model
    pattern: str  # e.g. "conv+bn+add+relu"
    nodes: tuple[str, ...]  # the ops it replaced, in order: module names, fx node names
    stopped: str | None = None  # why a following op that looks fusable was not fused


@dataclass(frozen=True)
class LeftConv:
    """A conv left to torch."""

    name: str  # its module's name in the returned model (the fx node's target)
    reason: str
    folded_bn: str | None = None  # the BatchNorm after it, folded into its weights and bias


@dataclass
class OptimizeReport:
    """What ``optimize`` fused and what it left to torch, with the reasons."""

    fused: list[FusedChain] = field(default_factory=list)
    left: list[LeftConv] = field(default_factory=list)
    # dtype="fp8": the fused modules that run on fp8, those that write fp8 for the next conv,
    # and those kept 16-bit (with why).
    fp8: list[str] = field(default_factory=list)
    fp8_outputs: list[str] = field(default_factory=list)
    # 16-bit convs (the stem) writing fp8 for the fp8 convs after them (``optimize_fp8._fp8_producers``).
    fp8_stems: list[str] = field(default_factory=list)
    fp8_scaling: str | None = None  # one of optimize_fp8.FP8_SCALINGS
    # dynamic scales: the fp8 convs whose 16-bit input another fused conv writes, with its
    # max|output| from the epilogue (``optimize_fp8._share_amax``): quantized without a reduction.
    fp8_amax_inputs: list[str] = field(default_factory=list)
    kept_16bit: list[LeftConv] = field(default_factory=list)
    # Max and average pools now ``TiledMaxPool2d``, ``MaxPool2d`` or ``AvgPool2d`` (torch's
    # channels_last kernels are slow).
    pools: list[str] = field(default_factory=list)
    # Global average pools now ``GlobalAvgPool2d`` (a GEMV; torch's channels_last mean is slow).
    avg_pools: list[str] = field(default_factory=list)
    # LayerNorms over the channels of NCHW tensors now ``ChannelLayerNorm`` (the grouped
    # kernel's norm; torch's LayerNorm kernel is slow on these).
    channel_norms: list[str] = field(default_factory=list)
    # Channel shuffles (with the concatenation before them) now ``ChannelShuffle``: one copy,
    # channels_last, where torch's makes the value NCHW-contiguous.
    shuffles: list[str] = field(default_factory=list)
    # Squeeze-excitation multiplies ``scale * x`` now ``ChannelScale`` (one kernel pass; torch's
    # broadcasting multiply is slow on channels_last maps).
    channel_scales: list[str] = field(default_factory=list)
    # Chains of growing concatenations (DenseNet's) kept in one buffer, their readers handed
    # prefix views (``cute_conv.concat``): one line each, its first tensor and length.
    concats: list[str] = field(default_factory=list)
    # Concatenations of fused convs' outputs (Inception's and GoogLeNet's branches,
    # SqueezeNet's expands) made in one buffer that those convs write their channels of
    # (``cute_conv.concat``): one line each, its name and how many pieces were written in place.
    concat_writes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Fused chains per pattern, most common first."""
        return dict(Counter(chain.pattern for chain in self.fused).most_common())

    def __str__(self) -> str:
        lines = [
            f"cute_conv.optimize: {len(self.fused)} convs fused, {len(self.left)} left to torch"
        ]
        lines += [f"  {count:4d} x {pattern}" for pattern, count in self.counts().items()]
        if self.fused:
            lines.append("fused:")
        for chain in self.fused:
            line = f"  {chain.module}: {chain.pattern} ({', '.join(chain.nodes)})"
            lines.append(line + (f"; stopped before: {chain.stopped}" if chain.stopped else ""))
        if self.left:
            lines.append("left to torch:")
        for conv in self.left:
            folded = f"; {conv.folded_bn} folded into its weights" if conv.folded_bn else ""
            lines.append(f"  {conv.name}: {conv.reason}{folded}")
        for replaced, label in (
            (self.pools, "max and average pools run by cute_conv"),
            (self.avg_pools, "global average pools run as GEMVs"),
            (self.channel_norms, "channel LayerNorms run by the grouped kernel"),
            (self.shuffles, "channel shuffles kept channels_last"),
            (self.channel_scales, "squeeze-excitation multiplies run by cute_conv"),
        ):
            if replaced:
                lines.append(f"{label}: {len(replaced)}")
        if self.concats:
            lines.append(f"concatenation chains kept in one buffer: {len(self.concats)}")
            lines += [f"  {chain}" for chain in self.concats]
        if self.concat_writes:
            lines.append(f"concatenations written by their convs: {len(self.concat_writes)}")
            lines += [f"  {cat}" for cat in self.concat_writes]
        if self.fp8 or self.kept_16bit:
            lines.append(
                f"fp8 ({self.fp8_scaling} scaling): {len(self.fp8)} fused convs "
                f"({len(self.fp8_outputs)} writing fp8 for the next conv), "
                f"{len(self.kept_16bit)} kept 16-bit"
            )
            if self.fp8_amax_inputs:
                lines.append(
                    f"  {len(self.fp8_amax_inputs)} scaled by the amax their input's conv "
                    "takes in its epilogue"
                )
            lines += [f"  kept 16-bit {conv.name}: {conv.reason}" for conv in self.kept_16bit]
            lines += [
                f"  16-bit {name} writes fp8 for the convs after it" for name in self.fp8_stems
            ]
        return "\n".join(lines)
