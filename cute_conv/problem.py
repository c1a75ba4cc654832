"""The geometry of one Conv2D forward problem, and the normalizers for its arguments.

Layouts follow the rest of the package: activations are NHWC ``[N, H, W, C]``, filters are
KRSC ``[K, R, S, C]`` and the output is NPQK ``[N, P, Q, K]``. The problem maps onto an implicit
GEMM with ``M = N*P*Q`` (output pixels), ``N = K`` (output channels) and ``K = C*R*S``.

This module is pure Python (no torch import) so that it can describe problems anywhere: in a
compile-cache key, in a benchmark suite, or in a CPU-only test.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Conv2dProblemShape",
    "Padding",
    "Pair",
    "normalize_padding",
    "normalize_pair",
    "output_hw",
    "output_size",
]

Pair = tuple[int, int]
"""``(h, w)``: one value per spatial dimension."""

Padding = tuple[tuple[int, int], tuple[int, int]]
"""``((top, bottom), (left, right))``: zero padding before and after each spatial dimension."""


def output_size(size: int, taps: int, pad: tuple[int, int], stride: int, dilation: int) -> int:
    """Output pixels along one dimension. Not positive when the filter does not fit the padded
    input."""
    return (size + pad[0] + pad[1] - (taps - 1) * dilation - 1) // stride + 1


def output_hw(hw: Pair, kernel_size: Pair, stride: Pair, padding: Padding, dilation: Pair) -> Pair:
    """The output's ``(P, Q)`` for a conv of this geometry on an ``hw`` map (``output_size``
    along each dimension)."""
    dims = zip(hw, kernel_size, padding, stride, dilation, strict=True)
    p, q = (output_size(size, taps, pad, step, dil) for size, taps, pad, step, dil in dims)
    return p, q


def _is_int(value: Any) -> bool:
    """True for ints and int-like scalars (``__index__``), False for bools and floats."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _check_int(name: str, value: Any) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return int(value)


def normalize_pair(name: str, value: int | Sequence[int]) -> Pair:
    """Return ``(h, w)`` from an int (used for both) or a length-2 sequence of ints.

    Raises ``TypeError`` for bools, floats and other non-ints, ``ValueError`` for a sequence that
    does not hold exactly two values. Ranges are not checked here: the caller knows the limit.
    """
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be an int or a pair (h, w) of ints, got {value!r}")
    if isinstance(value, Sequence):
        if len(value) != 2:
            raise ValueError(
                f"{name} must be an int or a pair (h, w) of ints, got {value!r} "
                f"with {len(value)} values (expected 2)"
            )
        return (_check_int(f"{name}[0]", value[0]), _check_int(f"{name}[1]", value[1]))
    if not _is_int(value):
        kind = type(value).__name__
        raise TypeError(f"{name} must be an int or a pair (h, w) of ints, got {value!r} ({kind})")
    return (int(value), int(value))


def normalize_padding(value: int | Sequence[int] | Sequence[Sequence[int]]) -> Padding:
    """Return ``((top, bottom), (left, right))`` from one of three forms.

    - ``p``: the same padding on all four sides;
    - ``(ph, pw)``: symmetric padding per dimension, ``((ph, ph), (pw, pw))``;
    - ``((top, bottom), (left, right))``: asymmetric padding, as ``F.pad`` would apply it.

    Negative padding raises ``ValueError`` (crop the input instead).
    """
    if (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes))
        and len(value) == 2
        and all(isinstance(v, Sequence) and not isinstance(v, (str, bytes)) for v in value)
    ):
        top, bottom = normalize_pair("padding[0]", value[0])
        left, right = normalize_pair("padding[1]", value[1])
    else:
        top, left = normalize_pair("padding", value)  # type: ignore[arg-type]
        bottom, right = top, left
    sides = {"top": top, "bottom": bottom, "left": left, "right": right}
    for side, amount in sides.items():
        if amount < 0:
            raise ValueError(
                f"padding must be >= 0 on every side, got {side}={amount} in padding={value!r}"
            )
    return ((top, bottom), (left, right))


@dataclass(frozen=True)
class Conv2dProblemShape:
    """One Conv2D forward problem: NHWC activation, KRSC filter, NPQK output.

    ``padding``, ``stride`` and ``dilation`` may be given in any form the normalizers accept;
    they are stored normalized (``padding`` as ``((top, bottom), (left, right))``). The
    constructor checks only what makes the shape meaningless (non-int or negative sizes, zero
    stride or dilation); the hardware limits of the kernels live in ``cute_conv.validation``.
    """

    N: int
    H: int
    W: int
    C: int
    K: int
    R: int
    S: int
    padding: Padding = ((0, 0), (0, 0))
    stride: Pair = (1, 1)
    dilation: Pair = (1, 1)

    def __post_init__(self) -> None:
        for name in ("N", "H", "W", "C", "K", "R", "S"):
            size = _check_int(name, getattr(self, name))
            lowest = 0 if name == "N" else 1
            if size < lowest:
                raise ValueError(f"{name} must be >= {lowest}, got {size}")
            object.__setattr__(self, name, size)
        object.__setattr__(self, "padding", normalize_padding(self.padding))
        for name in ("stride", "dilation"):
            pair = normalize_pair(name, getattr(self, name))
            if min(pair) < 1:
                raise ValueError(f"{name} must be >= 1 in each dimension, got {pair}")
            object.__setattr__(self, name, pair)

    @classmethod
    def from_shapes(
        cls,
        activation_shape: Sequence[int],
        filter_shape: Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
        dilation: int | Sequence[int] = 1,
    ) -> Conv2dProblemShape:
        """Build the problem from an NHWC activation shape and a KRSC filter shape."""
        if len(activation_shape) != 4:
            raise ValueError(
                f"activation_shape must be [N, H, W, C] (4 values), got {tuple(activation_shape)}"
            )
        if len(filter_shape) != 4:
            raise ValueError(
                f"filter_shape must be [K, R, S, C] (4 values), got {tuple(filter_shape)}"
            )
        n, h, w, c = activation_shape
        k, r, s, c_filter = filter_shape
        if c != c_filter:
            raise ValueError(
                f"activation_shape has C={c} channels but filter_shape has C={c_filter}; "
                "they must be equal"
            )
        return cls(
            N=n,
            H=h,
            W=w,
            C=c,
            K=k,
            R=r,
            S=s,
            padding=normalize_padding(padding),
            stride=normalize_pair("stride", stride),
            dilation=normalize_pair("dilation", dilation),
        )

    @property
    def P(self) -> int:
        """Output height. Not positive when the filter does not fit the padded input."""
        return output_size(self.H, self.R, self.padding[0], self.stride[0], self.dilation[0])

    @property
    def Q(self) -> int:
        """Output width. Not positive when the filter does not fit the padded input."""
        return output_size(self.W, self.S, self.padding[1], self.stride[1], self.dilation[1])

    @property
    def gemm_m(self) -> int:
        """Implicit-GEMM M: output pixels, ``N*P*Q``."""
        return self.N * self.P * self.Q

    @property
    def gemm_n(self) -> int:
        """Implicit-GEMM N: output channels, ``K``."""
        return self.K

    @property
    def gemm_k(self) -> int:
        """Implicit-GEMM K: reduction length, ``C*R*S``."""
        return self.C * self.R * self.S

    @property
    def flops(self) -> int:
        """Multiply-adds counted as two operations: ``2 * gemm_m * gemm_n * gemm_k``."""
        return 2 * self.gemm_m * self.gemm_n * self.gemm_k

    @property
    def activation_shape(self) -> tuple[int, int, int, int]:
        """``(N, H, W, C)``."""
        return (self.N, self.H, self.W, self.C)

    @property
    def filter_shape(self) -> tuple[int, int, int, int]:
        """``(K, R, S, C)``."""
        return (self.K, self.R, self.S, self.C)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        """``(N, P, Q, K)``."""
        return (self.N, self.P, self.Q, self.K)
