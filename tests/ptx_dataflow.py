"""A small backward data-flow walk over PTX, for asserting what feeds an instruction.

PTX registers are virtual and mostly assigned once, so ``dest -> (opcode, sources)`` read off the
instruction lines is enough to ask, e.g., whether the residual's ``cvt.f32.bf16`` feeds the
activation's ``ex2`` (residual before the activation) or not (after it).
"""

from __future__ import annotations

import re

_INSTRUCTION = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)\s+([^;]*);", re.M)
_REGISTER = re.compile(r"%[a-z]+\d+")


def definitions(ptx: str) -> dict[str, tuple[str, list[str]]]:
    """``register -> (opcode, source registers)`` of every instruction writing registers."""
    defs = {}
    for opcode, operands in _INSTRUCTION.findall(ptx):
        operands = operands.strip()
        if operands.startswith("{"):  # a vector destination: mov.b64 {%r1, %r2}, %rd3
            dest, _, rest = operands[1:].partition("}")
            dests = _REGISTER.findall(dest)
        elif operands.startswith("%"):
            dests, rest = _REGISTER.findall(operands)[:1], operands.partition(",")[2]
        else:
            continue
        for reg in dests:
            defs[reg] = (opcode, _REGISTER.findall(rest))
    return defs


def instructions(ptx: str, opcode_prefix: str) -> list[list[str]]:
    """The register operands of every instruction whose opcode starts with ``opcode_prefix``."""
    return [
        _REGISTER.findall(operands)
        for opcode, operands in _INSTRUCTION.findall(ptx)
        if opcode.startswith(opcode_prefix)
    ]


def feeds(defs: dict, register: str, opcode_prefix: str, depth: int) -> bool:
    """Whether an instruction of ``opcode_prefix`` is among ``register``'s sources, up to
    ``depth`` instructions back."""
    frontier, seen = [register], set()
    for _ in range(depth):
        next_frontier = []
        for reg in frontier:
            if reg in seen or reg not in defs:
                continue
            seen.add(reg)
            opcode, sources = defs[reg]
            if opcode.startswith(opcode_prefix):
                return True
            next_frontier.extend(sources)
        frontier = next_frontier
    return False


def divisions_before_im2col_loads(ptx: str) -> list[int]:
    """For each im2col TMA load, the integer divisions and remainders (``div.``/``rem.``) that
    run between it and the barrier wait before it: the load loop's per-k-tile work. A tile's
    pixel origin decomposed there costs two runtime divisions per k-tile."""
    lines = ptx.splitlines()
    counts = []
    for i, line in enumerate(lines):
        if "cp.async.bulk.tensor" in line and "im2col" in line:
            wait = next(j for j in range(i, -1, -1) if "mbarrier.try_wait" in lines[j])
            counts.append(sum(bool(re.search(r"\b(div|rem)\.", x)) for x in lines[wait:i]))
    return counts
