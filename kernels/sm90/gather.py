"""Gathered operands (``Conv2dConfig.gather``): the im2col A and filter B tiles loaded by threads.

TMA reads global rows only in 16-byte units, so a conv whose C is not a multiple of 8 (16-bit)
has no TMA view of its activation or filter. With ``gather`` the producer warps (two or four,
``pipeline_checks.gather_warps_for``) fill the A/B ring themselves, and the host stages
nothing. Per k-tile (c-block, s, r), every (row, 8-channel
run) of the A tile (an output pixel's im2col row) and of the B tile (an output channel's
filter row) is one unit of work, loaded ``vector`` channels at a time under its bounds
predicate (zero for padding, channels past C, rows past M or K) and stored to the
128B-swizzled stage by one 16-byte store (a run is one swizzle chunk). The units are taken
a group at a time (``units_in_flight``), all their loads issued before any store, so that a
thread waits on global memory once per group rather than once per unit; where a k-tile of
2-channel vectors holds few units, the loads of several k-tiles, both operands', issue
before any store (``k_tiles_per_batch``). Before the
thread arrives on the stage's full barrier, a proxy fence makes its stores visible to WGMMA
(the async proxy).

With packed taps (``Conv2dConfig.pack_taps``) the k-tiles walk the filter row's R*S*C
elements back to back instead of one tap's channels each (the k-tile walk is then
``(k-tiles of the row, 1, 1)``, the filter row one run of them): a C=1 1x7 fills one
k-tile of 16 instead of seven of 1 real channel. A unit's vectors may then lie in different
taps: each A vector's tap and channels come from its place in the row.

``vector`` is 1, 2 or 4 (C a multiple of it, a compile-time promise the host checks): 2-,
4- or 8-byte loads. Vectors of 4 channels are copied by ``cp.async`` (8 bytes) straight
into the stage, with zeros stored by the thread where the vector lies outside: no registers
hold them, a thread issues every copy of a k-tile without waiting, and the stage's full
barrier counts the thread's arrival once its copies land (``cp.async.mbarrier.arrive.noinc``),
so several stages' copies are in flight at once instead of one group's loads per round
trip. The consumers fence the async proxy after the wait
(``MainloopMixin.wait_for_k_tile``): the copies and stores are generic-proxy writes.
Smaller vectors go through registers as above: 2 bytes is below what ``cp.async`` moves,
and 4-byte copies ran no faster than the register loads (see ``copies_async``).
"""

import math
from dataclasses import dataclass
from typing import Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync

from ..common.dependent_launch import wait_before_first_load
from ..common.im2col import ConvGeometry
from ..common.tile_scheduler import StaticTileScheduler
from .schedule_checks import GATHER_RUN_CHANNELS as RUN_CHANNELS

# Units whose loads a thread issues before storing any of them, by channels per load: a unit
# holds 8 registers loaded element by element, 4 loaded as vectors, within the producer
# warpgroup's budget (on an H100, 8 vector units ran small gathered convs 1.16x faster than
# 4; 4 scalar units spilled). Tiles past 128x128 keep half as many: their threads own more
# units, and 8 in flight spilled 80-250 bytes there.
UNITS_IN_FLIGHT = {1: 2, 2: 8, 4: 8}
FULL_FLIGHT_MAX_TILE = 128
# Units a thread may hold across a batch of k-tiles (``k_tiles_per_batch``), 2-channel
# vectors only: twice ``UNITS_IN_FLIGHT``'s compiled without spills on 64-row tiles of four
# gather warps (four times spilled 110-150 instructions' worth).
BATCH_UNITS_IN_FLIGHT = {2: 16}


def copies_async(vector: int) -> bool:
    """Whether gathered vectors of ``vector`` channels are ``cp.async`` copies: 8-byte ones.
    Measured on an H100 against the register gather (the corpus's gathered problems, one
    process, replayed from CUDA graphs): 4-channel vectors 1.137x faster by geomean over 36
    problems (train 1.156x, held-out 1.112x, none slower), 2-channel ones 0.994x over 15
    (0.92-1.07x; train 0.989x)."""
    return vector == 4


def units_in_flight(vector: int, tile_mnk: Tuple[int, int, int], units: int) -> int:
    """The units a thread loads before storing them: ``UNITS_IN_FLIGHT``, halved past
    128x128 tiles, and a divisor of its ``units`` per operand tile."""
    in_flight = UNITS_IN_FLIGHT[vector]
    if max(tile_mnk[:2]) > FULL_FLIGHT_MAX_TILE:
        in_flight = max(UNITS_IN_FLIGHT[1], in_flight // 2)
    return math.gcd(units, in_flight)


def thread_units(tile_mnk: Tuple[int, int, int], threads: int) -> Tuple[int, int]:
    """Each of ``threads`` gather threads' units of a k-tile: of the A tile, of the filter
    tile (a unit is a row's run of ``RUN_CHANNELS`` channels)."""
    runs = tile_mnk[2] // RUN_CHANNELS
    return tuple(rows * runs // threads for rows in tile_mnk[:2])


def k_tiles_per_batch(vector: int, tile_mnk: Tuple[int, int, int], threads: int) -> int:
    """Register gathers of 2-channel vectors whose A and B units of a k-tile fit
    ``BATCH_UNITS_IN_FLIGHT`` (halved past 128x128 tiles) twice or more: the k-tiles whose
    loads, both operands', a thread issues before it stores any, so that it waits on global
    memory once per batch of k-tiles instead of once per k-tile. 0 otherwise: one operand
    tile at a time, in groups (``units_in_flight``; ptxas issued a k-tile's filter loads
    with its activation loads where both groups fit ``UNITS_IN_FLIGHT``)."""
    if vector not in BATCH_UNITS_IN_FLIGHT:
        return 0
    budget = BATCH_UNITS_IN_FLIGHT[vector]
    if max(tile_mnk[:2]) > FULL_FLIGHT_MAX_TILE:
        budget //= 2
    batch = budget // sum(thread_units(tile_mnk, threads))
    return batch if batch > 1 else 0


@dataclass(frozen=True)
class OperandGather:
    """The gather warps' view of one CTA's operands: the activation as ``((w, h, n), c)``,
    the filter as ``(k, (c, s, r))``, the A and B rings and the ``ab`` pipeline (a
    ``PipelineAsync`` every gather thread arrives on), the geometry and the k-tile walk
    ``(c-blocks, S, R)``; ``vector``: channels per load (C is a multiple of it)."""

    ab_pipeline: pipeline.PipelineAsync
    mA: cute.Tensor
    mB: cute.Tensor
    sA: cute.Tensor  # (tile_m, tile_k, ring stage)
    sB: cute.Tensor  # (tile_n, tile_k, ring stage)
    geometry: ConvGeometry
    k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]
    tile_mnk: Tuple[int, int, int]
    threads: int
    vector: int
    waits_late: bool = False  # see ``gather_tile``
    packs_taps: bool = False  # Conv2dConfig.pack_taps: k_shape is (k-tiles of the row, 1, 1)

    @property
    def copies_async(self) -> bool:
        return copies_async(self.vector)

    @property
    def k_tiles_per_batch(self) -> int:
        return k_tiles_per_batch(self.vector, self.tile_mnk, self.threads)

    @cute.jit
    def gather_tile(
        self,
        state: pipeline.PipelineState,
        scheduler: StaticTileScheduler,
        work: cutlass.Int32,
        tidx: cutlass.Int32,
    ) -> pipeline.PipelineState:
        """Gather every k-tile of work item ``work``'s output tile into the ring, in the
        consumers' order; ``tidx``: this thread's index among the gather threads. Returns the
        advanced state. With ``waits_late`` (PDL) the CTA's first work item waits for the
        previous grid after its tile coordinates and views, before its first load."""
        m_tile, n_tile = scheduler.tile_coord(work)
        c_blocks, taps_s, taps_r = self.k_shape
        activation, filters = self._vector_views()
        wait_before_first_load(self.waits_late, scheduler, work)
        if cutlass.const_expr(self.k_tiles_per_batch > 0):
            batch = self.k_tiles_per_batch
            k_tiles = c_blocks * taps_s * taps_r
            whole_batches = k_tiles // batch
            operands = ((activation, m_tile), (filters, n_tile))
            for b in range(whole_batches):
                state = self._gather_k_tiles(state, b * batch, batch, operands, tidx)
            for k in range(whole_batches * batch, k_tiles):
                state = self._gather_k_tiles(state, k, 1, operands, tidx)
            return state
        for r in range(taps_r):
            for s in range(taps_s):
                for c_block in range(c_blocks):
                    self.ab_pipeline.producer_acquire(state)
                    c_tile = c_block * self.tile_mnk[2]
                    self._gather_rows(self._activation_run, activation, self.sA,
                                      self.tile_mnk[0], m_tile, (c_tile, s, r), state.index,
                                      tidx)  # fmt: skip
                    self._gather_rows(self._filter_run, filters, self.sB, self.tile_mnk[1],
                                      n_tile, (c_tile, s, r), state.index, tidx)  # fmt: skip
                    if cutlass.const_expr(self.copies_async):
                        # Arrives once this thread's copies of the stage have landed.
                        self.ab_pipeline.sync_object_full.arrive_cp_async_mbarrier(state.index)
                    else:
                        # Generic-proxy stores; WGMMA reads through the async proxy.
                        cute.arch.fence_proxy("async.shared", space="cta")
                        self.ab_pipeline.producer_commit(state)
                    state.advance()
        return state

    @cute.jit
    def _gather_k_tiles(
        self,
        state: pipeline.PipelineState,
        first_k_tile: cutlass.Int32,
        count: cutlass.Constexpr[int],
        operands: Tuple,
        tidx: cutlass.Int32,
    ) -> pipeline.PipelineState:
        """``k_tiles_per_batch``: ``count`` k-tiles from ``first_k_tile`` (in the consumers'
        order, c-blocks innermost) into as many ring stages, every load of both operands'
        units issued before any store; ``operands``: the activation and filter views with
        their tile coordinates. Returns the advanced state."""
        runs = self.tile_mnk[2] // RUN_CHANNELS
        rows = self.tile_mnk[:2]
        units = thread_units(self.tile_mnk, self.threads)
        loaders = (self._activation_run, self._filter_run)
        rings = (self.sA, self.sB)
        values = cute.make_rmem_tensor((RUN_CHANNELS, count * sum(units)), self.sA.element_type)
        stages = []
        for _ in cutlass.range_constexpr(count):
            self.ab_pipeline.producer_acquire(state)
            stages.append(state.clone())
            state.advance()
        for j in cutlass.range_constexpr(count):
            k_coord = self._k_coord(first_k_tile + j)
            slot = j * sum(units)
            for op in cutlass.range_constexpr(2):
                gmem, row_tile = operands[op]
                for u in cutlass.range_constexpr(units[op]):
                    row, run = self._unit(u, tidx, runs)
                    c0 = k_coord[0] + run * RUN_CHANNELS
                    loaders[op](gmem, row_tile * rows[op] + row, c0, k_coord, values[(None, slot)])
                    slot += 1
        for j in cutlass.range_constexpr(count):
            slot = j * sum(units)
            for op in cutlass.range_constexpr(2):
                smem = rings[op][(None, None, stages[j].index)]
                smem_runs = cute.zipped_divide(smem, (1, RUN_CHANNELS))
                for u in cutlass.range_constexpr(units[op]):
                    unit = self._unit(u, tidx, runs)
                    cute.autovec_copy(values[(None, slot)], smem_runs[(None, unit)])
                    slot += 1
        # Generic-proxy stores; WGMMA reads through the async proxy.
        cute.arch.fence_proxy("async.shared", space="cta")
        for j in cutlass.range_constexpr(count):
            self.ab_pipeline.producer_commit(stages[j])
        return state

    @cute.jit
    def _k_coord(self, k_tile: cutlass.Int32) -> Tuple:
        """Flat k-tile ``k_tile``'s (first channel, s, r): c-blocks innermost, then s, r."""
        c_blocks, taps_s, _ = self.k_shape
        k_u, blocks_u = cutlass.Uint32(k_tile), cutlass.Uint32(c_blocks)
        tap = k_u // blocks_u
        c_block = cutlass.Int32(k_u - tap * blocks_u)
        taps_u = cutlass.Uint32(taps_s)
        r = tap // taps_u
        s = cutlass.Int32(tap - r * taps_u)
        return c_block * self.tile_mnk[2], s, cutlass.Int32(r)

    @cute.jit
    def _vector_views(self) -> Tuple[cute.Tensor, cute.Tensor]:
        """The activation as ``((w, h, n), (vector, C / vector))`` and the filter as ``(k,
        ((vector, C / vector), s, r))`` (``packs_taps``: ``(k, ((vector, R*S*C / vector), 1,
        1))``, the row's taps back to back): a vector of channels is one mode-0 slice, whose
        address the strides (multiples of ``vector``) prove aligned for one load."""
        g, v = self.geometry, self.vector
        c = cute.assume(g.c, divby=v)
        row = cute.assume(c * g.w, divby=v)
        image = cute.assume(cutlass.Int64(g.h) * row, divby=v)  # N*H*W*C may pass 2**31
        activation = cute.make_tensor(
            self.mA.iterator,
            cute.make_layout(((g.w, g.h, g.n), (v, g.c // v)), stride=((c, row, image), (1, v))),
        )
        filter_row = cute.assume(g.r * g.s * c, divby=v)
        if cutlass.const_expr(self.packs_taps):
            filter_layout = cute.make_layout(
                (g.k, ((v, filter_row // v), 1, 1)), stride=(filter_row, ((1, v), 0, 0))
            )
        else:
            filter_layout = cute.make_layout(
                (g.k, ((v, g.c // v), g.s, g.r)), stride=(filter_row, ((1, v), c, g.s * c))
            )
        return activation, cute.make_tensor(self.mB.iterator, filter_layout)

    @cute.jit
    def _gather_rows(
        self,
        load_run,
        gmem: cute.Tensor,
        smem: cute.Tensor,
        rows: int,
        row_tile: cutlass.Int32,
        k_coord: Tuple,
        stage: cutlass.Int32,
        tidx: cutlass.Int32,
    ):
        """This thread's units of one operand tile of ``rows`` rows: unit ``i * threads +
        tidx`` is row ``unit // runs`` and channels ``RUN_CHANNELS * (unit % runs)`` on, so
        that neighbouring threads read neighbouring channels (and rows). ``load_run(gmem,
        row, c, k_coord, run)`` loads the run of channels from c on into ``run``, zero
        outside the operand: into registers a group of units at a time, then stored, or with
        ``copies_async`` straight into the stage's run."""
        tile_k = self.tile_mnk[2]
        runs = tile_k // RUN_CHANNELS
        units = rows * runs // self.threads
        c_tile = k_coord[0]
        # The stage's runs: ((1, RUN_CHANNELS), (row, run)), each one 16-byte SMEM store.
        smem_runs = cute.zipped_divide(smem[(None, None, stage)], (1, RUN_CHANNELS))
        if cutlass.const_expr(self.copies_async):
            for u in cutlass.range_constexpr(units):
                row, run = self._unit(u, tidx, runs)
                c0 = c_tile + run * RUN_CHANNELS
                load_run(gmem, row_tile * rows + row, c0, k_coord, smem_runs[(None, (row, run))])
            return
        in_flight = units_in_flight(self.vector, self.tile_mnk, units)
        values = cute.make_rmem_tensor((RUN_CHANNELS, in_flight), smem.element_type)
        for group in cutlass.range_constexpr(units // in_flight):
            for u in cutlass.range_constexpr(in_flight):
                row, run = self._unit(group * in_flight + u, tidx, runs)
                c0 = c_tile + run * RUN_CHANNELS
                load_run(gmem, row_tile * rows + row, c0, k_coord, values[(None, u)])
            for u in cutlass.range_constexpr(in_flight):
                unit = self._unit(group * in_flight + u, tidx, runs)
                cute.autovec_copy(values[(None, u)], smem_runs[(None, unit)])

    def _unit(self, u: int, tidx: cutlass.Int32, runs: int) -> Tuple:
        """This thread's ``u``-th unit of an operand tile of ``runs`` runs a row: (row in the
        tile, run in the row); neighbouring threads take neighbouring runs (and rows)."""
        unit = u * self.threads + tidx
        return unit // runs, unit % runs

    @cute.jit
    def _load_vectors(self, vector_at, run: cute.Tensor):
        """``run`` = the run's vectors; ``vector_at(i)`` = ``(ok, view)``: whether to read
        vector i (else zero) and a function giving the ``(vector,)`` tensor of its channels
        (called only where read, so that its address is computed under the predicate). Each
        vector is loaded into a value of its own before it is written into ``run``, so that
        the run's loads all issue before the first one is waited for; with
        ``copies_async``, ``run`` is the stage's run itself and each vector a cp.async copy
        (``_copy_vectors``)."""
        run_vectors = cute.zipped_divide(run, (self.vector,))
        if cutlass.const_expr(self.copies_async):
            self._copy_vectors(vector_at, run_vectors)
        else:
            for i in cutlass.range_constexpr(RUN_CHANNELS // self.vector):
                ok, view = vector_at(i)
                values = cute.full((self.vector,), 0, run.element_type)
                if ok:
                    values = view().load()
                run_vectors[(None, i)].store(values)

    @cute.jit
    def _copy_vectors(self, vector_at, run_vectors: cute.Tensor):
        """``copies_async``: each vector of the run (``run_vectors``, in the stage) copied by
        ``cp.async`` from its view where ``vector_at(i)`` says to read it, else zeroed by a
        store."""
        atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(), run_vectors.element_type,
            num_bits_per_copy=run_vectors.element_type.width * self.vector,
        )  # fmt: skip
        for i in cutlass.range_constexpr(RUN_CHANNELS // self.vector):
            ok, view = vector_at(i)
            if ok:
                cute.copy(atom, view(), run_vectors[(None, i)])
            else:
                run_vectors[(None, i)].store(cute.full((self.vector,), 0, run_vectors.element_type))

    def _row_vectors(self, source, inside, c0: cutlass.Int32, extent):
        """``vector_at`` (``_load_vectors``) of the run from element ``c0`` on of a row of
        ``extent`` elements: vector v = ``source(v)``, read where ``inside`` and below the
        extent."""
        first = c0 // self.vector
        return lambda i: (
            inside & ((first + i) * self.vector < extent),
            lambda: source(first + i),
        )

    @cute.jit
    def _activation_run(
        self, activation: cute.Tensor, m: cutlass.Int32, c0: cutlass.Int32, k_coord: Tuple,
        run: cute.Tensor,
    ):  # fmt: skip
        """Row m of the im2col A at filter tap ``k_coord``, channels from c0 on: the input
        pixel under output pixel m, or zero in the padding and past M or C. With
        ``packs_taps``, c0 is the place in the filter row (taps back to back): each vector's
        tap comes from it (``_packed_vectors``)."""
        g = self.geometry
        _, s, r = k_coord
        # m = (n * P + p) * Q + q, by two unsigned divisions (signed ones cost twice as much).
        m_u, q_u, p_u = cutlass.Uint32(m), cutlass.Uint32(g.q), cutlass.Uint32(g.p)
        pixel_row = m_u // q_u
        n_u = pixel_row // p_u
        q = cutlass.Int32(m_u - pixel_row * q_u)
        p = cutlass.Int32(pixel_row - n_u * p_u)
        n = cutlass.Int32(n_u)
        h = p * g.stride_h - g.pad_top
        w = q * g.stride_w - g.pad_left
        if cutlass.const_expr(self.packs_taps):
            vectors = self._packed_vectors(activation, (w, h, n), c0)
        else:
            h = h + r * g.dil_h
            w = w + s * g.dil_w
            inside = (n < g.n) & (h >= 0) & (h < g.h) & (w >= 0) & (w < g.w)
            vectors = self._row_vectors(
                lambda v: activation[((w, h, n), (None, v))], inside, c0, g.c
            )
        self._load_vectors(vectors, run)

    def _packed_vectors(self, activation: cute.Tensor, origin: Tuple, c0: cutlass.Int32):
        """``packs_taps``: ``vector_at`` (``_load_vectors``) of an A run from place ``c0`` of
        the filter row on, for the output pixel whose window starts at input ``origin``
        ``(w, h, n)``: a vector's tap and channels are its place's quotient and remainder by
        C, the first vector's by division, the next ones' by stepping (C, S and R wrap)."""
        g = self.geometry
        w0, h0, n = origin
        per_tap_u = cutlass.Uint32(g.c // self.vector)
        first_u = cutlass.Uint32(c0 // self.vector)
        tap_u = first_u // per_tap_u
        taps_s_u = cutlass.Uint32(g.s)
        r_u = tap_u // taps_s_u
        cv = cutlass.Int32(first_u - tap_u * per_tap_u)
        s = cutlass.Int32(tap_u - r_u * taps_s_u)
        r = cutlass.Int32(r_u)
        per_tap = cutlass.Int32(per_tap_u)
        places = []  # (ok, w, h, channel vector) of each vector of the run
        for i in range(RUN_CHANNELS // self.vector):
            if i > 0:
                cv = cv + 1
                next_tap = cv == per_tap
                cv = cutlass.select_(next_tap, cutlass.Int32(0), cv)
                s = cutlass.select_(next_tap, s + 1, s)
                next_row = s == g.s
                s = cutlass.select_(next_row, cutlass.Int32(0), s)
                r = cutlass.select_(next_row, r + 1, r)
            h = h0 + r * g.dil_h
            w = w0 + s * g.dil_w
            ok = (n < g.n) & (r < g.r) & (h >= 0) & (h < g.h) & (w >= 0) & (w < g.w)
            places.append((ok, w, h, cv))

        def vector_at(i):
            ok, w, h, cv = places[i]
            return ok, lambda: activation[((w, h, n), (None, cv))]

        return vector_at

    @cute.jit
    def _filter_run(
        self, filters: cute.Tensor, k: cutlass.Int32, c0: cutlass.Int32, k_coord: Tuple,
        run: cute.Tensor,
    ):  # fmt: skip
        """Row k of the filter at tap ``k_coord``, channels from c0 on, zero past K or C
        (``packs_taps``: the row's taps back to back, zero past its R*S*C elements)."""
        g = self.geometry
        _, s, r = k_coord
        extent = g.c
        if cutlass.const_expr(self.packs_taps):
            extent = g.r * g.s * g.c
        source = lambda v: filters[(k, ((None, v), s, r))]  # noqa: E731
        self._load_vectors(self._row_vectors(source, k < g.k, c0, extent), run)
