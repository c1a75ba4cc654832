"""Element types by name: what the kernels take, and the one spelling of a dtype argument."""

from __future__ import annotations

from typing import Any

import cutlass

from . import validation

__all__ = ["CUTLASS_DTYPES", "DTYPES_BY_BYTES", "FP8_INPUT_DTYPES", "INPUT_DTYPES", "dtype_name"]

CUTLASS_DTYPES: dict[str, type[cutlass.Numeric]] = {
    "bfloat16": cutlass.BFloat16,
    "float16": cutlass.Float16,
    "float32": cutlass.Float32,
    "float8_e4m3fn": cutlass.Float8E4M3FN,
    "float8_e5m2": cutlass.Float8E5M2,
}
# The element type the rules size SMEM plans with, by element size (an input's 1 or 2 bytes,
# an output's 1, 2 or 4): every type of one size takes the same buffers.
DTYPES_BY_BYTES: dict[int, type[cutlass.Numeric]] = {
    1: cutlass.Float8E4M3FN,
    2: cutlass.BFloat16,
    4: cutlass.Float32,
}


def dtype_name(dtype: Any, argument: str = "dtype", choices: tuple[str, ...] = ()) -> str:
    """``torch.bfloat16``, ``cutlass.BFloat16`` or ``"bfloat16"`` -> ``"bfloat16"``, one of
    ``choices`` (default: every dtype a kernel takes); errors name ``argument``."""
    choices = choices or tuple(CUTLASS_DTYPES)
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type) and issubclass(dtype, cutlass.Numeric):
        name = {v: k for k, v in CUTLASS_DTYPES.items()}.get(dtype, dtype.__name__)
    else:
        name = str(dtype).removeprefix("torch.")
    if name not in choices:
        raise TypeError(
            f"{argument}={name} is not supported; use one of {', '.join(choices)} "
            "(a torch dtype, a cutlass type or its name)"
        )
    return name


# The names of the input dtypes the kernels take, from the torch dtypes the validation accepts.
INPUT_DTYPES = tuple(dtype_name(d) for d in validation.INPUT_DTYPES)
FP8_INPUT_DTYPES = tuple(dtype_name(d) for d in validation.FP8_DTYPES)
