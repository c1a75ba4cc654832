"""cute_conv: Conv2D forward kernels written in CuTe DSL, callable on torch tensors.

NHWC activation, KRSC filter, NPQK output; one persistent warp-specialized kernel per call.
"""

from .api import conv2d_fprop, conv2d_fprop_with_residual
from .compile import CompiledConv2d, compile_kernel
from .config import Conv2dConfig, default_config
from .epilogue import ACTIVATIONS, EpilogueSpec
from .problem import Conv2dProblemShape
from .tuning import autotune

__all__ = [
    "ACTIVATIONS",
    "CompiledConv2d",
    "Conv2dConfig",
    "Conv2dProblemShape",
    "EpilogueSpec",
    "autotune",
    "compile_kernel",
    "conv2d_fprop",
    "conv2d_fprop_with_residual",
    "default_config",
]
__version__ = "0.1.0"
