"""A thread's values in swizzled SMEM, addressed from a few swizzled bases: ``GroupedSmem``.

A pointer's swizzle ``S<B,M,S>`` XORs address bits ``[M, M+B)`` with bits ``[M+S, M+S+B)`` at
every access. Through such a pointer each value of a partition gets an address of its own, and
ptxas hoists those out of the kernel's persistent loop: a register per value, held across the
mainloop (an fp8 epilogue subtile's 64 2-byte accesses, in the output staging and the residual
source, spilled the 256-row fp8 residual kernels).

Two addresses that agree on bits ``[M, M+S+B)`` are swizzled alike, so they differ by as much
after the swizzle as before it. The values whose addresses so agree, for every thread, form a
group: one swizzled address per group, each value at a constant offset from it (an immediate
in its load or store). An fp8 subtile's 64 values fall in 4 groups.
"""

from __future__ import annotations

from typing import Iterable, List, NamedTuple, Optional

import cutlass
import cutlass.cute as cute


class GroupedSmem(NamedTuple):
    """A thread's partition of swizzled SMEM buffers, ``(..., buffer)``, whose values
    ``affine_groups`` groups for every thread: copied by ``copy_grouped``."""

    buffers: cute.Tensor


def _agreeing_bits(num_bits: int, num_base: int, num_shift: int) -> int:
    """The address bits a swizzle reads or changes, ``[M, M+S+B)``, as a mask."""
    return ((1 << (num_base + num_shift + num_bits)) - 1) & ~((1 << num_base) - 1)


def _groups(offsets: List[int], mask: int) -> List[List[int]]:
    groups: dict[int, List[int]] = {}
    for v, offset in enumerate(offsets):
        groups.setdefault(offset & mask, []).append(v)
    return list(groups.values())


def affine_groups(
    offsets: List[int], swizzle: tuple[int, int, int], bases: Iterable[int]
) -> Optional[List[List[int]]]:
    """Trace time: the values (indices into ``offsets``, their byte offsets from a thread's
    first value) grouped by the bits ``swizzle`` (``(B, M, S)``) reads or changes, or None
    where for some thread (``bases``: each thread's first byte address, modulo the
    swizzle's period) two values of a group would be swizzled differently."""
    mask = _agreeing_bits(*swizzle)
    groups = _groups(offsets, mask)
    for base in bases:
        for members in groups:
            first = (base + offsets[members[0]]) & mask
            if any((base + offsets[v]) & mask != first for v in members):
                return None
    return groups


@cute.jit
def copy_grouped(regs: cute.Tensor, smem: cute.Tensor, to_smem: cutlass.Constexpr[bool]):
    """Copy ``regs`` to (``to_smem``) or from one buffer of a ``GroupedSmem`` partition,
    ``smem`` (the same layout, its pointer swizzled): per group, the first value's address
    is swizzled once and the others are read or written at constant offsets from it."""
    swizzle = smem.iterator.type.swizzle_type
    num_bits, num_base, num_shift = swizzle.num_bits, swizzle.num_base, swizzle.num_shift
    elem_bytes = smem.element_type.width // 8
    offsets = [smem.layout(v) * elem_bytes for v in range(cute.size(smem))]
    groups = _groups(offsets, _agreeing_bits(num_bits, num_base, num_shift))
    changed = ((1 << num_bits) - 1) << num_base
    for g in cutlass.range_constexpr(len(groups)):
        members = groups[g]
        address = (smem.iterator + smem.layout(members[0])).toint()
        address = address ^ ((address >> num_shift) & changed)
        base = cute.make_ptr(
            smem.element_type, address, cute.AddressSpace.smem, assumed_align=elem_bytes
        )
        for i in cutlass.range_constexpr(len(members)):
            v = members[i]
            value = cute.make_tensor(
                base + (offsets[v] - offsets[members[0]]) // elem_bytes, cute.make_layout(1)
            )
            if cutlass.const_expr(to_smem):
                value[0] = regs[v]
            else:
                regs[v] = value[0]
