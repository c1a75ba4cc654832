"""The epilogue's subtile driver, shared by the conv kernels: one output subtile from the
accumulator's fp32 values to global memory.

    channel vectors -> apply_epilogue (+ beta * C from SMEM) -> registers to SMEM
    -> fence.proxy.async -> named barrier -> TMA store (one warp) -> named barrier

or, for outputs TMA cannot address (``EpilogueSpec.store_by_threads``,
``store_subtile_by_threads``):

    channel vectors -> apply_epilogue -> each thread's values to global memory, predicated

(two adjacent channels per access where K is even, ``thread_store_pairs``), or, where a tile
holds whole output rows (``bulk_tile_store``), to a dense copy of the tile in SMEM that
``bulk_store_tile`` moves out in one bulk copy.

With ``EpilogueSpec.has_amax`` each thread also keeps the running max of its values'
magnitudes (``raise_amax``), which ``publish_amax`` adds to global memory once per warp.

How the accumulator is read is the architecture's (WGMMA registers on SM90, a ``tcgen05.ld``
from TMEM on SM100): each kernel reads a subtile's values and calls ``store_subtile`` with them,
with its own partitions bundled as ``ChannelVectors``, ``SourceSubtiles`` and
``OutputSubtiles``.

One async-proxy fence serves both SMEM buffers a subtile touches. The output staging buffer is
written by the generic proxy (stmatrix / st.shared) and read by the TMA store (async proxy): the
fence makes the writes visible to it. The source buffer is read by the generic proxy and then
handed back to the source-load warp, whose next TMA load (async proxy) overwrites it: the PTX
memory model orders generic accesses before later async-proxy accesses of the same memory only
through a ``fence.proxy.async``, and an mbarrier release/acquire alone does not order across
proxies (a write-after-read hazard; Triton's proxy-fence pass inserts a fence there too). So the
source buffer is released after the fence, not before it.
"""

from typing import List, NamedTuple, Optional, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass._mlir.dialects import nvvm

from .epilogue import apply_epilogue, channel_count_vector, load_channel_vectors
from .swizzled_smem import GroupedSmem, copy_grouped


class ChannelVectors(NamedTuple):
    """Bias and scale in global memory (None where the spec leaves them out), the ``(m, n)``
    position inside a subtile of each of this thread's values, and registers for them.

    ``tile_bias`` and ``tile_scale``: where a kernel preloads them (``preload_channel_vectors``),
    registers in the vectors' own dtype holding this thread's distinct channels of a whole
    output tile, ``(column, subtile column)``; the kernel hands ``subtile_values`` the column
    of the subtile at hand (``subtile_vectors``). None: each subtile loads its values."""

    m_bias: Optional[cute.Tensor]
    m_scale: Optional[cute.Tensor]
    coords: cute.Tensor
    r_bias: cute.Tensor
    r_scale: cute.Tensor
    tile_bias: Optional[cute.Tensor] = None
    tile_scale: Optional[cute.Tensor] = None

    @property
    def preloaded(self) -> bool:
        return self.tile_bias is not None or self.tile_scale is not None


class SourceSubtiles(NamedTuple):
    """The residual C: its ring of SMEM subtiles (filled by the source-load warp), this
    thread's partition of it per buffer, and the registers it is copied to.

    ``tiled_copy`` None: ``smem`` and ``regs_copy`` share a layout (SM90's r2s partition of
    the buffers; as value pairs twice as wide, ``regs_copy`` a view of ``regs``, and a
    ``GroupedSmem`` where its pairs group); otherwise it is the SMEM -> registers copy into
    ``regs_copy``, a retiling of ``regs``."""

    pipeline: pipeline.PipelineTmaAsync
    tiled_copy: Optional[cute.TiledCopy]
    smem: cute.Tensor  # (..., buffer)
    regs_copy: cute.Tensor
    regs: cute.Tensor  # in the accumulator's value order


class OutputSubtiles(NamedTuple):
    """Registers -> SMEM staging buffers -> TMA store, and the barrier of the threads that
    share the staging buffers. ``smem`` a ``GroupedSmem`` (SM90's 8-bit outputs): no
    ``tiled_copy``; ``regs_copy`` views ``regs`` as the pairs ``copy_grouped`` moves."""

    regs: cute.Tensor  # the output values, in the accumulator's value order
    regs_copy: cute.Tensor  # ``regs`` as the registers -> SMEM copy reads it
    tiled_copy: Optional[cute.TiledCopy]  # registers -> SMEM
    smem: cute.Tensor  # this thread's partition of the staging buffers: (..., buffer)
    tma_atom: cute.CopyAtom
    smem_tma: cute.Tensor  # the staging buffers as the TMA store reads them: (TMA, buffer)
    barrier: pipeline.NamedBarrier
    store_pipeline: pipeline.PipelineTmaStore
    store_warp: cutlass.Int32  # the warp that issues the TMA stores
    # fp8 output: 1 / out_scale, applied before the (saturating) conversion; else None.
    out_factor: Optional[cutlass.Float32] = None
    # EpilogueSpec.has_amax: this thread's running max of its output values' magnitudes (one
    # float32 register, published by ``publish_amax``); else None.
    amax: Optional[cute.Tensor] = None


def _rows_and_columns(coords: cute.Tensor) -> Tuple[List[int], List[int], List[int], List[int]]:
    """Trace time: how a thread's values of a subtile share rows and columns. ``coords[v]``
    is the thread's base coordinate plus the static offset ``coords.layout(v)``, so values
    with one row (column) offset share a row (column). Returns a value of each row and of
    each column, and each value's row and column (indices into those)."""
    offsets = [coords.layout(v) for v in range(cute.size(coords))]
    row_offsets = sorted({offset[0] for offset in offsets})
    col_offsets = sorted({offset[1] for offset in offsets})
    row_values = [[o[0] for o in offsets].index(r) for r in row_offsets]
    col_values = [[o[1] for o in offsets].index(c) for c in col_offsets]
    row_of = [row_offsets.index(o[0]) for o in offsets]
    col_of = [col_offsets.index(o[1]) for o in offsets]
    return row_values, col_values, row_of, col_of


def preloaded_columns(coords: cute.Tensor) -> int:
    """Trace time: how many distinct channels this thread's values of a subtile hold (the
    registers a preloaded vector takes per subtile column)."""
    return len(_rows_and_columns(coords)[1])


@cute.jit
def preload_channel_vectors(
    spec: cutlass.Constexpr,
    vectors: ChannelVectors,
    tile_n0: cutlass.Int32,
    epi_n: cutlass.Constexpr,
    subtile_columns: cutlass.Constexpr = None,
):
    """Load this thread's bias/scale of the output tile whose first channel is ``tile_n0``
    into ``vectors.tile_bias``/``tile_scale``, unconverted (a conversion here would wait for
    the load): of every subtile column, or of those in ``subtile_columns``. Issued before the
    tile's mainloop, the loads land under it, where loading them per subtile waits on each
    subtile's loads after it."""
    _, col_values, _, _ = _rows_and_columns(vectors.coords)
    last_channel = cute.size(channel_count_vector(spec, vectors.m_bias, vectors.m_scale)) - 1
    tile = vectors.tile_bias if cutlass.const_expr(spec.has_bias) else vectors.tile_scale
    if cutlass.const_expr(subtile_columns is None):
        subtile_columns = range(cute.size(tile, mode=[1]))
    for s in subtile_columns:
        for j in cutlass.range_constexpr(len(col_values)):
            # Clamped: values past K (the N tail) are computed but clipped by the TMA store.
            column = tile_n0 + s * epi_n + vectors.coords[col_values[j]][1]
            channel = cutlass.min(column, last_channel)
            if cutlass.const_expr(spec.has_bias):
                vectors.tile_bias[j, s] = vectors.m_bias[channel]
            if cutlass.const_expr(spec.has_scale):
                vectors.tile_scale[j, s] = vectors.m_scale[channel]


def subtile_vectors(vectors: ChannelVectors, subtile_n: int) -> ChannelVectors:
    """Trace time: ``vectors`` for the subtiles of column ``subtile_n`` of a tile (their
    preloaded registers; as they are where nothing is preloaded)."""
    if not vectors.preloaded:
        return vectors
    return vectors._replace(
        tile_bias=None if vectors.tile_bias is None else vectors.tile_bias[(None, subtile_n)],
        tile_scale=None if vectors.tile_scale is None else vectors.tile_scale[(None, subtile_n)],
    )


@cute.jit
def unpack_channel_vectors(spec: cutlass.Constexpr, vectors: ChannelVectors):
    """``vectors.r_bias``/``r_scale`` (fp32, per value of a subtile) from one subtile column
    of the preloaded registers (``subtile_vectors``)."""
    _, _, _, col_of = _rows_and_columns(vectors.coords)
    for v in cutlass.range_constexpr(cute.size(vectors.r_bias)):
        if cutlass.const_expr(spec.has_bias):
            vectors.r_bias[v] = cutlass.Float32(vectors.tile_bias[col_of[v]])
        if cutlass.const_expr(spec.has_scale):
            vectors.r_scale[v] = cutlass.Float32(vectors.tile_scale[col_of[v]])


@cute.jit
def rows_and_columns_in_bounds(
    coords: cute.Tensor, coord_subtile: cute.Tensor, bound: cute.Shape
) -> Tuple[cute.Tensor, cute.Tensor]:
    """Which of this thread's rows and columns of a subtile (``_rows_and_columns``'s order)
    lie inside the output: ``coords`` holds each value's (m, n) position inside the subtile,
    ``coord_subtile`` the subtile's output coordinates and ``bound`` the output's shape (the
    M and K tails, and halo tiles' columns past Q, are outside).

    A value at (m, n) is inside iff its row, the subtile's (m, 0), and its column, (0, n),
    are: an output coordinate only grows along a subtile's rows and columns, so where the
    first row (column) is outside, all are."""
    row_values, col_values, _, _ = _rows_and_columns(coords)
    rows = cute.make_rmem_tensor(len(row_values), cutlass.Boolean)
    for i in cutlass.range_constexpr(len(row_values)):
        rows[i] = cute.elem_less(coord_subtile[(coords[row_values[i]][0], 0)], bound)
    cols = cute.make_rmem_tensor(len(col_values), cutlass.Boolean)
    for j in cutlass.range_constexpr(len(col_values)):
        cols[j] = cute.elem_less(coord_subtile[(0, coords[col_values[j]][1])], bound)
    return rows, cols


@cute.jit
def values_in_bounds(
    shape: cute.Shape, coords: cute.Tensor, coord_subtile: cute.Tensor, bound: cute.Shape
) -> cute.Tensor:
    """Which of this thread's values of a subtile lie inside the output (arguments as for
    ``rows_and_columns_in_bounds``)."""
    _, _, row_of, col_of = _rows_and_columns(coords)
    rows, cols = rows_and_columns_in_bounds(coords, coord_subtile, bound)
    in_bounds = cute.make_rmem_tensor(shape, cutlass.Boolean)
    for v in cutlass.range_constexpr(cute.size(in_bounds)):
        in_bounds[v] = rows[row_of[v]] & cols[col_of[v]]
    return in_bounds


@cute.jit
def running_amax(spec: cutlass.Constexpr) -> Optional[cute.Tensor]:
    """With ``spec.has_amax``: a thread's running max of its output values' magnitudes (one
    float32 register, from 0) for ``OutputSubtiles.amax``; else None."""
    if cutlass.const_expr(not spec.has_amax):
        return None
    amax = cute.make_rmem_tensor(1, cutlass.Float32)
    amax[0] = cutlass.Float32(0.0)
    return amax


def _max_tree(values: List[cutlass.Float32]) -> cutlass.Float32:
    """Trace time: the NaN-propagating maximum of ``values``, reduced pairwise (a tree of
    depth log2(n), where a running maximum chains all n into dependent instructions)."""
    while len(values) > 1:
        evens, odds = values[0::2], values[1::2]
        pairs = [cute.arch.fmax(a, b, nan=True) for a, b in zip(evens, odds, strict=False)]
        values = pairs + values[len(pairs) * 2 :]  # an odd one out waits a level
    return values[0]


def _masked_max(
    values: cute.Tensor,
    rows: cute.Tensor,
    cols: cute.Tensor,
    row_of: List[int],
    col_of: List[int],
) -> cutlass.Float32:
    """Trace time: the largest magnitude among ``values`` whose row and column are inside
    (``rows``, ``cols``; 0 where none is), as one tree per row."""
    zero = cutlass.Float32(0.0)
    row_maxima = []
    for i in range(cute.size(rows)):
        magnitudes = [
            cutlass.select_(cols[col_of[v]], cute.math.absf(values[v]), zero)
            for v in range(cute.size(values))
            if row_of[v] == i
        ]
        row_maxima.append(cutlass.select_(rows[i], _max_tree(magnitudes), zero))
    return _max_tree(row_maxima)


@cute.jit
def raise_amax(
    amax: cute.Tensor,
    y: cute.TensorSSA,
    coords: cute.Tensor,
    coord_subtile: cute.Tensor,
    bound: cute.Shape,
):
    """``amax[0]`` raised to the largest magnitude among this thread's values ``y`` of a
    subtile that lie inside the output (a NaN propagates; ``coords``, ``coord_subtile`` and
    ``bound`` as for ``values_in_bounds``). Reduced row by row as trees: each value is
    selected by its column's bound, each row's maximum by the row's."""
    _, _, row_of, col_of = _rows_and_columns(coords)
    rows, cols = rows_and_columns_in_bounds(coords, coord_subtile, bound)
    values = cute.make_rmem_tensor(cute.size(coords), cutlass.Float32)
    values.store(y)
    amax[0] = cute.arch.fmax(amax[0], _masked_max(values, rows, cols, row_of, col_of), nan=True)


@cute.jit
def publish_amax(amax: cute.Tensor, m_amax: cute.Tensor):
    """Every lane of a warp: the warp's running maxima reduced by shuffles, then added to
    the output's amax in global memory by one atomic max of lane 0. The magnitudes are
    non-negative floats (NaN as a positive one), which order as their bits, so the atomic
    is an integer max."""
    warp_max = cute.arch.warp_reduction(amax[0], lambda a, b: cute.arch.fmax(a, b, nan=True))
    if cute.arch.lane_idx() == 0:
        cute.arch.atomic_fmax(m_amax.iterator, warp_max, sign_bit=False)


@cute.jit
def subtile_values(
    spec: cutlass.Constexpr,
    acc: cute.TensorSSA,
    alpha: cutlass.Float32,
    vectors: ChannelVectors,
    subtile_n0: cutlass.Int32,
    residual: Optional[cute.TensorSSA],
    out: OutputSubtiles,
    coord_subtile: Optional[cute.Tensor],
    bound: Optional[cute.Shape],
) -> cute.TensorSSA:
    """The epilogue's fp32 results of this thread's values of one subtile (``residual``:
    ``beta * C`` of them, or None), times ``out.out_factor`` for an fp8 output. With
    ``out.amax``, the results inside the output (``coord_subtile`` and ``bound``, as for
    ``values_in_bounds``) raise it first."""
    if cutlass.const_expr(spec.has_channel_vectors and vectors.preloaded):
        unpack_channel_vectors(spec, vectors)
    elif cutlass.const_expr(spec.has_channel_vectors):
        load_channel_vectors(
            spec,
            vectors.m_bias,
            vectors.m_scale,
            vectors.coords,
            subtile_n0,
            vectors.r_bias,
            vectors.r_scale,
        )
    y = apply_epilogue(spec, acc, alpha, vectors.r_scale.load(), vectors.r_bias.load(), residual)
    if cutlass.const_expr(out.amax is not None):
        raise_amax(out.amax, y, vectors.coords, coord_subtile, bound)
    if cutlass.const_expr(out.out_factor is not None):
        y = y * out.out_factor  # cvt to fp8 is satfinite: past +-448 stores +-448
    return y


@cute.jit
def store_subtile_by_threads(
    spec: cutlass.Constexpr,
    acc: cute.TensorSSA,
    alpha: cutlass.Float32,
    beta: cutlass.Float32,
    vectors: ChannelVectors,
    subtile_n0: cutlass.Int32,
    out: OutputSubtiles,
    gmem_subtile: cute.Tensor,
    coord_subtile: cute.Tensor,
    bound: cute.Shape,
    source_subtile: Optional[cute.Tensor],
    preloaded_source: Optional[cute.Tensor] = None,
):
    """The epilogue of one subtile, each of this thread's values stored to global memory by
    the thread (no SMEM, no barrier): ``gmem_subtile`` is the subtile in the output,
    ``coord_subtile`` the output coordinates of its elements, stored where they are inside
    ``bound`` (the output's shape: the M and K tails are skipped). With a residual, its
    values are read from ``source_subtile`` (the source, divided as the output) the same
    way: each thread reads an element before it writes that element, so the source may be
    the output itself; or they were read before (``preloaded_source``, this thread's values
    in ``out.regs``' order, by ``read_source_by_threads``)."""
    regs, coords = out.regs, vectors.coords  # plain names: the DSL's runtime `if`s take these
    in_bounds = values_in_bounds(regs.shape, coords, coord_subtile, bound)
    groups = _thread_groups(spec, coords, cute.size(regs))
    width = len(groups[0])
    group_regs = cute.make_rmem_tensor(width, regs.element_type)
    residual = None
    if cutlass.const_expr(spec.has_residual):
        if cutlass.const_expr(preloaded_source is None):
            read_source_by_threads(spec, regs, coords, source_subtile, coord_subtile, bound)
        else:
            for v in cutlass.range_constexpr(cute.size(regs)):
                regs[v] = preloaded_source[v]
        residual = beta * regs.load().to(cutlass.Float32)
    y = subtile_values(spec, acc, alpha, vectors, subtile_n0, residual, out, coord_subtile, bound)
    regs.store(y.to(regs.element_type))
    for g in cutlass.range_constexpr(len(groups)):
        members = groups[g]
        for i in cutlass.range_constexpr(width):
            group_regs[i] = regs[members[i]]
        if in_bounds[members[0]]:
            cute.autovec_copy(group_regs, _group_at(gmem_subtile, coords[members[0]], width))


@cute.jit
def read_source_by_threads(
    spec: cutlass.Constexpr,
    into: cute.Tensor,
    coords: cute.Tensor,
    source_subtile: cute.Tensor,
    coord_subtile: cute.Tensor,
    bound: cute.Shape,
):
    """This thread's values of one subtile of the residual ``source_subtile`` into ``into``
    (in the order of ``coords``, this thread's value positions), zero outside ``bound``
    (arguments as for ``store_subtile_by_threads``): a pair of adjacent channels
    (``spec.thread_store_pairs``) or one value per load."""
    in_bounds = values_in_bounds(coords.shape, coords, coord_subtile, bound)
    groups = _thread_groups(spec, coords, cute.size(coords))
    width = len(groups[0])
    group_regs = cute.make_rmem_tensor(width, into.element_type)
    for g in cutlass.range_constexpr(len(groups)):
        members = groups[g]
        for i in cutlass.range_constexpr(width):
            group_regs[i] = into.element_type(0.0)
        if in_bounds[members[0]]:  # a pair lies inside or outside whole
            cute.autovec_copy(_group_at(source_subtile, coords[members[0]], width), group_regs)
        for i in cutlass.range_constexpr(width):
            into[members[i]] = group_regs[i]


def _thread_groups(spec, coords: cute.Tensor, values: int) -> List[List[int]]:
    """Trace time: this thread's values of a subtile as its global accesses: pairs of
    adjacent channels (``spec.thread_store_pairs``) or single values."""
    if spec.thread_store_pairs:
        return _column_pairs(coords)
    return [[v] for v in range(values)]


def _column_pairs(coords: cute.Tensor) -> List[List[int]]:
    """Trace time: this thread's values of a subtile as pairs ``[v, w]`` of one row whose
    columns are n and n + 1, n even (both MMAs' layouts hold values so)."""
    offsets = [coords.layout(v) for v in range(cute.size(coords))]
    pairs = []
    for v, (row, col) in enumerate(offsets):
        if col % 2 == 0:
            pairs.append([v, offsets.index((row, col + 1))])  # ValueError: no partner
    if len(pairs) * 2 != len(offsets):
        raise ValueError("a thread's subtile values do not form column pairs")
    return pairs


@cute.jit
def _group_at(tensor: cute.Tensor, coord, width: cutlass.Constexpr[int]) -> cute.Tensor:
    """The ``width`` consecutive elements of ``tensor`` (in global memory, or a dense copy of
    a tile in SMEM) from ``coord`` on, as a tensor whose pointer is known to be aligned to all
    of them."""
    start = tensor.iterator + cute.crd2idx(coord, tensor.layout)
    if cutlass.const_expr(width > 1):
        start = cute.make_ptr(
            tensor.element_type, start.toint(), start.memspace,
            assumed_align=width * tensor.element_type.width // 8,
        )  # fmt: skip
    return cute.make_tensor(start, cute.make_layout(width))


@cute.jit
def store_subtile(
    spec: cutlass.Constexpr,
    acc: cute.TensorSSA,
    alpha: cutlass.Float32,
    beta: cutlass.Float32,
    vectors: ChannelVectors,
    subtile_n0: cutlass.Int32,
    source: Optional[SourceSubtiles],
    source_state: Optional[pipeline.PipelineState],
    out: OutputSubtiles,
    buffer: cutlass.Int32,
    gmem_subtile: cute.Tensor,
    warp_idx: cutlass.Int32,
    coord_subtile: Optional[cute.Tensor] = None,
    bound: Optional[cute.Shape] = None,
):
    """The epilogue of one subtile whose accumulator values this thread holds in ``acc``
    (fp32): ``subtile_n0`` is its first output channel, ``buffer`` the staging buffer it goes
    through, ``gmem_subtile`` its TMA destination. Waits for the source subtile at
    ``source_state`` and releases it (the caller advances the state). With ``out.amax``,
    ``coord_subtile`` and ``bound`` say which values lie inside the output (as for
    ``store_subtile_by_threads``): the TMA store clips the others, the amax skips them."""
    residual = None
    if cutlass.const_expr(spec.has_residual):
        source.pipeline.consumer_wait(source_state)
        at = (None, None, None, source_state.index)
        if cutlass.const_expr(isinstance(source.smem, GroupedSmem)):
            copy_grouped(source.regs_copy, source.smem.buffers[at], to_smem=False)
        elif cutlass.const_expr(source.tiled_copy is None):
            cute.autovec_copy(source.smem[at], source.regs_copy)
        else:
            cute.copy(source.tiled_copy, source.smem[at], source.regs_copy)
        residual = beta * source.regs.load().to(cutlass.Float32)
    y = subtile_values(spec, acc, alpha, vectors, subtile_n0, residual, out, coord_subtile, bound)
    out.regs.store(y.to(out.regs.element_type))
    if cutlass.const_expr(isinstance(out.smem, GroupedSmem)):
        copy_grouped(out.regs_copy, out.smem.buffers[(None, None, None, buffer)], to_smem=True)
    else:
        cute.copy(out.tiled_copy, out.regs_copy, out.smem[(None, None, None, buffer)])
    # Generic-proxy SMEM accesses before the async proxy's: the output writes before the TMA
    # store reads them, the source reads before the next TMA load overwrites the buffer.
    cute.arch.fence_proxy("async.shared", space="cta")
    if cutlass.const_expr(spec.has_residual):
        source.pipeline.consumer_release(source_state)
    # Plain names in the branch: the DSL cannot carry the NamedTuple through a runtime `if`.
    store_pipeline, smem_tma = out.store_pipeline, out.smem_tma[(None, buffer)]
    out.barrier.arrive_and_wait()
    if warp_idx == out.store_warp:
        cute.copy(out.tma_atom, smem_tma, gmem_subtile)
        store_pipeline.producer_commit()
        store_pipeline.producer_acquire()
    out.barrier.arrive_and_wait()


BULK_BYTES = 16  # a bulk copy's size and addresses: whole 16-byte units


@cute.jit
def bulk_store_tile(
    staging: cute.Pointer,
    gmem: cute.Pointer,
    count: cutlass.Int32,
    issuer: cutlass.Boolean,
    tidx: cutlass.Int32,
):
    """``count`` elements from a dense SMEM copy of an output tile, ``staging``, to the
    output from ``gmem`` on (both 16-byte aligned), after the threads that wrote the copy
    fenced and met at a barrier: one bulk copy of the whole 16-byte units, issued and
    committed as a bulk group by the ``issuer`` thread (the caller has it wait for the
    group's reads before the buffer is written again), and the last elements that do not
    fill one, by the threads whose ``tidx`` is below their count."""
    unit = BULK_BYTES * 8 // staging.dtype.width
    whole = count // unit * unit
    if issuer:
        if whole > 0:
            nvvm.cp_async_bulk_global_shared_cta(
                gmem.llvm_ptr, staging.llvm_ptr,
                cutlass.Int32(whole * (staging.dtype.width // 8)).ir_value(),
            )  # fmt: skip
        cute.arch.cp_async_bulk_commit_group()
    if tidx < count - whole:
        rest = cute.make_tensor(gmem + whole + tidx, cute.make_layout(1))
        rest[0] = cute.make_tensor(staging + whole + tidx, cute.make_layout(1))[0]
