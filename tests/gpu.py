"""Skip helpers for tests that need a GPU.

Import from test modules as::

    from tests.gpu import requires_sm90

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
