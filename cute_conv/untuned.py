"""The config a call without one runs when nothing is autotuned: a CUDA-core kernel's for
1x1 convs of a few output pixels and for few-channel stems, else the arch's heuristic for
the problem the kernel runs, a gathering config where it spares a staging pass, the small-M,
single-warpgroup, halo, epilogue, cluster, last-wave, pointwise-pair, lone-CTA and ring
rules. ``dispatch`` runs it; ``tuning`` times it beside its candidates, so that a stored
choice never runs slower than the call it replaces."""

from __future__ import annotations

from .arch import ARCHS, ArchKernels
from .config import check_heuristic_args
from .problem import Conv2dProblemShape
from .staging import (
    channels_padded,
    copies_activation,
    gather_replaces,
    kernel_problem_for,
    patch_view,
)

__all__ = ["cuda_core_config", "heuristic_config", "untuned_config"]


def untuned_config(
    target: ArchKernels,
    problem: Conv2dProblemShape,
    kernel_problem: Conv2dProblemShape,
    num_sms: int,
    has_residual: bool,
    element_bytes: int,
    out_bytes: int = 2,
    *,
    cuda_cores: bool = True,
):
    """The arch's CUDA-core config where one of its rules takes the conv (``cuda_core_config``;
    unless ``cuda_cores`` is False: the tensor-core config, the autotuner's baseline).
    Else the heuristic's config for the staged ``kernel_problem``, or one that gathers
    ``problem``'s operands instead, where its staging is one a gather spares and the arch's
    gather rule takes it (sized by the heuristic on the channel-padded problem); for a conv
    that runs unstaged or gathered, as the arch's small-M rule makes it; then as the arch's
    single-warpgroup rule, its halo rule and its epilogue rule make it for the conv the kernel
    runs; then, for an unstaged conv, as its cluster rule makes it; then as its last-wave
    rule schedules it; then as its pair rule clusters it and its lone-CTA rule takes its 2-CTA
    clusters apart; last, as its ring rule sizes its A/B ring. A conv on the patch view
    (``staging.patch_view``: views, nothing copied) is the view's conv, unstaged."""
    if cuda_cores:
        on_cuda_cores = cuda_core_config(target, problem, element_bytes, out_bytes)
        if on_cuda_cores is not None:
            return on_cuda_cores
    if kernel_problem == patch_view(problem, element_bytes):
        problem = kernel_problem
    config = target.heuristic(kernel_problem, num_sms, has_residual, element_bytes, out_bytes)
    replaces = gather_replaces(problem, element_bytes)
    staged = replaces is not None or kernel_problem != problem  # unless gathered
    if staged and target.gather_rule is not None and replaces is not None:
        padded = channels_padded(problem, element_bytes)
        base = config
        if padded != kernel_problem:  # im2col columns: the staged config does not fit the conv
            base = target.heuristic(padded, num_sms, has_residual, element_bytes, out_bytes)
        gathered = target.gather_rule(
            base, padded, num_sms, element_bytes, replaces, channels=problem.C
        )
        if gathered is not None:
            config, staged = gathered, False
    if not staged and target.small_m_rule is not None:
        config = target.small_m_rule(config, problem, num_sms, has_residual, element_bytes)
    runs = kernel_problem if staged else problem
    if target.single_warpgroup_rule is not None:
        config = target.single_warpgroup_rule(config, runs, num_sms, has_residual, element_bytes)
    if target.halo_rule is not None:
        config = target.halo_rule(config, runs, num_sms, has_residual, element_bytes, out_bytes)
    if target.epilogue_rule is not None:
        config = target.epilogue_rule(
            config, runs, num_sms, has_residual, element_bytes, out_bytes
        )
    if not staged and target.cluster_rule is not None:
        config = target.cluster_rule(config, problem, num_sms, has_residual, element_bytes)
    if target.last_wave_rule is not None:
        config = target.last_wave_rule(config, runs, num_sms, has_residual, element_bytes)
    if target.pair_rule is not None:
        config = target.pair_rule(config, problem, num_sms, has_residual, element_bytes)
    if target.lone_cta_rule is not None:
        config = target.lone_cta_rule(config, runs, num_sms, has_residual, element_bytes)
    if target.ring_rule is not None:
        config = target.ring_rule(config, runs, num_sms, has_residual, element_bytes, out_bytes)
    return config


def cuda_core_config(
    target: ArchKernels,
    problem: Conv2dProblemShape,
    element_bytes: int,
    out_bytes: int,
):
    """The config of a CUDA-core kernel for ``problem`` where the arch's rules take it: its
    pointwise-GEMV rule (a ``PointwiseGemvConfig``), else its direct rule (a
    ``GroupedDirectConfig``); None: the tensor cores run it."""
    if target.pointwise_gemv_rule is not None:
        config = target.pointwise_gemv_rule(problem, element_bytes, out_bytes)
        if config is not None:
            return config
    if target.direct_rule is not None:
        staged = copies_activation(problem, element_bytes)
        return target.direct_rule(problem, element_bytes, out_bytes, staged)
    return None


def heuristic_config(
    problem: Conv2dProblemShape,
    num_sms: int,
    *,
    has_residual: bool = False,
    element_bytes: int = 2,
    arch: str = "sm_90a",
    out_bytes: int = 2,
    cuda_cores: bool = True,
):
    """The config a call on ``problem`` without one runs on ``arch`` when nothing is
    autotuned: a CUDA-core kernel's where the pointwise-GEMV or the direct rule takes the conv
    (unless ``cuda_cores`` is False), else the heuristic's for the staged kernel problem, or one
    that gathers the operands where the gather rule takes it, as the small-M rule makes it.
    The benchmarks pass it explicitly, so that a stored autotuner choice cannot stand in for
    it."""
    check_heuristic_args(problem, num_sms, has_residual)
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    if not isinstance(cuda_cores, bool):
        raise TypeError(f"cuda_cores must be a bool, got {cuda_cores!r}")
    kernel_problem = kernel_problem_for(problem, element_bytes)
    return untuned_config(
        ARCHS[arch], problem, kernel_problem, num_sms, has_residual, element_bytes, out_bytes,
        cuda_cores=cuda_cores,
    )  # fmt: skip
