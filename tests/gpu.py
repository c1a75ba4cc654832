"""Skip helpers for tests that need a GPU.

Import from test modules as::

    from tests.gpu import requires_sm90  # or requires_sm100 (CC 10.0)

    @requires_sm90
    def test_runs_on_hopper(): ...

(`pythonpath = ["."]` in pyproject.toml makes `tests` importable.) Tests marked
``@pytest.mark.gpu`` are skipped by ``tests/conftest.py`` with the same reason.
"""

from __future__ import annotations

import pytest

SM90 = (9, 0)


def _sm90_skip_reason() -> str | None:
    """None when the current CUDA device is CC 9.0, else why a SM90 test can't run."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        return f"torch is not importable ({exc})"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU of compute capability 9.0 (H100/H200); torch.cuda is unavailable"
    cap = tuple(torch.cuda.get_device_capability())
    if cap != SM90:
        name = torch.cuda.get_device_name()
        return (
            f"needs a GPU of compute capability 9.0 (H100/H200); "
            f"device 0 is {name} with capability {cap[0]}.{cap[1]}"
        )
    return None


SM90_SKIP_REASON: str | None = _sm90_skip_reason()
HAS_SM90: bool = SM90_SKIP_REASON is None

requires_sm90 = pytest.mark.skipif(not HAS_SM90, reason=SM90_SKIP_REASON or "")


SM100 = (10, 0)


def _sm100_skip_reason() -> str | None:
    """None when the current CUDA device is CC 10.0 (B200), else why a SM100 test can't run."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        return f"torch is not importable ({exc})"
    if not torch.cuda.is_available():
        return (
            "needs a GPU of compute capability 10.0 (B200); torch.cuda is unavailable. The "
            "SM100 kernel is compile-verified only here (tests/test_compile_sm100.py)"
        )
    cap = tuple(torch.cuda.get_device_capability())
    if cap != SM100:
        name = torch.cuda.get_device_name()
        return (
            f"needs a GPU of compute capability 10.0 (B200); "
            f"device 0 is {name} with capability {cap[0]}.{cap[1]}"
        )
    return None


SM100_SKIP_REASON: str | None = _sm100_skip_reason()
HAS_SM100: bool = SM100_SKIP_REASON is None

# Runtime tests of the SM100 kernel: they run on a B200 (.github/workflows/b200.yml), and skip
# with this reason everywhere else. Not the ``gpu`` marker, which means "needs a CC 9.0 GPU".
requires_sm100 = pytest.mark.skipif(not HAS_SM100, reason=SM100_SKIP_REASON or "")
