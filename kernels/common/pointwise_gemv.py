"""1x1 convs of a few output pixels on CUDA cores: a GEMV-like kernel with the fused epilogue.

A 1x1 conv of GEMM M = N*P*Q <= a few dozen rows (RegNet's and EfficientNet's
squeeze-excitation convs on 1x1 maps, batch-1 heads on 7x7 and 14x14 maps) is a
matrix-vector product: its time is the launch, the first loads' latency and the store, not
the math. The tensor-core kernels spend their prologue (ring barriers, the cluster sync, TMA
descriptors) and a pipeline fill on one or two tiles there; cuDNN runs a ``gemv`` kernel.

Each warp owns ``channels_per_warp`` output channels of ``rows`` output pixels: its lanes take
consecutive ``vector``-channel vectors of the activation rows and the filter rows (coalesced
loads, ``unroll`` of them per lane in flight), multiply them into float32 sums, reduce the
sums across the warp with butterfly shuffles, and each of its first ``rows *
channels_per_warp`` lanes runs the epilogue (``apply_epilogue``) on one sum and stores one
value. CTAs tile the output channels along x and the rows along y. With an amax
(``EpilogueSpec.has_amax``) each warp raises it once, by an atomic max of its lanes' largest
magnitude.

No shared memory, no barriers: the kernel's whole setup is its index arithmetic. It is
launched with programmatic dependent launch and waits for the previous grid before its
first load.
"""

from dataclasses import dataclass
from typing import Optional

import cutlass
import cutlass.cute as cute

from .channel_rows import channel_row_stride
from .dependent_launch import wait_for_previous_grid
from .entry import SIXTEEN_BIT_TYPES, WIDE_OUT_TYPES, ConvKernelEntry, ConvLaunchParams
from .epilogue import apply_epilogue

WARPS = 4
_THREADS = WARPS * 32
VECTOR_WIDTHS = (8, 4, 2, 1)  # 16-bit channels per load: 16, 8, 4 or 2 bytes
ROW_COUNTS = (1, 2, 4, 8)
CHANNELS_PER_WARP = (1, 2, 4, 8)
UNROLLS = (1, 2, 4)
MAX_SUMS_PER_WARP = 32  # rows * channels_per_warp: one lane stores each sum


@dataclass(frozen=True)
class PointwiseGemvConfig:
    """The shape of ``PointwiseGemv``'s work: compile-time, part of the kernel's cache key.

    Attributes:
        vector: channels per load (8, 4, 2 or 1; C must be a multiple of it).
        rows: output pixels per CTA (1, 2, 4 or 8).
        channels_per_warp: output channels per warp (1, 2, 4 or 8); a CTA's four warps take
            ``4 * channels_per_warp`` of them.
        unroll: vectors each lane loads per operand row before it multiplies any (1, 2 or 4).
    """

    vector: int = 8
    rows: int = 1
    channels_per_warp: int = 2
    unroll: int = 2

    def __post_init__(self) -> None:
        for name, allowed in (
            ("vector", VECTOR_WIDTHS),
            ("rows", ROW_COUNTS),
            ("channels_per_warp", CHANNELS_PER_WARP),
            ("unroll", UNROLLS),
        ):
            value = getattr(self, name)
            if type(value) is not int:
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value}")
        if self.rows * self.channels_per_warp > MAX_SUMS_PER_WARP:
            raise ValueError(
                f"rows * channels_per_warp must be at most {MAX_SUMS_PER_WARP} (a lane stores "
                f"each sum), got {self.rows} * {self.channels_per_warp}"
            )

    @property
    def sums(self) -> int:
        """The float32 sums each lane keeps: one per (row, channel) of its warp."""
        return self.rows * self.channels_per_warp


class PointwiseGemv(ConvKernelEntry):
    """A 1x1 conv without padding (any stride) of 16-bit inputs as warp-reduced dot products.

    The launch takes ``ConvLaunchParams`` as the tensor-core kernels do (the input and
    output fp8 scales and the workspace pointers unused); the epilogue is theirs
    (``apply_epilogue``, the amax and the source's device scale included), for a 16-bit or
    float32 output stored by the threads.
    """

    config_class = PointwiseGemvConfig

    def _configure(self) -> None:
        if self.act_dtype not in SIXTEEN_BIT_TYPES:
            raise TypeError(f"PointwiseGemv takes 16-bit inputs, got {self.act_dtype}")
        if self.out_dtype not in WIDE_OUT_TYPES:
            raise TypeError(
                f"PointwiseGemv writes a 16-bit or float32 output, got {self.out_dtype}"
            )
        self.vector = self.config.vector
        self.rows = self.config.rows
        self.channels_per_warp = self.config.channels_per_warp
        self.unroll = self.config.unroll

    def smem_bytes(self) -> int:
        """Shared memory the kernel asks for: none."""
        return 0

    @cute.jit
    def launch(self, params: ConvLaunchParams, stream):
        ptrs, geo = params.pointers, params.geometry
        vector = self.vector
        vectors = geo.c // vector  # C is a multiple of the vector
        c = channel_row_stride(vectors, vector)
        # Output pixel m = (n, p, q), q fastest, reads input pixel (n, p * stride_h, q * stride_w).
        m_a = cute.make_tensor(
            ptrs.act,
            cute.make_layout(
                (vector, vectors, (geo.q, geo.p, geo.n)),
                stride=(1, vector, (c * geo.stride_w, c * geo.w * geo.stride_h, c * geo.w * geo.h)),
            ),
        )
        m_b = cute.make_tensor(
            ptrs.filter, cute.make_layout((vector, vectors, geo.k), stride=(1, vector, c))
        )
        rows = geo.n * geo.p * geo.q
        out_pixels = cutlass.Int64(geo.out_pixel_stride)
        m_d = cute.make_tensor(ptrs.out, cute.make_layout((geo.k, rows), stride=(1, out_pixels)))
        source_layout = cute.make_layout((geo.k, rows), stride=(1, cutlass.Int64(geo.k)))
        m_c = cute.make_tensor(ptrs.source, source_layout)
        m_bias = cute.make_tensor(ptrs.bias, cute.make_layout(geo.k))
        m_scale = cute.make_tensor(ptrs.scale, cute.make_layout(geo.k))
        m_amax = cute.make_tensor(ptrs.amax, cute.make_layout(1))
        m_source_scale = cute.make_tensor(ptrs.source_scale, cute.make_layout(1))
        channels_per_cta = WARPS * self.channels_per_warp
        self.kernel(
            m_a, m_b, m_d, m_c, m_bias, m_scale, m_amax, m_source_scale, params.alpha, params.beta
        ).launch(
            grid=(
                (geo.k + channels_per_cta - 1) // channels_per_cta,
                (rows + self.rows - 1) // self.rows,
                1,
            ),
            block=[_THREADS, 1, 1],
            stream=stream,
            use_pdl=True,
        )

    @cute.kernel
    def kernel(
        self,
        m_a: cute.Tensor,
        m_b: cute.Tensor,
        m_d: cute.Tensor,
        m_c: cute.Tensor,
        m_bias: cute.Tensor,
        m_scale: cute.Tensor,
        m_amax: cute.Tensor,
        m_source_scale: cute.Tensor,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        warp, lane = tidx // 32, tidx % 32
        k_count, m_count = m_d.shape
        vectors = cute.size(m_b, mode=[1])
        first_channel = (bidx * WARPS + warp) * self.channels_per_warp
        first_row = bidy * self.rows
        wait_for_previous_grid()
        if cutlass.const_expr(self.epilogue.has_source_scale):
            beta = beta * m_source_scale[0]

        sums = cute.make_rmem_tensor((self.rows, self.channels_per_warp), cutlass.Float32)
        sums.fill(0.0)
        acts = cute.make_rmem_tensor((self.vector, self.unroll, self.rows), self.act_dtype)
        flts = cute.make_rmem_tensor(
            (self.vector, self.unroll, self.channels_per_warp), self.filter_dtype
        )
        # Rows and channels past the output are clamped to the last one, their sums never
        # stored; vectors past C are zero.
        step = 32 * self.unroll
        for start in cutlass.range(0, vectors, step):
            acts.fill(0.0)
            flts.fill(0.0)
            for u in cutlass.range_constexpr(self.unroll):
                v = start + u * 32 + lane
                if v < vectors:
                    for r in cutlass.range_constexpr(self.rows):
                        row = cutlass.min(first_row + r, m_count - 1)
                        cute.autovec_copy(m_a[(None, v, row)], acts[(None, u, r)])
                    for j in cutlass.range_constexpr(self.channels_per_warp):
                        channel = cutlass.min(first_channel + j, k_count - 1)
                        cute.autovec_copy(m_b[(None, v, channel)], flts[(None, u, j)])
            a = acts.load().to(cutlass.Float32)
            b = flts.load().to(cutlass.Float32)
            wide_a = cute.make_rmem_tensor(acts.shape, cutlass.Float32)
            wide_b = cute.make_rmem_tensor(flts.shape, cutlass.Float32)
            wide_a.store(a)
            wide_b.store(b)
            for r in cutlass.range_constexpr(self.rows):
                for j in cutlass.range_constexpr(self.channels_per_warp):
                    for u in cutlass.range_constexpr(self.unroll):
                        for e in cutlass.range_constexpr(self.vector):
                            sums[r, j] += wide_a[e, u, r] * wide_b[e, u, j]

        # Every lane ends with every sum; lane i keeps sum i.
        mine = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(self.rows * self.channels_per_warp):
            r, j = divmod(i, self.channels_per_warp)
            total = cute.arch.warp_reduction(sums[r, j], lambda x, y: x + y)
            if lane == i:
                mine = total
        r = lane // self.channels_per_warp
        channel = first_channel + lane - r * self.channels_per_warp
        row = first_row + r
        magnitude = cutlass.Float32(0.0)
        if lane < self.rows * self.channels_per_warp and row < m_count and channel < k_count:
            magnitude = self.store(mine, row, channel, m_d, m_c, m_bias, m_scale, alpha, beta)
        if cutlass.const_expr(self.epilogue.has_amax):
            # Magnitudes are non-negative (a NaN as a positive one): they order as their bits.
            warp_max = cute.arch.warp_reduction(
                magnitude, lambda a, b: cute.arch.fmax(a, b, nan=True)
            )
            if lane == 0:
                cute.arch.atomic_fmax(m_amax.iterator, warp_max, sign_bit=False)

    @cute.jit
    def store(
        self,
        total: cutlass.Float32,
        row: cutlass.Int32,
        channel: cutlass.Int32,
        m_d: cute.Tensor,
        m_c: cute.Tensor,
        m_bias: cute.Tensor,
        m_scale: cute.Tensor,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
    ):
        """One output value: the epilogue on ``total`` at (``row``, ``channel``); returns
        its magnitude as computed (for the amax)."""
        spec = self.epilogue
        value = cute.make_rmem_tensor((1,), cutlass.Float32)
        value[0] = total
        bias: Optional[cute.TensorSSA] = None
        scale: Optional[cute.TensorSSA] = None
        residual: Optional[cute.TensorSSA] = None
        term = cute.make_rmem_tensor((1,), cutlass.Float32)
        if cutlass.const_expr(spec.has_bias):
            term[0] = cutlass.Float32(m_bias[channel])
            bias = term.load()
        if cutlass.const_expr(spec.has_scale):
            term[0] = cutlass.Float32(m_scale[channel])
            scale = term.load()
        if cutlass.const_expr(spec.has_residual):
            term[0] = beta * cutlass.Float32(m_c[channel, row])
            residual = term.load()
        y = apply_epilogue(spec, value.load(), alpha, scale, bias, residual)
        out = cute.make_rmem_tensor((1,), self.out_dtype)
        out.store(y.to(self.out_dtype))
        m_d[channel, row] = out[0]
        result = cute.make_rmem_tensor((1,), cutlass.Float32)
        result.store(y)
        return cute.math.absf(result[0])
