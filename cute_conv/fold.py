"""What of a torch model folds into the conv epilogue, and as what.

An eval-mode BatchNorm (``nn.BatchNorm2d``; ``nn.SyncBatchNorm``, which models trained across
GPUs hold; torchvision's ``FrozenBatchNorm2d``, which pretrained detection backbones hold)
becomes the per-channel ``scale`` and ``bias``:

    bn(conv(x) + b) = conv(x) * scale + bias,
    scale = gamma / sqrt(running_var + eps),  bias = beta + (b - running_mean) * scale

The filter itself is left as it is: ``scale`` is applied to the float32 accumulator in the
kernel's epilogue, so folding rounds nothing to the filter's 16-bit dtype. A torch activation
(module, function or tensor method) becomes the epilogue's activation name.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from .kernels.common.epilogue import ACTIVATIONS, LEAKY_RELU_SLOPE

__all__ = ["activation_name", "batch_norm_channels", "fold_batch_norm", "folds_as_batch_norm"]


def _frozen_batch_norm_type() -> type | None:
    """torchvision's ``FrozenBatchNorm2d`` (statistics and affine terms as buffers, always
    normalizing by them), where torchvision is imported: a model holding one has imported it."""
    return getattr(sys.modules.get("torchvision.ops.misc"), "FrozenBatchNorm2d", None)


# Batch norms that normalize by running statistics in eval mode (SyncBatchNorm as BatchNorm2d
# does in one process).
_TORCH_BATCH_NORMS = (nn.BatchNorm2d, nn.SyncBatchNorm)


def folds_as_batch_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a BatchNorm ``fold_batch_norm`` takes: an ``nn.BatchNorm2d`` or
    ``nn.SyncBatchNorm`` with running statistics, or torchvision's ``FrozenBatchNorm2d`` (exact
    types: a subclass may compute something else in its forward). Training mode is the
    caller's to check."""
    if type(module) in _TORCH_BATCH_NORMS:
        return module.running_mean is not None and module.running_var is not None
    return type(module) is _frozen_batch_norm_type()


def batch_norm_channels(bn: nn.Module) -> int:
    """The channels ``bn`` normalizes.

    Raises:
        TypeError: ``bn`` is none of ``torch.nn.BatchNorm2d``, ``torch.nn.SyncBatchNorm`` and
            torchvision's ``FrozenBatchNorm2d``.
    """
    if isinstance(bn, _TORCH_BATCH_NORMS):
        return bn.num_features
    if type(bn) is _frozen_batch_norm_type():
        return bn.running_mean.shape[0]
    raise TypeError(
        "bn must be a torch.nn.BatchNorm2d, a torch.nn.SyncBatchNorm or torchvision's "
        f"FrozenBatchNorm2d, got {type(bn).__name__}"
    )


def fold_batch_norm(
    bn: nn.Module, conv_bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return float32 ``(scale, bias)`` vectors with ``bn(conv(x) + conv_bias) == conv(x) *
    scale + bias`` for a BatchNorm2d or SyncBatchNorm in eval mode or a torchvision
    ``FrozenBatchNorm2d`` (computed in float32 from its statistics, whatever their dtype).
    ``conv_bias`` is the conv's own bias, or None.

    Raises:
        TypeError: ``bn`` is none of those (``batch_norm_channels``).
        ValueError: ``bn`` is a torch BatchNorm in training mode (it would normalize by the
            batch's statistics) or keeping no running statistics, or ``conv_bias`` has the
            wrong length.
    """
    channels = batch_norm_channels(bn)
    if isinstance(bn, _TORCH_BATCH_NORMS) and bn.training:
        raise ValueError(
            f"bn {bn} is in training mode, where it normalizes by each batch's statistics; "
            "only an eval-mode BatchNorm folds into the conv: call model.eval() first"
        )
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError(
            f"bn {bn} keeps no running statistics (track_running_stats=False), so it "
            "normalizes by each batch's statistics even in eval mode; it cannot be folded"
        )
    if conv_bias is not None and tuple(conv_bias.shape) != (channels,):
        raise ValueError(
            f"conv_bias has shape {tuple(conv_bias.shape)}; bn {bn} normalizes {channels} "
            f"channels: shape ({channels},)"
        )
    with torch.no_grad():
        mean = bn.running_mean.float()
        scale = torch.rsqrt(bn.running_var.float() + bn.eps)
        if bn.weight is not None:  # affine=False: gamma = 1, beta = 0
            scale = scale * bn.weight.float()
        shift = -mean if conv_bias is None else conv_bias.float() - mean
        bias = shift * scale
        if bn.bias is not None:
            bias = bias + bn.bias.float()
    return scale.contiguous(), bias.contiguous()


def _gelu(approximate: str = "none") -> str:
    names = {"none": "gelu", "tanh": "gelu_tanh"}
    if approximate not in names:
        raise ValueError(f"GELU approximate={approximate!r}: the kernel runs 'none' and 'tanh'")
    return names[approximate]


def _leaky_relu(negative_slope: float = 0.01, inplace: bool = False) -> str:
    if negative_slope != LEAKY_RELU_SLOPE:
        raise ValueError(
            f"LeakyReLU negative_slope={negative_slope}: the kernel's leaky_relu has slope "
            f"{LEAKY_RELU_SLOPE} only"
        )
    return "leaky_relu"


def _named(name: str) -> Callable[..., str]:
    return lambda *_args, **_kwargs: name  # ``inplace`` changes nothing in a fused epilogue


# Each takes the arguments after the input tensor, as the torch call got them.
_FUNCTIONS: dict[Callable, Callable[..., str]] = {
    **dict.fromkeys((F.relu, torch.relu, torch.relu_, F.relu_), _named("relu")),
    F.gelu: _gelu,
    F.silu: _named("silu"),
    **dict.fromkeys((torch.sigmoid, F.sigmoid, torch.sigmoid_), _named("sigmoid")),
    **dict.fromkeys((torch.tanh, F.tanh, torch.tanh_), _named("tanh")),
    **dict.fromkeys((F.leaky_relu, F.leaky_relu_), _leaky_relu),
    F.mish: _named("mish"),
    F.relu6: _named("relu6"),
    F.hardswish: _named("hardswish"),
    F.hardsigmoid: _named("hardsigmoid"),
}
_METHODS: dict[str, Callable] = {
    "relu": torch.relu, "relu_": torch.relu_, "sigmoid": torch.sigmoid,
    "sigmoid_": torch.sigmoid_, "tanh": torch.tanh, "tanh_": torch.tanh_,
}  # fmt: skip
# Exact types: a subclass may compute something else in its forward.
_MODULES: dict[type, Callable[[nn.Module], str]] = {
    nn.ReLU: lambda m: "relu",
    nn.GELU: lambda m: _gelu(m.approximate),
    nn.SiLU: lambda m: "silu",
    nn.Sigmoid: lambda m: "sigmoid",
    nn.Tanh: lambda m: "tanh",
    nn.LeakyReLU: lambda m: _leaky_relu(m.negative_slope),
    nn.Mish: lambda m: "mish",
    nn.ReLU6: lambda m: "relu6",
    nn.Hardswish: lambda m: "hardswish",
    nn.Hardsigmoid: lambda m: "hardsigmoid",
}


def activation_name(activation: Any, *args: Any, **kwargs: Any) -> str | None:
    """The epilogue's name for a torch activation, or None when it is none the kernel knows.

    ``activation`` is an activation module (``nn.ReLU()``, ``nn.GELU("tanh")``, ...), a
    function (``F.relu``, ``torch.relu_``, ``F.gelu``, ...) called with ``args``/``kwargs``
    after its input tensor, or a name: the epilogue's own (``"gelu_tanh"``) or a tensor
    method's (``"relu_"``, for ``x.relu_()``).

    Raises:
        ValueError: a known activation with a parameter the kernel does not run (GELU's
            ``approximate`` other than "none"/"tanh", a LeakyReLU slope other than 0.01).
    """
    if isinstance(activation, nn.Module):
        resolve = _MODULES.get(type(activation))
        return None if resolve is None else resolve(activation)
    if isinstance(activation, str):
        if activation in ACTIVATIONS:
            return activation
        activation = _METHODS.get(activation)
    resolve = _FUNCTIONS.get(activation) if callable(activation) else None
    return None if resolve is None else resolve(*args, **kwargs)
