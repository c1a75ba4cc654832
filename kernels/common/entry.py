"""The host entry every conv kernel shares: one signature of raw pointers and runtime scalars.

The host launcher (``cute_conv.compile``) passes the same arguments to every architecture's
kernel, so the signature lives here once; each kernel class implements ``launch``, which
takes the pointers as one ``ConvPointers`` and the geometry as one ``ConvGeometry``.
"""

from typing import NamedTuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from .im2col import ConvGeometry


class ConvPointers(NamedTuple):
    """The device pointers of one launch, in the entry's order. ``source``, ``bias`` and
    ``scale`` are read only by the epilogue terms that use them, ``partials`` (float32) only
    by a stream-K kernel and ``flags`` (int32) by a stream-K or dynamically scheduled one:
    otherwise they may be null."""

    act: cute.Pointer
    filter: cute.Pointer
    out: cute.Pointer
    source: cute.Pointer
    bias: cute.Pointer
    scale: cute.Pointer
    partials: cute.Pointer
    flags: cute.Pointer


class ConvKernelEntry:
    """Base of the kernel classes: ``__call__`` is the compiled entry point."""

    @cute.jit
    def __call__(
        self,
        act_ptr: cute.Pointer,
        filter_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        source_ptr: cute.Pointer,
        bias_ptr: cute.Pointer,
        scale_ptr: cute.Pointer,
        partials_ptr: cute.Pointer,
        flags_ptr: cute.Pointer,
        n: cutlass.Int32,
        h: cutlass.Int32,
        w: cutlass.Int32,
        c: cutlass.Int32,
        k: cutlass.Int32,
        r: cutlass.Int32,
        s: cutlass.Int32,
        p: cutlass.Int32,
        q: cutlass.Int32,
        pad_top: cutlass.Int32,
        pad_bottom: cutlass.Int32,
        pad_left: cutlass.Int32,
        pad_right: cutlass.Int32,
        stride_h: cutlass.Int32,
        stride_w: cutlass.Int32,
        dil_h: cutlass.Int32,
        dil_w: cutlass.Int32,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        max_clusters: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        """Launch on raw device pointers of contiguous NHWC / KRSC / NPQK tensors (source: the
        output's shape and dtype; bias, scale: vectors of length K in the epilogue spec's
        ``vector_dtype``; partials, flags: the stream-K / dynamic-scheduling workspace, float32
        and int32). Pointers of terms the kernel's epilogue spec leaves out, and a workspace
        the kernel does not use, are never dereferenced: pass 0."""
        geom = ConvGeometry(
            n, h, w, c, k, r, s, p, q,
            pad_top, pad_bottom, pad_left, pad_right, stride_h, stride_w, dil_h, dil_w,
        )  # fmt: skip
        pointers = ConvPointers(
            act_ptr, filter_ptr, out_ptr, source_ptr, bias_ptr, scale_ptr, partials_ptr, flags_ptr
        )
        self.launch(pointers, geom, alpha, beta, max_clusters, stream)
