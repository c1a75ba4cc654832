"""The channel row of an NHWC tensor read in 16-byte vectors, as the CUDA-core kernels lay it out."""

import cutlass
import cutlass.cute as cute


@cute.jit
def channel_row_stride(vectors: cutlass.Int32, vector: cutlass.Constexpr[int]) -> cutlass.Int64:
    """C = ``vectors * vector`` elements between adjacent pixels: 64-bit (a batch may hold more
    than 2**31 elements), and known to be a multiple of ``vector``, so that every vector
    starts at a multiple of 16 bytes (one load or store each)."""
    return cute.assume(cutlass.Int64(vectors) * vector, divby=vector)
