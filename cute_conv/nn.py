"""``cute_conv.nn.Conv2d``: a ``torch.nn.Conv2d`` whose forward is one fused kernel.

It takes and returns NCHW tensors in channels_last memory: ``x.permute(0, 2, 3, 1)`` of such a
tensor is the contiguous NHWC tensor the kernel reads, and the kernel's NHWC output
``.permute(0, 3, 1, 2)`` is the NCHW channels_last result, with no copy either way. The filter is
a KRSC (``[K, R, S, C / groups]``) tensor: contiguous, or for a grouped conv a view of an
``[R, S, C / groups, K]`` one, the layout its kernel reads, so that no call stages it (not even
a CUDA graph's replay); the epilogue (a float32 per-channel ``scale`` and
``bias``, an activation and a residual ``identity``) runs in the kernel:

    y = act(conv(x) * scale + bias) + identity        residual_order="after_activation"
    y = act(conv(x) * scale + bias + identity)        residual_order="before_activation"

``forward`` calls ``cute_conv.conv2d_fprop`` / ``conv2d_fprop_with_residual`` (a grouped or
depthwise conv: groups of at least 24 channels, and calls of 16-channel groups up to
``tensor_cores_pay``'s size, on the tensor cores, ``cute_conv.grouped_tensor_cores``; others
``cute_conv.grouped``'s CUDA-core kernel, or, where ``cute_conv.grouped_rule`` finds the call
too large for it or the groups are out of ``grouped_limits``, cuDNN's grouped conv and torch
ops for the epilogue), so the module behaves as they do under ``torch.compile`` and autograd;
its kernel needs a Hopper GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import api
from .autograd import conv_operands
from .epilogue import ACTIVATIONS, EpilogueSpec
from .fold import activation_name, batch_norm_channels, fold_batch_norm
from .fp8 import quantize_dynamic, quantize_fp8, quantize_from_amax, quantize_with_scale
from .grouped import (
    check_channel_norm_eps,
    check_groups,
    check_norm_channels,
    grouped_conv2d,
    grouped_limits,
    stage_filter,
)
from .grouped_rule import runs_grouped_kernel
from .grouped_tensor_cores import (
    grouped_conv2d_tensor_cores,
    runs_on_tensor_cores,
    tensor_cores_pay,
    tensor_cores_take,
)
from .ops import takes_torch_path
from .problem import Padding, Pair, normalize_padding, normalize_pair, output_hw
from .reference import TORCH_ACTIVATIONS
from .validation import (
    ALIGNMENT_BYTES,
    IM2COL_2D,
    IM2COL_3D,
    INPUT_DTYPES,
    Im2colLimits,
    channel_slice_stride,
    check_scale_tensor,
    check_stride_dilation,
    slice_pixel_stride,
    validate_conv_inputs,
)

__all__ = ["Conv2d", "conv_limits"]


class Conv2d(nn.Module):
    """A drop-in for ``torch.nn.Conv2d`` (zero padding) with a fused epilogue.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            padding_mode, device: as ``torch.nn.Conv2d`` takes them (``padding`` also
            ``"same"``/``"valid"`` and ``((top, bottom), (left, right))``); ``padding_mode``
            must be ``"zeros"``. ``groups`` > 1 runs the grouped kernel where it can
            (``cute_conv.grouped_limits``: depthwise, or output channels per group a multiple
            of 8), cuDNN's grouped conv elsewhere; 16-bit only (no ``to_fp8`` /
            ``write_fp8``, no ``out_amax``).
        dtype: the weight's dtype, bfloat16 (the default) or float16.
        activation: None or an epilogue activation name (``cute_conv.ACTIVATIONS``).
        residual_order: where ``forward``'s ``identity`` joins: ``"after_activation"`` or
            ``"before_activation"`` (ResNet's ``relu(bn(conv(x)) + identity)``).
        channel_norm_eps: None, or (grouped convs without an activation, at most 2048 output
            channels) each output pixel normalized over its channels, a ``LayerNorm``
            without its affine (``cute_conv.grouped_conv2d``'s ``channel_norm_eps``);
            ``forward`` then takes no identity.

    Attributes:
        weight: ``[K, R, S, C / groups]`` Parameter (KRSC), of ``dtype`` (float8_e4m3fn after
            ``to_fp8``).
        bias: float32 ``[K]`` Parameter, or None.
        scale: float32 ``[K]`` buffer (a folded BatchNorm's; after ``to_fp8`` times the
            weight's per-channel scales), or None.
        activation, residual_order: as given.
        x_scale, out_scale, identity_scale: after ``to_fp8``: the input's per-tensor scale
            (None: measured on each call), for fp8 output the output's, and for an fp8
            identity the identity's (else None); 0-dim float32 buffers, read by the kernel.
            ``write_fp8`` sets ``out_scale`` of a 16-bit module.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: str | int | Sequence[int] | Sequence[Sequence[int]] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        activation: str | None = None,
        residual_order: str = "after_activation",
        channel_norm_eps: float | None = None,
    ) -> None:
        super().__init__()
        dtype = torch.bfloat16 if dtype is None else dtype
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size: Pair = normalize_pair("kernel_size", kernel_size)
        self.stride: Pair = normalize_pair("stride", stride)
        self.dilation: Pair = normalize_pair("dilation", dilation)
        self.padding = padding if isinstance(padding, str) else normalize_padding(padding)
        self.groups = groups
        self.padding_mode = padding_mode
        conv_limits(self, dtype)
        # What the kernel is given: ((top, bottom), (left, right)), "same" resolved.
        self._padding: Padding = _kernel_padding(
            padding, self.kernel_size, self.stride, self.dilation
        )
        # The kernel's own checks of both names (each error names the value and the choices).
        EpilogueSpec(activation=activation, has_residual=True, residual_order=residual_order)
        self.activation = activation
        self.residual_order = residual_order
        _check_channel_norm(channel_norm_eps, groups, out_channels, activation)
        self.channel_norm_eps = channel_norm_eps
        # Groups out of grouped_limits (ResNeXt's 4 output channels per group) run on cuDNN.
        self._grouped_kernel_takes = groups != 1 and _kernel_takes_groups(
            in_channels, out_channels, groups
        )
        # Wide groups run on the tensor cores (grouped_tensor_cores), where the geometry
        # limits of its 3-d im2col view hold.
        self._tensor_cores_take = tensor_cores_take(
            in_channels, out_channels, groups
        ) and _dense_geometry_holds(self, dtype, IM2COL_3D)
        r, s = self.kernel_size
        group_in = in_channels // groups
        weight = torch.empty(out_channels, r, s, group_in, device=device, dtype=dtype)
        weight = stored_filter(weight, self._stages_filter)
        # torch.nn.Conv2d's initialization: its fan-in, C/groups*R*S, is the same in KRSC.
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        self.weight = nn.Parameter(weight)
        if bias:
            bound = 1 / math.sqrt(group_in * r * s)
            vector = torch.empty(out_channels, device=device, dtype=torch.float32)
            self.bias = nn.Parameter(nn.init.uniform_(vector, -bound, bound))
        else:
            self.register_parameter("bias", None)
        self.register_buffer("scale", None)
        self.register_buffer("x_scale", None)
        self.register_buffer("w_scale", None)
        self.register_buffer("out_scale", None)
        self.register_buffer("identity_scale", None)
        # The dtype of the output (and of an identity) unless it is fp8.
        self.output_dtype = dtype
        # The weights as the grouped kernel and cuDNN take them, with the versions of the
        # tensors they were made from: {kind: (versions, weights)}.
        self._derived_cache: dict[str, tuple] = {}

    @classmethod
    def from_torch(
        cls,
        conv: nn.Conv2d,
        bn: nn.Module | None = None,
        activation: Any = None,
        residual_order: str = "after_activation",
    ) -> Conv2d:
        """The module computing ``activation(bn(conv(x)))`` (with ``forward``'s residual).

        Args:
            conv: a ``torch.nn.Conv2d`` of bfloat16 or float16 weights, zero padding, groups
                within ``conv_limits``. Its weight becomes KRSC (a view, no copy, when it is
                channels_last).
            bn: an eval-mode ``torch.nn.BatchNorm2d`` or ``SyncBatchNorm`` (or
                torchvision's ``FrozenBatchNorm2d``) after it, folded in float32 into
                ``scale`` and ``bias``; or None.
            activation: None, an activation module (``nn.ReLU()``, ``nn.GELU()``, ...), a
                function (``F.relu``, ``torch.relu``, ...) or an epilogue name (``"relu"``).
            residual_order: see the class.

        Raises:
            TypeError, ValueError: what the kernel cannot run, naming the limit.
        """
        if type(conv) is not nn.Conv2d:
            raise TypeError(f"conv must be a torch.nn.Conv2d, got {type(conv).__name__}")
        conv_limits(conv, conv.weight.dtype)
        name = activation_name(activation)
        if activation is not None and name is None:
            raise ValueError(
                f"activation {activation!r} is not one the kernel runs: nn.ReLU, nn.GELU, "
                "nn.SiLU, nn.Sigmoid, nn.Tanh, nn.LeakyReLU(0.01), nn.Mish, nn.ReLU6, nn.Hardswish, "
                f"nn.Hardsigmoid, their functions, or one of {', '.join(ACTIVATIONS)}"
            )
        conv_bias = None if conv.bias is None else conv.bias.detach()
        if bn is not None:
            channels = batch_norm_channels(bn)
            if channels != conv.out_channels:
                raise ValueError(
                    f"bn normalizes {channels} channels but conv has "
                    f"out_channels={conv.out_channels}"
                )
            scale, bias = fold_batch_norm(bn, conv_bias)
        else:
            scale, bias = None, None if conv_bias is None else conv_bias.float()
        module = cls(
            conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
            conv.dilation, conv.groups, bias=False, device="meta", dtype=conv.weight.dtype,
            activation=name, residual_order=residual_order,
        )  # fmt: skip
        device = conv.weight.device
        krsc = stored_filter(conv.weight.detach().permute(0, 2, 3, 1), module._stages_filter)
        trainable = conv.weight.requires_grad  # as the torch modules' parameters were
        module.weight = nn.Parameter(krsc, requires_grad=trainable)
        if bias is not None:
            module.bias = nn.Parameter(bias.to(device), requires_grad=trainable)
        if scale is not None:
            module.scale = scale.to(device)
        return module.train(conv.training)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        activation: Any = None,
        channel_scale: torch.Tensor | None = None,
    ) -> Conv2d:
        """The 1x1 conv computing ``activation(channel_scale * linear(x))`` over the channels
        of an NCHW input: ``linear`` applied to the last dim of the NHWC tensor (ConvNeXt's
        pointwise layers), its output NCHW (``forward``'s residual joins after the
        activation).

        Args:
            linear: a ``torch.nn.Linear`` of bfloat16 or float16 weights.
            activation: as ``from_torch`` takes it.
            channel_scale: None, or one factor per output feature (any shape of
                ``out_features`` elements: ConvNeXt's ``[K, 1, 1]`` layer scale), folded in
                float32 into ``scale`` and ``bias``.

        Raises:
            TypeError, ValueError: what the kernel cannot run, naming the limit.
        """
        if type(linear) is not nn.Linear:
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        if channel_scale is not None and not isinstance(channel_scale, torch.Tensor):
            raise TypeError(
                f"channel_scale must be a torch.Tensor or None, got {type(channel_scale).__name__}"
            )
        conv = nn.Conv2d(
            linear.in_features, linear.out_features, 1, bias=linear.bias is not None,
            device="meta", dtype=linear.weight.dtype,
        )  # fmt: skip
        conv.weight = nn.Parameter(
            linear.weight.detach()[:, :, None, None], requires_grad=linear.weight.requires_grad
        )
        conv.bias = linear.bias
        module = cls.from_torch(conv.train(linear.training), None, activation)
        if channel_scale is not None:
            scale = channel_scale.detach().float().flatten()
            if scale.numel() != linear.out_features:
                raise ValueError(
                    f"channel_scale has {scale.numel()} elements; linear has "
                    f"out_features={linear.out_features}"
                )
            module.scale = scale.to(module.weight.device)
            if module.bias is not None:  # a new tensor: a float32 bias is the Linear's own
                folded = module.bias.detach() * module.scale
                module.bias = nn.Parameter(folded, requires_grad=module.bias.requires_grad)
        return module

    def normalize_channels(self, eps: float | None) -> None:
        """Set ``channel_norm_eps`` (see the class): ``eps``, or None for no norm. Raises
        TypeError or ValueError as the constructor does."""
        _check_channel_norm(eps, self.groups, self.out_channels, self.activation)
        self.channel_norm_eps = eps

    def forward(
        self,
        x: torch.Tensor,
        identity: torch.Tensor | None = None,
        *,
        out: torch.Tensor | None = None,
        out_amax: torch.Tensor | None = None,
        x_amax: torch.Tensor | None = None,
        reset_amax: bool = True,
    ) -> torch.Tensor:
        """Return the NCHW (channels_last) output for an NCHW input: ``out`` if given.

        Args:
            x: ``[N, C, H, W]`` of the weight's dtype, on a Hopper GPU. Channels_last memory
                is read as it is; any other layout is first copied to channels_last
                (``x.contiguous(memory_format=torch.channels_last)``).
            identity: the residual, ``[N, K, P, Q]`` of the output's shape and dtype (copied
                to channels_last likewise if it is not), added where ``residual_order`` says;
                or a tensor that broadcasts to that shape (a traced model's ``conv(x) + t``:
                the call then runs in torch ops, cuDNN's conv, as torch would; 16-bit only);
                or None.
            out: None, or the ``[N, K, P, Q]`` tensor of the output's dtype to write:
                channels_last, or a channel slice of a channels_last tensor
                (``buffer[:, a:a + K]``: a concatenation's part). The bfloat16 / float16
                and grouped kernels write it in place where they can (``conv2d_fprop``'s
                ``out``); the cuDNN and fp8 paths, and any other layout, copy into it.
            out_amax: a one-element float32 tensor on the weight's device, or None: set to
                ``max|output|`` by the epilogue (zeroed first), for an fp8 reader's scale.
            reset_amax: False raises ``out_amax`` without zeroing it first (a caller that
                zeroes many such buffers in one op: ``optimize``'s fp8 graphs).
            x_amax: after ``to_fp8`` without a static ``x_scale``: ``max|x|`` (the
                ``out_amax`` of the conv that wrote ``x``), so that a 16-bit ``x`` is
                quantized in one pass with no reduction over it; None measures it.

        Raises:
            TypeError, ValueError: bad input, before anything runs.
        """
        # Lean on purpose: this runs on every call, beside a kernel call of a few microseconds.
        _check_nchw("x", x, self.in_channels)
        if out is not None:
            self._check_out(x, out)
        weight = self.weight
        if self.w_scale is not None:
            return _into(out, self._forward_fp8(x, identity, out_amax, x_amax, reset_amax))
        if x.dtype != weight.dtype:
            raise TypeError(f"x has dtype {x.dtype}; the weight is {weight.dtype}")
        # In place only without a gradient to track (out= calls have no backward), where the
        # kernel can store to it, and not under torch.compile (an address does not trace).
        in_place = (
            out is not None
            and not (torch.is_grad_enabled() and _requires_grad(x, identity, weight, self.bias))
            and not torch.compiler.is_compiling()
            and _kernel_stores_to(out)
        )
        out_nhwc = out.permute(0, 2, 3, 1) if in_place else None
        if self.groups != 1:  # never fp8 (to_fp8 refuses it)
            if out_amax is not None or x_amax is not None:
                raise ValueError("a grouped Conv2d keeps no amax (out_amax, x_amax)")
            return _into(out, self._forward_grouped(x, identity, out if in_place else None))
        if identity is None:
            _reset_amax(out_amax, weight.device, reset_amax)
            fp8_out = self.out_scale is not None  # write_fp8
            y = api.conv2d_fprop(
                _nhwc(x), weight, stride=self.stride, padding=self._padding,
                dilation=self.dilation, bias=self.bias, scale=self.scale,
                activation=self.activation, out_amax=out_amax, out_scale=self.out_scale,
                out_dtype=torch.float8_e4m3fn if fp8_out else None, out=out_nhwc,
            )  # fmt: skip
        elif self.out_scale is not None:
            raise ValueError("this Conv2d writes fp8 (write_fp8) and takes no identity")
        elif not self._check_identity(x, identity):
            if out_amax is not None:
                raise ValueError("an identity that broadcasts takes no out_amax")
            return _into(out, self._forward_torch(x, identity))
        else:
            _reset_amax(out_amax, weight.device, reset_amax)
            y = api.conv2d_fprop_with_residual(
                _nhwc(x), weight, _nhwc(identity), residual_order=self.residual_order,
                stride=self.stride, padding=self._padding, dilation=self.dilation,
                bias=self.bias, scale=self.scale, activation=self.activation,
                out_amax=out_amax, out=out_nhwc,
            )  # fmt: skip
        return out if in_place else _into(out, y.permute(0, 3, 1, 2))

    @property
    def _stages_filter(self) -> bool:
        """Whether the stored filter is the grouped kernel's ``[R, S, C / groups, K]``
        (``stored_filter``): for groups it takes that do not run on the tensor cores."""
        return self._grouped_kernel_takes and not self._tensor_cores_take

    def _forward_grouped(
        self, x: torch.Tensor, identity: torch.Tensor | None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``forward`` of a grouped conv (writing ``out`` in place, if given, and returning
        it): wide groups without an identity or a channel norm on an SM90 GPU's tensor
        cores (``grouped_tensor_cores``) where ``tensor_cores_pay``; else the grouped kernel on
        the stored weight (staged once from KRSC where the tensor cores took it), or cuDNN
        where ``grouped_rule`` says it is faster (the call's multiply-adds)."""
        if identity is not None and self.channel_norm_eps is not None:
            raise ValueError("a Conv2d with channel_norm_eps takes no identity")
        if identity is not None and not self._check_identity(x, identity):
            return self._forward_torch(x, identity)
        n, _, h, w = x.shape
        p, q = self._output_size(h, w)
        k, r, s, group_in = self.weight.shape
        macs = n * p * q * k * r * s * group_in
        if (
            self._tensor_cores_take
            and identity is None
            and self.channel_norm_eps is None
            and runs_on_tensor_cores(x.device)
            and tensor_cores_pay(group_in, macs)
        ):
            y = grouped_conv2d_tensor_cores(
                _nhwc(x), self.weight, groups=self.groups, stride=self.stride,
                padding=self._padding, dilation=self.dilation, bias=self.bias,
                scale=self.scale, activation=self.activation,
                out=None if out is None else out.permute(0, 2, 3, 1),
            )  # fmt: skip
            return y.permute(0, 3, 1, 2) if out is None else out
        if not self._grouped_kernel_takes or not runs_grouped_kernel(
            macs, group_in, k // self.groups, self.groups, r * s,
            normalizes=self.channel_norm_eps is not None,
        ):  # fmt: skip
            return self._forward_torch(x, identity)
        staged = self.weight.permute(1, 2, 3, 0)  # the stored layout: no staging, no cache
        if not staged.is_contiguous():  # a KRSC weight assigned since: staged once per version
            staged = self._derived_weights("staged", lambda: (stage_filter(self.weight),))[0]
        y = grouped_conv2d(
            _grouped_nhwc(x), staged, filter_layout="rsck", groups=self.groups, stride=self.stride,
            padding=self._padding, dilation=self.dilation, bias=self.bias, scale=self.scale,
            activation=self.activation, source=None if identity is None else _nhwc(identity),
            residual_order=self.residual_order, channel_norm_eps=self.channel_norm_eps,
            out=None if out is None else out.permute(0, 2, 3, 1),
        )  # fmt: skip
        return y.permute(0, 3, 1, 2) if out is None else out

    def _forward_torch(self, x: torch.Tensor, identity: torch.Tensor | None) -> torch.Tensor:
        """The same function in torch ops: cuDNN's (grouped) conv with the scale folded into
        the weight, the bias added in float32, then the activation and the residual (which may
        broadcast); or cuDNN's fused conv + bias + ReLU (``_fuses_cudnn_relu``). Grouped calls
        past ``grouped_rule``'s bound and identities that broadcast run here."""
        (weight,) = self._derived_weights("cudnn", self._cudnn_weight)
        (top, bottom), (left, right) = self._padding
        x, weight, padding, _ = conv_operands(
            x.permute(0, 2, 3, 1), weight, [top, bottom, left, right]
        )  # NCHW and KCRS views again; asymmetric padding applied to x
        if identity is None and self._fuses_cudnn_relu(x):
            (bias,) = self._derived_weights("cudnn_bias", self._cudnn_bias)
            return torch.cudnn_convolution_relu(
                x, weight, bias, self.stride, padding, self.dilation, self.groups
            )
        y = F.conv2d(x, weight, None, self.stride, padding, self.dilation, self.groups)
        if self.bias is not None:
            y = y.add_(self.bias.view(-1, 1, 1))  # float32 arithmetic, no bf16 copy of the bias
        if self.channel_norm_eps is not None:  # over the channels: the NHWC view's last dim
            nhwc = y.permute(0, 2, 3, 1)
            return F.layer_norm(nhwc, nhwc.shape[-1:], eps=self.channel_norm_eps).permute(
                0, 3, 1, 2
            )
        act = TORCH_ACTIVATIONS[self.activation]
        if identity is None:
            return act(y)
        if self.residual_order == "before_activation":
            return act(y.add_(identity))
        return act(y) + identity

    def _fuses_cudnn_relu(self, x: torch.Tensor) -> bool:
        """Whether the cuDNN path runs as cuDNN's one fused conv + bias + ReLU: eager CUDA
        calls with cuDNN enabled and nothing to differentiate (the op has no derivative;
        torch.compile fuses the bias and ReLU itself), on a power-of-two group width above 1,
        where cuDNN runs the conv natively (ResNeXt: 1.8-2.2x the conv, bias and ReLU apart;
        on RegNet's 56-wide groups, which cuDNN transforms, 1.2-1.6x slower:
        ``benchmarks/experiments/grouped_cudnn_relu_ab.py``)."""
        group_in = self.weight.shape[3]
        return (
            self.activation == "relu"
            and x.is_cuda
            and torch.backends.cudnn.enabled
            and group_in > 1  # depthwise convs were not measured with it
            and group_in & (group_in - 1) == 0
            and not takes_torch_path(x, self.weight, None, self.bias, self.scale, None)
        )

    def _cudnn_bias(self) -> tuple[torch.Tensor | None]:
        """The bias in the activation's dtype, as ``torch.cudnn_convolution_relu`` takes it."""
        return (None if self.bias is None else self.bias.to(self.weight.dtype),)

    def _cudnn_weight(self) -> tuple[torch.Tensor]:
        """The weight as cuDNN takes it without a copy, KRSC contiguous (a channels_last KCRS
        view), with ``scale`` folded in float32: one pass, or a differentiable three."""
        weight, scale = self.weight, self.scale
        if scale is None:
            return (weight.contiguous(),)
        scale = scale.view(-1, 1, 1, 1)
        if torch.is_grad_enabled() and (weight.requires_grad or scale.requires_grad):
            return ((weight.float() * scale).to(weight.dtype).contiguous(),)
        out = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
        return (torch.mul(weight, scale, out=out),)

    def _derived_weights(self, kind: str, make: Any) -> tuple:
        """``make()``: traced (torch.compile), differentiable (a tensor that requires grad) or
        captured (a CUDA graph restages on each replay, as ``cute_conv.staging`` does) on each
        call, else kept until the weight, scale or bias changes."""
        tensors = [t for t in (self.weight, self.scale, self.bias) if t is not None]
        if (
            torch.compiler.is_compiling()
            or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
            or (self.weight.is_cuda and torch.cuda.is_current_stream_capturing())
        ):
            return make()
        versions = tuple((t.data_ptr(), t._version, t.dtype) for t in tensors)
        cached = self._derived_cache.get(kind)
        if cached is None or cached[0] != versions:
            with torch.no_grad():
                cached = self._derived_cache[kind] = (versions, make())
        return cached[1]

    def _check_ungrouped(self, what: str) -> None:
        if self.groups != 1:
            raise ValueError(f"{what}: a grouped Conv2d (groups={self.groups}) runs 16-bit only")

    @torch.no_grad()
    def to_fp8(
        self,
        x_scale: torch.Tensor | None = None,
        out_scale: torch.Tensor | None = None,
        identity_scale: torch.Tensor | None = None,
    ) -> Conv2d:
        """Run this conv on float8_e4m3fn: the weight quantized once per output channel (its
        channel scales folded into ``scale``), the input per tensor, the epilogue in float32.

        Args:
            x_scale: the input's static scale (a 0-dim float32 tensor on the weight's device,
                e.g. a calibration run's ``max|x| / 448``); None measures it on every call.
                An fp8 input (written by a producer with this scale as its ``out_scale``) is
                read as it is; a 16-bit one is quantized with it first (one pass).
            out_scale: write the output as float8_e4m3fn with this scale (a consumer's
                ``x_scale``); None writes the 16-bit dtype the module had.
            identity_scale: with ``out_scale``: ``forward``'s identity is float8_e4m3fn of
                this scale (a 0-dim float32 tensor on the weight's device, the identity's
                writer's ``out_scale``), which the kernel reads as the residual's
                ``source_scale``.

        Returns ``self``. Raises, before changing anything, ``ValueError`` when already fp8,
        a scale is not one float32 element on the weight's device (``TypeError`` when it is
        no tensor), or ``identity_scale`` comes without ``out_scale``.
        """
        self._check_ungrouped("to_fp8")
        if self.w_scale is not None:
            raise ValueError("this Conv2d already runs on fp8 (to_fp8 was called)")
        device = self.weight.device
        scales = (
            ("x_scale", x_scale),
            ("out_scale", out_scale),
            ("identity_scale", identity_scale),
        )
        for name, value in scales:
            if value is not None:
                check_scale_tensor(name, value, device, "the weight")
        if identity_scale is not None and out_scale is None:
            raise ValueError("identity_scale (an fp8 identity) needs out_scale (an fp8 output)")
        weight, channel_scales = quantize_fp8(self.weight.detach(), per_channel_dim=0)
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.scale = channel_scales if self.scale is None else self.scale * channel_scales
        self.w_scale = torch.ones((), device=device)
        self.x_scale = x_scale
        self.out_scale = out_scale
        self.identity_scale = identity_scale
        return self

    @torch.no_grad()
    def write_fp8(self, out_scale: torch.Tensor) -> Conv2d:
        """Keep this conv's 16-bit inputs but write float8_e4m3fn (``result / out_scale``,
        saturated to +-448): a stem with too few channels for fp8 inputs writing the map its
        fp8 readers take (``optimize``). ``forward`` then takes no ``identity``.

        Args:
            out_scale: a 0-dim float32 tensor on the weight's device, read by the kernel on
                each call.

        Returns ``self``. Raises, before changing anything, ``ValueError`` when the module
        runs on fp8 (``to_fp8``) or already writes it, or ``out_scale`` is not one float32
        element on the weight's device (``TypeError`` when it is no tensor).
        """
        self._check_ungrouped("write_fp8")
        if self.w_scale is not None or self.out_scale is not None:
            raise ValueError("this Conv2d already runs on or writes fp8")
        check_scale_tensor("out_scale", out_scale, self.weight.device, "the weight")
        self.out_scale = out_scale
        return self

    def _forward_fp8(
        self,
        x: torch.Tensor,
        identity: torch.Tensor | None,
        out_amax: torch.Tensor | None,
        x_amax: torch.Tensor | None,
        reset_amax: bool,
    ) -> torch.Tensor:
        """``forward`` of an fp8 module (see ``to_fp8``)."""
        x_nhwc = _nhwc(x)
        x_scale = self.x_scale
        if x.dtype == torch.float8_e4m3fn:
            if x_scale is None:
                raise ValueError(
                    "x is float8_e4m3fn but this module has no static x_scale to read it with"
                )
        elif x.dtype != self.output_dtype:
            raise TypeError(f"x has dtype {x.dtype}; this fp8 module takes {self.output_dtype}")
        elif x_scale is None and x_amax is not None:
            x_nhwc, x_scale = quantize_from_amax(x_nhwc, x_amax)
        elif x_scale is None:
            x_nhwc, x_scale = quantize_dynamic(x_nhwc)
        else:
            x_nhwc = quantize_with_scale(x_nhwc, x_scale)
        out_dtype = self.output_dtype if self.out_scale is None else torch.float8_e4m3fn
        common = dict(
            stride=self.stride, padding=self._padding, dilation=self.dilation, bias=self.bias,
            scale=self.scale, activation=self.activation, out_dtype=out_dtype,
            x_scale=x_scale, w_scale=self.w_scale, out_scale=self.out_scale, out_amax=out_amax,
        )  # fmt: skip
        if identity is None:
            _reset_amax(out_amax, self.weight.device, reset_amax)
            y = api.conv2d_fprop(x_nhwc, self.weight, **common)
        else:
            _check_nchw("identity", identity, self.out_channels)
            identity_scale = None
            if identity.dtype == torch.float8_e4m3fn:
                if self.identity_scale is None:
                    raise ValueError("identity is float8_e4m3fn but identity_scale is not set")
                identity_scale = self.identity_scale
            _reset_amax(out_amax, self.weight.device, reset_amax)
            y = api.conv2d_fprop_with_residual(
                x_nhwc, self.weight, _nhwc(identity), source_scale=identity_scale,
                residual_order=self.residual_order, **common,
            )  # fmt: skip
        return y.permute(0, 3, 1, 2)

    def _output_size(self, h: int, w: int) -> tuple[int, int]:
        return output_hw((h, w), self.kernel_size, self.stride, self._padding, self.dilation)

    def _check_out(self, x: torch.Tensor, out: Any) -> None:
        """Raise unless ``out`` is a tensor of the output's shape and dtype (the paths that
        copy into it would broadcast and convert); the kernel checks its layout and device."""
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        shape = (x.shape[0], self.out_channels, *self._output_size(*x.shape[2:]))
        if tuple(out.shape) != shape:
            raise ValueError(f"out has shape {tuple(out.shape)}; this call writes {shape}")
        dtype = self.output_dtype if self.out_scale is None else torch.float8_e4m3fn
        if out.dtype != dtype:
            raise TypeError(f"out has dtype {out.dtype}; this call writes {dtype}")

    def _check_identity(self, x: torch.Tensor, identity: Any) -> bool:
        """Whether ``identity`` has the output's shape (the kernel adds it); False where it
        broadcasts to it (``_forward_torch`` adds it); else raise."""
        if not isinstance(identity, torch.Tensor):
            raise TypeError(f"identity must be a torch.Tensor, got {type(identity).__name__}")
        n, _, h, w = x.shape
        p, q = self._output_size(h, w)
        shape = (n, self.out_channels, p, q)
        if identity.shape != shape:
            try:
                broadcasts = torch.broadcast_shapes(identity.shape, shape) == shape
            except RuntimeError:
                broadcasts = False
            if broadcasts:
                return False
            raise ValueError(
                f"identity has shape {tuple(identity.shape)}; the residual must have the "
                f"output's shape [N, K, P, Q] = {shape}, or broadcast to it"
            )
        if identity.dtype != x.dtype:
            raise TypeError(
                f"identity has dtype {identity.dtype}; the residual must have the output's "
                f"dtype {x.dtype}"
            )
        return True

    def extra_repr(self) -> str:
        padding = self.padding if isinstance(self.padding, str) else self._padding
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={padding!r}, dilation={self.dilation}, "
            + (f"groups={self.groups}, " if self.groups != 1 else "")
            + f"dtype={self.weight.dtype}, epilogue='{self.epilogue_formula()}'"
            + (", fp8 output" if self.out_scale is not None else "")
        )

    def epilogue_formula(self) -> str:
        """What the kernel computes, e.g. ``relu(conv * scale + bias [+ identity])``: the
        bracketed residual applies when ``forward`` is given an ``identity``."""
        y = "conv"
        if self.scale is not None:
            y += " * scale"
        if self.bias is not None:
            y += " + bias"
        if self.channel_norm_eps is not None:
            return f"channel_norm({y}, eps={self.channel_norm_eps:g})"
        if self.activation is None:
            return f"{y} [+ identity]"
        if self.residual_order == "before_activation":
            return f"{self.activation}({y} [+ identity])"
        return f"{self.activation}({y}) [+ identity]"


def _check_channel_norm(
    eps: float | None, groups: int, out_channels: int, activation: str | None
) -> None:
    """``Conv2d``'s check of ``channel_norm_eps``: a TypeError for a non-number, else a
    ValueError naming the limit."""
    check_channel_norm_eps(eps)
    if eps is None:
        return
    if groups == 1:
        raise ValueError("channel_norm_eps: only a grouped Conv2d (groups > 1) normalizes")
    if activation is not None:
        raise ValueError(f"channel_norm_eps takes no activation, got {activation!r}")
    check_norm_channels("out_channels", out_channels)


def _reset_amax(out_amax: torch.Tensor | None, device: torch.device, reset: bool) -> None:
    """Zero ``out_amax`` (if given, and ``reset``) for the epilogue to raise with this call's
    output alone; checked first, so that a bad one is rejected before anything is written."""
    if out_amax is not None:
        check_scale_tensor("out_amax", out_amax, device, "the weight")
        if reset:
            out_amax.zero_()


def _check_nchw(name: str, t: Any, channels: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4 or t.shape[1] != channels:
        raise ValueError(
            f"{name} must be an [N, C, H, W] tensor with C={channels}, got shape {tuple(t.shape)}"
        )


def stored_filter(krsc: torch.Tensor, staged: bool) -> torch.Tensor:
    """``krsc`` as ``Conv2d`` stores its filter: ``staged`` (``Conv2d._stages_filter``: the
    grouped kernel runs it), a KRSC view of its ``[R, S, C / groups, K]`` copy, which that
    kernel reads as it is; else contiguous (no copy if it is), as the tensor-core kernels
    and cuDNN read it (groups outside the grouped kernel's limits only ever run on cuDNN).
    In-place writes, as ``load_state_dict`` makes, keep the layout."""
    if not staged:
        return krsc.contiguous()
    return stage_filter(krsc).permute(3, 0, 1, 2)


def _requires_grad(*tensors: Any) -> bool:
    return any(getattr(t, "requires_grad", False) for t in tensors)


def _kernel_stores_to(out: torch.Tensor) -> bool:
    """Whether the kernel can write the NCHW ``out`` in place: 16-byte aligned, channels_last
    or a channel slice of a channels_last tensor that it takes (``validation.out_pixel_stride``
    of its NHWC view)."""
    nhwc = out.permute(0, 2, 3, 1)
    return out.data_ptr() % ALIGNMENT_BYTES == 0 and slice_pixel_stride(nhwc) is not None


def _into(out: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
    """``y`` copied into ``out`` and ``out`` returned (nothing to copy where ``y`` is
    ``out``, written in place); ``y`` itself without an ``out``."""
    if out is None or y is out:
        return y
    return out.copy_(y)


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    """The NHWC view of an NCHW tensor, copied to channels_last first if it is not."""
    if not t.is_contiguous(memory_format=torch.channels_last):
        t = t.contiguous(memory_format=torch.channels_last)
    return t.permute(0, 2, 3, 1)


def _grouped_nhwc(t: torch.Tensor) -> torch.Tensor:
    """``_nhwc``, but a channel slice of a wider channels_last tensor (``optimize``'s
    concatenation buffers) is read in place where its pixel stride and offset keep the
    kernel's 16-byte loads aligned (``validation.channel_slice_stride``); not under
    ``torch.compile``, which does not trace a tensor's offset (the slice is copied there)."""
    nhwc = t.permute(0, 2, 3, 1)
    if torch.compiler.is_compiling():
        return _nhwc(t)
    stride = channel_slice_stride(nhwc)
    if stride is not None and stride % 8 == 0 and nhwc.storage_offset() % 8 == 0:
        return nhwc
    return _nhwc(t)


def _kernel_padding(
    padding: str | int | Sequence[int] | Sequence[Sequence[int]],
    kernel_size: Pair,
    stride: Pair,
    dilation: Pair,
) -> Padding:
    """``((top, bottom), (left, right))``, with torch's ``"valid"`` and ``"same"`` resolved."""
    if not isinstance(padding, str):
        return normalize_padding(padding)
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding != "same":
        raise ValueError(f"padding={padding!r} is not supported; use 'valid', 'same' or ints")
    if stride != (1, 1):
        raise ValueError(f"padding='same' needs stride 1 (as in torch), got stride={stride}")
    # torch's rule: the total (R-1)*dilation, the odd one on the bottom/right side.
    total = [(k - 1) * d for k, d in zip(kernel_size, dilation, strict=True)]
    return ((total[0] // 2, total[0] - total[0] // 2), (total[1] // 2, total[1] - total[1] // 2))


def _kernel_takes_groups(in_channels: int, out_channels: int, groups: int) -> bool:
    """Whether the grouped kernel runs these channels and groups (``grouped_limits``)."""
    try:
        grouped_limits(in_channels, out_channels, groups)
    except ValueError:
        return False
    return True


def conv_limits(conv: nn.Conv2d | Conv2d, dtype: torch.dtype) -> None:
    """Raise unless the kernel can run a conv of these attributes and weight ``dtype``.

    Checked here, from the attributes alone: channels and groups (``check_groups``), kernel
    size, stride and dilation of at least 1, padding mode, dtype, and the geometry limits that do
    not depend on the input's size (groups=1: stride 1..8, dilation, padding and filter span
    within the im2col TMA limits, by the package's own validation on a probe input just
    large enough for the filter; grouped: padding >= 0).
    The limits that do (an output of at least one pixel, N*P*Q < 2**31) are checked on every
    call.

    Raises:
        TypeError: ``dtype`` is not bfloat16/float16.
        ValueError: channels or groups that are not positive ints, groups that do not
            divide the channels, padding_mode != "zeros", or geometry out of the limits.
    """
    check_groups(conv.in_channels, conv.out_channels, conv.groups)
    kernel_size, stride, dilation = _geometry(conv)
    if min(kernel_size) < 1:
        raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
    check_stride_dilation(stride, dilation)
    if conv.padding_mode != "zeros":
        raise ValueError(
            f"padding_mode={conv.padding_mode!r}: the kernel pads with zeros only "
            "(padding_mode='zeros')"
        )
    if dtype not in INPUT_DTYPES:
        raise TypeError(
            f"dtype {dtype}: the kernel runs bfloat16 and float16 weights only; convert the "
            "model first, e.g. model.to(torch.bfloat16)"
        )
    if conv.groups == 1:
        _check_dense_geometry(conv, dtype)
        return
    padding = _kernel_padding(conv.padding, *_geometry(conv))
    if min(min(pair) for pair in padding) < 0:  # the direct kernel has no TMA limits
        raise ValueError(f"padding must be >= 0, got {padding}")


def _geometry(conv: nn.Conv2d | Conv2d) -> tuple[Pair, Pair, Pair]:
    """``(kernel_size, stride, dilation)`` of a module's attributes, as pairs."""
    return tuple(normalize_pair(name, getattr(conv, name))
                 for name in ("kernel_size", "stride", "dilation"))  # fmt: skip


def _check_dense_geometry(
    conv: nn.Conv2d | Conv2d, dtype: torch.dtype, limits: Im2colLimits = IM2COL_2D
) -> None:
    """Raise unless the tensor-core kernel's geometry limits that do not depend on the
    input's size hold: stride 1..8, dilation, padding and filter span within the im2col TMA
    ``limits`` (the package's own validation on a probe input just large enough for the
    filter, of all C channels: a grouped conv's are its dense problem's)."""
    kernel_size, stride, dilation = _geometry(conv)
    padding = _kernel_padding(conv.padding, kernel_size, stride, dilation)
    # Meta tensors: validation reads shapes, dtypes and strides only.
    h, w = ((k - 1) * d + 1 for k, d in zip(kernel_size, dilation, strict=True))
    probe_x = torch.empty(1, h, w, conv.in_channels, dtype=dtype, device="meta")
    probe_w = torch.empty(conv.out_channels, *kernel_size, conv.in_channels, dtype=dtype,
                          device="meta")  # fmt: skip
    validate_conv_inputs(
        probe_x, probe_w, stride=stride, padding=padding, dilation=dilation, limits=limits
    )


def _dense_geometry_holds(conv: Conv2d, dtype: torch.dtype, limits: Im2colLimits) -> bool:
    """Whether ``_check_dense_geometry`` passes within ``limits``."""
    try:
        _check_dense_geometry(conv, dtype, limits)
    except ValueError:
        return False
    return True
