"""Quantization of a 16-bit tensor to float8_e4m3fn with a per-tensor scale read on the device:
``y = saturate(x / scale)``, the input staging of an fp8 conv whose producer wrote 16 bits.

One pass: every thread converts one vector of ``VECTOR`` elements (16 bytes in, 8 out). The
scale is a device scalar, so a CUDA graph replays with whatever it holds (delayed scaling). The
conversion is PTX's ``cvt.rn.satfinite``: values past +-448 become +-448, never NaN.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

VECTOR = 8  # elements per thread: one 16-byte load of 16-bit values
_THREADS = 256


class QuantizeFp8:
    """``__call__`` is the compiled entry: raw pointers of the contiguous 16-bit input, the
    float8_e4m3fn output of the same element count and the float32 scale, and the count of
    ``VECTOR``-element vectors (the element count must be a multiple of ``VECTOR``)."""

    def __init__(self, dtype: type[cutlass.Numeric]):
        if dtype not in (cutlass.BFloat16, cutlass.Float16):
            raise TypeError(f"dtype must be BFloat16 or Float16, got {dtype}")
        self.dtype = dtype

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        y_ptr: cute.Pointer,
        scale_ptr: cute.Pointer,
        vectors: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        vectors_layout = cute.make_layout((VECTOR, vectors), stride=(1, VECTOR))
        m_x = cute.make_tensor(x_ptr, vectors_layout)
        m_y = cute.make_tensor(y_ptr, vectors_layout)
        m_scale = cute.make_tensor(scale_ptr, cute.make_layout(1))
        self.kernel(m_x, m_y, m_scale).launch(
            grid=((vectors + _THREADS - 1) // _THREADS, 1, 1),
            block=[_THREADS, 1, 1],
            stream=stream,
        )

    @cute.kernel
    def kernel(self, m_x: cute.Tensor, m_y: cute.Tensor, m_scale: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        vector = bidx * _THREADS + tidx
        if vector < m_x.shape[1]:
            values = cute.make_rmem_tensor((VECTOR,), self.dtype)
            cute.autovec_copy(m_x[(None, vector)], values)
            inverse = cutlass.Float32(1.0) / m_scale[0]
            quantized = cute.make_rmem_tensor((VECTOR,), cutlass.Float8E4M3FN)
            quantized.store((values.load().to(cutlass.Float32) * inverse).to(cutlass.Float8E4M3FN))
            cute.autovec_copy(quantized, m_y[(None, vector)])
