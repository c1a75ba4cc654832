"""Compile-time configuration of the Hopper (SM90) conv kernel and its SMEM budget.

``Conv2dConfig`` is frozen and hashable, a part of the compile-cache key, and holds nothing
that depends on the geometry. ``Conv2dConfig.plan(...)`` resolves it for one dtype/epilogue
combination into an ``Sm90Plan`` (subtile width, stage counts, SMEM bytes), in plain Python,
so the budget is checked on the host before anything is traced. The constants the host needs
of the kernel (SMEM capacity, halo slack rows, dynamic-scheduling counters) live here, not in
the kernel module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Optional, Tuple, Type

import cutlass

from ..common.config_checks import check_choice, check_field_types
from .schedule_checks import GATHER_ELEMENT_BITS, check_k_tile_bytes, check_schedule_options

__all__ = ["Conv2dConfig", "Sm90Plan", "SMEM_CAPACITY_SM90", "HALO_SLACK_ROWS", "WORK_COUNTERS"]

SMEM_CAPACITY_SM90 = 232448  # bytes of dynamic SMEM one CTA may use on H100/H200

# One consumer warpgroup of 64 rows, two of 64 or 128 rows each, or three of 64 rows.
TILE_M_CHOICES = (64, 128, 192, 256)
# 32, and 48..256 in steps of 16: the multiples of the 32-wide epilogue subtile (160 fits
# K=320 and 640 exactly) and the half steps between them (``is_half_step``; 80 fits 320).
TILE_N_CHOICES = (32, *range(48, 257, 16))
# The consumer warpgroups hold the fp32 accumulator in registers: 128x256 is the largest tile
# that leaves two of them room for the epilogue (232 registers a thread), 192x160 three (152).
MAX_TILE_ELEMS = 128 * 256
# Channels per k-tile (k-tiles never straddle a filter tap); a k-tile is 32..128 bytes, so
# which of these an input dtype takes is checked by ``plan`` (16-bit: 16..64, fp8: 32..128).
TILE_K_CHOICES = (16, 32, 64, 128)
CLUSTER_CHOICES = (1, 2, 4)
MAX_CLUSTER_SIZE = 4
MIN_STAGES, MAX_STAGES = 2, 16
EPI_N_CHOICES = (0, 16, 32, 64)  # 0: by the tile width and the epilogue (see _SmemBudget)
# CTAs a stream-K split may share one output tile among (``stream_k_split``).
MAX_STREAM_K_SPLIT = 32
# Halo tiles: output columns per tile row (a power of two dividing tile_m).
HALO_TILE_W_CHOICES = (32, 64, 128)

# The shared storage outside the A/B ring and the epilogue and halo buffers (``smem.py``): the
# barriers before sA, padded to its 1024-byte alignment, the source barriers after sD, padded
# to sC's, and sC's slot (or a placeholder) with the turn barriers, padded to the struct's
# alignment. A plan that reserved only the first 1024 filled SMEM to the byte on some tiles
# (128x160 k32 with fp32 output, 256x32 k32), and their storage did not fit at launch.
STORAGE_OVERHEAD_BYTES = 3 * 1024
_MAX_AB_STAGES = 16  # small k-tiles would fit more; past this, latency is long hidden
_EPI_STAGES = 4  # output staging buffers (2 in a residual kernel, whose C buffers take room)
_EPI_STAGES_WITH_SOURCE = 2
# Plain 16-bit kernels of 192-row tiles stage their 32-wide output subtiles (12 KB) in 2
# buffers where that buys the A/B ring a stage (192x128 k64: 5 of 40 KB instead of 4). On an
# H200 (15 corpus convs, CUDA graphs, one process against 4 buffers) they ran 0.98x the time,
# train and held-out alike, up to 0.92x on DeepLab's 65x65 1x1s; 128- and 256-row tiles ran
# 1.00-1.01x (benchmarks/two_output_buffers_compare_H200.md).
_FEW_EPI_STAGES = 2
_FEW_EPI_STAGES_TILE_M = 192
_EPI_N = 32  # epilogue subtile width: tile_m x 32 output/C subtiles
_NARROW_EPI_N = 16  # for tiles whose width 32 does not divide (48, 80, ..., 240)
# Such half-step tiles take k-tiles of at least this many bytes, so that each stage of the
# filter ring stays a whole number of 1024-byte swizzle blocks (the storage's alignment).
HALF_STEP_MIN_K_TILE_BYTES = 64
# Residual kernels take tile_m x 64 subtiles where a whole tile of C still fits beside the A/B
# ring: half the barrier rounds per tile (H200: fused 2-9% faster on 64- and 128-wide tiles).
_WIDE_EPI_N = 64
# A residual kernel buffers up to a whole tile of C, so that the source-load warp can fetch the
# next tile's C during its mainloop, and a halo kernel's halos take room too: each gives up
# A/B stages for that only down to this depth (then it takes fewer epilogue buffers).
_MIN_AB_STAGES_KEPT = 4
_MIN_SOURCE_STAGES = 2
# Halo tiles: activation halos in flight (each holds every filter tap's rows of one c-block),
# and rows of slack after the last one, which tap shifts along W read for columns past Q only
# (so (S-1) * dilation_w may be at most this).
HALO_STAGES = 2
# Ping-pong: each consumer holds its tile's halo through its mainloop, so a third stage lets
# the next tile's halo load while both are held.
HALO_STAGES_PINGPONG = 3
HALO_SLACK_ROWS = 8
# Work items the load warp may hand out ahead of the consumers (dynamic scheduling).
WORK_QUEUE_STAGES = 4
# Dynamic scheduling's global int32 counters: the next work item to hand out (minus the grid
# size), and the CTAs done taking work.
WORK_COUNTERS = 2


@dataclass(frozen=True)
class Conv2dConfig:
    """Compile-time choices of one Conv2D forward kernel.

    Attributes:
        tile_m: CTA tile along GEMM M (output pixels): 64 (one warpgroup), 128 or 256 (two
            warpgroups of 64 or 128 rows), or 192 (three warpgroups of 64 rows); tile_m *
            tile_n <= 128 * 256.
        tile_n: CTA tile along GEMM N (output channels): 32, or a multiple of 16 in 48..256
            (widths 32 does not divide store their output in 16-wide subtiles).
        tile_k: CTA tile along GEMM K (channels of one filter tap): a 128-byte row, 64
            16-bit or 128 fp8 channels; down to 32 bytes (16 16-bit or 32 fp8 channels) for
            convs with few input channels, where a full row would be mostly zero-fill.
        cluster_m: CTAs per cluster along M (1, 2 or 4); they share the filter tile by
            multicast, each loading ``tile_n / cluster_m`` of its rows (a multiple of 8).
        cluster_n: CTAs per cluster along N (1, 2 or 4); they share the activation tile, each
            loading ``tile_m / cluster_n`` of its rows (a multiple of 8). A cluster holds at
            most 4 CTAs; a cluster of 4 takes no stream-K (a split waits on other clusters'
            partial tiles; only 2-CTA clusters were run with it). A launch takes at most
            as many clusters as the device holds at once (``cute_conv.occupancy``).
        stages: depth of the shared-memory input ring; 0 means as many as fit in shared memory.
        raster_along_m: walk output tiles M-fastest (True) or N-fastest (False).
        swizzle: grouped rasterization, for L2 reuse: tiles are walked in groups of ``swizzle``
            tiles along the raster's minor direction.
        stream_k: split the k-tiles of all output tiles evenly over the SMs instead of giving
            each SM whole tiles; a tile split between SMs is summed through a float32
            workspace (one tile_m x tile_n partial per SM, allocated per device and stream).
            For grids of less than a wave of tiles with long mainloops; past two waves only
            the first tiles (the last partial wave and one whole wave) are split, the rest
            run whole after them, for grids whose last wave is mostly empty. A tile's owner
            waits for CTAs launched after it, so the whole grid (one CTA per SM of the device's SM
            count) must be able to be resident at once: do not force it where SMs are
            withheld from the process.
        stream_k_split: with ``stream_k``, at most this many CTAs per output tile (0: one
            CTA per SM): the grid is ``stream_k_split`` times the tiles, or the SMs if they
            are fewer, so each tile's k-tiles are split that many ways and summed by fewer
            partials than over the whole grid. A launch choice: kernels of every split are
            the same compiled kernel.
        dynamic_schedule: after its first tile, each CTA takes the next output tile from a
            global counter rather than every grid-th tile, so that SMs that run faster (closer
            to the memory they stream) take more tiles. Clusters of one CTA only; the counter
            lives in the same per-stream workspace as stream-K's.
        tile_w, halo_h: halo tiles, for stride-1 convs (0, 0: off). An output tile is
            ``tile_m / tile_w`` output rows of ``tile_w`` columns (without ``halo_w``, whole
            rows: tile_w >= Q + (S-1) * dilation_w; the columns past Q are computed and not
            stored), and the kernel loads the tile's input halo, ``halo_h`` rows (>= tile_m /
            tile_w + (R-1) * dilation_h) by ``tile_w`` (or ``halo_w``) columns, once per 128
            bytes of channels instead of once per filter tap: every tap reads the same halo
            shifted. Needs tile_k=64 (fp8: 128), clusters of one CTA and no stream_k.
        halo_w: pitched halo tiles (0: off): the halo is ``halo_w`` columns wide (a multiple
            of 8, >= tile_w + (S-1) * dilation_w, at most 256), so that a tile's rows need
            not be whole output rows: an output row takes ``ceil(Q / tile_w)`` tiles side by
            side, each with its own halo. ``tile_w`` must then be 64 (each 64-row WGMMA atom
            one row of the tile, its taps' atoms ``halo_w`` SMEM rows apart), and halo_h *
            halo_w a multiple of 16 (whole pairs of 8-row swizzle blocks).
        pingpong: the two consumer warpgroups take the CTA's output tiles in turn, each with
            its own 128 x tile_n accumulator, so that one's epilogue runs while the other's
            mainloop has the tensor cores (False: both work on every tile and the tensor
            cores idle during its epilogue). 128-row tiles at most 128 wide, static
            scheduling, no stream_k; with halo tiles each consumer holds its own tile's halo.
        programmatic_launch: launch with programmatic dependent launch, so that the kernel's
            setup overlaps the previous kernel's tail on the stream (it waits for that
            kernel's writes before touching global memory); False launches it the plain way.
        gather: the A and filter tiles are gathered by the producer warps (two, or all four
            where the loads are vectors: ``pipeline_checks.gather_warps_for``; plain
            loads and SMEM stores, zero outside the image and past C) instead of loaded by
            TMA, which needs 16-byte channel rows: a conv whose C is not a multiple of 8 then
            reads its activation and filter as they are, with no padded copies. For small
            convs: the warps load far slower than TMA. 16-bit inputs, clusters of one CTA, no halo
            tiles, ping-pong, stream_k or dynamic scheduling.
        gather_vector: with ``gather``, channels per gathered load: 1, 2 or 4 (2, 4 or 8
            bytes). C must be a multiple of it (``check_config_fits`` says so);
            ``gather_rule.with_gathered_operands`` takes the largest that divides C.
        pack_taps: with ``gather``, the GEMM K is the filter row's R*S*C elements back to
            back (the k-tile walk ``ceil(R*S*C / tile_k)`` k-tiles) instead of a tap's C
            channels per k-tile, zero-filled to tile_k: a conv of few channels per tap
            (C=1 1x7: 7 k-tiles -> 1 of 16) takes fewer k-tiles, each vector's tap decoded
            from its place in the row. ``gather_rule.gathered_config`` sets it where it
            saves k-tiles (register gathers: at 16-channel k-tiles only).
        epi_n: width of the epilogue's output subtiles (tile_m x epi_n, each staged in SMEM
            and stored by one TMA store): 16, 32 or 64, dividing tile_n; 0 lets the kernel
            choose (32, or 16 for tiles 32 does not divide; a residual kernel 64 where a tile
            of C fits beside the A/B ring). Wider subtiles take fewer barrier rounds and store
            longer rows per request, at more SMEM per buffer (fewer A/B stages).
        groups: a grouped conv of this many groups (1: dense). The filter is the grouped
            conv's ``[K, R, S, C / groups]``; an output tile's channels lie in one group
            (a group takes ``ceil(K / groups / tile_n)`` tiles, its last one's columns past
            the group left out: zeros read, nothing stored) and its A tiles read that
            group's channels. Clusters of one CTA along N (a cluster's N tiles may be other
            groups), no gather, halo tiles or stream-K.
    """

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    cluster_m: int = 1
    cluster_n: int = 1
    stages: int = 0
    raster_along_m: bool = True
    swizzle: int = 8
    stream_k: bool = False
    stream_k_split: int = 0
    dynamic_schedule: bool = False
    tile_w: int = 0
    halo_h: int = 0
    halo_w: int = 0
    pingpong: bool = False
    programmatic_launch: bool = True
    gather: bool = False
    gather_vector: int = 1
    epi_n: int = 0
    groups: int = 1
    pack_taps: bool = False

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.groups < 1:
            raise ValueError(f"groups must be >= 1, got {self.groups}")
        if self.groups > 1 and (
            self.cluster_n != 1 or self.gather or self.tile_w or self.stream_k
        ):
            raise ValueError(
                f"groups={self.groups}: clusters of one CTA along N, no gather, halo tiles or "
                f"stream_k (got cluster_n={self.cluster_n}, gather={self.gather}, "
                f"tile_w={self.tile_w}, stream_k={self.stream_k})"
            )
        if self.pack_taps and not self.gather:
            raise ValueError("pack_taps packs the gathered k-tiles: it needs gather=True")
        check_choice("tile_m", self.tile_m, TILE_M_CHOICES)
        check_choice("tile_n", self.tile_n, TILE_N_CHOICES)
        if self.tile_m * self.tile_n > MAX_TILE_ELEMS:
            raise ValueError(
                f"tile_m*tile_n must be <= {MAX_TILE_ELEMS} (128x256, the accumulator register "
                f"budget of two consumer warpgroups), got tile_m={self.tile_m}, "
                f"tile_n={self.tile_n} ({self.tile_m * self.tile_n})"
            )
        check_choice("tile_k", self.tile_k, TILE_K_CHOICES)
        check_choice("cluster_m", self.cluster_m, CLUSTER_CHOICES)
        check_choice("cluster_n", self.cluster_n, CLUSTER_CHOICES)
        if self.cluster_m * self.cluster_n > MAX_CLUSTER_SIZE:
            raise ValueError(
                f"cluster_m*cluster_n must be <= {MAX_CLUSTER_SIZE}, got "
                f"cluster_m={self.cluster_m}, cluster_n={self.cluster_n}"
            )
        if self.stages != 0 and not MIN_STAGES <= self.stages <= MAX_STAGES:
            raise ValueError(
                f"stages must be 0 (as many as fit) or in {MIN_STAGES}..{MAX_STAGES}, "
                f"got {self.stages}"
            )
        if self.stream_k_split and not (
            self.stream_k and 2 <= self.stream_k_split <= MAX_STREAM_K_SPLIT
        ):
            raise ValueError(
                f"stream_k_split must be 0 (the whole grid) or in 2..{MAX_STREAM_K_SPLIT} "
                f"with stream_k=True, got stream_k_split={self.stream_k_split}, "
                f"stream_k={self.stream_k}"
            )
        if self.swizzle < 1:
            raise ValueError(f"swizzle must be >= 1, got {self.swizzle}")
        check_choice("epi_n", self.epi_n, EPI_N_CHOICES)
        if self.epi_n and self.tile_n % self.epi_n:
            raise ValueError(
                f"epi_n must divide tile_n, got epi_n={self.epi_n}, tile_n={self.tile_n}"
            )
        if self.tile_w or self.halo_h or self.halo_w:  # halo tiles (tile_w=0 is an error here)
            check_choice("tile_w", self.tile_w, HALO_TILE_W_CHOICES)
        check_schedule_options(
            tile_mnk=self.tile_shape_mnk,
            cluster_mn=self.cluster_shape_mn,
            stream_k=self.stream_k,
            dynamic_schedule=self.dynamic_schedule,
            tile_w=self.tile_w,
            halo_h=self.halo_h,
            halo_w=self.halo_w,
            pingpong=self.pingpong,
            gather=self.gather,
            gather_vector=self.gather_vector,
        )

    def __repr__(self) -> str:
        body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.shown_fields())
        return f"{type(self).__name__}({body})"

    def shown_fields(self) -> list[dataclasses.Field]:
        """The fields ``repr`` names: all but ``groups`` and ``pack_taps`` at their defaults,
        so that other configs keep the repr they had before those fields (the sweeps'
        committed rows and the disk cache's keys are reprs)."""
        hidden = {"groups": 1, "pack_taps": False}
        return [
            f for f in dataclasses.fields(self)
            if f.name not in hidden or getattr(self, f.name) != hidden[f.name]
        ]  # fmt: skip

    @property
    def tile_shape_mnk(self) -> tuple[int, int, int]:
        """``(tile_m, tile_n, tile_k)``."""
        return (self.tile_m, self.tile_n, self.tile_k)

    @property
    def cluster_shape_mn(self) -> tuple[int, int]:
        """``(cluster_m, cluster_n)``."""
        return (self.cluster_m, self.cluster_n)

    @property
    def launch_cluster(self) -> Optional[Tuple[int, int, int]]:
        """The cluster dimensions the kernel launches with: None for single-CTA clusters,
        which launch as a plain grid (each CTA its own cluster; measured on an H200 no slower,
        and a 128x96 DeepLab 1x1 1.08x faster), else ``(cluster_m, cluster_n, 1)``."""
        if self.cluster_m * self.cluster_n == 1:
            return None
        return (self.cluster_m, self.cluster_n, 1)

    def compiled_form(self) -> "Conv2dConfig":
        """This config with its launch choices (``stream_k_split``) at their defaults: what
        the compiled kernel depends on, and so what keys it."""
        return replace(self, stream_k_split=0)

    @property
    def num_consumer_warpgroups(self) -> int:
        """64- and 192-row tiles: one and three warpgroups of 64 rows; otherwise two of
        tile_m / 2."""
        return {64: 1, 192: 3}.get(self.tile_m, 2)

    @property
    def num_epilogues(self) -> int:
        """Epilogues that run at once, each with its own staging buffers: one per consumer
        warpgroup with ping-pong, else one for the tile."""
        return self.num_consumer_warpgroups if self.pingpong else 1

    @property
    def halo_pitch(self) -> int:
        """Columns of a halo row in SMEM: ``halo_w`` for pitched halo tiles, else ``tile_w``
        (0 without halo tiles)."""
        return self.halo_w or self.tile_w

    @property
    def halo_stages(self) -> int:
        """Halos in flight (0 without halo tiles)."""
        if not self.tile_w:
            return 0
        return HALO_STAGES_PINGPONG if self.pingpong else HALO_STAGES

    def plan(
        self,
        act_dtype: Type[cutlass.Numeric],
        out_dtype: Type[cutlass.Numeric],
        has_residual: bool,
    ) -> "Sm90Plan":
        """Resolve the SMEM budget for one dtype/epilogue: the epilogue subtile width, the
        output staging, source and A/B ring depths. Raises ``ValueError`` when ``stages``
        does not fit, ``tile_k`` is no k-tile of ``act_dtype`` or ``gather`` is set for
        fp8 inputs."""
        check_k_tile_bytes(self.tile_k, act_dtype.width, halo_tiles=bool(self.tile_w))
        if is_half_step(self.tile_n):
            check_half_step_tile(self.tile_n, self.tile_k, act_dtype)
        if self.gather and act_dtype.width != GATHER_ELEMENT_BITS:
            raise ValueError(
                f"gather needs 16-bit inputs (BFloat16 or Float16), got {act_dtype.__name__}"
            )
        return _SmemBudget(self, act_dtype, out_dtype).plan(has_residual)

    def tile_copies(self, plan: "Sm90Plan") -> int:
        """How many dense copies of a whole output tile (``tile_m x tile_n`` values) the
        staging buffers of ``plan`` (this config's plan without a residual source) hold, for
        ``EpilogueSpec.bulk_tile_store``: 0 with halo tiles (their subtiles are boxes of the
        output) or ping-pong (each consumer's own buffers)."""
        if self.tile_w or self.pingpong:
            return 0
        return plan.epi_stages * plan.epi_n // self.tile_n


def is_half_step(tile_n: int) -> bool:
    """Whether ``tile_n`` is a half-step width (48, 80, ..., 240), one the ``_EPI_N``-wide
    epilogue subtile does not divide: its output is stored in ``_NARROW_EPI_N``-wide ones."""
    return tile_n % _EPI_N != 0


def check_half_step_tile(tile_n: int, tile_k: int, act_dtype) -> None:
    """Raise ``ValueError`` where a half-step tile width cannot run: k-tiles under
    ``HALF_STEP_MIN_K_TILE_BYTES``. (8-bit outputs run: their 16-wide subtiles are copied
    to SMEM 16 columns at a time, ``Sm90EpilogueMixin.r2s_tiled_copy``.)"""
    if tile_k * act_dtype.width // 8 < HALF_STEP_MIN_K_TILE_BYTES:
        raise ValueError(
            f"tile_n={tile_n} (not a multiple of {_EPI_N}) needs k-tiles of at least "
            f"{HALF_STEP_MIN_K_TILE_BYTES} bytes, got tile_k={tile_k} {act_dtype.__name__} "
            "channels"
        )


@dataclass(frozen=True)
class Sm90Plan:
    """A config resolved for one dtype/epilogue: what the kernel is compiled with."""

    epi_n: int  # width of an epilogue subtile (tile_m x epi_n)
    epi_stages: int  # output staging buffers per epilogue
    source_stages: int  # residual C buffers (0 without a residual)
    ab_stages: int  # depth of the A/B ring
    smem_bytes: int  # what the kernel asks for: ring + halos + epilogue buffers + barriers


class _SmemBudget:
    """The SMEM arithmetic of ``Conv2dConfig.plan``: byte sizes of the kernel's buffers."""

    def __init__(self, config: Conv2dConfig, act_dtype, out_dtype):
        self.config = config
        self.act_bytes = act_dtype.width // 8
        self.out_bytes = out_dtype.width // 8
        self.out_name = out_dtype

    def ab_bytes_per_stage(self) -> int:
        """Bytes of one ring stage: A and B tiles, or B alone with halo tiles."""
        cfg = self.config
        a_rows = 0 if cfg.tile_w else cfg.tile_m
        return (a_rows + cfg.tile_n) * cfg.tile_k * self.act_bytes

    def halo_bytes(self) -> int:
        """The halo stages and their slack rows (0 without halo tiles)."""
        cfg = self.config
        if not cfg.tile_w:
            return 0
        rows = cfg.halo_stages * cfg.halo_h * cfg.halo_pitch + HALO_SLACK_ROWS
        return rows * cfg.tile_k * self.act_bytes

    def subtile_bytes(self, epi_n: int) -> int:
        return self.config.tile_m * epi_n * self.out_bytes

    def ab_budget(self, epi_stages: int, source_stages: int, epi_n: int) -> int:
        """SMEM bytes left for the A/B ring next to the epilogue's buffers of ``epi_n``-wide
        subtiles: output staging per epilogue, plus the source ring."""
        buffers = epi_stages * self.config.num_epilogues + source_stages
        epi_bytes = self.subtile_bytes(epi_n) * buffers
        return SMEM_CAPACITY_SM90 - STORAGE_OVERHEAD_BYTES - epi_bytes - self.halo_bytes()

    def residual_epilogue(self) -> Tuple[int, int]:
        """The epilogue subtile width and the number of C buffers of a residual kernel.

        ``_WIDE_EPI_N``-wide subtiles where a whole tile of C (at least
        ``_MIN_SOURCE_STAGES`` buffers, so that the next tile's C can load during this
        epilogue) fits beside ``stages`` (or ``_MIN_AB_STAGES_KEPT``) A/B stages;
        otherwise ``_EPI_N``-wide ones, a whole tile of them where that fits, else fewer. A
        config's own ``epi_n`` is taken as it is, with as many C buffers as fit."""
        cfg = self.config
        keep = (cfg.stages or _MIN_AB_STAGES_KEPT) * self.ab_bytes_per_stage()
        epi_stages = _EPI_STAGES_WITH_SOURCE
        if cfg.tile_n % _WIDE_EPI_N == 0 and cfg.epi_n in (0, _WIDE_EPI_N):
            source_stages = max(cfg.tile_n // _WIDE_EPI_N, _MIN_SOURCE_STAGES)
            if self.ab_budget(epi_stages, source_stages, _WIDE_EPI_N) >= keep:
                return _WIDE_EPI_N, source_stages
        epi_n = self.epi_n()
        for source_stages in range(cfg.tile_n // epi_n, _MIN_SOURCE_STAGES, -1):
            if self.ab_budget(epi_stages, source_stages, epi_n) >= keep:
                return epi_n, source_stages
        return epi_n, _MIN_SOURCE_STAGES

    def epi_n(self) -> int:
        """The subtile width of a plain epilogue: the config's ``epi_n``, else ``_EPI_N``,
        or ``_NARROW_EPI_N`` for the tiles it does not divide."""
        if self.config.epi_n:
            return self.config.epi_n
        return _NARROW_EPI_N if is_half_step(self.config.tile_n) else _EPI_N

    def buys_a_stage(self, stage_bytes: int, epi_n: int) -> bool:
        """Whether a plain kernel of this config takes ``_FEW_EPI_STAGES`` output buffers: one
        of 16-bit inputs and output, ``_FEW_EPI_STAGES_TILE_M``-row tiles and ``_EPI_N``-wide
        subtiles (the plans measured; wider subtiles, which ``cute_conv.epilogue_rule`` weighs
        by their ring depth, keep four), no halo tiles and no set ring depth, whose A/B ring
        that makes a stage deeper."""
        cfg = self.config
        measured = (
            cfg.tile_m == _FEW_EPI_STAGES_TILE_M
            and epi_n == _EPI_N
            and self.act_bytes == self.out_bytes == 2
        )
        if not measured or cfg.tile_w or cfg.stages:
            return False

        def stages(epi_stages: int) -> int:
            return min(self.ab_budget(epi_stages, 0, epi_n) // stage_bytes, _MAX_AB_STAGES)

        return stages(_FEW_EPI_STAGES) > stages(_EPI_STAGES)

    def plan(self, has_residual: bool) -> Sm90Plan:
        cfg = self.config
        if has_residual:
            epi_stages = _EPI_STAGES_WITH_SOURCE
            epi_n, source_stages = self.residual_epilogue()
        else:
            epi_n, epi_stages, source_stages = self.epi_n(), _EPI_STAGES, 0
        stage_bytes = self.ab_bytes_per_stage()
        if not has_residual and self.buys_a_stage(stage_bytes, epi_n):
            epi_stages = _FEW_EPI_STAGES
        if (
            cfg.tile_w
            and not has_residual
            and self.ab_budget(epi_stages, 0, epi_n) < _MIN_AB_STAGES_KEPT * stage_bytes
        ):
            epi_stages = _EPI_STAGES_WITH_SOURCE  # a tall halo leaves room for fewer
        budget = self.ab_budget(epi_stages, source_stages, epi_n)
        fit = max(min(budget // stage_bytes, _MAX_AB_STAGES), 0)
        chosen = cfg.stages or fit
        if chosen < 2 or chosen > fit:
            halo = f" and {self.halo_bytes()} bytes of halos" if cfg.tile_w else ""
            raise ValueError(
                f"stages={cfg.stages} does not fit: tile {cfg.tile_shape_mnk} with "
                f"{self.out_name} output{halo} leaves room for {fit} stages (at least 2 are "
                f"needed) in {SMEM_CAPACITY_SM90} bytes of SMEM"
            )
        smem_bytes = SMEM_CAPACITY_SM90 - budget + chosen * stage_bytes
        return Sm90Plan(epi_n, epi_stages, source_stages, chosen, smem_bytes)
