"""The compilation targets: each architecture registered once, with its kernel class, config
class, default config, heuristic and launch scratch. ``compile``, ``api`` and ``dispatch`` look
an arch up here instead of branching on config types.

``sm_100a`` is compile-verified only: built and checked on its PTX, never run on a Blackwell GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .config import check_config_fits, default_config, tiles_hold_whole_rows
from .config_sm100 import default_config_sm100
from .direct_rule import direct_dense_config
from .epilogue_rule import wide_epilogue_config
from .gather_rule import gathered_config
from .gemv_rule import pointwise_gemv_config
from .halo_rule import halo_tiled_config
from .kernels.common.grouped_direct import GroupedDirectConfig
from .kernels.common.pointwise_gemv import PointwiseGemvConfig
from .kernels.sm90.config import SMEM_CAPACITY_SM90, Conv2dConfig
from .kernels.sm90.conv2d_fprop import Conv2dFpropSm90
from .kernels.sm100.config import SMEM_CAPACITY_SM100, Conv2dConfigSm100
from .kernels.sm100.conv2d_fprop import Conv2dFpropKernel
from .problem import Conv2dProblemShape
from .ring_rule import single_tile_ring_config
from .small_grid_rules import (
    last_wave_config,
    lone_cta_config,
    pointwise_pair_config,
    single_warpgroup_config,
    small_m_config,
    wide_cluster_config,
)
from .workspace import workspace_size_sm90

__all__ = ["ARCHS", "ArchKernels", "check_config_type", "config_types"]


@dataclass(frozen=True)
class ArchKernels:
    """What one architecture brings: its kernel class, built as
    ``kernel_class(act_dtype, filter_dtype, out_dtype, config, epilogue)``, and its config."""

    kernel_class: type
    config_class: type
    smem_capacity: int  # bytes of dynamic SMEM one CTA may use
    # The config of ``compile_kernel`` without one (no problem to fit it to).
    default_config: Callable[[], Any]
    # The config of a call without one: ``(kernel problem, SM count, has_residual, bytes of
    # an input element, bytes of an output element)``.
    heuristic: Callable[[Conv2dProblemShape, int, bool, int, int], Any]
    # Raises ``ValueError`` where a config cannot run a kernel problem (None: any runs).
    check_fits: Optional[Callable[[Any, Conv2dProblemShape], None]]
    # ``(config, kernel problem, input dtype name, output dtype name)`` -> whether its
    # thread-stored output may go out a tile at a time in bulk (``EpilogueSpec.
    # bulk_tile_store``); None: the arch's kernels have no such store.
    whole_rows_rule: Optional[Callable[[Any, Conv2dProblemShape, str, str], bool]]
    # Whether a call without a config may time candidates on the GPU (``tuning``).
    autotuned: bool
    # For a call without a config, before the autotuner and every rule below: ``(the
    # problem as called, bytes of an input element, bytes of an output element)`` -> a
    # ``PointwiseGemvConfig`` for the CUDA-core kernel of few-row 1x1s, or None (None: the
    # arch's tensor-core kernels run every conv).
    pointwise_gemv_rule: Optional[Callable[[Conv2dProblemShape, int, int], Any]]
    # Likewise, where the pointwise-GEMV rule declines: the same arguments and whether the
    # tensor-core path would copy the activation first (``staging.copies_activation``) -> a
    # ``GroupedDirectConfig`` for the CUDA-core direct conv of few-channel dense convs
    # (``direct_rule``), or None (None: never).
    direct_rule: Optional[Callable[[Conv2dProblemShape, int, int, bool], Any]]
    # For a call without a config whose C would be padded or unfolded (im2col): ``(the
    # heuristic's config for the channel-padded problem, that problem, SM count, bytes of an
    # input element, the staging spared; keyword ``channels``: the conv's C)`` -> a config
    # that gathers the operands, or None for the staged path (None: the arch's kernels always
    # read staged copies).
    gather_rule: Optional[Callable[..., Any]]
    # For a call without a config on a conv that runs unstaged or gathered: ``(the config it
    # would run, the problem, SM count, has_residual, bytes of an input element)`` -> the
    # config to run (None: that one).
    small_m_rule: Optional[Callable[..., Any]]
    # For a call without a config, after the rules above: ``(the config it would run, the
    # problem the kernel runs, SM count, has_residual, bytes of an input element)`` -> the
    # config to run (None: that one).
    single_warpgroup_rule: Optional[Callable[..., Any]]
    # For a call without a config, after the rules above: ``(the config it would run, the
    # problem the kernel runs, SM count, has_residual, bytes of an input element, bytes of an
    # output element)`` -> the config to run (None: that one).
    halo_rule: Optional[Callable[..., Any]]
    # For a call without a config, after the rules above, with the halo rule's arguments:
    # its epilogue's subtile width (None: the kernel's own).
    epilogue_rule: Optional[Callable[..., Any]]
    # For a call without a config on a conv that runs unstaged, last, with the small-M
    # rule's arguments: its cluster shape (None: the config's).
    cluster_rule: Optional[Callable[..., Any]]
    # For a call without a config, after every rule above, with the small-M rule's arguments
    # (the problem the kernel runs): its schedule over the last wave (None: the config's).
    last_wave_rule: Optional[Callable[..., Any]]
    # For a call without a config, last, with the small-M rule's arguments (the conv as
    # called: a conv unfolded into a 1x1 is not one): the cluster shape of a 1x1 whose few
    # k-tiles are partly empty (None: the config's).
    pair_rule: Optional[Callable[..., Any]]
    # For a call without a config, after the pair rule, with the last-wave rule's arguments:
    # single CTAs instead of a 2-CTA cluster where the tiles fill at most one wave (None: the
    # config's).
    lone_cta_rule: Optional[Callable[..., Any]]
    # For a call without a config, last, with the epilogue rule's arguments: the A/B ring's
    # depth where each CTA runs one tile (None: the config's).
    ring_rule: Optional[Callable[..., Any]]
    # The scratch a launch needs, ``(float32 partials, int32 flags)`` or None, for
    # ``(kernel problem, config, max clusters)`` (None: the arch's kernels never need any).
    workspace_size: Optional[Callable[[Conv2dProblemShape, Any, int], Optional[tuple]]]


def _heuristic_sm100(
    problem: Conv2dProblemShape, num_sms: int, has_residual: bool, element_bytes: int,
    out_bytes: int,
):  # fmt: skip
    """``default_config_sm100``: untuned, so a residual does not change its choice."""
    return default_config_sm100(problem, num_sms, element_bytes=element_bytes)


def _heuristic_sm90(
    problem: Conv2dProblemShape, num_sms: int, has_residual: bool, element_bytes: int,
    out_bytes: int,
):  # fmt: skip
    return default_config(
        problem, num_sms, has_residual=has_residual, element_bytes=element_bytes,
        out_bytes=out_bytes,
    )  # fmt: skip


ARCHS: dict[str, ArchKernels] = {
    "sm_90a": ArchKernels(
        kernel_class=Conv2dFpropSm90,
        config_class=Conv2dConfig,
        smem_capacity=SMEM_CAPACITY_SM90,
        default_config=Conv2dConfig,
        heuristic=_heuristic_sm90,
        check_fits=check_config_fits,
        whole_rows_rule=tiles_hold_whole_rows,
        autotuned=True,
        pointwise_gemv_rule=pointwise_gemv_config,
        direct_rule=direct_dense_config,
        gather_rule=gathered_config,
        small_m_rule=small_m_config,
        single_warpgroup_rule=single_warpgroup_config,
        halo_rule=halo_tiled_config,
        epilogue_rule=wide_epilogue_config,
        cluster_rule=wide_cluster_config,
        last_wave_rule=last_wave_config,
        pair_rule=pointwise_pair_config,
        lone_cta_rule=lone_cta_config,
        ring_rule=single_tile_ring_config,
        workspace_size=workspace_size_sm90,
    ),
    "sm_100a": ArchKernels(
        kernel_class=Conv2dFpropKernel,
        config_class=Conv2dConfigSm100,
        smem_capacity=SMEM_CAPACITY_SM100,
        default_config=Conv2dConfigSm100.default_bf16,
        heuristic=_heuristic_sm100,
        check_fits=None,
        whole_rows_rule=None,
        autotuned=False,
        pointwise_gemv_rule=None,
        direct_rule=None,
        gather_rule=None,
        small_m_rule=None,
        single_warpgroup_rule=None,
        halo_rule=None,
        epilogue_rule=None,
        cluster_rule=None,
        last_wave_rule=None,
        pair_rule=None,
        lone_cta_rule=None,
        ring_rule=None,
        workspace_size=None,
    ),
}


def config_types() -> tuple[type, ...]:
    """The config classes of every registered arch, and the CUDA-core kernels'
    (``PointwiseGemvConfig`` and ``GroupedDirectConfig``, any arch)."""
    return (
        *(arch.config_class for arch in ARCHS.values()), PointwiseGemvConfig, GroupedDirectConfig
    )


def check_config_type(config: Any) -> None:
    """Raise ``TypeError`` unless ``config`` is None or a registered arch's config, a
    ``PointwiseGemvConfig`` or a ``GroupedDirectConfig``."""
    if config is not None and not isinstance(config, config_types()):
        accepted = ", ".join(f"a {a.config_class.__name__} ({name})" for name, a in ARCHS.items())
        raise TypeError(
            f"config must be {accepted}, a PointwiseGemvConfig (1x1 convs of few output "
            "pixels), a GroupedDirectConfig (few-channel convs on CUDA cores) or None, got "
            f"{type(config).__name__}"
        )
