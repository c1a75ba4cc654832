"""How fast Hopper's WGMMAs run from shared memory, alone and beside TMA fills (H100/H200):

    python benchmarks/experiments/wgmma_rate.py --out wgmma_rate.json [--k-tiles 9] [--with ARG]

The question (benchmarks/NOTES.md, sessions 56-57): why does the conv's fp8 128x128x128 k-tile
take ~610-630 cycles instead of 512? Each CTA (one per SM) holds a 128 x N x K A/B tile in
SMEM and its consumer warpgroups run ``k_tiles`` batches of WGMMAs over it as the conv kernel's
mainloop does (a batch per 128-byte k-tile: fence, the k-blocks' WGMMAs, commit, wait for all
but the newest batch); no global loads. Reported per variant: cycles per k-tile (median over
CTAs) against the MMA rate's, and the fills' bytes per cycle.

What a variant adds (``WgmmaRate``'s arguments):

- ``fill``: one thread of a third warpgroup keeps ``fill_stages`` (default ``FILL_STAGES``)
  TMA loads of 128 x 128-byte tiles (from an L2-resident buffer) in flight into other SMEM,
  faster than the conv's ring needs (session 56's shared-memory byte model predicted ~640
  cycles for fp8 N=128 with them). Four in flight fill ~70 B/cycle per SM, which with 64 KB
  in flight is ~940 cycles of latency per load: more stages tell whether that rate is the
  latency's or a ceiling of the SM's loads or of the L2 (the conv's loads alone move ~8.7
  TB/s, session 58);
- ``sync``: each batch behind a ring stage's full/empty barriers, which a producer thread
  keeps full, as the conv's consumers wait and release;
- ``random``: pseudo-random operand bits instead of SMEM as the kernel finds it;
- ``rotate``: the batches cycle through ``DATA_STAGES`` stages (a runtime index);
- ``warpgroups=1``: one warpgroup issues all 128 rows (two m64 halves, as a ping-pong
  consumer does), ``m_outer`` each half's k-blocks in turn rather than interleaved;
- ``regs``: ``setmaxnreg`` as the conv's roles (consumers 232, the rest 40);
- ``uniform``: the MMA slice taken by a warp-uniform index, as the conv does: ptxas then
  builds every WGMMA's descriptors in the same uniform registers (the conv's SASS), where
  the thread index gives each WGMMA of a batch its own.

Measured on an H200 (session 57): every variant runs at the MMA rate over 4096 k-tiles, and
at 91-93% over 9 (a chain's fill and drain, ~430 cycles). So none of these is what the conv
loses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
import torch
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.cute.runtime import make_fake_stream, make_ptr
from cutlass.tensor_utils import LayoutEnum

FILL_STAGES = 4
RING_STAGES = 6  # ``sync``: the conv's fp8 128x128 ring depth
DATA_STAGES = 4  # ``rotate``: the A/B stages the consumers cycle through (N=128 only: SMEM)
FILL_ROWS = 32768  # the fill's source: 32768 rows of 128 bytes (4 MiB, L2-resident)
THREADS = 384  # two consumer warpgroups (the second idle with ``warpgroups=1``); a third: the
# fill (warp 8) and the ring's producer (warp 9)
TILE_M = 128
K_BYTES = 128  # a k-tile: one 128-byte row per operand row
OUT_FIELDS = 4  # per CTA: consumer cycles, fill cycles, fill loads, an accumulator (kept live)
MMA_FMA_PER_CYCLE = {8: 4096, 16: 2048}  # dense, per SM, by input bits


class WgmmaRate:
    """One variant: ``dtype`` inputs, N = ``tile_n``, ``k_tiles`` batches; the module
    docstring says what each of the other arguments adds. With ``sync`` a producer thread
    keeps the ring full and no data moves."""

    def __init__(
        self, dtype: type[cutlass.Numeric], tile_n: int, k_tiles: int, fill: bool = False,
        sync: bool = False, random: bool = False, rotate: bool = False,
        warpgroups: int = 2, m_outer: bool = False, regs: bool = False,
        uniform: bool = False, fill_stages: int = FILL_STAGES,
    ):  # fmt: skip
        self.dtype = dtype
        self.tile_mnk = (TILE_M, tile_n, K_BYTES * 8 // dtype.width)
        self.k_tiles = k_tiles
        self.fill = fill
        self.sync = sync
        self.random = random
        self.stages = DATA_STAGES if rotate else 1
        self.warpgroups = warpgroups  # 1: one warpgroup issues all 128 rows (two m64 halves)
        self.m_outer = m_outer  # one warpgroup: each half's k-blocks in turn, not interleaved
        self.consumers = 128 * warpgroups
        self.regs = regs  # ``setmaxnreg`` as the conv's roles: consumers 232, the rest 40
        self.uniform = uniform  # the MMA slice by a warp-uniform index, as the conv's
        self.fill_stages = fill_stages  # ``fill``: its TMA loads in flight

    @cute.jit
    def __call__(
        self, fill_ptr: cute.Pointer, out_ptr: cute.Pointer, ctas: cutlass.Int32,
        stream: cuda.CUstream,
    ):  # fmt: skip
        tile_m, tile_n, tile_k = self.tile_mnk
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, OperandMajorMode.K, OperandMajorMode.K, cutlass.Float32,
            (self.warpgroups, 1, 1), tiler_mn=(64, tile_n),
        )  # fmt: skip
        a_layout = sm90_utils.make_smem_layout_a(
            LayoutEnum.ROW_MAJOR, self.tile_mnk, self.dtype, self.stages
        )
        b_layout = sm90_utils.make_smem_layout_b(
            LayoutEnum.ROW_MAJOR, self.tile_mnk, self.dtype, self.stages
        )
        fill_layout = sm90_utils.make_smem_layout_a(
            LayoutEnum.ROW_MAJOR, self.tile_mnk, self.dtype, self.fill_stages
        )
        m_fill = cute.make_tensor(
            fill_ptr, cute.make_layout((FILL_ROWS, tile_k), stride=(tile_k, 1))
        )
        tma_atom, tma_fill = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), m_fill,
            cute.slice_(fill_layout, (None, None, 0)), (tile_m, tile_k),
        )  # fmt: skip
        m_out = cute.make_tensor(
            out_ptr, cute.make_layout((ctas, OUT_FIELDS), stride=(OUT_FIELDS, 1))
        )
        MemRange, Align = cute.struct.MemRange, cute.struct.Align

        @cute.struct
        class Storage:
            fill_mbar: MemRange[cutlass.Int64, self.fill_stages]
            ring_mbar: MemRange[cutlass.Int64, RING_STAGES * 2]
            sA: Align[MemRange[self.dtype, cute.cosize(a_layout)], 1024]
            sB: Align[MemRange[self.dtype, cute.cosize(b_layout)], 1024]
            sF: Align[MemRange[self.dtype, cute.cosize(fill_layout)], 1024]

        self.storage = Storage
        self.kernel(tiled_mma, tma_atom, tma_fill, m_out, a_layout, b_layout, fill_layout).launch(
            grid=(ctas, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_atom: cute.CopyAtom,
        tma_fill: cute.Tensor,
        m_out: cute.Tensor,
        a_layout: cute.ComposedLayout,
        b_layout: cute.ComposedLayout,
        fill_layout: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        barriers = storage.fill_mbar.data_ptr()
        ring = pipeline.PipelineAsync.create(
            barrier_storage=storage.ring_mbar.data_ptr(), num_stages=RING_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumers),
            defer_sync=True,
        )  # fmt: skip
        if warp_idx == 8:
            if cute.arch.lane_idx() == 0:
                for s in cutlass.range_constexpr(self.fill_stages):
                    cute.arch.mbarrier_init(barriers + s, 1)
        cute.arch.mbarrier_init_fence()  # the fill's and the ring's inits, before any use
        cute.arch.sync_threads()
        if cutlass.const_expr(self.regs):
            if warp_idx < self.consumers // 32:
                cute.arch.setmaxregister_increase(232)
            else:
                cute.arch.setmaxregister_decrease(40)
        if warp_idx < self.consumers // 32:
            self.consume(tiled_mma, storage, a_layout, b_layout, m_out, bidx, tidx, ring)
        elif warp_idx == 8:
            if cutlass.const_expr(self.fill):
                self.fill_smem(tma_atom, tma_fill, storage, fill_layout, barriers, m_out, bidx)
        elif warp_idx == 9:
            if cutlass.const_expr(self.sync):
                if cute.arch.lane_idx() == 0:
                    state = pipeline.make_pipeline_state(
                        pipeline.PipelineUserType.Producer, RING_STAGES
                    )
                    for _ in cutlass.range(self.k_tiles, unroll=1):
                        ring.producer_acquire(state)
                        ring.producer_commit(state)
                        state.advance()

    @cute.jit
    def consume(self, tiled_mma, storage, a_layout, b_layout, m_out, bidx, tidx, ring):
        """The two consumer warpgroups: ``k_tiles`` WGMMA batches over the one A/B tile (with
        ``sync``: each after waiting for its ring stage, the one before released once its
        batch is done, as ``ConsumerMainloop.mainloop`` does)."""
        sA = storage.sA.get_tensor(a_layout.outer, swizzle=a_layout.inner)
        sB = storage.sB.get_tensor(b_layout.outer, swizzle=b_layout.inner)
        thr_mma = tiled_mma.get_slice(tidx)
        if cutlass.const_expr(self.uniform):  # ptxas then reuses one UR quad per descriptor
            warpgroup_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx()) // 4
            thr_mma = tiled_mma.get_slice(warpgroup_idx * 128)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc_shape = thr_mma.partition_shape_C(cute.select(self.tile_mnk, mode=[0, 1]))
        acc = cute.make_rmem_tensor(acc_shape, cutlass.Float32)
        acc.fill(0.0)
        if cutlass.const_expr(self.random):
            self.scramble(storage.sA.data_ptr(), cute.cosize(a_layout), tidx)
            self.scramble(storage.sB.data_ptr(), cute.cosize(b_layout), tidx)
            cute.arch.fence_proxy("async.shared", space="cta")  # generic writes, then WGMMA reads
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        k_blocks = cute.size(tCrA, mode=[2])
        cute.arch.barrier(barrier_id=1, number_of_threads=self.consumers)
        Consumer = pipeline.PipelineUserType.Consumer
        read = pipeline.make_pipeline_state(Consumer, RING_STAGES)
        release = pipeline.make_pipeline_state(Consumer, RING_STAGES)
        start = cute.arch.clock64()
        for k_tile in cutlass.range(self.k_tiles, unroll=1):
            if cutlass.const_expr(self.sync):
                ring.consumer_wait(read)
                read.advance()
            warpgroup.fence()
            stage = k_tile % self.stages  # with ``rotate``, a runtime index as the conv's
            if cutlass.const_expr(self.m_outer):
                b_nk = tCrB[(None, None, None, stage)]
                for m in cutlass.range_constexpr(cute.size(acc, mode=[1])):
                    acc_m = self.with_unit_mode(acc[(None, m, None)], 1)  # (V, 1, N)
                    a_mk = self.with_unit_mode(tCrA[(None, m, None, stage)], 1)  # (V, 1, K)
                    for kb in cutlass.range_constexpr(k_blocks):
                        cute.gemm(
                            tiled_mma, acc_m, a_mk[(None, None, kb)], b_nk[(None, None, kb)], acc_m
                        )  # fmt: skip
            else:
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(
                        tiled_mma, acc, tCrA[(None, None, kb, stage)],
                        tCrB[(None, None, kb, stage)], acc,
                    )  # fmt: skip
            warpgroup.commit_group()
            warpgroup.wait_group(1)
            if cutlass.const_expr(self.sync):
                if k_tile > 0:
                    ring.consumer_release(release)
                    release.advance()
        warpgroup.wait_group(0)
        if cutlass.const_expr(self.sync):
            ring.consumer_release(release)
        end = cute.arch.clock64()
        if tidx == 0:
            m_out[(bidx, 0)] = end - start
            # each m-half's first value: ptxas drops WGMMAs whose accumulators nothing reads
            m_out[(bidx, 3)] = cutlass.Int64(acc[0] + acc[cute.size(acc) - 1])

    @staticmethod
    def with_unit_mode(tensor: cute.Tensor, at: int) -> cute.Tensor:
        """``tensor`` with a mode of size 1 inserted at ``at`` (a sliced-away M mode back)."""
        shape, stride = list(tensor.layout.shape), list(tensor.layout.stride)
        shape.insert(at, 1)
        stride.insert(at, 0)
        return cute.make_tensor(
            tensor.iterator, cute.make_layout(tuple(shape), stride=tuple(stride))
        )

    @cute.jit
    def scramble(self, operand: cute.Pointer, elements: int, tidx):
        """Pseudo-random operand bits (a multiplicative hash of the word's index), the top
        exponent bit of each byte cleared so that no value is NaN or infinite: the tensor
        cores' rate may depend on the data, and SMEM left as it is may be zeros."""
        count = elements * self.dtype.width // 32
        words = cute.make_tensor(
            cute.recast_ptr(operand, dtype=cutlass.Uint32), cute.make_layout(count)
        )
        for i in cutlass.range(tidx, count, self.consumers, unroll=1):
            hashed = cutlass.Uint32(i) * cutlass.Uint32(2654435761) + cutlass.Uint32(0x9E3779B9)
            words[i] = hashed & cutlass.Uint32(0xBFBFBFBF)

    @cute.jit
    def fill_smem(self, tma_atom, tma_fill, storage, fill_layout, barriers, m_out, bidx):
        """One thread: ``fill_stages`` TMA loads of 128 x 128 bytes in flight, each stage
        reloaded as soon as it lands (as fast as TMA goes: a harder test than the conv's
        ring, whose fills follow the MMAs), for six times a ring's fill bytes per k-tile, so
        that the fills outlast the consumers (``fill_outlasts_mma`` checks it)."""
        sF = storage.sF.get_tensor(fill_layout.outer, swizzle=fill_layout.inner)
        gF = cute.local_tile(tma_fill, (TILE_M, self.tile_mnk[2]), (None, None))
        tFsF, tFgF = cpasync.tma_partition(
            tma_atom, 0, cute.make_layout(1), cute.group_modes(sF, 0, 2), cute.group_modes(gF, 0, 2)
        )
        blocks = FILL_ROWS // TILE_M
        stage_bytes = TILE_M * K_BYTES
        loads = 6 * self.k_tiles * (self.tile_mnk[0] + self.tile_mnk[1]) * K_BYTES // stage_bytes
        if cute.arch.lane_idx() == 0:
            start = cute.arch.clock64()
            for s in cutlass.range_constexpr(self.fill_stages):
                cute.arch.mbarrier_arrive_and_expect_tx(barriers + s, stage_bytes)
                cute.copy(
                    tma_atom,
                    tFgF[(None, (bidx + s) % blocks, 0)],
                    tFsF[(None, s)],
                    tma_bar_ptr=barriers + s,
                )
            for i in cutlass.range(self.fill_stages, loads, unroll=1):
                stage = i % self.fill_stages
                cute.arch.mbarrier_wait(barriers + stage, ((i // self.fill_stages) - 1) % 2)
                cute.arch.mbarrier_arrive_and_expect_tx(barriers + stage, stage_bytes)
                cute.copy(
                    tma_atom, tFgF[(None, (bidx + i) % blocks, 0)], tFsF[(None, stage)],
                    tma_bar_ptr=barriers + stage,
                )  # fmt: skip
            for i in cutlass.range(loads, loads + self.fill_stages, unroll=1):
                stage = i % self.fill_stages
                cute.arch.mbarrier_wait(barriers + stage, ((i // self.fill_stages) - 1) % 2)
            end = cute.arch.clock64()
            m_out[(bidx, 1)] = end - start
            m_out[(bidx, 2)] = cutlass.Int64(loads)


def compile_variant(variant: WgmmaRate, arch: str = "sm_90a"):
    """``cute.compile`` of one variant (no GPU needed), its PTX kept (``__ptx__``); call it
    with ``(fill_ptr, out_ptr, ctas, stream)``."""
    fake = [make_ptr(variant.dtype, 0, cute.AddressSpace.gmem, assumed_align=16),
            make_ptr(cutlass.Int64, 0, cute.AddressSpace.gmem, assumed_align=16),
            cutlass.Int32(1), make_fake_stream()]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="wgmma_rate_") as dump_dir:
        options = f"--gpu-arch {arch} --enable-tvm-ffi --keep-ptx --dump-dir {dump_dir}"
        return cute.compile(variant, *fake, options=options)


def measure(variant: WgmmaRate, fn, ctas: int) -> dict:
    """One run: per-CTA cycles, reduced to medians."""
    torch_dtype = torch.float8_e4m3fn if variant.dtype.width == 8 else torch.bfloat16
    fill = torch.randn(FILL_ROWS, variant.tile_mnk[2], device="cuda").to(torch_dtype)
    out = torch.zeros(ctas, OUT_FIELDS, dtype=torch.int64, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    fn(fill.data_ptr(), out.data_ptr(), ctas, stream)  # warm-up
    fn(fill.data_ptr(), out.data_ptr(), ctas, stream)
    torch.cuda.synchronize()
    rows = out.cpu().tolist()
    tile_m, tile_n, tile_k = variant.tile_mnk
    mma_run = statistics.median(r[0] for r in rows)
    per_k_tile = mma_run / variant.k_tiles
    mma_cycles = tile_m * tile_n * tile_k / MMA_FMA_PER_CYCLE[variant.dtype.width]
    result = {"cycles_per_k_tile": per_k_tile, "mma_cycles_per_k_tile": mma_cycles,
              "mma_rate": mma_cycles / per_k_tile}  # fmt: skip
    if variant.fill:
        fill_cycles = statistics.median(r[1] for r in rows)
        result["fill_bytes_per_cycle"] = rows[0][2] * TILE_M * K_BYTES / fill_cycles
        result["fill_outlasts_mma"] = fill_cycles >= mma_run
    return result


FP8, BF16 = cutlass.Float8E4M3FN, cutlass.BFloat16
VARIANTS = [
    dict(dtype=dtype, tile_n=n, fill=fill) for dtype in (FP8, BF16) for n in (128, 256)
    for fill in (False, True)
]  # fmt: skip
# Behind the ring's barriers, as the conv's mainloop: fp8 N=128 alone and with fills, the rest
# with fills.
VARIANTS += [dict(dtype=FP8, tile_n=128, fill=False, sync=True)]
VARIANTS += [
    dict(dtype=t, tile_n=n, fill=True, sync=True) for t, n in ((FP8, 128), (FP8, 256), (BF16, 128))
]
# The same, on pseudo-random operands.
VARIANTS += [dict(dtype=FP8, tile_n=128, fill=False, random=True)]
VARIANTS += [dict(v, random=True) for v in VARIANTS[-4:-1]]
# Cycling through DATA_STAGES stages, as the conv's consumers read its ring; then one warpgroup
# issuing both m-halves, interleaved or not, and the conv's register split.
RING = dict(tile_n=128, fill=True, sync=True, random=True, rotate=True)
VARIANTS += [dict(RING, dtype=t) for t in (FP8, BF16)]
VARIANTS += [dict(RING, dtype=FP8, warpgroups=1, m_outer=m) for m in (False, True)]
VARIANTS += [dict(RING, dtype=FP8, warpgroups=w, regs=True) for w in (2, 1)]
VARIANTS += [dict(RING, dtype=t, uniform=True) for t in (FP8, BF16)]
# The fill's loads in flight (session 58, prepared): 2, 4 (the default) and 8.
VARIANTS += [dict(dtype=FP8, tile_n=128, fill=True, fill_stages=s) for s in (2, 8)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--k-tiles", type=int, default=4096)
    parser.add_argument(
        "--with", dest="argument", metavar="ARG",
        help="only the variants that set this argument (e.g. fill_stages)",
    )  # fmt: skip
    args = parser.parse_args()
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    results = {"device": torch.cuda.get_device_name(), "k_tiles": args.k_tiles, "rows": []}
    for kwargs in VARIANTS:
        if args.argument and args.argument not in kwargs:
            continue
        variant = WgmmaRate(k_tiles=args.k_tiles, **kwargs)
        row = {name: getattr(value, "__name__", value) for name, value in kwargs.items()}
        row |= measure(variant, compile_variant(variant), ctas)
        print(json.dumps(row), flush=True)
        results["rows"].append(row)
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
