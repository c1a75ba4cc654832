"""Quantization of a 16-bit tensor to float8_e4m3fn with a per-tensor scale read on the device:
``y = saturate(x / scale)``, the input staging of an fp8 conv whose producer wrote 16 bits.

One pass: every thread converts one vector of ``VECTOR`` elements (16 bytes in, 8 out). The
scale is a device scalar, so a CUDA graph replays with whatever it holds (delayed scaling). The
conversion is PTX's ``cvt.rn.satfinite``: values past +-448 become +-448, never NaN.

With ``from_amax`` (dynamic scaling) the kernel reads ``max|x|`` instead, measured by the
launch before it, derives the scale itself (``amax / 448``, correctly rounded; 1 for 0 and
for NaN, as ``cute_conv.fp8.scale_from_amax``) and writes it for the conv that reads ``y``: the handful of
scalar torch ops that would compute it are as many launches, each as long as this pass on a
small activation.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from .dependent_launch import wait_for_previous_grid

VECTOR = 8  # elements per thread: one 16-byte load of 16-bit values
_THREADS = 256
_E4M3_MAX = 448.0


class QuantizeFp8:
    """``__call__`` is the compiled entry: raw pointers of the contiguous 16-bit input, the
    float8_e4m3fn output of the same element count, the float32 scale and the float32 amax,
    and the count of ``VECTOR``-element vectors (the element count must be a multiple of
    ``VECTOR``). Without ``from_amax`` the scale is read and the amax pointer is not (pass the
    scale's); with it the amax is read and the scale written."""

    def __init__(self, dtype: type[cutlass.Numeric], from_amax: bool = False):
        if dtype not in (cutlass.BFloat16, cutlass.Float16):
            raise TypeError(f"dtype must be BFloat16 or Float16, got {dtype}")
        self.dtype = dtype
        self.from_amax = from_amax

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        y_ptr: cute.Pointer,
        scale_ptr: cute.Pointer,
        amax_ptr: cute.Pointer,
        vectors: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        vectors_layout = cute.make_layout((VECTOR, vectors), stride=(1, VECTOR))
        m_x = cute.make_tensor(x_ptr, vectors_layout)
        m_y = cute.make_tensor(y_ptr, vectors_layout)
        m_scale = cute.make_tensor(scale_ptr, cute.make_layout(1))
        m_amax = cute.make_tensor(amax_ptr, cute.make_layout(1))
        self.kernel(m_x, m_y, m_scale, m_amax).launch(
            grid=((vectors + _THREADS - 1) // _THREADS, 1, 1),
            block=[_THREADS, 1, 1],
            stream=stream,
            use_pdl=True,
        )

    @cute.kernel
    def kernel(self, m_x: cute.Tensor, m_y: cute.Tensor, m_scale: cute.Tensor, m_amax: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        vector = bidx * _THREADS + tidx
        wait_for_previous_grid()
        if cutlass.const_expr(self.from_amax):
            amax = m_amax[0]
            scale = cutlass.Float32(1.0)
            if amax > cutlass.Float32(0.0):  # false for NaN too
                scale = amax / cutlass.Float32(_E4M3_MAX)
            if vector == 0:
                m_scale[0] = scale  # read by the next launch only
        if vector < m_x.shape[1]:
            values = cute.make_rmem_tensor((VECTOR,), self.dtype)
            cute.autovec_copy(m_x[(None, vector)], values)
            if cutlass.const_expr(self.from_amax):
                inverse = cutlass.Float32(1.0) / scale
            else:
                inverse = cutlass.Float32(1.0) / m_scale[0]
            quantized = cute.make_rmem_tensor((VECTOR,), cutlass.Float8E4M3FN)
            quantized.store((values.load().to(cutlass.Float32) * inverse).to(cutlass.Float8E4M3FN))
            cute.autovec_copy(quantized, m_y[(None, vector)])
