"""``Conv2dSmem``: the one shared-storage struct of the SM100 conv kernel.

Fields, in the seed's order (every tile array 1024-byte aligned for the 128-byte swizzle):

  input_tiles        act[stages][BM x BK], filter[stages][BN x BK]   (the A/B input ring)
  output_tiles       out[output_stages][OutputM x OutputN]           (D subtiles for TMA stores)
  source_tiles       src[source_stages][OutputM x OutputN]           (residual C; empty without)
  pipelines          mbarriers of the input ring, the accumulator ring, the CLC ring and its
                     throttle, the CLC responses, the TMEM-dealloc barrier, the TMEM address
  epi_load_pipeline  mbarriers of the source (epilogue-load) ring
  load_order_barrier one mbarrier: the first tile's mainloop prologue is issued

The struct is built from plain integers (``conv2d_smem_struct``), so the host computes the
exact byte count the kernel will ask for (``Conv2dConfigSm100.plan``) before compiling; inside
the kernel ``Conv2dSmem`` wraps the allocated struct and hands out typed views.
"""

# No `from __future__ import annotations`: cute.struct reads the field annotations as types.
from typing import Type

import cutlass
import cutlass.cute as cute
import cutlass.memory

__all__ = ["Conv2dSmem", "conv2d_smem_struct"]

TILE_ALIGN = 1024  # a 128-byte swizzle pattern repeats every 1024 bytes
CLC_RESPONSE_BYTES = 16  # one clusterlaunchcontrol.try_cancel response


def conv2d_smem_struct(
    *,
    act_dtype: Type[cutlass.Numeric],
    out_dtype: Type[cutlass.Numeric],
    act_elems: int,
    filter_elems: int,
    out_elems: int,
    src_elems: int,
    ab_stages: int,
    acc_stages: int,
    clc_stages: int,
    src_stages: int,
):
    """The ``cute.struct`` type of the kernel's shared storage, from element counts."""
    Int64, Int32 = cutlass.Int64, cutlass.Int32
    MemRange, Align = cute.struct.MemRange, cute.struct.Align

    @cute.struct
    class InputTiles:
        act: Align[MemRange[act_dtype, act_elems], TILE_ALIGN]
        filter: Align[MemRange[act_dtype, filter_elems], TILE_ALIGN]

    @cute.struct
    class OutputTiles:
        out: Align[MemRange[out_dtype, out_elems], TILE_ALIGN]

    @cute.struct
    class SourceTiles:
        src: Align[MemRange[out_dtype, src_elems], TILE_ALIGN]

    @cute.struct
    class Pipelines:
        # Each ring: full[stages] then empty[stages], as the DSL pipelines lay them out.
        input: MemRange[Int64, 2 * ab_stages]
        accumulator: MemRange[Int64, 2 * acc_stages]
        clc: MemRange[Int64, 2 * clc_stages]
        clc_throttle: MemRange[Int64, 2 * clc_stages]
        clc_response: Align[MemRange[Int32, CLC_RESPONSE_BYTES // 4 * clc_stages], 16]
        tmem_dealloc: Int64
        tmem_address: Int32

    @cute.struct
    class EpiLoadPipeline:
        barriers: MemRange[Int64, 2 * src_stages]

    @cute.struct
    class Conv2dSmemStorage:
        input_tiles: Align[InputTiles, TILE_ALIGN]
        output_tiles: Align[OutputTiles, TILE_ALIGN]
        source_tiles: Align[SourceTiles, TILE_ALIGN]
        pipelines: Pipelines
        epi_load_pipeline: EpiLoadPipeline
        load_order_barrier: Int64

    return Conv2dSmemStorage


class Conv2dSmem:
    """The allocated shared storage of one CTA, with typed views of its parts.

    Built inside the kernel by ``Conv2dSmem.allocate``; the layouts are the staged SMEM layouts
    the kernel's TMA atoms and MMA were made with.
    """

    def __init__(
        self,
        storage,
        act_layout: cute.ComposedLayout,
        filter_layout: cute.ComposedLayout,
        out_layout: cute.ComposedLayout,
        src_layout: cute.ComposedLayout,
        clc_stages: int,
    ):
        self.storage = storage
        self._act_layout = act_layout
        self._filter_layout = filter_layout
        self._out_layout = out_layout
        self._src_layout = src_layout
        self._clc_stages = clc_stages

    # A Conv2dSmem is fully described by the struct's base pointer (the layouts are static),
    # so it can be carried through the kernel's runtime control flow.
    def __extract_mlir_values__(self) -> list:
        return self.storage.__extract_mlir_values__()

    def __new_from_mlir_values__(self, values: list) -> "Conv2dSmem":
        return Conv2dSmem(
            self.storage.__new_from_mlir_values__(values),
            self._act_layout,
            self._filter_layout,
            self._out_layout,
            self._src_layout,
            self._clc_stages,
        )

    @staticmethod
    def allocate(
        struct_type,
        act_layout: cute.ComposedLayout,
        filter_layout: cute.ComposedLayout,
        out_layout: cute.ComposedLayout,
        src_layout: cute.ComposedLayout,
        clc_stages: int,
    ) -> "Conv2dSmem":
        storage = cutlass.memory.SmemAllocator().allocate(struct_type)
        return Conv2dSmem(storage, act_layout, filter_layout, out_layout, src_layout, clc_stages)

    # ---- tiles -------------------------------------------------------------------------------

    def act_tiles(self) -> cute.Tensor:
        """A ring in the MMA's form: ``(MMA, MMA_M, MMA_K, STAGE)``."""
        return self._tiles(self.storage.input_tiles.act, self._act_layout)

    def filter_tiles(self) -> cute.Tensor:
        """B ring in the MMA's form: ``(MMA, MMA_N, MMA_K, STAGE)``."""
        return self._tiles(self.storage.input_tiles.filter, self._filter_layout)

    def out_tiles(self) -> cute.Tensor:
        """Output subtiles: ``(OutputM, OutputN, STAGE)``."""
        return self._tiles(self.storage.output_tiles.out, self._out_layout)

    def src_tiles(self) -> cute.Tensor:
        """Residual source subtiles: ``(OutputM, OutputN, STAGE)`` (residual kernels only)."""
        return self._tiles(self.storage.source_tiles.src, self._src_layout)

    @staticmethod
    def _tiles(mem_range, layout: cute.ComposedLayout) -> cute.Tensor:
        return mem_range.get_tensor(layout.outer, swizzle=layout.inner)

    # ---- barriers ----------------------------------------------------------------------------

    def input_barriers(self) -> cute.Pointer:
        return self.storage.pipelines.input.data_ptr()

    def accumulator_barriers(self) -> cute.Pointer:
        return self.storage.pipelines.accumulator.data_ptr()

    def clc_barriers(self) -> cute.Pointer:
        return self.storage.pipelines.clc.data_ptr()

    def clc_throttle_barriers(self) -> cute.Pointer:
        return self.storage.pipelines.clc_throttle.data_ptr()

    def clc_responses(self) -> cute.Pointer:
        """``clc_stages`` 16-byte responses, 4 Int32 apart."""
        return self.storage.pipelines.clc_response.data_ptr()

    def tmem_dealloc_barrier(self) -> cute.Pointer:
        return self.storage.pipelines.tmem_dealloc.ptr

    def tmem_address(self) -> cute.Pointer:
        """Where ``tcgen05.alloc`` writes the TMEM base address."""
        return self.storage.pipelines.tmem_address.ptr

    def epi_load_barriers(self) -> cute.Pointer:
        return self.storage.epi_load_pipeline.barriers.data_ptr()

    def get_load_order_barrier(self) -> cute.Pointer:
        return self.storage.load_order_barrier.ptr
