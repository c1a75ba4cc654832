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
SM100 = (10, 0)


def _skip_reason(capability: tuple[int, int], gpus: str, no_cuda_note: str = "") -> str | None:
    """None when the current CUDA device has ``capability``, else why a test for it can't run."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        return f"torch is not importable ({exc})"
    wanted = f"needs a GPU of compute capability {capability[0]}.{capability[1]} ({gpus})"
    if not torch.cuda.is_available():
        return f"{wanted}; torch.cuda is unavailable{no_cuda_note}"
    cap = tuple(torch.cuda.get_device_capability())
    if cap != capability:
        name = torch.cuda.get_device_name()
        return f"{wanted}; device 0 is {name} with capability {cap[0]}.{cap[1]}"
    return None


SM90_SKIP_REASON: str | None = _skip_reason(SM90, "H100/H200")
HAS_SM90: bool = SM90_SKIP_REASON is None

requires_sm90 = pytest.mark.skipif(not HAS_SM90, reason=SM90_SKIP_REASON or "")

SM100_SKIP_REASON: str | None = _skip_reason(
    SM100,
    "B200",
    ". The SM100 kernel is compile-verified only here (tests/test_compile_sm100.py)",
)
HAS_SM100: bool = SM100_SKIP_REASON is None

# Runtime tests of the SM100 kernel: they run on a B200 (.github/workflows/b200.yml), and skip
# with this reason everywhere else. Not the ``gpu`` marker, which means "needs a CC 9.0 GPU".
requires_sm100 = pytest.mark.skipif(not HAS_SM100, reason=SM100_SKIP_REASON or "")
