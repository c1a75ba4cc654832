"""The channel row of an NHWC tensor read in 16-byte vectors, as the CUDA-core kernels lay it out."""

from typing import Tuple, Type

import cutlass
import cutlass.cute as cute

VECTOR_BYTES = 16  # per load and store: C must be a multiple of VECTOR_BYTES / element size


def vector_elements(dtype: Type[cutlass.Numeric], dtypes: Tuple[Type[cutlass.Numeric], ...]) -> int:
    """The elements of ``dtype`` in one 16-byte vector; a TypeError unless ``dtype`` is one of
    the kernel's ``dtypes``."""
    if dtype not in dtypes:
        raise TypeError(
            f"dtype must be one of {', '.join(t.__name__ for t in dtypes)}, got {dtype}"
        )
    return VECTOR_BYTES * 8 // dtype.width


@cute.jit
def channel_row_stride(vectors: cutlass.Int32, vector: cutlass.Constexpr[int]) -> cutlass.Int64:
    """C = ``vectors * vector`` elements between adjacent pixels: 64-bit (a batch may hold more
    than 2**31 elements), and known to be a multiple of ``vector``, so that every vector
    starts at a multiple of 16 bytes (one load or store each)."""
    return cute.assume(cutlass.Int64(vectors) * vector, divby=vector)
