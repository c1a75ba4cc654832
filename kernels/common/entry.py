"""The seam between the host and every conv kernel: one typed structure of launch parameters.

A launch takes ``ConvLaunchParams``: the device pointers (``ConvPointers``), the runtime
geometry (``ConvGeometry``), the epilogue's scalars and the bound of the persistent grid. Each
kernel class implements ``launch(params, stream)``. The compiled entry point (``__call__``)
takes the same values flattened, because TVM-FFI calls it with positional scalars (the
launch's hot path); its parameter list is checked against ``ConvLaunchParams.flat_names()`` when
this module is imported, so the order is stated once, by the NamedTuples.
"""

import inspect
from typing import NamedTuple, Optional, Tuple, Type

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from .epilogue import EpilogueSpec
from .im2col import ConvGeometry


class ConvPointers(NamedTuple):
    """The device pointers of one launch. ``source``, ``bias`` and ``scale`` are read only by
    the epilogue terms that use them; ``act_scale`` and ``filter_scale`` (one float32 each) by
    a kernel of fp8 inputs, ``out_scale`` (one float32) by one of fp8 output, ``amax`` (one
    float32, raised to the output's amax) by one with ``EpilogueSpec.has_amax``,
    ``source_scale`` (one float32, a factor of ``beta``) by one with
    ``EpilogueSpec.has_source_scale``; ``partials``
    (float32) only by a stream-K kernel and ``flags`` (int32) by a stream-K or dynamically
    scheduled one: otherwise they may be null."""

    act: cute.Pointer
    filter: cute.Pointer
    out: cute.Pointer
    source: cute.Pointer
    bias: cute.Pointer
    scale: cute.Pointer
    act_scale: cute.Pointer
    filter_scale: cute.Pointer
    out_scale: cute.Pointer
    amax: cute.Pointer
    source_scale: cute.Pointer
    partials: cute.Pointer
    flags: cute.Pointer


class ConvLaunchParams(NamedTuple):
    """Everything a launch takes at run time: one compiled kernel serves any of these."""

    pointers: ConvPointers
    geometry: ConvGeometry
    alpha: cutlass.Float32  # scales the accumulator
    beta: cutlass.Float32  # scales the residual source
    # The persistent grid's bound: clusters that can be resident at once (SMs / cluster size, or
    # fewer where the GPCs hold fewer: ``cute_conv.occupancy``).
    max_clusters: cutlass.Int32

    @staticmethod
    def flat_names() -> Tuple[str, ...]:
        """The entry point's parameters, in order: pointers, geometry, then the scalars."""
        pointers = tuple(f"{name}_ptr" for name in ConvPointers._fields)
        return pointers + ConvGeometry._fields + ConvLaunchParams._fields[2:]


SIXTEEN_BIT_TYPES = (cutlass.BFloat16, cutlass.Float16)
FP8_TYPES = (cutlass.Float8E4M3FN, cutlass.Float8E5M2)
WIDE_OUT_TYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.Float32)


def check_kernel_dtypes(act_dtype, filter_dtype, out_dtype) -> None:
    """Raise ``TypeError`` unless the inputs are one 16-bit type or two fp8 types and the
    output one the epilogue writes: a 16-bit type, float32 or Float8E4M3FN (saturating)."""
    fp8 = act_dtype in FP8_TYPES and filter_dtype in FP8_TYPES
    if not (fp8 or (act_dtype in SIXTEEN_BIT_TYPES and filter_dtype == act_dtype)):
        raise TypeError(
            f"act_dtype and filter_dtype must both be BFloat16, both Float16, or each "
            f"Float8E4M3FN or Float8E5M2, got {act_dtype} and {filter_dtype}"
        )
    out_types = WIDE_OUT_TYPES + (cutlass.Float8E4M3FN,)
    if out_dtype not in out_types:
        raise TypeError(
            f"out_dtype must be one of {', '.join(t.__name__ for t in out_types)} with "
            f"{act_dtype.__name__} inputs, got {out_dtype}"
        )


class MainloopOperands(NamedTuple):
    """The A and B operands as a launch hands them to its device kernel: the TMA atoms and
    the tensors they load from (the activation's im2col or halo view, the filter's GEMM
    view)."""

    tma_atom_a: cute.CopyAtom
    mA_mk: cute.Tensor
    tma_atom_b: cute.CopyAtom
    mB_nk: cute.Tensor


class ConvKernelEntry:
    """Base of the kernel classes: the constructor every arch shares, and ``__call__``, the
    compiled entry point. A subclass names its config class in ``config_class`` and
    implements ``_configure`` (its attributes, from the checked arguments) and
    ``launch(params, stream)``.

    :param act_dtype, filter_dtype: input types: both BFloat16 or both Float16, or each
        Float8E4M3FN or Float8E5M2 (the epilogue then multiplies the accumulator by the
        per-tensor ``act_scale`` and ``filter_scale``).
    :param out_dtype: BFloat16, Float16 or Float32; Float8E4M3FN (saturating) too for fp8
        inputs.
    :param config: an instance of the arch's ``config_class``.
    :param epilogue: the fused epilogue terms (default: a plain store), see ``EpilogueSpec``.
    """

    config_class: type

    def __init__(
        self,
        act_dtype: Type[cutlass.Numeric],
        filter_dtype: Type[cutlass.Numeric],
        out_dtype: Type[cutlass.Numeric],
        config: object,
        epilogue: Optional[EpilogueSpec] = None,
    ):
        check_kernel_dtypes(act_dtype, filter_dtype, out_dtype)
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"config must be a {self.config_class.__name__}, got {type(config).__name__}"
            )
        self.act_dtype = act_dtype
        self.filter_dtype = filter_dtype
        self.out_dtype = out_dtype
        self.acc_dtype = cutlass.Float32
        self.config = config
        self.epilogue = EpilogueSpec() if epilogue is None else epilogue
        self._configure()

    def _configure(self) -> None:
        """The arch's compile-time attributes, from ``config`` and the dtypes."""
        raise NotImplementedError

    @cute.jit
    def __call__(
        self,
        act_ptr: cute.Pointer,
        filter_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        source_ptr: cute.Pointer,
        bias_ptr: cute.Pointer,
        scale_ptr: cute.Pointer,
        act_scale_ptr: cute.Pointer,
        filter_scale_ptr: cute.Pointer,
        out_scale_ptr: cute.Pointer,
        amax_ptr: cute.Pointer,
        source_scale_ptr: cute.Pointer,
        partials_ptr: cute.Pointer,
        flags_ptr: cute.Pointer,
        n: cutlass.Int32,
        h: cutlass.Int32,
        w: cutlass.Int32,
        c: cutlass.Int32,
        k: cutlass.Int32,
        r: cutlass.Int32,
        s: cutlass.Int32,
        p: cutlass.Int32,
        q: cutlass.Int32,
        pad_top: cutlass.Int32,
        pad_bottom: cutlass.Int32,
        pad_left: cutlass.Int32,
        pad_right: cutlass.Int32,
        stride_h: cutlass.Int32,
        stride_w: cutlass.Int32,
        dil_h: cutlass.Int32,
        dil_w: cutlass.Int32,
        out_pixel_stride: cutlass.Int32,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        max_clusters: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        """``ConvLaunchParams`` flattened (see the module docstring)."""
        pointers = ConvPointers(
            act_ptr, filter_ptr, out_ptr, source_ptr, bias_ptr, scale_ptr, act_scale_ptr,
            filter_scale_ptr, out_scale_ptr, amax_ptr, source_scale_ptr, partials_ptr, flags_ptr,
        )  # fmt: skip
        geometry = ConvGeometry(
            n, h, w, c, k, r, s, p, q,
            pad_top, pad_bottom, pad_left, pad_right, stride_h, stride_w, dil_h, dil_w,
            out_pixel_stride,
        )  # fmt: skip
        self.launch(ConvLaunchParams(pointers, geometry, alpha, beta, max_clusters), stream)


def _check_entry_order() -> None:
    """The entry's parameters must be ``ConvLaunchParams.flat_names()`` and the stream."""
    entry = inspect.unwrap(ConvKernelEntry.__call__)
    names = tuple(inspect.signature(entry).parameters)[1:]
    expected = ConvLaunchParams.flat_names() + ("stream",)
    if names != expected:
        raise TypeError(f"ConvKernelEntry.__call__ takes {names}, ConvLaunchParams {expected}")


_check_entry_order()
