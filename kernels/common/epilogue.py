"""The fused epilogue shared by the conv kernels: its compile-time spec and its math.

    D = epilogue_fn(act(alpha * acc * scale[k] + bias[k])) + beta * C      (after_activation)
    D = epilogue_fn(act(alpha * acc * scale[k] + bias[k] + beta * C))      (before_activation)

applied in fp32 registers to every accumulator element. ``alpha`` and ``beta`` are runtime
scalars; which terms exist is compile time (``EpilogueSpec``), so a kernel without bias loads no
bias and a kernel without residual has no source-tile loader. Bias and scale are read in their own
dtype (``EpilogueSpec.vector_dtype``) and converted to fp32 as they are loaded, so a bf16 bias
needs no conversion launch on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from .im2col import ConvGeometry, output_gemm_view

if TYPE_CHECKING:  # entry imports this module
    from .entry import ConvPointers

# Element types the kernels read bias and scale vectors in (names as in ``cute_conv.compile``).
VECTOR_DTYPES = ("float32", "bfloat16", "float16")
L2_LINE_BYTES = 128  # what one prefetch_channel_vectors probe brings into L2
LEAKY_RELU_SLOPE = 0.01  # torch.nn.functional.leaky_relu's default
# Where the residual ``beta * C`` joins: after the activation (and epilogue_fn), as a skip
# connection around a block, or before it, as ResNet's ``relu(bn(conv(x)) + identity)``.
RESIDUAL_ORDERS = ("after_activation", "before_activation")


def _relu(x):
    return cute.where(x > 0.0, x, cute.full_like(x, 0.0))


def _leaky_relu(x):
    return cute.where(x > 0.0, x, x * LEAKY_RELU_SLOPE)


def _gelu(x):
    return x * 0.5 * (1.0 + cute.math.erf(x * (1.0 / math.sqrt(2.0))))


def _gelu_tanh(x):
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return x * 0.5 * (1.0 + cute.math.tanh(inner))


def _sigmoid(x):
    return 1.0 / (1.0 + cute.math.exp(-x))


def _silu(x):
    return x / (1.0 + cute.math.exp(-x))


def _tanh(x):
    return cute.math.tanh(x)


def _mish(x):
    # as torch computes it: a large x's exp overflows to inf, tanh(inf) = 1, so mish(x) = x
    return x * cute.math.tanh(cute.math.log1p(cute.math.exp(x)))


def _relu6(x):
    """``x`` clamped to [0, 6], NaN kept (as torch's ``relu6``, ``hardsigmoid``)."""
    t = cute.where(x < 0.0, cute.full_like(x, 0.0), x)
    return cute.where(t > 6.0, cute.full_like(t, 6.0), t)


def _hardsigmoid(x):
    return _relu6(x + 3.0) * (1.0 / 6.0)


def _hardswish(x):
    return x * _hardsigmoid(x)


# Name -> elementwise function on an fp32 TensorSSA. Names follow torch.nn.functional.
ACTIVATIONS: dict[str, Callable] = {
    "relu": _relu,
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": _silu,
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "leaky_relu": _leaky_relu,
    "mish": _mish,
    "relu6": _relu6,
    "hardswish": _hardswish,
    "hardsigmoid": _hardsigmoid,
}


@dataclass(frozen=True)
class EpilogueSpec:
    """Which epilogue terms a kernel is compiled with. Part of the compile-cache key.

    ``epilogue_fn`` is a user function of one fp32 TensorSSA (the value after the activation)
    returning a TensorSSA of the same shape; it is traced into the kernel, so it may use
    arithmetic operators and ``cutlass.cute.math`` functions. ``vector_dtype`` is the element
    type of the bias and scale vectors in global memory, one of ``VECTOR_DTYPES``.
    ``residual_order`` (one of ``RESIDUAL_ORDERS``) places the residual after the activation
    or before it; it only matters with ``has_residual``.

    ``store_by_threads``: the epilogue threads write the output to global memory themselves,
    each value under a bounds predicate, instead of staging it in SMEM for TMA stores, and
    read the residual source the same way (no source-load warp, no C buffers). For outputs
    whose rows are not whole 16-byte units (K not a multiple of 8 16-bit values), which TMA
    cannot address: the kernel then runs them without a padded scratch output.
    ``thread_store_pairs`` (with ``store_by_threads``, for an even K): each thread stores,
    and reads the residual as, pairs of adjacent channels in one access of twice the
    element's width (both MMAs give a thread its values in column pairs from an even column,
    and an even K keeps every pair inside one row, aligned).
    ``bulk_tile_store`` (with ``store_by_threads``, without a residual; SM90 tiles along M,
    no ping-pong): each output tile holds whole output rows (its N tile all of K), so its
    rows are one contiguous range of the output; the threads write their values into a dense
    copy of the tile in SMEM and one bulk copy moves it out (``bulk_store_tile``). With a
    residual it measured slower than the threads' own stores, so it is not offered there.

    ``has_amax``: the kernel also raises a float32 in global memory to the largest magnitude
    of the output values it stores, as computed (before an fp8 output's ``1 / out_scale``
    and the rounding to the output type; a NaN wins): the next layer's fp8 scale, without a
    pass over the output. Each consumer thread keeps its running max over the values inside
    the output, and each warp adds it with one atomic max when the kernel ends.

    ``has_source_scale``: ``beta`` is multiplied by a float32 the kernel reads from global
    memory (an fp8 source's per-tensor scale as a device tensor, which a CUDA graph replays
    with its current value: delayed scaling).
    """

    has_bias: bool = False
    has_scale: bool = False
    activation: Optional[str] = None
    epilogue_fn: Optional[Callable] = None
    has_residual: bool = False
    vector_dtype: str = "float32"
    residual_order: str = "after_activation"
    store_by_threads: bool = False
    thread_store_pairs: bool = False
    bulk_tile_store: bool = False
    has_amax: bool = False
    has_source_scale: bool = False

    def __post_init__(self) -> None:
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation={self.activation!r} is not supported; use None or one of "
                f"{', '.join(ACTIVATIONS)}"
            )
        if self.epilogue_fn is not None and not callable(self.epilogue_fn):
            raise TypeError(f"epilogue_fn must be callable, got {type(self.epilogue_fn).__name__}")
        if self.vector_dtype not in VECTOR_DTYPES:
            raise ValueError(
                f"vector_dtype={self.vector_dtype!r} is not supported; use one of "
                f"{', '.join(VECTOR_DTYPES)}"
            )
        if self.residual_order not in RESIDUAL_ORDERS:
            raise ValueError(
                f"residual_order={self.residual_order!r} is not supported; use one of "
                f"{', '.join(RESIDUAL_ORDERS)}"
            )
        for flag in ("thread_store_pairs", "bulk_tile_store"):
            if getattr(self, flag) and not self.store_by_threads:
                raise ValueError(f"{flag}=True needs store_by_threads=True")
        if self.bulk_tile_store and self.has_residual:
            raise ValueError("bulk_tile_store=True is for outputs without a residual")
        if not self.has_residual:
            # Without a residual the order and the source's scale change nothing: one
            # spelling, one cached kernel.
            object.__setattr__(self, "residual_order", RESIDUAL_ORDERS[0])
            object.__setattr__(self, "has_source_scale", False)

    @property
    def residual_before_activation(self) -> bool:
        return self.has_residual and self.residual_order == "before_activation"

    @property
    def loads_source_by_tma(self) -> bool:
        """A residual read through SMEM, filled by a source-load warp's TMA loads (every
        residual kernel but those that store by threads, whose threads read C themselves)."""
        return self.has_residual and not self.store_by_threads

    @property
    def needs_output_coords(self) -> bool:
        """Whether the epilogue predicates values by their output coordinates: to store them
        by threads, or to leave the tiles' values past the output out of the amax."""
        return self.store_by_threads or self.has_amax

    @property
    def has_channel_vectors(self) -> bool:
        return self.has_bias or self.has_scale

    @property
    def name(self) -> str:
        """A short id for logs and test names, e.g. ``bias-relu-residual``."""
        parts = [flag for flag, on in (("scale", self.has_scale), ("bias", self.has_bias)) if on]
        if self.activation:
            parts.append(self.activation)
        if self.epilogue_fn is not None:
            parts.append("fn")
        if self.has_residual:
            parts.append("residual-pre-act" if self.residual_before_activation else "residual")
        if self.has_source_scale:
            parts.append("source-scale")
        name = "-".join(parts) or "linear"
        if self.has_amax:
            name = f"{name}-amax"
        if self.store_by_threads:
            name = f"{name}-thread-store"
        if self.thread_store_pairs:
            name = f"{name}-pairs"
        return f"{name}-bulk" if self.bulk_tile_store else name


@cute.jit
def apply_epilogue(
    spec: cutlass.Constexpr,
    acc: cute.TensorSSA,
    alpha: cutlass.Float32,
    scale: Optional[cute.TensorSSA],
    bias: Optional[cute.TensorSSA],
    residual: Optional[cute.TensorSSA],
) -> cute.TensorSSA:
    """The whole epilogue, in the documented order, on fp32 values. ``residual`` is
    ``beta * C`` (None without a residual), added where ``spec.residual_order`` says."""
    y = acc * alpha
    if cutlass.const_expr(spec.has_scale):
        y = y * scale
    if cutlass.const_expr(spec.has_bias):
        y = y + bias
    if cutlass.const_expr(spec.residual_before_activation):
        y = y + residual
    if cutlass.const_expr(spec.activation is not None):
        y = ACTIVATIONS[spec.activation](y)
    if cutlass.const_expr(spec.epilogue_fn is not None):
        y = spec.epilogue_fn(y)
    if cutlass.const_expr(spec.has_residual and not spec.residual_before_activation):
        y = y + residual
    return y


def channel_count_vector(
    spec: cutlass.Constexpr, m_bias: Optional[cute.Tensor], m_scale: Optional[cute.Tensor]
) -> cute.Tensor:
    """Trace time: the vector whose length (K) clamps the channels a tile's N tail reads:
    the bias where the epilogue has one, else the scale."""
    return m_bias if cutlass.const_expr(spec.has_bias) else m_scale


@cute.jit
def load_channel_vectors(
    spec: cutlass.Constexpr,
    m_bias: Optional[cute.Tensor],
    m_scale: Optional[cute.Tensor],
    coords: cute.Tensor,
    subtile_n0: cutlass.Int32,
    r_bias: cute.Tensor,
    r_scale: cute.Tensor,
):
    """Per-channel bias/scale (fp32) for a thread's values of one epilogue subtile.

    ``coords`` holds the (m, n) position inside the subtile of each of the thread's values,
    ``subtile_n0`` the subtile's first channel. The vectors are read through L1/L2 in
    ``spec.vector_dtype`` and converted here.
    """
    last_channel = cute.size(channel_count_vector(spec, m_bias, m_scale)) - 1
    for v in cutlass.range_constexpr(cute.size(r_bias)):
        # Clamped: values past K (the N tail) are computed but clipped by the TMA store.
        channel = cutlass.min(subtile_n0 + coords[v][1], last_channel)
        if cutlass.const_expr(spec.has_bias):
            r_bias[v] = cutlass.Float32(m_bias[channel])
        if cutlass.const_expr(spec.has_scale):
            r_scale[v] = cutlass.Float32(m_scale[channel])


@cute.jit
def prefetch_channel_vectors(
    spec: cutlass.Constexpr,
    m_bias: Optional[cute.Tensor],
    m_scale: Optional[cute.Tensor],
    tile_n0: cutlass.Int32,
    tile_n: cutlass.Constexpr,
    tidx: cutlass.Int32,
):
    """Bring the bias/scale of an output tile's channels ``[tile_n0, tile_n0 + tile_n)`` into
    L2, one line per thread of the first few (``tidx`` among the tile's threads).

    Called before the tile's mainloop: the lines land while it runs, so that the epilogue's
    loads of them (``load_channel_vectors``, after it) hit L2. Otherwise they wait on DRAM
    after the last MMA, the one load of a short conv's tile that nothing else hides. The
    probes step a line apart from the first channel, plus the last: together they touch
    every line of the range, however it straddles them.
    """
    if cutlass.const_expr(spec.has_channel_vectors):
        ref = channel_count_vector(spec, m_bias, m_scale)
        per_line = L2_LINE_BYTES * 8 // ref.element_type.width
        probes = (tile_n + per_line - 1) // per_line + 1
        if tidx < probes:
            last = cutlass.min(tile_n0 + tile_n, cute.size(ref)) - 1
            channel = cutlass.min(tile_n0 + tidx * per_line, last)
            if cutlass.const_expr(spec.has_bias):
                cute.arch.prefetch((m_bias.iterator + channel).llvm_ptr, cache_level="L2")
            if cutlass.const_expr(spec.has_scale):
                cute.arch.prefetch((m_scale.iterator + channel).llvm_ptr, cache_level="L2")


class EpilogueOperands(NamedTuple):
    """The epilogue's global operands of one launch (C, bias and scale None where the spec
    leaves them out): what ``make_epilogue_operands`` builds and every kernel takes."""

    tma_atom_d: Optional[cute.CopyAtom]  # None: stored by threads
    mD_mn: cute.Tensor  # the output, as the TMA store's tensor (stored by threads: in memory)
    tma_atom_c: Optional[cute.CopyAtom]
    # The residual source, as its TMA load's tensor (stored by threads: in memory).
    mC_mn: Optional[cute.Tensor]
    m_bias: Optional[cute.Tensor]
    m_scale: Optional[cute.Tensor]
    # fp8 inputs: the per-tensor dequantization scales of activation and filter; fp8 output:
    # the output's scale (stored value = result / out_scale). One float32 each, else None.
    m_act_scale: Optional[cute.Tensor]
    m_filter_scale: Optional[cute.Tensor]
    m_out_scale: Optional[cute.Tensor]
    m_amax: Optional[cute.Tensor]  # the output's amax (one float32), None unless has_amax
    # beta's device factor (one float32), None unless has_source_scale
    m_source_scale: Optional[cute.Tensor]


def make_epilogue_operands(
    spec: EpilogueSpec,
    geom: ConvGeometry,
    ptrs: ConvPointers,
    epi_smem_layout: cute.ComposedLayout,
    source_smem_layout: cute.ComposedLayout,
    epi_tile: tuple,
    output_view: Callable = output_gemm_view,
    *,
    dequantize: bool = False,
    quantize_output: bool = False,
) -> EpilogueOperands:
    """The epilogue's global operands from a launch's ``ConvPointers``, as every kernel's
    host launch builds them. The output is stored and the residual C loaded by tiled TMA in
    ``epi_tile`` subtiles of ``output_view`` (by default the (N*P*Q, K) GEMM view), the
    output's pixels ``geom.out_pixel_stride`` apart and C's K apart; C, bias
    and scale are None where ``spec`` leaves them out, the activation and filter scales
    unless ``dequantize`` (fp8 inputs), the output scale unless ``quantize_output``. With
    ``spec.store_by_threads`` there are no store or source atoms, and the output and source
    are ``output_view`` of their pointers themselves."""
    if cutlass.const_expr(spec.store_by_threads):
        tma_atom_d, tma_tensor_d = None, output_view(ptrs.out, geom, geom.out_pixel_stride)
    else:
        tma_atom_d, tma_tensor_d = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(),
            output_view(ptrs.out, geom, geom.out_pixel_stride),
            epi_smem_layout,
            epi_tile,
        )
    tma_atom_c, tma_tensor_c = None, None
    if cutlass.const_expr(spec.has_residual and spec.store_by_threads):
        tma_tensor_c = output_view(ptrs.source, geom, geom.k)
    elif cutlass.const_expr(spec.has_residual):
        tma_atom_c, tma_tensor_c = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(),
            output_view(ptrs.source, geom, geom.k),
            source_smem_layout,
            epi_tile,
        )
    channel_vector = cute.make_layout(geom.k)
    m_bias = cute.make_tensor(ptrs.bias, channel_vector) if spec.has_bias else None
    m_scale = cute.make_tensor(ptrs.scale, channel_vector) if spec.has_scale else None
    scalar = cute.make_layout(1)
    m_act_scale = cute.make_tensor(ptrs.act_scale, scalar) if dequantize else None
    m_filter_scale = cute.make_tensor(ptrs.filter_scale, scalar) if dequantize else None
    m_out_scale = cute.make_tensor(ptrs.out_scale, scalar) if quantize_output else None
    m_amax = cute.make_tensor(ptrs.amax, scalar) if spec.has_amax else None
    m_source_scale = None
    if cutlass.const_expr(spec.has_source_scale):
        m_source_scale = cute.make_tensor(ptrs.source_scale, scalar)
    return EpilogueOperands(
        tma_atom_d, tma_tensor_d, tma_atom_c, tma_tensor_c, m_bias, m_scale, m_act_scale,
        m_filter_scale, m_out_scale, m_amax, m_source_scale,
    )  # fmt: skip


def quantization_scalars(
    alpha: cutlass.Float32, beta: cutlass.Float32, operands: EpilogueOperands
) -> Tuple[cutlass.Float32, cutlass.Float32, Optional[cutlass.Float32]]:
    """In a kernel: ``alpha`` times the fp8 inputs' dequantization scales, ``beta`` times the
    source's scale (``has_source_scale``), and the factor the output is multiplied by before
    its saturating fp8 conversion (``1 / out_scale``; None for a wider output). The scales
    are device scalars, read once per thread, so a CUDA graph replays with whatever they
    hold (delayed scaling)."""
    if cutlass.const_expr(operands.m_act_scale is not None):
        alpha = alpha * operands.m_act_scale[0] * operands.m_filter_scale[0]
    if cutlass.const_expr(operands.m_source_scale is not None):
        beta = beta * operands.m_source_scale[0]
    out_factor = None
    if cutlass.const_expr(operands.m_out_scale is not None):
        out_factor = cutlass.Float32(1.0) / operands.m_out_scale[0]
    return alpha, beta, out_factor
