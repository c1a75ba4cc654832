"""``Sm90Smem``: the one shared-storage struct of the SM90 conv kernel.

Fields, in order (tile arrays 1024-byte aligned for the 128-byte swizzle):

  ab_barriers      mbarriers of the A/B ring (full + empty per stage)
  work_barriers    the dynamic-scheduling work queue's mbarriers, and
  work_items       its slots (one unused slot without dynamic scheduling)
  halo_barriers    mbarriers of the halo ring (one unused pair without halo tiles)
  act_tiles        A: im2col tiles per ring stage, or halos (+ slack rows) per halo stage
  filter_tiles     B per ring stage
  out_tiles        output staging buffers (ping-pong: each consumer's own)
  source_barriers  mbarriers of the residual C ring (one unused pair without a residual)
  source_tiles     residual C subtiles (8 unused elements without a residual)
  turn_barriers    ping-pong's mainloop and epilogue turns

The unused slots keep the struct's shape fixed across configs; each fits in alignment padding.
"""

# No `from __future__ import annotations`: cute.struct reads the field annotations as types.
from typing import Type

import cutlass
import cutlass.cute as cute
import cutlass.memory

__all__ = ["Sm90Smem", "sm90_smem_struct"]

TILE_ALIGN = 1024  # a 128-byte swizzle pattern repeats every 1024 bytes


def sm90_smem_struct(
    *,
    act_dtype: Type[cutlass.Numeric],
    filter_dtype: Type[cutlass.Numeric],
    out_dtype: Type[cutlass.Numeric],
    act_elems: int,
    filter_elems: int,
    out_elems: int,
    source_elems: int,
    ab_stages: int,
    queue_stages: int,
    halo_stages: int,
    source_stages: int,
    turn_barriers: int,
):
    """The ``cute.struct`` type of the kernel's shared storage, from element counts."""
    Int64, Int32 = cutlass.Int64, cutlass.Int32
    MemRange, Align = cute.struct.MemRange, cute.struct.Align

    @cute.struct
    class SharedStorage:
        ab_mbar: MemRange[Int64, ab_stages * 2]
        work_mbar: MemRange[Int64, queue_stages * 2]
        work_items: MemRange[Int32, queue_stages]
        halo_mbar: MemRange[Int64, max(halo_stages, 1) * 2]
        sA: Align[MemRange[act_dtype, act_elems], TILE_ALIGN]
        sB: Align[MemRange[filter_dtype, filter_elems], TILE_ALIGN]
        sD: Align[MemRange[out_dtype, out_elems], TILE_ALIGN]
        source_mbar: MemRange[Int64, max(source_stages, 1) * 2]
        sC: Align[MemRange[out_dtype, source_elems if source_stages else 8], TILE_ALIGN]
        turn_mbar: MemRange[Int64, turn_barriers]

    return SharedStorage


class Sm90Smem:
    """The allocated shared storage, with typed views of its fields."""

    def __init__(
        self,
        storage,
        a_layout: cute.ComposedLayout,
        b_layout: cute.ComposedLayout,
        out_layout: cute.ComposedLayout,
        source_layout: cute.ComposedLayout,
    ):
        self.storage = storage
        self.layouts = (a_layout, b_layout, out_layout, source_layout)

    @staticmethod
    def allocate(struct, *layouts: cute.ComposedLayout) -> "Sm90Smem":
        """Allocate ``struct`` (``sm90_smem_struct``) with the staged SMEM layouts of A, B,
        the output staging buffers and the source buffers."""
        return Sm90Smem(cutlass.memory.SmemAllocator().allocate(struct), *layouts)

    @staticmethod
    def _tiles(mem_range, layout: cute.ComposedLayout) -> cute.Tensor:
        return mem_range.get_tensor(layout.outer, swizzle=layout.inner)

    def act_tiles(self) -> cute.Tensor:
        return self._tiles(self.storage.sA, self.layouts[0])

    def filter_tiles(self) -> cute.Tensor:
        return self._tiles(self.storage.sB, self.layouts[1])

    def out_tiles(self) -> cute.Tensor:
        return self._tiles(self.storage.sD, self.layouts[2])

    def source_tiles(self) -> cute.Tensor:
        return self._tiles(self.storage.sC, self.layouts[3])

    def ab_barriers(self) -> cute.Pointer:
        return self.storage.ab_mbar.data_ptr()

    def halo_barriers(self) -> cute.Pointer:
        return self.storage.halo_mbar.data_ptr()

    def source_barriers(self) -> cute.Pointer:
        return self.storage.source_mbar.data_ptr()

    def work_barriers(self) -> cute.Pointer:
        return self.storage.work_mbar.data_ptr()

    def work_items(self, stages: int) -> cute.Tensor:
        return self.storage.work_items.get_tensor(cute.make_layout(stages))

    def turn_barriers(self) -> cute.Pointer:
        return self.storage.turn_mbar.data_ptr()
