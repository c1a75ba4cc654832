"""Grouped and depthwise convs on CUDA cores, with the fused epilogue: a direct conv.

A grouped conv (``groups`` > 1: RegNet's and ResNeXt's 3x3s, MobileNet's, EfficientNet's and
ConvNeXt's depthwise convs) is ``groups`` small convs side by side: each output channel reads
only the ``C / groups`` input channels of its group. As an implicit GEMM its N (output
channels per group) and K (``R * S * C / groups``) are a few dozen, far below a tensor-core
tile; cuDNN runs them in NHWC through layout transforms of the activation and the output
(RegNetY-1.6GF at batch 1 on an H200: three transforms per grouped conv, 40% of the forward).

Each thread owns ``vector`` output channels (``VECTOR``, 8: 16 bytes; a depthwise conv of
channels not a multiple of 8 takes 4 or 2: ShuffleNetV2's 58 and 116; a grouped one whose
groups' output channels are not takes 4, 2 or 1: a dense conv into a VAE's 4 latent
channels) of ``pixels`` adjacent output pixels of a row
(adjacent threads adjacent channel vectors, so a warp's stores are coalesced). It walks the
filter taps and sums in float32, then runs the tensor-core kernels' epilogue
(``apply_epilogue``) on each pixel's vector and stores it with one vector store; a residual's
source vectors are loaded before the sums (their latency hidden behind the multiply-adds),
the bias and scale once for all the thread's pixels. A filter
vector loaded for a tap serves all the thread's pixels: with ``pixels`` > 1 the loads per
multiply-add fall (their count, not their bytes, bounds the kernel: the re-reads hit L1), at
the price of fewer threads. Two forms, chosen at compile time by the config:

- depthwise (one input and one output channel per group): the thread's output channels read
  their own input channels: per tap one filter vector, and per pixel one activation vector.
  With a ``window`` (the filter width, compiled in where stride and dilation along the row
  are 1), a filter row's taps are unrolled and the ``pixels + window - 1`` input columns they
  read are loaded and converted once each, all before the row's multiply-adds: the loads of
  a row overlap instead of each tap waiting on its own.
- grouped (``group_out`` a multiple of ``vector``): the thread's output channels share one
  group's inputs: per tap it loads each pixel's activations of the group ``in_vector``
  channels at a time, and for each input channel one filter vector (its ``vector`` output
  channels), and multiplies each pixel's input into all of them. A batch of input channels'
  loads all issue before their multiply-adds (``FILTER_BATCH``). With a ``channel_split`` of
  2, 4 or 8 that many adjacent threads share an output vector, each summing every
  ``channel_split``-th activation vector of the group; butterfly shuffles add their sums and
  the first runs the epilogue and stores: a wide group's chain of ``R * S * C / groups``
  multiply-adds is cut where too few threads leave the SMs idle.

With ``channel_norm_eps`` (a LayerNorm over the channels without its affine, which the caller
folds into the next layer: ConvNeXt's depthwise conv -> LayerNorm -> Linear), each output pixel
is normalized over its K channels before the store: ``(z - mean) * rsqrt(var + eps)``, ``z``
the epilogue's value. A pixel's channels are ``K / vector`` adjacent threads, so a CTA then
holds whole pixel groups: ``NORM_THREADS // vectors`` of them (its last threads idle where
that does not divide). Each sum is reduced by shuffles within a warp's part of a group, and
the parts meet in shared memory (one float32 atomic add per part); mean first, then the
squared deviations from it: two passes over registers, no cancellation.

The filter is staged ``[R, S, C / groups, K]`` (``stage_filter`` on the host: the KRSC filter
permuted) so that a tap's and input channel's weights of adjacent output channels are
contiguous. No shared memory but the norm's sums: neighbouring pixels' re-reads of an input
pixel and every thread's re-reads of the filter hit L1/L2. Launched with programmatic
dependent launch; it waits for the previous grid before its first load. The staged grouped
form asks ptxas for one CTA per SM (``.minnctapersm 1``): without it ptxas kept registers for
only a few of a tap's loads ahead of their multiply-adds (a batch-1 call's few threads waited
on each in turn), and held 32- and 64-wide groups to 64 registers, their sums spilled to local
memory.
"""

from dataclasses import dataclass
from math import gcd

import cutlass
import cutlass.cute as cute

from .dependent_launch import wait_for_previous_grid
from .entry import SIXTEEN_BIT_TYPES, WIDE_OUT_TYPES, ConvKernelEntry, ConvLaunchParams
from .epilogue import EpilogueSpec, apply_epilogue

THREADS = 128
VECTOR = 8  # 16-bit output channels per thread: one 16-byte filter load and store
# A depthwise thread's channels where C is not a multiple of VECTOR: 8- or 4-byte loads.
DEPTHWISE_VECTORS = (VECTOR, 4, 2)
# A grouped thread's output channels where the group's are not a multiple of VECTOR (the dense
# form's few output channels: a VAE's K=4, a detection head's K=3): 8-, 4- or 2-byte stores.
GROUPED_VECTORS = (VECTOR, 4, 2, 1)
MAX_GROUP_IN = 256  # input channels per group: the grouped form unrolls its loop over them
# Input channels whose filter vectors a grouped thread loads before multiplying: one round trip
# to L2 per batch, not per few loads. At most FILTER_BATCH (their VECTOR 16-bit weights each in
# registers), and at most BATCH_PIXELS / pixels: the sums of more pixels take the registers
# (on an H200 four pixels ran slower batched, as many threads as RegNet's at batch 32 lost
# occupancy); at least one activation vector.
FILTER_BATCH = 32
BATCH_PIXELS = 48
MAX_PIXELS = 8  # output pixels per thread: each holds `vector` float32 sums in registers
CHANNEL_SPLITS = (1, 2, 4, 8)  # threads per output vector: adjacent lanes of one warp
MAX_WINDOW = 7  # filter width of the depthwise row window: its columns sit in registers
# A normalizing kernel's CTA: whole pixel groups of K / vector threads, so a pixel has at most
# NORM_THREADS * vector channels (256 threads: the window form's registers still fit).
NORM_THREADS = 256
MAX_NORM_CHANNELS = NORM_THREADS * VECTOR  # at vector 8; NORM_THREADS * vector in general
WARP = 32


def output_vector(group_out: int) -> int:
    """The grouped form's output channels per thread: the widest of ``GROUPED_VECTORS`` (8, 4,
    2, 1) that divides ``group_out``."""
    return next(v for v in GROUPED_VECTORS if group_out % v == 0)


def runs_epilogue(spec: EpilogueSpec) -> bool:
    """Whether the kernel runs ``spec``: scale, bias, an activation and a residual, but no
    ``epilogue_fn``, amax or source scale."""
    return not (spec.epilogue_fn is not None or spec.has_amax or spec.has_source_scale)


@dataclass(frozen=True)
class GroupedDirectConfig:
    """The group shape ``GroupedDirectConv`` is compiled for (part of the kernel's cache key).

    Attributes:
        group_in: input channels per group, ``C / groups`` (1 .. ``MAX_GROUP_IN``).
        group_out: output channels per group, ``K / groups``: 1 with ``group_in == 1``
            (depthwise), else a multiple of ``vector``.
        pixels: adjacent output pixels of a row per thread (1 .. ``MAX_PIXELS``).
        window: depthwise only: the filter width ``S`` compiled into the row window form
            (1 .. ``MAX_WINDOW``; the conv's stride and dilation along the row must be 1),
            or 0: the taps walked at run time.
        channel_norm_eps: None, or each output pixel normalized over its channels with this
            epsilon (see the module docstring): a finite float >= 0.
        vector: output channels per thread: one of ``DEPTHWISE_VECTORS`` (depthwise: K a
            multiple of it), else ``output_vector(group_out)``: ``VECTOR`` where
            ``group_out`` is a multiple of it.
        filter_krsc: the filter read as the conv's KRSC tensor (``[K, R, S, C / groups]``,
            a thread's output channels ``R * S * C / groups`` apart: scalar loads) instead
            of staged ``[R, S, C / groups, K]`` (one vector load): for the calls of
            ``conv2d_fprop`` that ``direct_rule`` sends here, whose filter is not staged.
        channel_split: threads per output vector (one of ``CHANNEL_SPLITS``), each summing
            every ``channel_split``-th activation vector of the group: the grouped form
            only (not depthwise, no ``channel_norm_eps``), at most one part per activation
            vector of the group (``group_in / in_vector``).
    """

    group_in: int
    group_out: int
    pixels: int = 1
    window: int = 0
    channel_norm_eps: float | None = None
    vector: int = VECTOR
    filter_krsc: bool = False
    channel_split: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.filter_krsc, bool):
            raise ValueError(
                f"GroupedDirectConfig.filter_krsc must be a bool, got {self.filter_krsc!r}"
            )
        for name in ("group_in", "group_out", "pixels", "window"):
            value = getattr(self, name)
            least = 0 if name == "window" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                kind = "a non-negative" if least == 0 else "a positive"
                raise ValueError(f"GroupedDirectConfig.{name} must be {kind} int, got {value!r}")
        if self.group_in > MAX_GROUP_IN:
            raise ValueError(
                f"GroupedDirectConfig.group_in={self.group_in}: at most {MAX_GROUP_IN} input "
                "channels per group"
            )
        if self.pixels > MAX_PIXELS:
            raise ValueError(
                f"GroupedDirectConfig.pixels={self.pixels}: at most {MAX_PIXELS} output pixels "
                "per thread"
            )
        if self.window > MAX_WINDOW:
            raise ValueError(
                f"GroupedDirectConfig.window={self.window}: at most {MAX_WINDOW} filter columns"
            )
        eps = self.channel_norm_eps
        if eps is not None and (
            isinstance(eps, bool) or not isinstance(eps, float) or not 0.0 <= eps < float("inf")
        ):
            raise ValueError(
                f"GroupedDirectConfig.channel_norm_eps must be None or a finite float >= 0, "
                f"got {eps!r}"
            )
        if self.depthwise:
            if type(self.vector) is not int or self.vector not in DEPTHWISE_VECTORS:
                raise ValueError(
                    f"GroupedDirectConfig.vector={self.vector!r}: one of {DEPTHWISE_VECTORS} "
                    "(depthwise form)"
                )
        elif type(self.vector) is not int or self.vector != output_vector(self.group_out):
            raise ValueError(  # `type`: not True, not 1.0
                f"GroupedDirectConfig.vector={self.vector!r}: group_out={self.group_out} takes "
                f"vector={output_vector(self.group_out)}, the widest of {GROUPED_VECTORS} that "
                "divides it (grouped form)"
            )
        if self.window and not self.depthwise:
            raise ValueError(
                f"GroupedDirectConfig.window={self.window}: the row window is depthwise only "
                f"(group_in={self.group_in}, group_out={self.group_out})"
            )
        check_channel_split(
            "GroupedDirectConfig.channel_split", self.channel_split, self.group_in,
            self.in_vector, grouped=not self.depthwise and self.channel_norm_eps is None,
        )  # fmt: skip

    @property
    def depthwise(self) -> bool:
        return self.group_in == 1 and self.group_out == 1

    @property
    def in_vector(self) -> int:
        """Input channels per activation load of the grouped form (a divisor of group_in)."""
        return gcd(self.group_in, VECTOR)


def check_channel_split(
    name: str, split: object, group_in: int, in_vector: int, *, grouped: bool
) -> None:
    """A ``ValueError`` naming ``name`` unless ``split`` threads per output vector fit a conv
    of ``group_in`` input channels per group loaded ``in_vector`` at a time: one of
    ``CHANNEL_SPLITS``, more than 1 only on the ``grouped`` form (not depthwise, no channel
    norm), at most one part per activation vector of the group."""
    if isinstance(split, bool) or split not in CHANNEL_SPLITS:
        raise ValueError(f"{name} must be one of {CHANNEL_SPLITS}, got {split!r}")
    if split == 1:
        return
    if not grouped:
        raise ValueError(
            f"{name}={split}: the grouped form only (not depthwise, no channel_norm_eps)"
        )
    parts = group_in // in_vector
    if split > parts:
        raise ValueError(
            f"{name}={split}: at most {parts} at group_in={group_in} (one part per activation "
            f"vector of {in_vector} channels)"
        )


class GroupedDirectConv(ConvKernelEntry):
    """A grouped conv of 16-bit inputs, a thread per ``config.vector`` output channels of
    ``config.pixels`` adjacent output pixels of a row (see the module docstring). Takes
    ``ConvLaunchParams`` with the filter pointer at the staged ``[R, S, C / groups, K]``
    filter (the KRSC one with ``config.filter_krsc``); ``geometry.c`` and ``geometry.k`` are
    the whole conv's channels (K a multiple of ``config.vector``)."""

    config_class = GroupedDirectConfig

    def _configure(self) -> None:
        if self.act_dtype not in SIXTEEN_BIT_TYPES:
            raise TypeError(f"GroupedDirectConv takes 16-bit inputs, got {self.act_dtype}")
        if self.out_dtype not in WIDE_OUT_TYPES:
            raise TypeError(f"GroupedDirectConv writes 16- or 32-bit outputs, got {self.out_dtype}")
        spec = self.epilogue
        if not runs_epilogue(spec):
            raise ValueError(
                "GroupedDirectConv's epilogue takes scale, bias, an activation and a residual "
                "only (no amax, source scale or epilogue_fn)"
            )
        self.norm_eps = self.config.channel_norm_eps
        if self.norm_eps is not None and (spec.activation is not None or spec.has_residual):
            raise ValueError(
                "GroupedDirectConv normalizes the channels of alpha * conv * scale + bias only "
                "(no activation or residual with channel_norm_eps)"
            )
        self.group_in = self.config.group_in
        self.group_out = self.config.group_out
        self.depthwise = self.config.depthwise
        self.vector = self.config.vector
        self.in_vector = self.vector if self.depthwise else self.config.in_vector
        self.pixels = self.config.pixels
        self.window = self.config.window
        self.split = self.config.channel_split
        # A grouped thread's chain is long and its loads many: asked for one CTA per SM,
        # ptxas issues a tap's loads together (registers for all of them) instead of a few
        # ahead of their multiply-adds, and keeps 32- and 64-wide groups' sums out of local
        # memory. Measured on staged filters; the KRSC form and depthwise keep ptxas's own.
        self.one_cta_schedule = not self.depthwise and not self.config.filter_krsc

    def smem_bytes(self) -> int:
        """Shared memory: the norm's per-pixel sums, else none."""
        return 0 if self.norm_eps is None else 2 * self.pixels * NORM_THREADS * 4

    @cute.jit
    def launch(self, params: ConvLaunchParams, stream):
        ptrs, geo = params.pointers, params.geometry
        in_vector = self.in_vector
        # 64-bit strides: a large activation's offsets pass 2**31 elements.
        c = cute.assume(cutlass.Int64(geo.c // in_vector) * in_vector, divby=in_vector)
        vector = self.vector
        k = cute.assume(cutlass.Int64(geo.k // vector) * vector, divby=vector)
        vectors = geo.k // vector
        m_x = cute.make_tensor(
            ptrs.act,
            cute.make_layout(
                (in_vector, geo.c // in_vector, geo.w, geo.h, geo.n),
                stride=(1, in_vector, c, c * geo.w, c * geo.w * geo.h),
            ),
        )
        group_k = k * self.group_in
        filter_shape = (vector, vectors, self.group_in, geo.s, geo.r)
        filter_stride = (1, vector, k, group_k, group_k * geo.s)  # staged [R, S, C / g, K]
        if cutlass.const_expr(self.config.filter_krsc):  # [K, R, S, C / g]
            taps = cutlass.Int64(geo.r) * geo.s * self.group_in
            filter_stride = (taps, taps * vector, 1, self.group_in, self.group_in * geo.s)
        m_f = cute.make_tensor(ptrs.filter, cute.make_layout(filter_shape, stride=filter_stride))
        rows = geo.n * geo.p * geo.q
        row_blocks = geo.n * geo.p * ((geo.q + self.pixels - 1) // self.pixels)
        out_pixels = cute.assume(
            cutlass.Int64(geo.out_pixel_stride // vector) * vector, divby=vector
        )
        out_layout = cute.make_layout((vector, vectors, rows), stride=(1, vector, out_pixels))
        m_d = cute.make_tensor(ptrs.out, out_layout)
        source_layout = cute.make_layout((vector, vectors, rows), stride=(1, vector, k))
        m_c = cute.make_tensor(ptrs.source, source_layout)
        vec_layout = cute.make_layout((vector, vectors), stride=(1, vector))
        m_bias = cute.make_tensor(ptrs.bias, vec_layout)
        m_scale = cute.make_tensor(ptrs.scale, vec_layout)
        cta_threads = THREADS
        ctas = (cutlass.Int64(vectors) * row_blocks * self.split + THREADS - 1) // THREADS
        if cutlass.const_expr(self.norm_eps is not None):
            cta_threads = NORM_THREADS  # whole pixel groups per CTA
            groups = NORM_THREADS // vectors
            ctas = (cutlass.Int64(row_blocks) + groups - 1) // groups
        self.kernel(m_x, m_f, m_d, m_c, m_bias, m_scale, geo, params.alpha, params.beta).launch(
            grid=(cutlass.Int32(ctas), 1, 1),
            block=[cta_threads, 1, 1],
            stream=stream,
            use_pdl=True,
            min_blocks_per_mp=1 if self.one_cta_schedule else 0,
        )

    @cute.kernel
    def kernel(
        self,
        m_x: cute.Tensor,
        m_f: cute.Tensor,
        m_d: cute.Tensor,
        m_c: cute.Tensor,
        m_bias: cute.Tensor,
        m_scale: cute.Tensor,
        geo,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        pixels = self.pixels
        vectors = cute.size(m_d, mode=[1])
        q_blocks = (geo.q + pixels - 1) // pixels
        blocks = cutlass.Int64(geo.n) * geo.p * q_blocks
        sums = group = None
        part = 0  # the thread's part of its output vector's channels (channel_split)
        if cutlass.const_expr(self.norm_eps is not None):
            group = tidx // vectors  # the CTA's pixel group; past the last: idle threads
            groups = NORM_THREADS // vectors
            v = tidx % vectors
            block = cutlass.Int64(bidx) * groups + group
            if group >= groups:
                block = blocks
            sums = self.zeroed_norm_sums(group, v)
        else:
            thread = cutlass.Int64(bidx) * THREADS + tidx
            if cutlass.const_expr(self.split > 1):
                part = cutlass.Int32(thread % self.split)
                thread = thread // self.split
            v = cutlass.Int32(thread % vectors)
            block = thread // vectors  # (q block, p, n), q block fastest
        q0 = cutlass.Int32(block % q_blocks) * pixels
        p = cutlass.Int32((block // q_blocks) % geo.p)
        n = cutlass.Int32(block // (q_blocks * geo.p))
        in_range = block < blocks
        row0 = (cutlass.Int64(n) * geo.p + p) * geo.q + q0
        wait_for_previous_grid()
        residuals = None
        if cutlass.const_expr(self.epilogue.has_residual):
            # Loaded before the sums, so that their latency hides behind the multiply-adds: in
            # the epilogue each load would wait on the previous pixel's store (the source may
            # be the output). A thread reads only the pixels it writes, so in place is safe.
            residuals = cute.make_rmem_tensor((self.vector, pixels), m_c.element_type)
            if in_range and part == 0:  # the part that stores
                for j in cutlass.range_constexpr(pixels):
                    if q0 + j < geo.q:
                        cute.autovec_copy(m_c[(None, v, row0 + j)], residuals[(None, j)])
        acc = cute.make_rmem_tensor((self.vector, pixels), cutlass.Float32)
        acc.fill(0.0)
        if in_range:
            for r in cutlass.range(geo.r):
                ih = p * geo.stride_h - geo.pad_top + r * geo.dil_h
                if ih >= 0 and ih < geo.h:
                    if cutlass.const_expr(self.window > 0):
                        self.depthwise_row(acc, m_x, m_f, geo, v, q0 - geo.pad_left, ih, n, r)
                    else:
                        for s in cutlass.range(geo.s):
                            iw0 = q0 * geo.stride_w - geo.pad_left + s * geo.dil_w
                            if cutlass.const_expr(self.depthwise):
                                self.depthwise_tap(acc, m_x, m_f, geo, v, iw0, ih, n, s, r)
                            else:
                                self.grouped_tap(acc, m_x, m_f, geo, v, part, iw0, ih, n, s, r)
        if cutlass.const_expr(self.split > 1):
            self.add_parts(acc)  # every lane, in range or not: the shuffles take the warp
        if cutlass.const_expr(self.norm_eps is not None):
            # Every thread reaches the norm's barriers, in range or not.
            self.normalized_store(acc, sums, tidx, group, in_range, q0, v, row0, m_d, m_bias,
                                  m_scale, geo, alpha)  # fmt: skip
        elif in_range and part == 0:
            bias, scale = self.channel_vectors(v, m_bias, m_scale)
            for j in cutlass.range_constexpr(pixels):
                if q0 + j < geo.q:
                    residual = None
                    if cutlass.const_expr(self.epilogue.has_residual):
                        residual = residuals[(None, j)].load().to(cutlass.Float32) * beta
                    self.store(acc[(None, j)], v, row0 + j, m_d, bias, scale, residual, alpha)

    @cute.jit
    def depthwise_tap(self, acc, m_x, m_f, geo, v, iw0, ih, n, s, r):
        """One tap of the depthwise form: each output channel times its own input channel,
        one filter vector for all the thread's pixels."""
        f_vec = cute.make_rmem_tensor((self.vector,), self.filter_dtype)
        cute.autovec_copy(m_f[(None, v, 0, s, r)], f_vec)
        weights = f_vec.load().to(cutlass.Float32)
        x_vec = cute.make_rmem_tensor((self.vector,), self.act_dtype)
        for j in cutlass.range_constexpr(self.pixels):
            iw = iw0 + j * geo.stride_w
            if iw >= 0 and iw < geo.w:
                cute.autovec_copy(m_x[(None, v, iw, ih, n)], x_vec)
                sums = acc[(None, j)]
                sums.store(sums.load() + x_vec.load().to(cutlass.Float32) * weights)

    @cute.jit
    def depthwise_row(self, acc, m_x, m_f, geo, v, iw0, ih, n, r):
        """One filter row of the depthwise window form (stride and dilation 1 along the row):
        the ``pixels + window - 1`` input columns from ``iw0`` loaded (zeros outside the input)
        and converted once, then each tap's filter vector times the columns it meets."""
        columns = self.pixels + self.window - 1
        x_raw = cute.make_rmem_tensor((self.vector, columns), self.act_dtype)
        x_raw.fill(0.0)
        for t in cutlass.range_constexpr(columns):
            iw = iw0 + t
            if iw >= 0 and iw < geo.w:
                cute.autovec_copy(m_x[(None, v, iw, ih, n)], x_raw[(None, t)])
        inputs = [x_raw[(None, t)].load().to(cutlass.Float32) for t in range(columns)]
        f_vec = cute.make_rmem_tensor((self.vector,), self.filter_dtype)
        for s in cutlass.range_constexpr(self.window):
            cute.autovec_copy(m_f[(None, v, 0, s, r)], f_vec)
            weights = f_vec.load().to(cutlass.Float32)
            for j in cutlass.range_constexpr(self.pixels):
                sums = acc[(None, j)]
                sums.store(sums.load() + inputs[j + s] * weights)

    @cute.jit
    def grouped_tap(self, acc, m_x, m_f, geo, v, part, iw0, ih, n, s, r):
        """One tap of the grouped form: every input channel of the thread's group (of its
        ``part``: every ``channel_split``-th activation vector), at each of its pixels, times
        the thread's output channels' weights for it. The loads of a batch of input channels
        (their activations and filter vectors; see ``FILTER_BATCH``) all issue before its
        multiply-adds, so that their latencies overlap."""
        in_vector, split = self.in_vector, self.split
        group_vectors = self.group_in // in_vector
        ragged = group_vectors % split != 0  # the last parts have one vector fewer
        # The group's first input vector: output channel v * vector is in group
        # v * vector // group_out, whose inputs start at channel group * group_in.
        first = (v * self.vector // self.group_out) * group_vectors
        slots = (group_vectors + split - 1) // split  # activation vectors per part
        batch = min(slots * in_vector, FILTER_BATCH, BATCH_PIXELS // self.pixels)
        batch = max(1, batch // in_vector)  # in activation vectors
        for t0 in cutlass.range_constexpr(0, slots, batch):
            count = min(batch, slots - t0)
            channels = count * in_vector
            x_vecs = cute.make_rmem_tensor((in_vector, count, self.pixels), self.act_dtype)
            x_vecs.fill(0.0)  # a pixel left of or past the input, or a vector past the group
            # The part's vectors (t0 + c) * split + part (part is 0 without a split).
            vecs = [(t0 + c) * split + part for c in range(count)]
            for j in cutlass.range_constexpr(self.pixels):
                iw = iw0 + j * geo.stride_w
                if iw >= 0 and iw < geo.w:
                    for c in cutlass.range_constexpr(count):
                        if not ragged or vecs[c] < group_vectors:
                            cute.autovec_copy(m_x[(None, first + vecs[c], iw, ih, n)],
                                              x_vecs[(None, c, j)])  # fmt: skip
            f_vecs = cute.make_rmem_tensor((self.vector, channels), self.filter_dtype)
            for i in cutlass.range_constexpr(channels):
                vec = vecs[i // in_vector]
                if cutlass.const_expr(ragged):  # past the group: a valid row, times zeros
                    vec = cutlass.min(vec, group_vectors - 1)
                channel = vec * in_vector + i % in_vector
                cute.autovec_copy(m_f[(None, v, channel, s, r)], f_vecs[(None, i)])
            for i in cutlass.range_constexpr(channels):
                weights = f_vecs[(None, i)].load().to(cutlass.Float32)
                for j in cutlass.range_constexpr(self.pixels):
                    x = x_vecs[(i % in_vector, i // in_vector, j)].to(cutlass.Float32)
                    sums = acc[(None, j)]
                    sums.store(sums.load() + weights * x)

    @cute.jit
    def add_parts(self, acc):
        """Each output vector's sums over its ``channel_split`` adjacent lanes, in every one
        of them (butterfly shuffles)."""
        for o in cutlass.range_constexpr(self.split.bit_length() - 1):
            for j in cutlass.range_constexpr(self.pixels):
                for e in cutlass.range_constexpr(self.vector):  # shuffles move 32 bits
                    acc[(e, j)] = acc[(e, j)] + cute.arch.shuffle_sync_bfly(acc[(e, j)], 1 << o)

    @cute.jit
    def zeroed_norm_sums(self, group, v) -> cute.Tensor:
        """The norm's shared sums ``(pass, pixel, group)``, the thread's group's zeroed by its
        first thread, behind a barrier."""
        smem = cutlass.memory.SmemAllocator()
        sums = smem.allocate_tensor(
            cutlass.Float32, cute.make_layout((2, self.pixels, NORM_THREADS)), byte_alignment=16
        )
        if v == 0:
            for i in cutlass.range_constexpr(2):
                for j in cutlass.range_constexpr(self.pixels):
                    sums[(i, j, group)] = cutlass.Float32(0.0)
        cute.arch.barrier()
        return sums

    @cute.jit
    def normalized_store(self, acc, sums, tidx, group, in_range, q0, v, row0, m_d, m_bias,
                         m_scale, geo, alpha):  # fmt: skip
        """The epilogue's value of each pixel normalized over its K channels: the group's
        threads add their channels' sums into ``sums``, then their squared deviations from
        the mean; each stores its vector of ``(z - mean) * rsqrt(var + eps)``."""
        spec = self.epilogue
        bias, scale = self.channel_vectors(v, m_bias, m_scale)
        inv_k = 1.0 / cutlass.Float32(geo.k)
        values = [apply_epilogue(spec, acc[(None, j)].load(), alpha, scale, bias, None)
                  for j in range(self.pixels)]  # fmt: skip
        # A pixel past the row's end (or a thread past the grid's) adds nothing, stores nothing.
        last = cutlass.Int32(0)
        if in_range:
            last = cutlass.min(geo.q - q0, self.pixels)
        vectors = cute.size(m_d, mode=[1])
        self._add_group_sums(sums, 0, values, last, tidx, group, v, vectors)
        cute.arch.barrier()
        centered = [values[j] - sums[(0, j, group)] * inv_k for j in range(self.pixels)]
        self._add_group_sums(sums, 1, [d * d for d in centered], last, tidx, group, v, vectors)
        cute.arch.barrier()
        out = cute.make_rmem_tensor((self.vector,), self.out_dtype)
        for j in cutlass.range_constexpr(self.pixels):
            if j < last:
                rstd = cute.math.rsqrt(sums[(1, j, group)] * inv_k + self.norm_eps)
                out.store((centered[j] * rstd).to(self.out_dtype))
                cute.autovec_copy(out, m_d[(None, v, row0 + j)])

    @cute.jit
    def _add_group_sums(self, sums, pass_, values, last, tidx, group, v, vectors):
        """Add each pixel's sum of ``values`` over the group's threads to ``sums[pass_, j,
        group]`` (pixels from ``last`` on add nothing): the thread's channels summed, then the
        sums of the group's threads in this warp by shuffles (lane L adds in lane L + o
        where that is still the group's, o = 1, 2, .., 16), and the first of them (lane 0 or
        the group's first thread) adds the warp's part with one atomic add."""
        lane = tidx % WARP
        last_lane = cutlass.min((group + 1) * vectors - 1 - (tidx - lane), WARP - 1)
        for j in cutlass.range_constexpr(self.pixels):
            total = cutlass.Float32(0.0)
            if j < last:
                total = values[j].reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
            for i in cutlass.range_constexpr(5):  # every lane takes part in the shuffles
                other = cute.arch.shuffle_sync_down(total, 1 << i)
                if lane + (1 << i) <= last_lane:
                    total = total + other
            if cutlass.min(lane, v) == 0:
                if j < last:
                    offset = cute.crd2idx((pass_, j, group), sums.layout)
                    cute.arch.atomic_add(sums.iterator + offset, total, scope="cta")

    @cute.jit
    def channel_vectors(self, v, m_bias, m_scale):
        """The thread's bias and scale vectors (None where the epilogue has none), loaded once
        for all its pixels."""
        spec = self.epilogue
        bias = scale = None
        if cutlass.const_expr(spec.has_bias):
            bias = self._load_vector(m_bias[(None, v)])
        if cutlass.const_expr(spec.has_scale):
            scale = self._load_vector(m_scale[(None, v)])
        return bias, scale

    @cute.jit
    def store(self, acc, v, row, m_d, bias, scale, residual, alpha):
        """The epilogue on one thread's vector of sums (its bias, scale and residual, scaled
        by beta, given), and its store."""
        y = apply_epilogue(self.epilogue, acc.load(), alpha, scale, bias, residual)
        out = cute.make_rmem_tensor((self.vector,), self.out_dtype)
        out.store(y.to(self.out_dtype))
        cute.autovec_copy(out, m_d[(None, v, row)])

    @cute.jit
    def _load_vector(self, src: cute.Tensor) -> cute.TensorSSA:
        staged = cute.make_rmem_tensor((self.vector,), src.element_type)
        cute.autovec_copy(src, staged)
        return staged.load().to(cutlass.Float32)
