"""The implicit-GEMM views of an NHWC/KRSC/NPQK convolution and its im2col-TMA parameters.

GEMM M = N*P*Q (output pixels), GEMM N = K (output channels), GEMM K = C*S*R.
The K mode is hierarchical, ``(c, s, r)``: a K tile of ``(TK, 1, 1)`` covers TK channels of a
single filter tap, and the rest-K mode ``(c-blocks, S, R)`` is walked colexicographically
(c-block fastest, then s, then r) by a linear k-tile index. Activation and filter views must use
that same order.

Every extent and every geometry scalar here may be a runtime ``Int32``: one compiled kernel
serves every N/H/W/padding/stride/dilation.
"""

from typing import NamedTuple, Optional, Tuple

import cutlass
import cutlass.cute as cute


class ConvGeometry(NamedTuple):
    """Runtime geometry scalars in the order the kernels take them."""

    n: cutlass.Int32
    h: cutlass.Int32
    w: cutlass.Int32
    c: cutlass.Int32
    k: cutlass.Int32
    r: cutlass.Int32
    s: cutlass.Int32
    p: cutlass.Int32
    q: cutlass.Int32
    pad_top: cutlass.Int32
    pad_bottom: cutlass.Int32
    pad_left: cutlass.Int32
    pad_right: cutlass.Int32
    stride_h: cutlass.Int32
    stride_w: cutlass.Int32
    dil_h: cutlass.Int32
    dil_w: cutlass.Int32
    # Elements from one output pixel to the next: K, or more where the output is a channel
    # slice of a wider NHWC tensor (a concatenation's buffer). The residual source is K apart.
    out_pixel_stride: cutlass.Int32


class PixelDivisors(NamedTuple):
    """The output's Q and P as divisors (``cute.FastDivmodDivisorV2``, made on the host):
    a linear output pixel's (q, p, n) without integer divisions (``im2col_tile_at_origin``)."""

    q: cute.FastDivmodDivisorV2
    p: cute.FastDivmodDivisorV2


class ChannelBlocks(NamedTuple):
    """How a tap's channels fill its k-tiles: ``c_blocks`` k-tiles per tap, the last holding
    channels in only its first ``last_k_blocks`` MMA k-blocks when C is no multiple of tile_k.
    The loads fill the rest with zeros, and the MMAs skip them (an fp8 C of 96 in 128-wide
    k-tiles: 3 of 4)."""

    c_blocks: cutlass.Int32
    last_k_blocks: cutlass.Int32

    @staticmethod
    def of(
        filter_view: cute.Tensor, tiled_mma: cute.TiledMma, c_blocks: cutlass.Int32, tile_k: int
    ) -> "ChannelBlocks":
        """The blocks of the filter's channels (``filter_gemm_view``'s C) in ``c_blocks``
        k-tiles of ``tile_k``, in k-blocks of ``tiled_mma``'s K."""
        mma_k = cute.size(tiled_mma.shape_mnk, mode=[2])
        last = cute.size(filter_view, mode=[1, 0]) - (c_blocks - 1) * tile_k
        return ChannelBlocks(c_blocks, (last + mma_k - 1) // mma_k)

    def k_blocks_of(self, c_block: cutlass.Int32, k_blocks_per_tile: int) -> cutlass.Int32:
        """The MMA k-blocks of c-block ``c_block`` that hold channels."""
        last = c_block == self.c_blocks - 1
        return cutlass.select_(last, self.last_k_blocks, cutlass.Int32(k_blocks_per_tile))

    def next_c_block(self, c_block: cutlass.Int32) -> cutlass.Int32:
        """The c-block of the k-tile after one of ``c_block`` (c-blocks vary fastest)."""
        after = c_block + 1
        return cutlass.select_(after == self.c_blocks, cutlass.Int32(0), after)


@cute.jit
def activation_im2col_view(act_ptr: cute.Pointer, g: ConvGeometry, groups: int = 1) -> cute.Tensor:
    """Contiguous NHWC activation as ``((w, h, n), c)``, the form the im2col TMA atom expects.

    With ``groups`` (compile-time) the activation of a grouped conv as a 3-d conv's
    ``((w, h, d, n), c)``: the images as the depth, the group as the batch (``C / groups``
    elements apart) and ``C / groups`` channels. A tile's pixel walk (w, h, then images)
    stays in its group, and the channels of a k-tile past the group's last are outside the
    view: TMA fills them with zeros instead of reading the next group's (whose Inf or NaN
    would turn the products with the filter's zero columns into NaN)."""
    row = g.w * g.c
    image = cutlass.Int64(g.h) * row  # N*H*W*C may pass 2**31 elements
    if cutlass.const_expr(groups == 1):
        layout = cute.make_layout(((g.w, g.h, g.n), g.c), stride=((g.c, row, image), 1))
        return cute.make_tensor(act_ptr, layout)
    group_in = g.c // groups
    layout = cute.make_layout(
        ((g.w, g.h, g.n, groups), group_in), stride=((g.c, row, image, group_in), 1)
    )
    return cute.make_tensor(act_ptr, layout)


@cute.jit
def filter_gemm_view(filter_ptr: cute.Pointer, g: ConvGeometry, groups: int = 1) -> cute.Tensor:
    """Contiguous KRSC filter as ``(k, (c, s, r))``: the GEMM B operand, K-major. With
    ``groups`` (compile-time) the filter of a grouped conv, ``[K, R, S, C / groups]``, as a
    dense filter of ``C / groups`` channels whose k is ``(k in the group, group)``: a tile
    of ``(tile_n, 1)`` rows stays in its group, the rows past the group's last (where
    ``tile_n`` does not divide it) outside the view (TMA fills them with zeros)."""
    if cutlass.const_expr(groups == 1):
        layout = cute.make_layout(
            (g.k, (g.c, g.s, g.r)), stride=(g.r * g.s * g.c, (1, g.c, g.s * g.c))
        )
        return cute.make_tensor(filter_ptr, layout)
    c, group_out = g.c // groups, g.k // groups
    row = g.r * g.s * c
    layout = cute.make_layout(
        ((group_out, groups), (c, g.s, g.r)), stride=((row, group_out * row), (1, c, g.s * c))
    )
    return cute.make_tensor(filter_ptr, layout)


@cute.jit
def packed_filter_view(filter_ptr: cute.Pointer, g: ConvGeometry) -> cute.Tensor:
    """Contiguous KRSC filter as ``(k, (r*s*c, 1, 1))``: the GEMM B operand of a gather
    with packed taps (``Conv2dConfig.pack_taps``), each row's taps back to back as one
    tap's channels, so that its k-tiles walk the row in ``filter_gemm_view``'s mode order
    (its c-blocks, one tap)."""
    row = g.r * g.s * g.c
    return cute.make_tensor(
        filter_ptr, cute.make_layout((g.k, (row, 1, 1)), stride=(row, (1, 0, 0)))
    )


@cute.jit
def output_gemm_view(
    out_ptr: cute.Pointer, g: ConvGeometry, pixel_stride: cutlass.Int32, groups: int = 1
) -> cute.Tensor:
    """NPQK output, its pixels ``pixel_stride`` elements apart, as the row-major
    ``(N*P*Q, K)`` GEMM D matrix (its row offsets 64-bit: N*P*Q*K may pass 2**31 elements).
    With ``groups`` (compile-time), K as ``(k in the group, group)`` (``filter_gemm_view``):
    a tile's columns past its group's last are outside the view (TMA stores skip them)."""
    m = g.n * g.p * g.q
    if cutlass.const_expr(groups == 1):
        layout = cute.make_layout((m, g.k), stride=(cutlass.Int64(pixel_stride), 1))
        return cute.make_tensor(out_ptr, layout)
    group_out = g.k // groups
    layout = cute.make_layout(
        (m, (group_out, groups)), stride=(cutlass.Int64(pixel_stride), (1, group_out))
    )
    return cute.make_tensor(out_ptr, layout)


@cute.jit
def output_tile_view(
    out_ptr: cute.Pointer, g: ConvGeometry, pixel_stride: cutlass.Int32
) -> cute.Tensor:
    """NPQK output, its pixels ``pixel_stride`` elements apart, as ``((q, p, n), k)``: halo
    tiles store (q, p) boxes, clipped at Q and P."""
    row = g.q * pixel_stride
    image = cutlass.Int64(g.p) * row
    layout = cute.make_layout(((g.q, g.p, g.n), g.k), stride=((pixel_stride, row, image), 1))
    return cute.make_tensor(out_ptr, layout)


def qpn_coord(index, q, p):
    """The ``(q, p, n)`` of ``index``, counted along Q first, then P, then images, as the
    output's pixels and its halo tiles are numbered; ``q`` and ``p`` are the extents across a
    row and down an image, or their divisors (``cute.FastDivmodDivisorV2``)."""
    row = index // q  # the row of the images stacked: p + P * n
    return index % q, row % p, row // p


@cute.jit
def im2col_tile_at_origin(
    tile: cute.Tensor,
    pixel_divisors: Optional[PixelDivisors] = None,
    group: Optional[Tuple[cutlass.Int32, cutlass.Int32]] = None,
) -> cute.Tensor:
    """One output tile's im2col TMA coordinates, ``(TMA, (c-blocks, S, R))``, with the tile's
    pixel offset turned into its (w, h, n) coordinate once, here.

    Sliced by a tile index, the coordinate tensor keeps that offset in its layout as a linear
    pixel index, which each k-tile's copy decomposes by runtime divisions by Q and P. They
    follow the barrier wait in the load loop, so the compiler cannot hoist them: ~60 of the
    load warp's ~95 instructions per k-tile, enough to starve the consumers of a conv with few
    k-tiles per tile. Here the offset is evaluated into the coordinate tensor's origin and
    the layout keeps only the k-tiles' offsets. Past a box's first pixel the coordinates are
    off (decomposed from pixel 0, not from the tile's), but a copy reads only its box origin:
    the TMA unit walks the box itself.

    With ``pixel_divisors`` the offset's (q, p, n) takes a multiply-high and a shift per
    division instead of two integer divisions (~60 dependent instructions on the way to each
    tile's first load).

    With ``group``, ``(group, images)`` (a grouped conv's view, ``activation_im2col_view``;
    needs ``pixel_divisors``), the tile reads that group: its pixel's (q, p, image) and the
    group are the view's (w, h, d, n) coordinate. A tile wholly past the last image (the
    spare CTAs of a cluster along M) starts in a later group instead: the im2col box must
    start inside the depth it walks (an image past it faults), and its rows are not stored.
    """
    layout = tile.layout
    if cutlass.const_expr(pixel_divisors is None):
        offset = layout.inner(layout.offset)
    else:
        pixel, k_offset = layout.offset
        pixel_coord = qpn_coord(pixel, *pixel_divisors)
        if cutlass.const_expr(group is not None):
            (q, p, image), (group_index, images) = pixel_coord, group
            pixel_coord = (q, p, image % images, group_index + image // images)
        offset = layout.inner((pixel_coord, k_offset))
    origin = _add_coords(tile.iterator, offset)
    return cute.make_tensor(
        origin, cute.make_composed_layout(layout.inner, _zeros_like(layout.offset), layout.outer)
    )


def _add_coords(a, b):
    """The elementwise sum of two coordinates of one profile."""
    if isinstance(a, tuple):
        return tuple(_add_coords(x, y) for x, y in zip(a, b, strict=True))
    return a + b


def _zeros_like(coord):
    """The zero coordinate of ``coord``'s profile."""
    if isinstance(coord, tuple):
        return tuple(_zeros_like(c) for c in coord)
    return 0


def fprop_im2col_params(g: ConvGeometry, groups: int = 1) -> dict:
    """Keyword arguments of ``cpasync.make_im2col_tma_atom`` for forward propagation.

    The corners bound the filter's footprint relative to the input, W before H
    (the same formulas as CUTLASS's conv collective): the box walks output pixels from
    ``-pad_lo`` to ``W - 1 + pad_hi - (S-1)*dil`` with the conv stride, and the filter tap
    offsets ``(s, r) * dilation`` are added by the im2col offsets of each load. A grouped
    conv's view (``activation_im2col_view``) adds the depth of its images: one filter tap,
    no padding, stride 1.
    """
    params = dict(
        lower_corner_whd=(-g.pad_left, -g.pad_top),
        upper_corner_whd=(
            g.pad_right - (g.s - 1) * g.dil_w,
            g.pad_bottom - (g.r - 1) * g.dil_h,
        ),
        lower_padding_whd=(g.pad_left, g.pad_top),
        upper_padding_whd=(g.pad_right, g.pad_bottom),
        stride_whd=(g.stride_w, g.stride_h),
        lower_srt=(0, 0),
        stride_srt=(g.dil_w, g.dil_h),
    )
    if groups == 1:
        return params
    depth = dict(
        lower_corner_whd=0, upper_corner_whd=0, lower_padding_whd=0, upper_padding_whd=0,
        stride_whd=1, lower_srt=0, stride_srt=1,
    )  # fmt: skip
    return {name: (*value, depth[name]) for name, value in params.items()}
