"""Grouped convs of wide groups on the SM90 tensor-core kernel (``Conv2dConfig.groups``).

A conv of ``G`` groups is ``G`` dense convs of ``C / G`` channels side by side. Its KRSC
filter, ``[K, R, S, C / G]``, is a dense filter of ``C / G`` channels, and where the tile's
``tile_n`` divides ``K / G`` an output tile's channels lie in one group: the dense kernel's
filter, output, bias and residual views serve as they are, and only the activation's tiles
read their group's channels (``Im2colLoader.channel_group``). Measured as a bound before it
was built (``benchmarks/experiments/grouped_tensor_core_bound.py``): the same work as one
dense conv ran 3-9x cuDNN's grouped convs on RegNet's wide groups at batch 8 and 32; built,
it runs 0.85-1.03x that bound's time at batch 8 and 32, 1.09-1.45x at batch 1
(``experiments/grouped_tensor_cores_H200.json``).
"""

from __future__ import annotations

import torch

from .compile import compile_kernel, kernel_scalars
from .config import check_config_fits
from .cuda_context import current_raw_stream, device_arch, on_device
from .dtypes import dtype_name
from .kernels.common.epilogue import EpilogueSpec
from .kernels.sm90.config import TILE_N_CHOICES, Conv2dConfig
from .occupancy import resident_clusters
from .problem import Conv2dProblemShape
from .reference import TORCH_ACTIVATIONS
from .schedule import launch_clusters

__all__ = ["default_tile_n", "grouped_conv2d_tensor_cores"]

_INPUT_DTYPES = (torch.bfloat16, torch.float16)


def default_tile_n(group_out: int) -> int:
    """The widest tile width (``TILE_N_CHOICES``, at most 256) that divides ``group_out``
    output channels per group; a ``ValueError`` where none does (56, 120: not multiples of
    16)."""
    tile_n = next((t for t in sorted(TILE_N_CHOICES, reverse=True) if group_out % t == 0), None)
    if tile_n is None:
        raise ValueError(f"K / groups = {group_out}: no tile width divides it")
    return tile_n


def grouped_conv2d_tensor_cores(
    x: torch.Tensor,
    filter: torch.Tensor,
    groups: int,
    *,
    stride=1,
    padding=0,
    dilation=1,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    config: Conv2dConfig | None = None,
) -> torch.Tensor:
    """``act(conv(x, filter, groups) + bias)`` on the tensor cores: ``x`` a contiguous
    ``[N, H, W, C]`` bf16/fp16 tensor, ``filter`` the grouped conv's contiguous
    ``[K, R, S, C / groups]``, ``C / groups`` a multiple of 8 (16-byte filter rows), ``bias``
    ``[K]`` or None. ``config``: a ``Conv2dConfig`` whose ``groups`` is ``groups`` and whose
    ``tile_n`` divides ``K / groups`` (default: 128 rows, the widest tile_n that divides it).
    A ``ValueError`` or ``TypeError`` names the argument before any launch."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 2:
        raise ValueError(f"groups must be an int >= 2, got {groups!r}")
    for name, t in (("x", x), ("filter", filter)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _INPUT_DTYPES or t.dim() != 4 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 4-d bfloat16/float16 tensor")
    if filter.dtype != x.dtype or filter.device != x.device or x.device.type != "cuda":
        raise ValueError("x and filter must be CUDA tensors of one dtype on one device")
    n, h, w, c = x.shape
    k, r, s, group_in = filter.shape
    if c != group_in * groups or k % groups:
        raise ValueError(
            f"filter has shape {tuple(filter.shape)}; a conv of {c} channels in {groups} "
            f"groups takes [K, R, S, {c // groups}] with K a multiple of {groups}"
        )
    if group_in % 8:
        raise ValueError(f"C / groups = {group_in}: a multiple of 8 (16-byte filter rows)")
    group_out = k // groups
    if config is None:
        config = Conv2dConfig(tile_m=128, tile_n=default_tile_n(group_out), groups=groups)
    if not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")
    if config.groups != groups or group_out % config.tile_n:
        raise ValueError(
            f"config has groups={config.groups}, tile_n={config.tile_n}; this call takes "
            f"groups={groups} and a tile_n dividing K / groups = {group_out}"
        )
    if k % 8:
        raise ValueError(f"K = {k}: a multiple of 8 (the output's 16-byte TMA rows)")
    if activation not in TORCH_ACTIVATIONS:
        names = sorted(a for a in TORCH_ACTIVATIONS if a is not None)
        raise ValueError(f"activation must be None or one of {names}, got {activation!r}")
    if bias is not None and (
        not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (k,)
        or bias.device != x.device or not bias.is_contiguous()
    ):  # fmt: skip
        raise ValueError(f"bias must be a contiguous [{k}] tensor on {x.device}")
    # The dense problem over all channels: P, Q and the geometry's C (the activation's pixel
    # stride) and K (the output's); the kernel reads the filter's C / groups itself.
    problem = Conv2dProblemShape.from_shapes(
        (n, h, w, c), (k, r, s, c), stride=stride, padding=padding, dilation=dilation
    )
    check_config_fits(config, problem)
    vector_dtype = None if bias is None else dtype_name(bias.dtype)
    spec = EpilogueSpec(has_bias=bias is not None, activation=activation,
                        vector_dtype=vector_dtype)  # fmt: skip
    index = x.device.index
    kernel = compile_kernel(
        device_arch(index), act_dtype=dtype_name(x.dtype), filter_dtype=dtype_name(x.dtype),
        out_dtype=dtype_name(x.dtype), config=config, epilogue=spec,
    )  # fmt: skip
    num_sms = torch.cuda.get_device_properties(index).multi_processor_count
    clusters = launch_clusters(
        problem, config, num_sms, resident_clusters(index, config.cluster_m)
    )
    out = torch.empty(problem.output_shape, dtype=x.dtype, device=x.device)
    pointers = (x.data_ptr(), filter.data_ptr(), out.data_ptr(), 0,
                0 if bias is None else bias.data_ptr(), 0, *([0] * 7))  # fmt: skip
    with on_device(index):
        kernel.launch(pointers, kernel_scalars(problem, 1.0, 0.0, clusters),
                      current_raw_stream(index))  # fmt: skip
    return out
