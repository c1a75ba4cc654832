"""CPU checks of benchmarks/ab_versions.py's loader: another checkout imports beside this one."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _ab_versions():
    """benchmarks/ab_versions.py as a module (it imports its neighbour ``bench``)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import ab_versions
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return ab_versions


def test_another_checkout_imports_as_its_own_package():
    base = _ab_versions().import_base(ROOT)  # this checkout, as the "other" one
    assert base.__name__ == "cute_conv_base"
    assert Path(base.kernels.__file__).parent == ROOT / "kernels"
    assert base.Conv2dConfig is not __import__("cute_conv").Conv2dConfig
    # Its ops live in their own namespace, beside this package's.
    assert hasattr(torch.ops.cute_conv_base, "conv2d_fprop")
    assert hasattr(torch.ops.cute_conv, "conv2d_fprop")
