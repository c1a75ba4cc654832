"""When ``cute_conv.nn.Conv2d`` runs a grouped conv on the grouped kernel, and when on cuDNN.

The grouped kernel (``kernels/common/grouped_direct.py``) runs on CUDA cores: it wins where
cuDNN's time is launches and layout transforms, and loses where the work is large enough for
cuDNN's tensor-core grouped kernels to pay. The bound is on the call's multiply-adds
(``N * P * Q * K * R * S * C / groups``), fitted on an H200
(``benchmarks/experiments/grouped_direct_ab_H200.json``: the kernel with its fused bias and
activation against cuDNN's conv with the bias, then the activation, CUDA-graph replays) on the
train models RegNetY-1.6GF, ResNeXt-50 32x4d and MobileNetV3-Large at batch 1, 8 and 32: each
bound the smallest power of two of least summed time per forward over its rows:

- depthwise: up to ``DEPTHWISE_MAX_MACS``. Held out (EfficientNet-B0, ConvNeXt-T's 7x7s):
  1.31x cuDNN summed over their rows as the rule runs them, the worst conv it takes 0.95x.
- grouped, ``C / groups`` a power of two (ResNeXt's 8, 16, 32 per group, which cuDNN runs
  without layout transforms): up to ``NATIVE_GROUPED_MAX_MACS`` (ResNeXt-50's at batch 1,
  0.88-1.37x per conv, 1.04x summed; at batch 8 and 32 cuDNN is faster, 0.28-0.97x);
- other grouped (RegNet's 24 per group, which cuDNN transforms to NCHW and back: 40% of
  RegNetY-1.6GF's batch-1 forward): up to ``GROUPED_MAX_MACS`` (RegNetY-1.6GF's summed
  5,410 -> 3,425 us over its rows of the three batches).

The grouped bounds have no held-out check yet (the train set holds both grouped families).
"""

from __future__ import annotations

__all__ = ["DEPTHWISE_MAX_MACS", "GROUPED_MAX_MACS", "NATIVE_GROUPED_MAX_MACS", "runs_grouped_kernel"]

DEPTHWISE_MAX_MACS = 2**27
NATIVE_GROUPED_MAX_MACS = 2**24
GROUPED_MAX_MACS = 2**29


def runs_grouped_kernel(macs: int, group_in: int, group_out: int) -> bool:
    """Whether a grouped conv call of ``macs`` multiply-adds, ``group_in`` input and
    ``group_out`` output channels per group runs faster on the grouped kernel than on cuDNN."""
    if group_in == group_out == 1:
        return macs <= DEPTHWISE_MAX_MACS
    if group_in & (group_in - 1) == 0:  # a power of two
        return macs <= NATIVE_GROUPED_MAX_MACS
    return macs <= GROUPED_MAX_MACS
