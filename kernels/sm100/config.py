"""Compile-time configuration of the Blackwell (SM100) conv kernel and its resource budgets.

``Conv2dConfigSm100`` is the seed's ``Conv2dConfig`` (renamed so that it does not collide with
the Hopper ``cute_conv.Conv2dConfig``): MMA shape, CTA group, output tile, stage counts,
swizzles and the tile-raster swizzle. It is frozen and hashable, a part of the compile-cache
key, and holds nothing that depends on the geometry.

``Conv2dConfigSm100.plan(...)`` resolves it for one dtype/epilogue combination into a
``Sm100Plan``: the stage counts that fit, the exact bytes of the kernel's shared storage
(``Conv2dSmem``, built here from plain integers, so the number is the one the kernel will ask
for) and the TMEM columns. Everything here is pure Python: the budgets are checked on the host,
before anything is traced or compiled, and every violation is a ``ValueError`` that names the
field, its value and the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Type

import cutlass

from ..common.config_checks import check_choice, check_field_types
from .smem import conv2d_smem_struct

__all__ = [
    "Conv2dConfigSm100",
    "Sm100Plan",
    "SMEM_CAPACITY_SM100",
    "TMEM_COLUMNS_SM100",
]

SMEM_CAPACITY_SM100 = 232448  # bytes of dynamic SMEM one CTA may use on B200 (227 KB)
TMEM_COLUMNS_SM100 = 512  # 32-bit columns of tensor memory per SM (x 128 lanes)
ACC_BITS = 32  # fp32 accumulators: one TMEM column per output column

CTA_GROUPS = (1, 2)
# The epilogue maps the 4 epilogue warps onto the 128 TMEM lanes of one CTA: one CTA holds 128
# accumulator rows, so MMA M is 128 (1-SM) or 256 (2-SM, 128 rows per CTA of the pair).
MMA_M_BY_CTA_GROUP = {1: 128, 2: 256}
MMA_N_CHOICES = (64, 128, 192, 256)
# Channels of one filter tap per k-tile (a k-tile never straddles a tap): one 64-byte or
# 128-byte swizzle row, 32 or 64 16-bit channels, 64 or 128 fp8 ones (checked by ``plan``).
TILE_K_CHOICES = (32, 64, 128)
K_TILE_BYTES = (64, 128)
EPI_N_CHOICES = (16, 32, 64)
BLOCK_SWIZZLE_CHOICES = (1, 2, 4, 8)
MIN_STAGES, MAX_STAGES = 2, 16
MAX_ACC_STAGES = 2
MAX_CLC_STAGES = 4
MAX_OUTPUT_STAGES = 4
MAX_SOURCE_STAGES = 16
# When source_stages is 0 the source ring holds one output tile's subtiles (the seed's
# MMA_N / OutputN), halved until the A/B ring keeps at least this many stages.
MIN_AUTO_AB_STAGES = 3


@dataclass(frozen=True)
class Conv2dConfigSm100:
    """Compile-time choices of one SM100 Conv2D forward kernel.

    Attributes:
        cta_group: 1 (1-SM ``tcgen05.mma``) or 2 (2-SM: a CTA pair shares one MMA, cluster 2x1).
        mma_m: M of one MMA: 128 for cta_group 1, 256 for cta_group 2 (128 rows per CTA).
        mma_n: N of one MMA (output channels per tile): 64, 128, 192 or 256.
        tile_k: channels of one filter tap per k-tile, a 128-byte or 64-byte swizzle row: 64
            or 32 with 16-bit inputs, 128 or 64 with fp8 ones.
        epi_n: N of one output subtile (the seed's OutputN): 16, 32 or 64. The output tile is
            ``(mma_m / cta_group, epi_n)``: one SMEM buffer, one TMA store.
        stages: depth of the A/B input ring; 0 means as many as fit in SMEM.
        acc_stages: TMEM accumulator buffers (1 or 2); ``acc_stages * mma_n <= 512`` columns.
        clc_stages: depth of the cluster-launch-control response ring (1..4).
        output_stages: SMEM buffers of output subtiles in flight to TMA stores (1..4).
        source_stages: SMEM buffers of residual subtiles; 0 means one output tile's worth
            (``mma_n / epi_n``), fewer if the A/B ring would drop below 3 stages. Unused
            without a residual.
        block_swizzle: tiles are walked in bands of this many clusters along the raster's
            minor direction (1, 2, 4 or 8), for L2 reuse.
        raster_along_m: walk output tiles M-fastest (True) or N-fastest (False).
        programmatic_launch: launch with programmatic dependent launch, so that the kernel's
            setup overlaps the previous kernel's tail on the stream (it waits for that
            kernel's writes before touching global memory); False launches it the plain way.
    """

    cta_group: int = 2
    mma_m: int = 256
    mma_n: int = 256
    tile_k: int = 64
    epi_n: int = 32
    stages: int = 0
    acc_stages: int = 2
    clc_stages: int = 2
    output_stages: int = 2
    source_stages: int = 0
    block_swizzle: int = 1
    raster_along_m: bool = True
    programmatic_launch: bool = True

    @classmethod
    def default_bf16(cls) -> "Conv2dConfigSm100":
        """The seed's default: 2-SM (cta_group 2, cluster 2x1), MMA 256x256, 64-channel k-tiles."""
        return cls()

    @classmethod
    def default_bf16_1sm(cls) -> "Conv2dConfigSm100":
        """The seed's 1-SM config: cta_group 1, MMA 128x128, no cluster."""
        return cls(cta_group=1, mma_m=128, mma_n=128)

    def __post_init__(self) -> None:
        check_field_types(self)
        check_choice("cta_group", self.cta_group, CTA_GROUPS)
        if self.mma_m != MMA_M_BY_CTA_GROUP[self.cta_group]:
            raise ValueError(
                f"mma_m must be {MMA_M_BY_CTA_GROUP[self.cta_group]} with "
                f"cta_group={self.cta_group} (128 accumulator rows per CTA), got {self.mma_m}"
            )
        check_choice("mma_n", self.mma_n, MMA_N_CHOICES)
        check_choice("tile_k", self.tile_k, TILE_K_CHOICES)
        check_choice("epi_n", self.epi_n, EPI_N_CHOICES)  # every choice divides every mma_n
        if self.stages != 0 and not MIN_STAGES <= self.stages <= MAX_STAGES:
            raise ValueError(
                f"stages must be 0 (as many as fit) or in {MIN_STAGES}..{MAX_STAGES}, "
                f"got {self.stages}"
            )
        _check_range("acc_stages", self.acc_stages, 1, MAX_ACC_STAGES)
        _check_range("clc_stages", self.clc_stages, 1, MAX_CLC_STAGES)
        _check_range("output_stages", self.output_stages, 1, MAX_OUTPUT_STAGES)
        _check_range("source_stages", self.source_stages, 0, MAX_SOURCE_STAGES)
        check_choice("block_swizzle", self.block_swizzle, BLOCK_SWIZZLE_CHOICES)
        if self.tmem_columns() > TMEM_COLUMNS_SM100:
            raise ValueError(
                f"acc_stages*mma_n = {self.acc_stages}*{self.mma_n} = "
                f"{self.acc_stages * self.mma_n} TMEM columns (allocated as "
                f"{self.tmem_columns()}) exceeds the {TMEM_COLUMNS_SM100} columns of an SM"
            )

    # ------------------------------------------------------------------------------------------
    # The seed's derived shapes
    # ------------------------------------------------------------------------------------------

    @property
    def mma_shape(self) -> tuple[int, int, int]:
        """``(MMA_M, MMA_N, MMA_K)`` of one ``tcgen05.mma`` (MMA_K = 16 for 16-bit inputs)."""
        return (self.mma_m, self.mma_n, 16)

    @property
    def block_tile_shape(self) -> tuple[int, int, int]:
        """``(BM, BN, BK)`` one CTA loads per k-tile: its A rows, its B rows, the channels."""
        return (self.mma_m // self.cta_group, self.mma_n // self.cta_group, self.tile_k)

    @property
    def output_tile_shape(self) -> tuple[int, int]:
        """``(OutputM, OutputN)``: one epilogue subtile, one SMEM buffer, one TMA store."""
        return (self.mma_m // self.cta_group, self.epi_n)

    @property
    def cluster_m(self) -> int:
        """CTAs per cluster along M: the CTA pair of a 2-SM MMA."""
        return self.cta_group

    @property
    def cluster_n(self) -> int:
        return 1

    @property
    def cluster_shape_mn(self) -> tuple[int, int]:
        return (self.cluster_m, self.cluster_n)

    def ab_swizzle_bytes(self, input_bits: int = 16) -> int:
        """Swizzle of the A and B tiles: one k-tile row (64 or 128 bytes)."""
        return self.tile_k * input_bits // 8

    def c_swizzle_bytes(self, output_bits: int = 16) -> int:
        """Swizzle of the output/source subtiles: one subtile row, at most 128 bytes."""
        return min(self.epi_n * output_bits // 8, 128)

    def tmem_columns(self) -> int:
        """TMEM columns allocated for the accumulators: ``acc_stages * mma_n`` fp32 columns,
        rounded up to a power of two (``tcgen05.alloc`` allocates powers of two >= 32)."""
        used = self.acc_stages * self.mma_n * ACC_BITS // 32
        return max(32, 1 << (used - 1).bit_length())

    # ------------------------------------------------------------------------------------------
    # Budgets
    # ------------------------------------------------------------------------------------------

    def plan(
        self,
        act_dtype: Type[cutlass.Numeric],
        out_dtype: Type[cutlass.Numeric],
        has_residual: bool,
    ) -> "Sm100Plan":
        """Resolve the stage counts for one dtype/epilogue and check SMEM and TMEM.

        ``act_dtype``: the activation/filter type; ``out_dtype``: the output (and source)
        type. Raises ``ValueError`` when the config does not fit, or ``tile_k`` is no k-tile
        of ``act_dtype``.
        """
        if self.ab_swizzle_bytes(act_dtype.width) not in K_TILE_BYTES:
            raise ValueError(
                f"tile_k={self.tile_k} with {act_dtype.width}-bit inputs is a "
                f"{self.ab_swizzle_bytes(act_dtype.width)}-byte k-tile; it must be "
                f"{' or '.join(map(str, K_TILE_BYTES))} bytes (16-bit: tile_k 32 or 64, "
                "fp8: 64 or 128)"
            )
        bm, bn, bk = self.block_tile_shape
        om, on = self.output_tile_shape
        ab_stage_bytes = (bm + bn) * bk * act_dtype.width // 8
        subtile_bytes = om * on * out_dtype.width // 8
        source_stages = 0
        if has_residual:
            source_stages = self.source_stages or self.mma_n // self.epi_n

        def size(ab_stages: int, src_stages: int) -> int:
            return _smem_bytes(self, act_dtype, out_dtype, ab_stages, src_stages)

        def ab_fit(src_stages: int) -> int:
            fixed = size(0, src_stages)
            return (SMEM_CAPACITY_SM100 - fixed) // ab_stage_bytes

        if has_residual and self.source_stages == 0:
            while source_stages > 1 and ab_fit(source_stages) < MIN_AUTO_AB_STAGES:
                source_stages //= 2
        fit = ab_fit(source_stages)
        stages = self.stages or min(fit, MAX_STAGES)
        if stages < MIN_STAGES or stages > fit:
            raise ValueError(
                f"stages={stages} does not fit: an A/B stage takes {ab_stage_bytes} bytes, the "
                f"output ({self.output_stages} x {subtile_bytes} bytes) and source "
                f"({source_stages} x {subtile_bytes} bytes) subtiles and barriers leave room "
                f"for {MIN_STAGES}..{fit} stages in {SMEM_CAPACITY_SM100} bytes of SMEM"
            )
        return Sm100Plan(
            config=self,
            ab_stages=stages,
            source_stages=source_stages,
            smem_bytes=size(stages, source_stages),
            tmem_columns=self.tmem_columns(),
        )


@dataclass(frozen=True)
class Sm100Plan:
    """A config resolved for one dtype/epilogue: what the kernel is compiled with."""

    config: Conv2dConfigSm100
    ab_stages: int
    source_stages: int  # 0 without a residual
    smem_bytes: int  # sizeof(Conv2dSmem): what the kernel asks for
    tmem_columns: int

    def __post_init__(self) -> None:
        if self.smem_bytes > SMEM_CAPACITY_SM100:
            raise ValueError(
                f"shared storage of {self.smem_bytes} bytes exceeds the SM100 limit of "
                f"{SMEM_CAPACITY_SM100} bytes"
            )
        if self.tmem_columns > TMEM_COLUMNS_SM100:
            raise ValueError(
                f"{self.tmem_columns} TMEM columns exceeds the SM100 limit of {TMEM_COLUMNS_SM100}"
            )


def _smem_bytes(
    cfg: Conv2dConfigSm100,
    act_dtype: Type[cutlass.Numeric],
    out_dtype: Type[cutlass.Numeric],
    ab_stages: int,
    src_stages: int,
) -> int:
    bm, bn, bk = cfg.block_tile_shape
    om, on = cfg.output_tile_shape
    struct = conv2d_smem_struct(
        act_dtype=act_dtype,
        out_dtype=out_dtype,
        act_elems=bm * bk * ab_stages,
        filter_elems=bn * bk * ab_stages,
        out_elems=om * on * cfg.output_stages,
        src_elems=om * on * src_stages,
        ab_stages=ab_stages,
        acc_stages=cfg.acc_stages,
        clc_stages=cfg.clc_stages,
        src_stages=src_stages,
    )
    return struct.__sizeof__()


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {value}")
