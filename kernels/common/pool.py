"""Max and average pooling of a contiguous NHWC activation: ``y[n, p, q, c]`` is the max
(``MaxPool2dNhwc``) or the mean (``AvgPool2dNhwc``) of ``x`` over the window under output pixel
``(p, q)``.

For the pools ``optimize`` meets between convs (ResNet's 3x3 stride-2 max pool of the stem's
output, DenseNet's 2x2 average pools, Inception's 3x3 stride-1 ones): torch's channels_last
``max_pool2d`` reads that map at ~0.6 TB/s on an H100. One pass, every thread one 16-byte vector
of channels of one output pixel: it loads the window's vectors (each a 16-byte load,
consecutive threads consecutive vectors of a pixel), reduces them in float32 and stores one
vector.

- Max: the padding never chosen (as ``-inf``), NaN propagated; exact (the result is one of the
  values).
- Mean: the taps inside the map summed in torch's order (rows, then columns) from 0, divided
  (IEEE) by torch's divisor: ``divisor_override``, else the window's pixels up to the padded
  map's edge (``count_include_pad``; ceil mode's overhang past the padding not counted) or
  those inside the map. The same bits as torch's channels_last pool.

The window (size, stride, padding, dilation) is compile-time, so its loops unroll; the extents
are runtime values.
"""

from typing import NamedTuple, Optional, Tuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from .channel_rows import channel_row_stride, vector_elements
from .dependent_launch import wait_for_previous_grid

# e4m3 maps too (an fp8 stem's output): max commutes with a monotone per-tensor quantization.
# Not e5m2: its infinities would come back finite from the saturating conversion.
POOL_TYPES = (cutlass.BFloat16, cutlass.Float16, cutlass.Float32, cutlass.Float8E4M3FN)
# A mean is no value of the map: no fp8 (its quantization would need a scale).
AVG_POOL_TYPES = POOL_TYPES[:3]
_THREADS = 256
# Taps whose loads a thread holds in flight at once: 16 of 16 bytes in 64 registers.
TAPS_IN_FLIGHT = 16


class PoolWindow(NamedTuple):
    """A pooling window as ``(height, width)`` pairs."""

    kernel_size: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int]  # top and left; bottom and right follow from the output size
    dilation: Tuple[int, int]


class MaxPool2dNhwc:
    """``__call__`` is the compiled entry: raw pointers of the contiguous ``[N, H, W, C]``
    input and ``[N, P, Q, C]`` output, then ``n, h, w, p, q`` and ``vectors = C / vector`` as
    Int32."""

    dtypes = POOL_TYPES  # the values it pools

    def __init__(self, dtype: type[cutlass.Numeric], window: PoolWindow):
        self.vector = vector_elements(dtype, self.dtypes)
        self.dtype = dtype
        self.window = window

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        y_ptr: cute.Pointer,
        n: cutlass.Int32,
        h: cutlass.Int32,
        w: cutlass.Int32,
        p: cutlass.Int32,
        q: cutlass.Int32,
        vectors: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        vector = self.vector
        c = channel_row_stride(vectors, vector)
        m_x = cute.make_tensor(
            x_ptr,
            cute.make_layout((vector, vectors, w, h, n), stride=(1, vector, c, c * w, c * w * h)),
        )
        m_y = cute.make_tensor(
            y_ptr,
            cute.make_layout((vector, vectors, q, p, n), stride=(1, vector, c, c * q, c * q * p)),
        )
        slots = n * p * q * vectors
        self.kernel(m_x, m_y).launch(
            grid=((slots + _THREADS - 1) // _THREADS, 1, 1),
            block=[_THREADS, 1, 1],
            stream=stream,
            use_pdl=True,
        )

    @cute.kernel
    def kernel(self, m_x: cute.Tensor, m_y: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        _, vectors, w, h, _ = m_x.shape
        _, _, q, p, n = m_y.shape
        (kh, kw), (sh, sw), (ph, pw), _ = self.window
        slot = bidx * _THREADS + tidx
        pixel = slot // vectors
        wait_for_previous_grid()
        if pixel < n * p * q:
            chunk = slot - pixel * vectors
            image = pixel // (p * q)
            out_h = (pixel - image * (p * q)) // q
            out_w = pixel - image * (p * q) - out_h * q
            top = out_h * sh - ph
            left = out_w * sw - pw
            acc = cute.make_rmem_tensor((self.vector,), cutlass.Float32)
            acc.fill(cutlass.Float32(self.initial))
            wide = cute.make_rmem_tensor((self.vector,), cutlass.Float32)
            taps = kh * kw
            # A group's loads all issued before its first use, unconditionally (a tap past the
            # map reads the nearest pixel, then counts for nothing), so that they are in
            # flight together: a load in its own branch, feeding the reduction there, waited
            # out the one before, and a small pool's time was its taps' latencies end to end.
            for first in cutlass.range_constexpr(0, taps, TAPS_IN_FLIGHT):
                group = min(TAPS_IN_FLIGHT, taps - first)
                values = cute.make_rmem_tensor((self.vector, group), self.dtype)
                for i in cutlass.range_constexpr(group):
                    in_h, in_w = self.tap_position(first + i, top, left)
                    in_h = cutlass.min(cutlass.max(in_h, 0), h - 1)
                    in_w = cutlass.min(cutlass.max(in_w, 0), w - 1)
                    cute.autovec_copy(m_x[(None, chunk, in_w, in_h, image)], values[None, i])
                # The taps inside the map, reduced in torch's order.
                for i in cutlass.range_constexpr(group):
                    in_h, in_w = self.tap_position(first + i, top, left)
                    if in_h >= 0 and in_h < h and in_w >= 0 and in_w < w:
                        wide.store(values[None, i].load().to(cutlass.Float32))
                        for e in cutlass.range_constexpr(self.vector):
                            acc[e] = self.combine(acc[e], wide[e])
            self.finish(acc, top, left, h, w)
            out = cute.make_rmem_tensor((self.vector,), self.dtype)
            out.store(acc.load().to(self.dtype))
            cute.autovec_copy(out, m_y[(None, chunk, out_w, out_h, image)])

    def tap_position(self, tap: int, top, left):
        """The input ``(row, column)`` of the window's ``tap``-th tap (rows, then columns),
        from the window's top-left corner ``(top, left)``; outside the map near the edges."""
        (_, kw), _, _, (dh, dw) = self.window
        r, s = divmod(tap, kw)
        return top + r * dh, left + s * dw

    initial = float("-inf")  # the padding: never the max

    def combine(self, acc: cutlass.Float32, value: cutlass.Float32) -> cutlass.Float32:
        """The reduction of a tap's value into the running one: the max, NaN kept."""
        return cute.arch.fmax(acc, value, nan=True)

    @cute.jit
    def finish(self, acc: cute.Tensor, top, left, h, w):
        """The window's reduction ``acc`` (in place) once every tap is in: the max as it is."""


class AvgPool2dNhwc(MaxPool2dNhwc):
    """``MaxPool2dNhwc``'s entry and walk of the window (dilation 1), the taps summed and the
    sum divided by torch's divisor (see the module docstring)."""

    dtypes = AVG_POOL_TYPES
    initial = 0.0

    def __init__(
        self,
        dtype: type[cutlass.Numeric],
        window: PoolWindow,
        count_include_pad: bool,
        divisor_override: Optional[int],
    ):
        if tuple(window.dilation) != (1, 1):
            raise ValueError(f"an average pool has no dilation, got {window.dilation}")
        super().__init__(dtype, window)
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def combine(self, acc: cutlass.Float32, value: cutlass.Float32) -> cutlass.Float32:
        return acc + value

    @cute.jit
    def finish(self, acc: cute.Tensor, top, left, h, w):
        (kh, kw), _, (ph, pw), _ = self.window
        if cutlass.const_expr(self.divisor_override is not None):
            divisor = cutlass.Float32(float(self.divisor_override))
        elif cutlass.const_expr(self.count_include_pad):
            # The window clipped to the padded map: ceil mode's overhang is not counted.
            rows = cutlass.min(top + kh, h + ph) - top
            cols = cutlass.min(left + kw, w + pw) - left
            divisor = cutlass.Float32(rows * cols)
        else:
            rows = cutlass.min(top + kh, h) - cutlass.max(top, 0)
            cols = cutlass.min(left + kw, w) - cutlass.max(left, 0)
            divisor = cutlass.Float32(rows * cols)
        for e in cutlass.range_constexpr(self.vector):
            acc[e] = acc[e] / divisor
