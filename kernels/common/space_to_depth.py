"""Folded space-to-depth of an NHWC activation: the staging of stride-2 convs with few channels.

Staged pixel ``(n, i, j)`` holds the input pixels of rows ``2i + a`` (``a < 2``) and columns
``2j + b`` (``b < fold_cols``) of the zero-padded input, channels ordered ``(a, b, c)``, each
input pixel's ``C`` channels zero-extended to ``fold_channels``. It replaces a pad and a
strided copy in torch (two passes, the second element-wise) with one pass: every thread moves
one input pixel, 16 bytes when ``C`` is 8 16-bit channels.

The host side (``cute_conv.staging``) owns the geometry; this kernel only needs the input's
extent, the staged extent and the top/left padding.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from .dependent_launch import wait_for_previous_grid

FOLD_ROWS = 2
# A few CTAs per row of staged pixels; a 1-D grid, since rows x images can pass 65535.
_THREADS = 256


class SpaceToDepthFold:
    """``__call__`` is the compiled entry: raw pointers of the contiguous ``[N, H, W, C]``
    input and the ``[N, H2, W2, 2 * fold_cols * fold_channels]`` output, and the geometry as
    Int32."""

    def __init__(
        self, dtype: type[cutlass.Numeric], channels: int, fold_channels: int, fold_cols: int
    ):
        if not 0 < channels <= fold_channels:
            raise ValueError(f"channels={channels} must be in 1..fold_channels={fold_channels}")
        if fold_cols < 2 or fold_cols & (fold_cols - 1):
            raise ValueError(f"fold_cols={fold_cols} must be a power of two >= 2")
        self.dtype = dtype
        self.channels = channels
        self.fold_channels = fold_channels
        self.fold_cols = fold_cols

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        y_ptr: cute.Pointer,
        n: cutlass.Int32,
        h: cutlass.Int32,
        w: cutlass.Int32,
        h2: cutlass.Int32,
        w2: cutlass.Int32,
        pad_top: cutlass.Int32,
        pad_left: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        c, cf, cols = self.channels, self.fold_channels, self.fold_cols
        # Mode 0 is the channel: a thread's copy is one (None, ...) slice of each tensor.
        # Every pixel starts at a multiple of c elements: lets a 16-byte pixel move as one vector.
        # Row and image strides are 64-bit: an image, let alone a batch, may hold more than
        # 2**31 elements.
        row_stride = cute.assume(cutlass.Int64(c) * w, divby=c)
        image_stride = cute.assume(row_stride * h, divby=c)
        m_x = cute.make_tensor(
            x_ptr, cute.make_layout((c, w, h, n), stride=(1, c, row_stride, image_stride))
        )
        staged_pixel = FOLD_ROWS * cols * cf
        staged_row = cute.assume(cutlass.Int64(staged_pixel) * w2, divby=staged_pixel)
        staged_image = cute.assume(staged_row * h2, divby=staged_pixel)
        m_y = cute.make_tensor(
            y_ptr,
            cute.make_layout(
                (cf, cols, FOLD_ROWS, w2, h2, n),
                stride=(1, cf, cols * cf, staged_pixel, staged_row, staged_image),
            ),
        )
        ctas_per_row = (FOLD_ROWS * cols * w2 + _THREADS - 1) // _THREADS
        self.kernel(m_x, m_y, pad_top, pad_left, ctas_per_row).launch(
            grid=(ctas_per_row * h2 * n, 1, 1),
            block=[_THREADS, 1, 1],
            stream=stream,
            use_pdl=True,
        )

    @cute.kernel
    def kernel(
        self,
        m_x: cute.Tensor,
        m_y: cute.Tensor,
        pad_top: cutlass.Int32,
        pad_left: cutlass.Int32,
        ctas_per_row: cutlass.Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        rows = m_y.shape[4]
        i = (bidx // ctas_per_row) % rows
        image = bidx // (ctas_per_row * rows)
        # Consecutive threads take consecutive input pixels of a block: (b, a, j) with b
        # fastest, so a warp reads runs of fold_cols input pixels and writes one span.
        slot = (bidx % ctas_per_row) * _THREADS + tidx
        b = slot % self.fold_cols
        a = (slot // self.fold_cols) % FOLD_ROWS
        j = slot // (self.fold_cols * FOLD_ROWS)
        _, w, h, _ = m_x.shape
        wait_for_previous_grid()
        if j < m_y.shape[3]:
            row = 2 * i + a - pad_top
            col = 2 * j + b - pad_left
            pixel = cute.make_rmem_tensor((self.fold_channels,), self.dtype)
            pixel.fill(0)
            if row >= 0 and row < h and col >= 0 and col < w:
                src = m_x[(None, col, row, image)]
                if cutlass.const_expr(self.channels == self.fold_channels):
                    cute.autovec_copy(src, pixel)
                else:
                    for ch in cutlass.range_constexpr(self.channels):
                        pixel[ch] = src[ch]
            cute.autovec_copy(pixel, m_y[(None, b, a, j, i, image)])
