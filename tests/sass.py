"""SASS of a compiled kernel, through the cuobjdump that triton ships (skips without it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def cuda_tool(name: str) -> str:
    """The path of a CUDA binary utility (cuobjdump, ptxas): triton's, or one on PATH; skips
    the test without."""
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"no {name} (neither triton's nor on PATH)")
    return found


def sass_of(cubin: bytes) -> str:
    """``cuobjdump -sass`` of ``cubin``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [cuda_tool("cuobjdump"), "-sass", f.name], capture_output=True, text=True, check=True
        ).stdout


def sass_of_ptx(ptx: str, arch: str) -> str:
    """The SASS of ``ptx`` assembled by ptxas for ``arch`` (kernels kept as PTX only, such as
    the staging kernels)."""
    return sass_of(_assembled(ptx, arch)[0])


def ptxas_messages(ptx: str, arch: str) -> str:
    """What ptxas prints assembling ``ptx`` for ``arch`` (its infos and performance
    warnings, e.g. C7520: WGMMAs serialized)."""
    return _assembled(ptx, arch)[1]


def _assembled(ptx: str, arch: str) -> tuple[bytes, str]:
    """ptxas's cubin of ``ptx`` and its messages; skips where the ptxas is too old for the
    PTX's ISA version, fails where ptxas fails otherwise."""
    with tempfile.TemporaryDirectory() as tmp:
        source, cubin = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        source.write_text(ptx)
        ptxas = subprocess.run(
            [cuda_tool("ptxas"), f"-arch={arch}", str(source), "-o", str(cubin)],
            capture_output=True, text=True,
        )  # fmt: skip
        if ptxas.returncode != 0:
            # An older ptxas (a GPU machine's triton) refuses a newer PTX ISA: not a kernel fault.
            if "Unsupported .version" in ptxas.stderr:
                pytest.skip(f"ptxas predates the PTX's ISA version: {ptxas.stderr.strip()}")
            raise AssertionError(f"ptxas failed on the PTX: {ptxas.stderr.strip()}")
        return cubin.read_bytes(), ptxas.stderr


def loads_waiting_on_loads(sass: str) -> int:
    """Global loads that write a register an earlier global load wrote, with no shared-memory
    store or barrier between them: each must wait for the earlier load to land, so the two
    are not in flight together."""
    written: set[str] = set()
    waiting = 0
    for line in sass.splitlines():
        load = re.search(r"\bLDG\S*\s+(R\d+)", line)
        if load:
            waiting += load.group(1) in written
            written.add(load.group(1))
        elif re.search(r"\b(STS|BAR|SYNCS)\b", line):
            written.clear()
    return waiting
