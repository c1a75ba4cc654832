"""Unfolding of an NHWC activation into explicit im2col columns: the staging of convs with very
few channels (the RGB stems no other staging takes), which then run as 1x1 convs, and, on a
1x1 window, the zero-padding of C to whole TMA rows.

Row ``(n, p, q)`` of the ``[N*P*Q, width]`` columns holds the ``(r, s, c)`` patch under output
pixel ``(p, q)`` (c fastest), zero where the patch leaves the image and in the ``width - R*S*C``
columns that round a row up to whole 16-byte TMA units. It replaces torch's pad, zero fill and
strided copy (three passes and several host-side views) with one pass: every thread writes one
16-byte vector of a row, loading each of its elements with a predicate.

``Im2colPatchRows`` takes the window (R, S) at compile time too, for the patches of at most
``PATCH_ROW_MAX_COLUMNS`` columns (the RGB stems): every thread then writes a whole row, each
column's tap and channel a constant, so that the per-element index arithmetic (a runtime
division by S per element in ``Im2colColumns``) reduces to one bounds check per tap.

The host side (``cute_conv.staging``) owns the geometry; C (and R, S) are the compile-time
extents, the rest are runtime values.
"""

from typing import NamedTuple, Tuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

# One store per thread: the rows are whole TMA units, so a multiple of VECTOR_BYTES.
from .channel_rows import VECTOR_BYTES
from .dependent_launch import wait_for_previous_grid

# ``Im2colPatchRows`` holds a row (one load per column) in each thread's registers: up to a 7x7
# stem's patch of 4 channels (196 columns). 256 spilled on sm_90a; 200 did not.
PATCH_ROW_MAX_COLUMNS = 200
_THREADS = 256


def check_patch_taps(taps: object, channels: int) -> None:
    """``TypeError`` unless ``taps`` is a pair of ints, ``ValueError`` unless each is at least 1
    and the patch (``R * S * channels`` columns) has at most ``PATCH_ROW_MAX_COLUMNS``."""
    if (
        not isinstance(taps, tuple)
        or len(taps) != 2
        or not all(isinstance(t, int) and not isinstance(t, bool) for t in taps)
    ):
        raise TypeError(f"taps must be a pair of ints (R, S), got {taps!r}")
    if min(taps) < 1:
        raise ValueError(f"taps must be >= 1 each, got {taps}")
    if taps[0] * taps[1] * channels > PATCH_ROW_MAX_COLUMNS:
        raise ValueError(
            f"taps={taps} with channels={channels} make {taps[0] * taps[1] * channels} columns; "
            f"the patch-row kernel takes at most {PATCH_ROW_MAX_COLUMNS}"
        )


class _Window(NamedTuple):
    """The runtime geometry of the filter window under an output pixel."""

    p: cutlass.Int32
    q: cutlass.Int32
    r: cutlass.Int32
    s: cutlass.Int32
    pad_top: cutlass.Int32
    pad_left: cutlass.Int32
    stride_h: cutlass.Int32
    stride_w: cutlass.Int32
    dil_h: cutlass.Int32
    dil_w: cutlass.Int32


@cute.jit
def _patch_corner(row: cutlass.Int32, g: _Window):
    """``(image, top, left)``: the image of column row ``row`` (output pixel ``(n, p, q)``) and
    the input coordinates of its patch's top-left tap (in the padding where negative)."""
    image = row // (g.p * g.q)
    pixel = row - image * (g.p * g.q)
    out_h = pixel // g.q
    top = out_h * g.stride_h - g.pad_top
    left = (pixel - out_h * g.q) * g.stride_w - g.pad_left
    return image, top, left


class Im2colColumns:
    """``__call__`` is the compiled entry: raw pointers of the contiguous ``[N, H, W, C]`` input
    and the ``[N*P*Q, width]`` columns, then the geometry as Int32 (``n, h, w, p, q, r, s,
    pad_top, pad_left, stride_h, stride_w, dil_h, dil_w``) and ``chunks = width / vector``, the
    vectors of a row."""

    def __init__(self, dtype: type[cutlass.Numeric], channels: int):
        if channels < 1:
            raise ValueError(f"channels={channels} must be at least 1")
        self.dtype = dtype
        self.channels = channels
        self.vector = VECTOR_BYTES * 8 // dtype.width

    def threads_per_row(self, chunks: cutlass.Int32) -> cutlass.Int32:
        """One thread per 16-byte vector of a row."""
        return chunks

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
        r: cutlass.Int32,
        s: cutlass.Int32,
        pad_top: cutlass.Int32,
        pad_left: cutlass.Int32,
        stride_h: cutlass.Int32,
        stride_w: cutlass.Int32,
        dil_h: cutlass.Int32,
        dil_w: cutlass.Int32,
        chunks: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        c, vector = self.channels, self.vector
        # Row and image strides are 64-bit: a batch may hold more than 2**31 elements.
        row_stride = cutlass.Int64(c) * w
        m_x = cute.make_tensor(
            x_ptr, cute.make_layout((c, w, h, n), stride=(1, c, row_stride, row_stride * h))
        )
        # Every vector starts at a multiple of 16 bytes: lets it move as one store.
        width = cute.assume(cutlass.Int64(chunks) * vector, divby=vector)
        rows = n * p * q
        m_y = cute.make_tensor(
            y_ptr, cute.make_layout((vector, chunks, rows), stride=(1, vector, width))
        )
        geometry = _Window(p, q, r, s, pad_top, pad_left, stride_h, stride_w, dil_h, dil_w)
        threads = rows * self.threads_per_row(chunks)
        self.kernel(m_x, m_y, geometry).launch(
            grid=((threads + _THREADS - 1) // _THREADS, 1, 1),
            block=[_THREADS, 1, 1],
            stream=stream,
            use_pdl=True,
        )

    @cute.kernel
    def kernel(self, m_x: cute.Tensor, m_y: cute.Tensor, g: "_Window"):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        _, chunks, rows = m_y.shape
        _, w, h, _ = m_x.shape
        # Consecutive threads take consecutive vectors of a row: a warp writes one span.
        slot = bidx * _THREADS + tidx
        row = slot // chunks
        chunk = slot - row * chunks
        wait_for_previous_grid()
        if row < rows:
            image, top, left = _patch_corner(row, g)
            values = cute.make_rmem_tensor((self.vector,), self.dtype)
            for e in cutlass.range_constexpr(self.vector):
                column = chunk * self.vector + e
                tap = column // self.channels
                tap_h = tap // g.s
                in_h = top + tap_h * g.dil_h
                in_w = left + (tap - tap_h * g.s) * g.dil_w
                # Each element is a value of its own until the vector is written, so that its
                # loads do not wait on one another.
                value = self.dtype(0)
                if tap_h < g.r and in_h >= 0 and in_h < h and in_w >= 0 and in_w < w:
                    value = m_x[(column - tap * self.channels, in_w, in_h, image)]
                values[e] = value
            cute.autovec_copy(values, m_y[(None, chunk, row)])


class Im2colPatchRows(Im2colColumns):
    """``Im2colColumns`` for a compile-time window of ``taps = (R, S)`` whose patch has at most
    ``PATCH_ROW_MAX_COLUMNS`` columns: the same entry (its runtime R and S are unused), every
    thread one whole row, ``ceil(R*S*C / vector)`` vectors (``chunks`` must be that)."""

    def __init__(self, dtype: type[cutlass.Numeric], channels: int, taps: Tuple[int, int]):
        super().__init__(dtype, channels)
        check_patch_taps(taps, channels)
        self.taps = taps
        self.columns = taps[0] * taps[1] * channels
        self.chunks = -(-self.columns // self.vector)

    def threads_per_row(self, chunks: cutlass.Int32) -> cutlass.Int32:
        return 1

    @cute.kernel
    def kernel(self, m_x: cute.Tensor, m_y: cute.Tensor, g: "_Window"):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        _, _, rows = m_y.shape
        _, w, h, _ = m_x.shape
        _, s = self.taps
        # Consecutive threads take consecutive rows: a warp's loads span neighbouring pixels.
        row = bidx * _THREADS + tidx
        wait_for_previous_grid()
        if row < rows:
            image, top, left = _patch_corner(row, g)
            # Element offsets from the patch's corner (which may lie in the padding): the
            # corner's once, a tap's as constant multiples of the dilated steps, so that no
            # load recomputes a 64-bit product.
            flat = cute.make_tensor(m_x.iterator, cute.make_layout(cute.cosize(m_x.layout)))
            corner = cute.crd2idx((0, left, top, image), m_x.layout)
            _, pixel_stride, row_stride, _ = m_x.layout.stride
            step_h = row_stride * g.dil_h
            step_w = pixel_stride * g.dil_w
            # The whole row's loads before its first store, which they could otherwise not
            # pass (the compiler cannot tell the columns from the input), so that they are
            # all in flight together.
            values = cute.make_rmem_tensor((self.vector, self.chunks), self.dtype)
            for column in cutlass.range_constexpr(self.vector * self.chunks):
                value = self.dtype(0)  # past the patch: the row's padding to a TMA unit
                if cutlass.const_expr(column < self.columns):
                    tap, channel = divmod(column, self.channels)
                    tap_h, tap_w = divmod(tap, s)
                    in_h = top + tap_h * g.dil_h
                    in_w = left + tap_w * g.dil_w
                    offset = corner + tap_h * step_h + tap_w * step_w + channel
                    if in_h >= 0 and in_h < h and in_w >= 0 and in_w < w:
                        value = flat[offset]
                values[column] = value
            for chunk in cutlass.range_constexpr(self.chunks):
                cute.autovec_copy(values[(None, chunk)], m_y[(None, chunk, row)])
