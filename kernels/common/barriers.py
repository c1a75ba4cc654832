"""Named hardware barriers shared by the conv kernels.

Barrier 0 is what ``__syncthreads`` uses, so the enum starts at 1.
"""

import enum


class NamedBarrierConv(enum.IntEnum):
    # The threads that share an epilogue meet here around each epilogue subtile: all of them
    # have written their part of the SMEM staging buffer before one warp issues the TMA store,
    # and nobody overwrites a buffer the store may still read. Cooperative schedule: both
    # consumer warpgroups; ping-pong schedule: consumer 0 (warps 4-7) alone.
    Epilogue = enum.auto()
    # The load warp arrives once the first tile's A/B loads are issued; the source-load warp(s)
    # wait here before their first C load, so C does not compete with the mainloop's fill.
    EpilogueLoad = enum.auto()
    # Ping-pong schedule only: consumer 1's (warps 8-11) own epilogue barrier (its epilogue runs
    # independently of consumer 0's, on its own staging buffers).
    EpilogueConsumer1 = enum.auto()
