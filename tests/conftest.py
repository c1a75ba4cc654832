"""Test-session setup: tests marked ``gpu`` skip with a reason unless a CC 9.0 GPU is present."""

from __future__ import annotations

import pytest

from tests.gpu import HAS_SM90, SM90_SKIP_REASON


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_SM90:
        return
    skip = pytest.mark.skip(reason=SM90_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
