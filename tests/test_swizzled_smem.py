"""``kernels.common.swizzled_smem.affine_groups``: which values of a swizzled SMEM partition
one swizzled base may address (pure Python, no GPU)."""

from __future__ import annotations

from cute_conv.kernels.common.swizzled_smem import affine_groups

SWIZZLE_64B = (2, 4, 3)  # S<2,4,3>: address bits 4-5 ^= bits 7-8


def _swizzled(address: int) -> int:
    return address ^ ((address >> 3) & 0x30)


def test_an_fp8_subtile_falls_in_four_groups_whose_offsets_survive_the_swizzle():
    # A thread's byte pairs in a 64-byte-wide fp8 subtile: columns 8j + (0, 1) of rows r,
    # r + 8, r + 128 and r + 136 (the WGMMA fragment), from bases 2t + 64r.
    offsets = [row * 64 + 8 * j for row in (0, 8, 128, 136) for j in range(8)]
    bases = [2 * t + 64 * r for t in range(4) for r in range(16)]
    groups = affine_groups(offsets, SWIZZLE_64B, bases)
    assert groups is not None and len(groups) == 4
    assert sorted(v for g in groups for v in g) == list(range(len(offsets)))
    for base in bases:
        for members in groups:
            first = offsets[members[0]]
            for v in members:
                shift = _swizzled(base + offsets[v]) - _swizzled(base + first)
                assert shift == offsets[v] - first


def test_a_base_that_carries_into_the_swizzled_bits_is_refused():
    # Offsets 0 and 8 agree on bits 4-8, but from base 12 the second crosses into bit 4.
    assert affine_groups([0, 8], SWIZZLE_64B, [0, 4]) == [[0, 1]]
    assert affine_groups([0, 8], SWIZZLE_64B, [0, 12]) is None
