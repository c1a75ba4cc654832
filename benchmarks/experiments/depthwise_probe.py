"""A probe: depthwise convs (groups = C, one filter per channel: MobileNet's, EfficientNet's,
ConvNeXt's) on CUDA cores with the fused epilogue, against cuDNN (H100/H200).

    python benchmarks/experiments/depthwise_probe.py --model mobilenet_v3_large --batches 1 8 \
        --out depthwise.json

``optimize`` leaves depthwise convs to torch (cuDNN) with their BatchNorm folded; the
activation after them is a kernel of its own. ``DepthwiseProbe`` computes
``act(conv * scale + bias) [+ beta * C]`` in one pass: each thread owns ``vector`` channels of
one output pixel (adjacent threads adjacent channel vectors, so a warp's loads are coalesced),
walks the filter taps, loads one activation vector and one filter vector per tap (the filter
staged ``[R, S, C]`` so that a tap's channels are contiguous), sums in float32 and runs the
tensor-core kernels' epilogue (``apply_epilogue``) on the vector. No shared memory: neighbouring
pixels' re-reads of an input pixel hit L1/L2.

The A/B: for each distinct depthwise conv of a torchvision model (input shapes recorded by
forward hooks on a 224x224 batch), bf16 channels_last, random weights and bias: ``cudnn``
(``F.conv2d`` with ``groups=C`` and the bias, then the activation: what an optimized model
runs now) against ``probe``, both checked against float32 from NaN-poisoned outputs
(``compare_to_reference``), CUDA-graph replays in interleaved rounds (medians); sums over a
forward's calls. A probe, not a product: it reaches into ``cute_conv.compile``'s internals to
compile a kernel the package does not dispatch to.

    python benchmarks/experiments/depthwise_probe.py --compile-only   # no GPU: compiles it
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import cutlass
import cutlass.cute as cute
import torch
import torch.nn.functional as F
from cute_conv.kernels.common.dependent_launch import wait_for_previous_grid
from cute_conv.kernels.common.entry import SIXTEEN_BIT_TYPES, ConvKernelEntry, ConvLaunchParams
from cute_conv.kernels.common.epilogue import EpilogueSpec, apply_epilogue
from torch import nn

from cute_conv.compile import (
    CompiledConv2d,
    KernelKey,
    _cute_compile,
    _fake_launch_args,
    _positional_launcher,
    kernel_scalars,
)
from cute_conv.fold import activation_name
from cute_conv.problem import Conv2dProblemShape
from cute_conv.reference import TORCH_ACTIVATIONS
from cute_conv.testing import compare_to_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import build_model, distinct_calls, replayed_us  # noqa: E402

_THREADS = 128


@dataclass(frozen=True)
class DepthwiseProbeConfig:
    """``vector``: channels per thread (C a multiple of it)."""

    vector: int = 8


class DepthwiseProbe(ConvKernelEntry):
    """A depthwise conv (K = C, filter ``[R, S, C]``) of 16-bit inputs, a thread per
    ``vector`` channels of an output pixel. Takes ``ConvLaunchParams``; ``geometry.k`` must
    equal ``geometry.c``."""

    config_class = DepthwiseProbeConfig

    def _configure(self) -> None:
        if self.act_dtype not in SIXTEEN_BIT_TYPES:
            raise TypeError(f"DepthwiseProbe takes 16-bit inputs, got {self.act_dtype}")
        self.vector = self.config.vector

    def smem_bytes(self) -> int:
        return 0

    @cute.jit
    def launch(self, params: ConvLaunchParams, stream):
        ptrs, geo = params.pointers, params.geometry
        vector = self.vector
        vectors = geo.c // vector
        c = cute.assume(cutlass.Int64(vectors) * vector, divby=vector)
        m_x = cute.make_tensor(
            ptrs.act,
            cute.make_layout(
                (vector, vectors, geo.w, geo.h, geo.n),
                stride=(1, vector, c, c * geo.w, c * geo.w * geo.h),
            ),
        )
        m_f = cute.make_tensor(
            ptrs.filter,
            cute.make_layout((vector, vectors, geo.s, geo.r), stride=(1, vector, c, c * geo.s)),
        )
        rows = geo.n * geo.p * geo.q
        out_layout = cute.make_layout((vector, vectors, rows), stride=(1, vector, c))
        m_d = cute.make_tensor(ptrs.out, out_layout)
        m_c = cute.make_tensor(ptrs.source, out_layout)
        vec_layout = cute.make_layout((vector, vectors), stride=(1, vector))
        m_bias = cute.make_tensor(ptrs.bias, vec_layout)
        m_scale = cute.make_tensor(ptrs.scale, vec_layout)
        threads = vectors * rows
        self.kernel(m_x, m_f, m_d, m_c, m_bias, m_scale, geo, params.alpha, params.beta).launch(
            grid=((threads + _THREADS - 1) // _THREADS, 1, 1),
            block=[_THREADS, 1, 1],
            stream=stream,
            use_pdl=True,
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
        vectors = cute.size(m_d, mode=[1])
        rows = cute.size(m_d, mode=[2])
        thread = bidx * _THREADS + tidx
        v = thread % vectors
        row = thread // vectors
        wait_for_previous_grid()
        if row < rows:
            q = row % geo.q
            p = (row // geo.q) % geo.p
            n = row // (geo.q * geo.p)
            acc = cute.make_rmem_tensor((self.vector,), cutlass.Float32)
            acc.fill(0.0)
            x_vec = cute.make_rmem_tensor((self.vector,), self.act_dtype)
            f_vec = cute.make_rmem_tensor((self.vector,), self.filter_dtype)
            for r in cutlass.range(geo.r):
                ih = p * geo.stride_h - geo.pad_top + r * geo.dil_h
                for s in cutlass.range(geo.s):
                    iw = q * geo.stride_w - geo.pad_left + s * geo.dil_w
                    if ih >= 0 and ih < geo.h and iw >= 0 and iw < geo.w:
                        cute.autovec_copy(m_x[(None, v, iw, ih, n)], x_vec)
                        cute.autovec_copy(m_f[(None, v, s, r)], f_vec)
                        acc.store(
                            acc.load()
                            + x_vec.load().to(cutlass.Float32) * f_vec.load().to(cutlass.Float32)
                        )
            self.store(acc, v, row, m_d, m_c, m_bias, m_scale, alpha, beta)

    @cute.jit
    def store(self, acc, v, row, m_d, m_c, m_bias, m_scale, alpha, beta):
        """The epilogue on one thread's vector of sums, and its store."""
        spec = self.epilogue
        bias = scale = residual = None
        if cutlass.const_expr(spec.has_bias):
            bias = self._load_vector(m_bias[(None, v)])
        if cutlass.const_expr(spec.has_scale):
            scale = self._load_vector(m_scale[(None, v)])
        if cutlass.const_expr(spec.has_residual):
            residual = self._load_vector(m_c[(None, v, row)]) * beta
        y = apply_epilogue(spec, acc.load(), alpha, scale, bias, residual)
        out = cute.make_rmem_tensor((self.vector,), self.out_dtype)
        out.store(y.to(self.out_dtype))
        cute.autovec_copy(out, m_d[(None, v, row)])

    @cute.jit
    def _load_vector(self, src: cute.Tensor) -> cute.TensorSSA:
        staged = cute.make_rmem_tensor((self.vector,), src.element_type)
        cute.autovec_copy(src, staged)
        return staged.load().to(cutlass.Float32)


@functools.cache
def compile_probe(spec: EpilogueSpec, arch: str = "sm_90a") -> CompiledConv2d:
    """The probe compiled for bf16 with ``spec`` (no GPU needed)."""
    config = DepthwiseProbeConfig()
    key = KernelKey(arch, "bfloat16", "bfloat16", "bfloat16", config, spec)
    kernel = DepthwiseProbe(cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16, config, spec)
    fn, ptx, cubin = _cute_compile(kernel, _fake_launch_args(key), arch)
    return CompiledConv2d(key, ptx, cubin, 0, _positional_launcher(fn))


def depthwise_convs(model: nn.Module, batch: int) -> list[tuple[nn.Conv2d, tuple, str, int]]:
    """``(conv, input shape, activation after it, calls per forward)`` of each distinct
    depthwise conv call of ``model`` on a batch (the activation: the module run right after
    the conv's BatchNorm in torchvision's ``Conv2dNormActivation``, else None)."""
    activations: dict[int, str | None] = {}
    for block in model.modules():
        children = list(block.children())
        for i, child in enumerate(children):
            is_depthwise = isinstance(child, nn.Conv2d) and child.groups == child.in_channels > 1
            if is_depthwise and child.out_channels == child.in_channels:
                rest = children[i + 1 : i + 3]
                names = [activation_name(m) for m in rest if not isinstance(m, nn.BatchNorm2d)]
                activations[id(child)] = names[0] if names else None

    def activation(conv: nn.Module) -> str | None:
        return activations[id(conv)]

    calls = distinct_calls(model, batch, lambda m: id(m) in activations, activation)
    return [(conv, shape, activation(conv), count) for conv, shape, count in calls]


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, calls: int, rounds: int):
    n, c, h, w = shape
    r, s = conv.kernel_size
    geom = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation)
    x = torch.randn(shape, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    weight = (torch.randn(c, 1, r, s, device="cuda") / (r * s) ** 0.5).bfloat16()
    bias = torch.randn(c, device="cuda").bfloat16()
    act = TORCH_ACTIVATIONS[activation]
    ref = act(F.conv2d(x.float(), weight.float(), bias.float(), groups=c, **geom))
    problem = Conv2dProblemShape.from_shapes(
        (n, h, w, c), (c, r, s, c), stride=conv.stride, padding=conv.padding,
        dilation=conv.dilation,
    )  # fmt: skip
    spec = EpilogueSpec(has_bias=True, activation=activation, vector_dtype="bfloat16")
    kernel = compile_probe(spec)
    x_nhwc = x.permute(0, 2, 3, 1)  # a view of the channels_last tensor
    filter_rsc = weight[:, 0].permute(1, 2, 0).contiguous()
    out = torch.full(problem.output_shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    pointers = (
        x_nhwc.data_ptr(), filter_rsc.data_ptr(), out.data_ptr(), 0, bias.data_ptr(),
        *([0] * 8),
    )  # fmt: skip
    scalars = kernel_scalars(problem, 1.0, 0.0, 1)
    fns = {
        "cudnn": lambda: act(F.conv2d(x, weight, bias, groups=c, **geom)),
        "probe": lambda: kernel.launch(pointers, scalars, torch.cuda.current_stream().cuda_stream),
    }
    row = {"module": repr(conv), "input": list(shape), "activation": activation,
           "calls": calls, "checks": {}}  # fmt: skip
    fns["probe"]()
    results = {"cudnn": fns["cudnn"](), "probe": out.permute(0, 3, 1, 2)}
    torch.cuda.synchronize()
    for name, result in results.items():
        check = compare_to_reference(result, ref)
        row["checks"][name] = {"ok": check.ok, "rel_err": check.rel_err}
    row["graph_us"] = replayed_us(fns, rounds)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v3_large")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compile-only", action="store_true", help="compile, no GPU")
    args = parser.parse_args()
    if args.compile_only:
        for activation in (None, "relu", "hardswish", "silu"):
            spec = EpilogueSpec(has_bias=True, activation=activation, vector_dtype="bfloat16")
            ptx = compile_probe(spec).ptx
            print(f"{spec.name}: {len(ptx)} bytes of PTX, ld.global.v4 {'ld.global.v4' in ptx}")
        return
    torch.backends.cudnn.benchmark = True
    model = build_model(args.model)
    result = {"device": torch.cuda.get_device_name(), "model": args.model, "rows": []}
    for batch in args.batches:
        rows = [measure(*found, args.rounds) for found in depthwise_convs(model, batch)]
        result["rows"] += [{"batch": batch, **row} for row in rows]
        totals = {
            name: sum(r["graph_us"][name] * r["calls"] for r in rows) for name in ("cudnn", "probe")
        }
        bad = [r["input"] for r in rows if not all(c["ok"] for c in r["checks"].values())]
        print(
            f"{args.model} batch {batch}: {len(rows)} distinct depthwise convs, per forward "
            + ", ".join(f"{name} {us:.1f} us" for name, us in totals.items())
            + f"; outputs out of tolerance: {bad}",
            flush=True,
        )
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
