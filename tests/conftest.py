"""Test-session setup.

* The package's caches (compiled kernels, ``autotune.json``) go to a directory of this session,
  removed at its end: tests never write a user's ``~/.cache/cute_conv``, nor run a config tuned
  there. Both caches read ``CUTE_CONV_CACHE_DIR`` when they are used, so setting it here, before
  any test module is imported, covers every test. ``CUTE_CONV_TEST_CACHE_DIR`` names a
  directory to keep instead (to reuse compiled kernels across sessions on a GPU machine).
* Tests marked ``gpu`` skip with a reason unless a CC 9.0 GPU is present.
* ``benchmarks/`` and ``benchmarks/experiments/`` are on ``sys.path``: the tests of the
  benchmark scripts' CPU parts (sweeps, the corpus, the chain and model benchmarks, the
  experiments' probes) import their modules.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.gpu import HAS_SM90, SM90_SKIP_REASON

_BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path[:0] = [str(_BENCHMARKS), str(_BENCHMARKS / "experiments")]

_kept_cache_dir = os.environ.get("CUTE_CONV_TEST_CACHE_DIR")
_session_cache_dir = _kept_cache_dir or tempfile.mkdtemp(prefix="cute_conv_test_cache_")
os.environ["CUTE_CONV_CACHE_DIR"] = _session_cache_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _kept_cache_dir:
        shutil.rmtree(_session_cache_dir, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_SM90:
        return
    skip = pytest.mark.skip(reason=SM90_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
