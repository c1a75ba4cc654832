"""cute_conv: Conv2D forward kernels written in CuTe DSL, callable on torch tensors.

NHWC activation, KRSC filter, NPQK output; one persistent warp-specialized kernel per call
(a CUDA-core kernel for 1x1 convs of a few output pixels); grouped and depthwise convs on a
CUDA-core direct kernel (``grouped_conv2d``), wide groups also on the tensor cores
(``grouped_conv2d_tensor_cores``).
"""

from . import nn
from .api import autotune, conv2d_fprop, conv2d_fprop_with_residual
from .compile import CompiledConv2d, compile_kernel
from .config import Conv2dConfig, check_config_fits, default_config
from .config_sm100 import Conv2dConfigSm100, can_implement_sm100, default_config_sm100
from .epilogue import ACTIVATIONS, EpilogueSpec
from .fp8 import quantize_fp8
from .grouped import grouped_conv2d, grouped_limits
from .grouped_tensor_cores import grouped_conv2d_tensor_cores
from .kernels.common.grouped_direct import GroupedDirectConfig
from .kernels.common.pointwise_gemv import PointwiseGemvConfig
from .optimize import OptimizeReport, optimize
from .problem import Conv2dProblemShape
from .staging import clear_staged_weights

__all__ = [
    "ACTIVATIONS",
    "CompiledConv2d",
    "Conv2dConfig",
    "Conv2dConfigSm100",
    "Conv2dProblemShape",
    "EpilogueSpec",
    "GroupedDirectConfig",
    "OptimizeReport",
    "PointwiseGemvConfig",
    "autotune",
    "can_implement_sm100",
    "check_config_fits",
    "clear_staged_weights",
    "compile_kernel",
    "conv2d_fprop",
    "conv2d_fprop_with_residual",
    "default_config",
    "default_config_sm100",
    "grouped_conv2d",
    "grouped_conv2d_tensor_cores",
    "grouped_limits",
    "nn",
    "optimize",
    "quantize_fp8",
]
__version__ = "0.1.0"
