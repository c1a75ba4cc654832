"""The persistent tier of the compile cache: compiled kernels as object files on disk.

A kernel compiled once is exported (``export_to_c``) with its PTX, cubin and SMEM size, so a
later process loads it in milliseconds instead of compiling for seconds. Entries live in
``$CUTE_CONV_CACHE_DIR`` (default ``~/.cache/cute_conv``) under a directory named by a hash of
the package's sources and the versions of the DSL, TVM-FFI and Python, so a changed kernel
never loads a stale binary. ``CUTE_CONV_DISK_CACHE=0`` turns the tier off.

Kernels with a user ``epilogue_fn`` are not stored: a Python function has no stable identity
across processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

_PACKAGE_ROOT = Path(__file__).resolve().parent
_SYMBOL = "cute_conv_kernel"


def enabled() -> bool:
    return os.environ.get("CUTE_CONV_DISK_CACHE", "1") != "0"


def cache_root() -> Path:
    return Path(os.environ.get("CUTE_CONV_CACHE_DIR", Path.home() / ".cache" / "cute_conv"))


@functools.lru_cache(maxsize=1)
def _build_fingerprint() -> str:
    """Hash of everything that shapes a compiled kernel besides its key."""
    import cutlass
    import tvm_ffi

    from . import kernels

    digest = hashlib.sha256()
    kernels_dir = Path(kernels.__file__).resolve().parent  # kernels/ is mapped, not nested
    sources = sorted(kernels_dir.rglob("*.py")) + [_PACKAGE_ROOT / "compile.py"]
    for path in sources:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    versions = (cutlass.__version__, tvm_ffi.__version__, platform.python_version())
    digest.update(repr(versions).encode())
    return digest.hexdigest()[:16]


def _entry_dir(key: Any) -> Path:
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
    return cache_root() / _build_fingerprint() / name


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One process at a time compiles and writes a given entry."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _load(directory: Path) -> tuple[Callable, dict] | None:
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        return None
    from cutlass.cute.runtime import load_module

    meta = json.loads(meta_path.read_text())
    module = load_module(str(directory / "kernel.o"), enable_tvm_ffi=True)
    meta["ptx"] = (directory / "kernel.ptx").read_text()
    meta["cubin"] = (directory / "kernel.cubin").read_bytes()
    return getattr(module, _SYMBOL), meta


def _store(directory: Path, fn: Any, ptx: str, cubin: bytes, smem_bytes: int) -> None:
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        staging = Path(tmp)
        fn.export_to_c(str(staging / "kernel.o"), function_name=_SYMBOL)
        (staging / "kernel.ptx").write_text(ptx)
        (staging / "kernel.cubin").write_bytes(cubin)
        # meta.json is renamed into place last: its presence marks a complete entry.
        (staging / "meta.json").write_text(json.dumps({"smem_bytes": smem_bytes}))
        for name in ("kernel.o", "kernel.ptx", "kernel.cubin", "meta.json"):
            os.replace(staging / name, directory / name)


def load_or_compile(
    key: Any, compile_fn: Callable[[], tuple[Any, str, bytes, int]]
) -> tuple[Any, str, bytes, int]:
    """``(fn, ptx, cubin, smem_bytes)`` from disk, or from ``compile_fn`` and then stored.

    ``key`` must have a ``repr`` that identifies the kernel across processes.
    """
    directory = _entry_dir(key)
    with locked(directory):
        loaded = _load(directory)
        if loaded is not None:
            fn, meta = loaded
            return fn, meta["ptx"], meta["cubin"], meta["smem_bytes"]
        fn, ptx, cubin, smem_bytes = compile_fn()
        _store(directory, fn, ptx, cubin, smem_bytes)
        return fn, ptx, cubin, smem_bytes
