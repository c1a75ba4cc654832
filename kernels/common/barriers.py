"""Named hardware barriers shared by the conv kernels.

Barrier 0 is what ``__syncthreads`` uses, so the enum starts at 1.
"""

import enum


class NamedBarrierConv(enum.IntEnum):
    # The consumer warpgroups meet here around each epilogue subtile: all of them have
    # written their part of the SMEM staging buffer before one warp issues the TMA store,
    # and nobody overwrites a buffer the store may still read.
    Epilogue = enum.auto()
    # The load warp arrives once the first tile's A/B loads are issued; the source-load warp
    # waits here before its first C load, so C does not compete with the mainloop's fill
    # (the first gather warp arrives before its first tile's gathers).
    EpilogueLoad = enum.auto()
    # Ping-pong: the second consumer warpgroup's own epilogue barrier (the first uses
    # ``Epilogue``), as each runs the epilogues of its own tiles.
    EpilogueConsumer1 = enum.auto()
