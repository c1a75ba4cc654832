"""Checks on the arguments of a Conv2D forward call.

``validate_conv_inputs`` runs before any launch and before any CUDA query, so everything it
checks is testable on a CPU with CPU tensors. ``validate_device`` runs after it and is the only
place that asks the CUDA runtime anything. Every error names the argument, the offending value
and the limit; nothing here writes to any tensor.

The limits are those of docs/ARCHITECTURE.md section 4: im2col-mode TMA on a 4-D tensor (pixel-box
corners in [-128, 127], traversal stride <= 8, filter span <= 255: ``IM2COL_2D``; the grouped
tensor cores' 5-D view is narrower, ``IM2COL_3D``) and the Int32 implicit-GEMM
M coordinate. A conv whose filter windows tile its input (``tiles_input``: a ViT-style patch
embedding) may have any stride: the kernel never runs it at that stride (see
``staging.patch_view``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from .problem import Conv2dProblemShape, Pair, normalize_padding, normalize_pair

__all__ = [
    "ALIGNMENT_BYTES",
    "ROW_ALIGNMENT_BYTES",
    "ARCH_TABLE",
    "check_alignment",
    "check_fp8_scales",
    "check_scale_tensor",
    "check_stride_dilation",
    "default_out_dtype",
    "FP8_DTYPES",
    "IM2COL_2D",
    "IM2COL_3D",
    "INPUT_DTYPES",
    "Im2colLimits",
    "OUTPUT_DTYPES",
    "channel_slice_stride",
    "check_compute_capability",
    "check_cuda_core_io",
    "check_problem_limits",
    "check_tensor",
    "cuda_core_io",
    "out_pixel_stride",
    "output_rows_unaligned",
    "slice_pixel_stride",
    "tiles_input",
    "validate_conv_inputs",
    "validate_device",
]

FP8_DTYPES: tuple[torch.dtype, ...] = (torch.float8_e4m3fn, torch.float8_e5m2)
INPUT_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, *FP8_DTYPES)
# float8_e4m3fn output is written (saturating) from any inputs.
OUTPUT_DTYPES: tuple[torch.dtype, ...] = (
    torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn
)
ALIGNMENT_BYTES = 16  # TMA global base addresses
# TMA row strides: C channel rows are padded to this; output rows that are not whole units of
# it are stored by the epilogue threads (``output_rows_unaligned``).
ROW_ALIGNMENT_BYTES = 16


class Im2colLimits(NamedTuple):
    """The im2col TMA's pixel-box limits, by the spatial rank of its view: the box corners'
    and the filter taps' offsets are signed and unsigned fields of 8 bits per spatial
    dimension on a 2-d conv's (4-d) view and of 5 on a 3-d conv's (5-d, the grouped tensor
    cores' ``activation_im2col_view``)."""

    max_pad_lo: int  # lower corner -pad_lo >= -max_pad_lo
    corner_min: int  # upper corner pad_hi - (R-1)*dilation in [corner_min, corner_max]
    corner_max: int
    max_filter_span: int  # (R-1)*dilation
    what: str  # the TMA the limits are of, for errors


IM2COL_2D = Im2colLimits(128, -128, 127, 255, "im2col TMA")
IM2COL_3D = Im2colLimits(
    16, -16, 15, 31, "3-d im2col TMA of grouped convs on the tensor cores (groups as its batch)"
)
MIN_STRIDE, MAX_STRIDE = 1, 8  # im2col traversal stride
MAX_GEMM_M = 2**31  # exclusive: N*P*Q is an Int32 coordinate


class Arch(NamedTuple):
    """What cute_conv does on one compute capability."""

    name: str  # the CUDA arch the kernels are compiled for
    gpus: str
    runnable: bool  # dispatched to on this compute capability
    # False: compile-verified only (built for the arch and checked on its PTX on a CPU), never
    # run on such a GPU by this project.
    hardware_verified: bool = True


# One entry per compute capability cute_conv knows. sm_100a is dispatched to on CC 10.0 but has
# never run: set hardware_verified once tests/test_conv2d_sm100.py has passed on a B200.
ARCH_TABLE: dict[tuple[int, int], Arch] = {
    (9, 0): Arch("sm_90a", "H100/H200", runnable=True),
    (10, 0): Arch("sm_100a", "B200", runnable=True, hardware_verified=False),
}

# name -> (the layout cute_conv expects, the channels-first layout torch uses for it)
_LAYOUTS = {
    "activation": ("[N, H, W, C]", "[N, C, H, W]"),
    "filter": ("[K, R, S, C]", "[K, C, R, S]"),
    "out": ("[N, P, Q, K]", "[N, K, P, Q]"),
    "source": ("[N, P, Q, K]", "[N, K, P, Q]"),
}


def _names(dtypes: Sequence[torch.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


def output_rows_unaligned(k: int, out_bits: int) -> bool:
    """Whether ``k`` output channels of ``out_bits``-bit values make rows that are not whole
    ``ROW_ALIGNMENT_BYTES`` units: TMA cannot store them, so the epilogue threads do
    (``EpilogueSpec.store_by_threads``) and read the residual the same way."""
    return k * out_bits // 8 % ROW_ALIGNMENT_BYTES != 0


def check_tensor(
    name: str, t: object, dtypes: Sequence[torch.dtype], *, contiguous: bool = True
) -> torch.Tensor:
    """Check that ``t`` is a dense, contiguous (unless not ``contiguous``: its caller checks
    its strides), 16-byte aligned rank-4 tensor of ``dtypes``.

    ``name`` is one of ``activation``, ``filter``, ``out`` or ``source`` and picks the
    expected layout.
    """
    layout, torch_layout = _LAYOUTS[name]
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise ValueError(f"{name} must be a dense (torch.strided) tensor, got layout {t.layout}")
    if t.dim() != 4:
        raise ValueError(
            f"{name} must be a rank-4 {layout} tensor, got rank {t.dim()} (shape {tuple(t.shape)})"
        )
    if t.dtype not in dtypes:
        raise TypeError(f"{name} has dtype {t.dtype}; supported dtypes: {_names(dtypes)}")
    if contiguous and not t.is_contiguous():
        hint = f"e.g. t.permute(0, 2, 3, 1).contiguous() for a {torch_layout} tensor t"
        if t.is_contiguous(memory_format=torch.channels_last):
            hint = (
                f"it looks like a {torch_layout} tensor in channels_last memory format: "
                f"{name}.permute(0, 2, 3, 1) is its contiguous {layout} view (no copy)"
            )
        raise ValueError(
            f"{name} must be a contiguous {layout} tensor, got shape {tuple(t.shape)} with "
            f"strides {t.stride()}; {hint}"
        )
    check_alignment(name, t)
    return t


def check_alignment(name: str, t: torch.Tensor) -> None:
    """TMA needs 16-byte aligned base addresses; the one check repeated on every call."""
    if t.data_ptr() % ALIGNMENT_BYTES:
        raise ValueError(
            f"{name}.data_ptr() = {t.data_ptr():#x} is not {ALIGNMENT_BYTES}-byte aligned "
            f"(offset {t.data_ptr() % ALIGNMENT_BYTES}); TMA needs {ALIGNMENT_BYTES}-byte "
            f"aligned base addresses: pass {name}.clone() instead of an offset view"
        )


def check_stride_dilation(stride: Pair, dilation: Pair) -> None:
    """A ``ValueError`` unless every stride is at least ``MIN_STRIDE`` and every dilation at
    least 1, naming the dimension."""
    for dim, s in zip("hw", stride, strict=True):
        if s < MIN_STRIDE:
            raise ValueError(
                f"stride must be >= {MIN_STRIDE}, got {s} along {dim} (stride={stride})"
            )
    for dim, d in zip("hw", dilation, strict=True):
        if d < 1:
            raise ValueError(f"dilation must be >= 1, got {d} along {dim} (dilation={dilation})")


def tiles_input(problem: Conv2dProblemShape) -> bool:
    """Whether the filter's windows tile the input exactly, as a ViT patch embedding's do:
    stride equal to the filter's size (larger than 1x1), no padding or dilation, and H and W
    whole multiples of it."""
    return (
        problem.stride == (problem.R, problem.S)
        and problem.R * problem.S > 1
        and problem.padding == ((0, 0), (0, 0))
        and problem.dilation == (1, 1)
        and problem.H % problem.R == 0
        and problem.W % problem.S == 0
    )


def check_problem_limits(problem: Conv2dProblemShape, limits: Im2colLimits = IM2COL_2D) -> None:
    """Raise ``ValueError`` unless the output is non-empty and im2col TMA can express it
    within ``limits`` (any stride where the filter's windows tile the input:
    ``tiles_input``)."""
    if max(problem.stride) > MAX_STRIDE and not tiles_input(problem):
        raise ValueError(
            f"stride must be in {MIN_STRIDE}..{MAX_STRIDE} (im2col TMA limit), got "
            f"stride={problem.stride}; a larger stride is taken only where the filter's windows "
            f"tile the input (stride = filter size, no padding or dilation, H and W multiples "
            f"of it, as in a ViT patch embedding): filter {problem.R}x{problem.S}, padding "
            f"{problem.padding}, dilation {problem.dilation}, input {problem.H}x{problem.W}"
        )
    dims = (
        ("height", "P", "H", "R", ("top", "bottom"), 0),
        ("width", "Q", "W", "S", ("left", "right"), 1),
    )
    for what, out_name, in_name, f_name, (lo_name, hi_name), i in dims:
        lo, hi = problem.padding[i]
        size, taps = getattr(problem, in_name), getattr(problem, f_name)
        dil = problem.dilation[i]
        span = (taps - 1) * dil
        out_size = getattr(problem, out_name)
        if out_size < 1:
            raise ValueError(
                f"output {what} {out_name} = {out_size} must be >= 1: activation {in_name}={size} "
                f"plus padding {lo_name}/{hi_name}=({lo}, {hi}) is smaller than the filter's "
                f"dilated extent (filter {f_name}={taps}, dilation={dil}): "
                f"{size + lo + hi} < ({f_name}-1)*dilation + 1 = {span + 1}"
            )
        if lo > limits.max_pad_lo:
            raise ValueError(
                f"padding {lo_name}={lo} exceeds the {limits.what} limit: padding before each "
                f"spatial dimension must be <= {limits.max_pad_lo}"
            )
        if span > limits.max_filter_span:
            raise ValueError(
                f"filter {f_name}={taps} with dilation={dil} spans ({f_name}-1)*dilation = {span} "
                f"{what} positions; the {limits.what} limit is {limits.max_filter_span}"
            )
        corner = hi - span
        if not limits.corner_min <= corner <= limits.corner_max:
            raise ValueError(
                f"padding {hi_name}={hi} minus the filter span (filter {f_name}={taps}, "
                f"dilation={dil}: ({f_name}-1)*dilation = {span}) is {corner}; the {limits.what} "
                f"limit is {limits.corner_min} <= padding {hi_name} - ({f_name}-1)*dilation <= "
                f"{limits.corner_max}"
            )
    if problem.gemm_m >= MAX_GEMM_M:
        raise ValueError(
            f"activation gives N*P*Q = {problem.N}*{problem.P}*{problem.Q} = {problem.gemm_m} "
            f"output pixels; the limit is < 2**31 ({MAX_GEMM_M}): split the batch"
        )


def validate_conv_inputs(
    activation: torch.Tensor,
    filter: torch.Tensor,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
    dilation: int | Sequence[int] = 1,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    limits: Im2colLimits = IM2COL_2D,
) -> tuple[Conv2dProblemShape, torch.dtype]:
    """Check a Conv2D forward call; return its problem shape and the resolved output dtype.
    ``limits``: the im2col TMA's of the kernel that runs it (``check_problem_limits``).

    The output dtype is ``out_dtype`` if given, else ``out.dtype`` if ``out`` is given, else the
    activation's dtype (bfloat16 for fp8 inputs). C or K that is not a multiple of 16 bytes is
    accepted (the API pads channels).
    Makes no CUDA query: run ``validate_device`` afterwards.
    """
    check_tensor("activation", activation, INPUT_DTYPES)
    check_tensor("filter", filter, INPUT_DTYPES)
    fp8 = activation.dtype in FP8_DTYPES
    if (filter.dtype in FP8_DTYPES) != fp8 or (not fp8 and filter.dtype != activation.dtype):
        raise TypeError(
            f"filter has dtype {filter.dtype} but activation has dtype {activation.dtype}; "
            "they must be equal, or both fp8 (float8_e4m3fn / float8_e5m2, in any pairing)"
        )
    stride_hw = normalize_pair("stride", stride)
    dilation_hw = normalize_pair("dilation", dilation)
    padding_hw = normalize_padding(padding)
    check_stride_dilation(stride_hw, dilation_hw)

    n, h, w, c = activation.shape
    k, r, s, c_filter = filter.shape
    for name, t, dims in (("activation", activation, "NHWC"), ("filter", filter, "KRSC")):
        for dim, size in zip(dims, t.shape, strict=True):
            if size < 1 and dim != "N":
                raise ValueError(
                    f"{name} has {dim}={size} in shape {tuple(t.shape)}; "
                    f"{', '.join(dims.replace('N', ''))} must be >= 1"
                    + (" (N may be 0)" if name == "activation" else "")
                )
    if c_filter != c:
        raise ValueError(
            f"filter has C={c_filter} channels but activation has C={c} (filter shape "
            f"{tuple(filter.shape)}, activation shape {tuple(activation.shape)}); "
            "they must be equal"
        )
    problem = Conv2dProblemShape(
        n, h, w, c, k, r, s, padding=padding_hw, stride=stride_hw, dilation=dilation_hw
    )
    check_problem_limits(problem, limits)

    if out_dtype is not None:
        if not isinstance(out_dtype, torch.dtype):
            raise TypeError(f"out_dtype must be a torch.dtype, got {out_dtype!r}")
        if out_dtype not in OUTPUT_DTYPES:
            raise TypeError(
                f"out_dtype is {out_dtype}; supported output dtypes: {_names(OUTPUT_DTYPES)}"
            )
    if out is not None:
        _check_out(out, out_dtype, activation, problem)
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else default_out_dtype(activation.dtype)
    return problem, out_dtype


def default_out_dtype(input_dtype: torch.dtype) -> torch.dtype:
    """The output dtype of a call that names none: the input's, bfloat16 for fp8 inputs."""
    return torch.bfloat16 if input_dtype in FP8_DTYPES else input_dtype


def check_fp8_scales(
    input_dtype: torch.dtype,
    out_dtype: torch.dtype,
    device: torch.device,
    x_scale: object,
    w_scale: object,
    out_scale: object,
    out_amax: object = None,
    source_scale: object = None,
    *,
    has_source: bool = False,
) -> None:
    """Check the per-tensor scales of an fp8 call: ``x_scale`` and ``w_scale`` with fp8
    inputs, ``out_scale`` with fp8 output, each a one-element float32 tensor on ``device``
    (read by the kernel, so that CUDA graphs replay with new values); none of them
    otherwise. ``out_amax``, which the kernel raises to the output's amax, may come with
    any call, and ``source_scale`` (a device factor of ``beta``) with any call that has a
    residual source (``has_source``); each is then a one-element float32 tensor on
    ``device`` too."""
    fp8_in, fp8_out = input_dtype in FP8_DTYPES, out_dtype in FP8_DTYPES
    for name, value, needed, what in (
        ("x_scale", x_scale, fp8_in, "fp8 inputs"),
        ("w_scale", w_scale, fp8_in, "fp8 inputs"),
        ("out_scale", out_scale, fp8_out, "fp8 output"),
    ):
        if value is None:
            if needed:
                raise ValueError(
                    f"{name} is required with {what} (inputs {input_dtype}, output "
                    f"{out_dtype}): a one-element float32 tensor on {device}; "
                    "cute_conv.quantize_fp8 returns one"
                )
            continue
        if not needed:
            raise ValueError(
                f"{name} is only for {what}; this call has inputs {input_dtype} and output "
                f"{out_dtype}: leave it unset"
            )
        check_scale_tensor(name, value, device, "activation")
    if out_amax is not None:
        check_scale_tensor("out_amax", out_amax, device, "activation")
    if source_scale is not None:
        if not has_source:
            raise ValueError(
                "source_scale multiplies beta * source: it needs a residual source "
                "(conv2d_fprop_with_residual)"
            )
        check_scale_tensor("source_scale", source_scale, device, "activation")


def check_scale_tensor(name: str, value: object, device: torch.device, owner: str) -> None:
    """``TypeError`` unless ``value`` is a tensor, ``ValueError`` unless it is one dense
    float32 element on ``device`` (where ``owner``, named in the message, lives): an fp8
    scale as the kernels read it."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a one-element float32 torch.Tensor, got {type(value).__name__}"
        )
    if value.layout != torch.strided:  # the kernel reads the element at data_ptr()
        raise ValueError(f"{name} must be a dense (torch.strided) tensor, got layout {value.layout}")
    if value.dtype != torch.float32 or value.numel() != 1:
        raise ValueError(
            f"{name} must be a one-element float32 tensor, got dtype {value.dtype} and "
            f"shape {tuple(value.shape)}"
        )
    if value.device != device:
        raise ValueError(
            f"{name} is on {value.device} but {owner} is on {device}; they must be on the "
            "same device"
        )


def _check_out(
    out: torch.Tensor,
    out_dtype: torch.dtype | None,
    activation: torch.Tensor,
    problem: Conv2dProblemShape,
) -> None:
    check_tensor("out", out, OUTPUT_DTYPES, contiguous=False)
    out_pixel_stride(out)
    if out_dtype is not None and out.dtype != out_dtype:
        raise TypeError(
            f"out has dtype {out.dtype} but out_dtype is {out_dtype}; they must be equal "
            "(or leave out_dtype unset)"
        )
    if tuple(out.shape) != problem.output_shape:
        raise ValueError(
            f"out has shape {tuple(out.shape)}; this convolution writes [N, P, Q, K] = "
            f"{problem.output_shape}"
        )
    if out.device != activation.device:
        raise ValueError(
            f"out is on {out.device} but activation is on {activation.device}; "
            "they must be on the same device"
        )


def out_pixel_stride(out: torch.Tensor) -> int:
    """The elements from one pixel of an ``[N, P, Q, K]`` ``out`` to the next: K where it is
    contiguous, or L where it is a channel slice of a contiguous ``[N, P, Q, L]`` tensor
    (``buffer[..., a:a + K]``: a concatenation's part written in place), L a whole number of
    16-byte units (TMA's row pitch). A ValueError for other strides."""
    pixels = slice_pixel_stride(out)
    if pixels is None:
        raise ValueError(
            f"out must be a contiguous [N, P, Q, K] tensor or a channel slice of one "
            f"([N, P, Q, L] with L*{out.element_size()} bytes a multiple of {ALIGNMENT_BYTES}), "
            f"got shape {tuple(out.shape)} with strides {out.stride()}; e.g. "
            f"buffer.permute(0, 2, 3, 1)[..., a:a + K] for a channels_last [N, L, P, Q] buffer"
        )
    return pixels


def slice_pixel_stride(out: torch.Tensor) -> int | None:
    """``out_pixel_stride`` of an ``[N, P, Q, K]`` tensor, or None where it raises."""
    if out.is_contiguous():
        return out.shape[3]
    pixels = channel_slice_stride(out)
    if pixels is None or pixels * out.element_size() % ALIGNMENT_BYTES:
        return None
    return pixels


def channel_slice_stride(x: object) -> int | None:
    """``s`` where ``x`` is an NHWC view of C of the ``s`` > C channels of a dense
    ``[N, H, W, s]`` tensor (``t[..., a:a + C]``: a concatenation's prefix, DenseNet's under
    ``optimize``, which the grouped kernel reads in place, or a part the kernels write in
    place, ``out_pixel_stride``); else None. The offset ``a`` is the caller's to check."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.layout != torch.strided:
        return None
    n, h, w, c = x.shape
    s = x.stride(2)
    if x.stride(3) != 1 or s <= c:
        return None
    dense = (h * w * s, w * s, s)  # [N, H, W] strides of the [N, H, W, s] tensor
    for dim, (size, want) in enumerate(zip((n, h, w), dense, strict=True)):
        if size > 1 and x.stride(dim) != want:
            return None
    return s


def check_compute_capability(capability: tuple[int, int], device: object = "the device") -> str:
    """Return the arch name (e.g. ``"sm_90a"``) for ``capability`` if cute_conv runs there."""
    major, minor = capability
    arch = ARCH_TABLE.get((major, minor))
    if arch is not None and arch.runnable:
        return arch.name
    found = f"{device} has compute capability {major}.{minor}"
    if arch is not None:
        found += f" ({arch.name}, {arch.gpus})"
    runnable = ", ".join(
        f"{a.name} ({a.gpus}, compute capability {cc[0]}.{cc[1]}"
        + ("" if a.hardware_verified else "; compile-verified only, never run on a GPU")
        + ")"
        for cc, a in ARCH_TABLE.items()
        if a.runnable
    )
    message = f"{found}; the supported archs are {runnable}"
    compile_only = ", ".join(a.name for a in ARCH_TABLE.values() if not a.runnable)
    if compile_only:
        message += f"; {compile_only} is compile-only in this release (built, never launched)"
    raise ValueError(message)


def validate_device(
    activation: torch.Tensor,
    filter: torch.Tensor,
    out: torch.Tensor | None = None,
    **others: torch.Tensor | None,
) -> str:
    """Check that all tensors are on one CUDA device that cute_conv runs on; return its arch.

    ``others`` are further named tensors of the call (``source=``, ``bias=``, ...; None is
    skipped). Run after ``validate_conv_inputs``; this is the first check that queries the
    CUDA runtime.
    """
    named = {"activation": activation, "filter": filter, "out": out, **others}
    tensors = [(name, t) for name, t in named.items() if t is not None]
    for name, t in tensors:
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; cute_conv runs on CUDA tensors")
    device = activation.device
    for name, t in tensors[1:]:
        if t.device != device:
            raise ValueError(
                f"{name} is on {t.device} but activation is on {device}; "
                "all tensors must be on the same CUDA device"
            )
    capability = torch.cuda.get_device_capability(device)
    return check_compute_capability(capability, device)


def cuda_core_io(element_bytes: int, out_bytes: int) -> bool:
    """Whether the CUDA-core kernels (``PointwiseGemv``, ``GroupedDirectConv``) take inputs of
    ``element_bytes`` and an output of ``out_bytes``: 16-bit inputs, a 16- or 32-bit output."""
    return element_bytes == 2 and out_bytes >= 2


def check_cuda_core_io(config_name: str, element_bytes: int, out_bytes: int) -> None:
    """Raise ``ValueError``, naming ``config_name``, unless ``cuda_core_io``."""
    if not cuda_core_io(element_bytes, out_bytes):
        raise ValueError(
            f"a {config_name} runs 16-bit inputs (bfloat16, float16) into a 16- or 32-bit "
            f"output; this call has {element_bytes}-byte inputs and a {out_bytes}-byte output"
        )
