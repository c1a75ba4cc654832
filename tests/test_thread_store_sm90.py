"""GPU numerics of the outputs the epilogue threads store themselves
(``EpilogueSpec.store_by_threads``): K whose output rows are not whole 16-byte units, run
without a padded scratch output, residual sources read by the same threads, in every
schedule, against a float32 reference.

The output is a view into a larger buffer whose guard bands hold a sentinel, and is itself
NaN-poisoned: a value the kernel fails to write, or one written past the M or K tail (a
wrong bounds predicate), fails the test.
"""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.testing import compare_to_reference, random_conv_inputs
from cute_conv.untuned import heuristic_config
from tests.test_compile_thread_store import CASES as COMPILED_CASES
from tests.test_epilogue_sm90 import reference
from tests.test_fp8_sm90 import E4M3, run_fp8

pytestmark = pytest.mark.gpu

GUARD = 4096  # elements of sentinel on each side of the output (a multiple of 16 bytes)
SENTINEL = 1234.0


def guarded_output(shape, dtype):
    """A NaN-poisoned output of ``shape`` inside a buffer with sentinel guard bands, and a
    check that the bands are intact."""
    numel = torch.Size(shape).numel()
    buffer = torch.full((numel + 2 * GUARD,), SENTINEL, dtype=dtype, device="cuda")
    out = buffer[GUARD : GUARD + numel].view(shape)
    out.fill_(float("nan"))

    def bands_intact() -> bool:
        bands = torch.cat((buffer[:GUARD], buffer[GUARD + numel :]))
        return bool((bands == SENTINEL).all())

    return out, bands_intact


def run_and_check(n, h, w, c, k, r, s, *, geom=None, config=None, out_dtype=torch.bfloat16,
                  bias=True, scale=True, activation="relu", alpha=0.75, beta=None,
                  order="after_activation", in_place=False):  # fmt: skip
    """One call checked against float32 (``beta``: a residual of that weight, ``order``;
    ``in_place``: the source is the output)."""
    geom = geom or {}
    x, flt = random_conv_inputs(n, h, w, c, k, r, s)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    b = torch.randn(k, device="cuda") if bias else None
    sc = torch.rand(k, device="cuda") + 0.5 if scale else None
    out, bands_intact = guarded_output(problem.output_shape, out_dtype)
    epilogue = dict(alpha=alpha, bias=b, scale=sc, activation=activation, out=out, config=config)
    source = None
    if beta is None:
        cute_conv.conv2d_fprop(x, flt, **epilogue, **geom)
    else:
        source = torch.randn(problem.output_shape, device="cuda").to(out_dtype)
        if in_place:
            out.copy_(source)
        cute_conv.conv2d_fprop_with_residual(
            x, flt, out if in_place else source, beta=beta, residual_order=order, **epilogue,
            **geom,
        )
    torch.cuda.synchronize()
    ref = reference(x, flt, geom, alpha=alpha, bias=b, scale=sc, activation=activation,
                    source=source, beta=beta or 0.0, order=order)  # fmt: skip
    report = compare_to_reference(out, ref)
    assert report.ok, f"{problem} {config}: {report}"
    assert bands_intact(), f"{problem} {config}: a store landed outside the output"


# The schedules the compile test builds, the default as the heuristic picks it; halo tiles
# take a geometry of their own (test_halo_tiles_store_unaligned_k).
CONFIGS = {
    "default": None,
    **{name: c for name, c in COMPILED_CASES.items() if name not in ("default", "halo")},
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("k", [1, 12, 57, 84, 222], ids=lambda k: f"k{k}")
def test_schedules_store_unaligned_k(config, k):
    # 3x3 over 9x11 maps: M = 2*9*11 = 198, tails in M and K; k-tiles enough for stream-K.
    run_and_check(2, 9, 11, 64, k, 3, 3, geom=dict(padding=1), config=config)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("k", [12, 57, 58], ids=lambda k: f"k{k}")
def test_schedules_store_whole_row_tiles_in_bulk(config, k):
    """Outputs of 287 KiB to 1.4 MiB, so that tiles holding whole rows go out in bulk (not
    ping-pong's): M = 3*61*67 = 12261 leaves a 101-row last tile, whose last elements do not
    fill 16 bytes at K=57; the 1x2 cluster's second N tile lies past K."""
    run_and_check(3, 61, 67, 64, k, 3, 3, geom=dict(padding=1), config=config)


@pytest.mark.parametrize(
    "out_dtype, k", [(torch.float32, 6), (E4M3, 24)], ids=["fp32-k6", "e4m3-k24"]
)
def test_bulk_tile_stores_of_other_output_dtypes(out_dtype, k):
    shape = (3, 61, 67, 64, k, 3, 3, dict(padding=1))
    if out_dtype == E4M3:
        run_fp8(shape, out_dtype=out_dtype, bias=True)
    else:
        run_and_check(*shape[:7], geom=shape[7], out_dtype=out_dtype)


RESIDUAL_CONFIGS = {
    name: CONFIGS[name] for name in ("default", "m256-2x1", "stream-k", "dynamic", "pingpong")
}


@pytest.mark.parametrize("config", RESIDUAL_CONFIGS.values(), ids=RESIDUAL_CONFIGS.keys())
@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("k", [84, 85], ids=["k84-pairs", "k85"])
def test_residuals_are_read_by_the_threads(config, order, k):
    run_and_check(2, 9, 11, 64, k, 3, 3, geom=dict(padding=1), config=config, beta=0.5,
                  order=order)  # fmt: skip


@pytest.mark.parametrize(
    "k, config, pairs, bulk",
    [(58, None, True, True), (57, None, False, True), (58, Conv2dConfig(pingpong=True), True, False),
     (84, Conv2dConfig(tile_n=64), True, False)],
    ids=["k58", "k57", "k58-pingpong", "k84-over-tile-n"],
)  # fmt: skip
def test_the_host_picks_pairs_and_bulk_tile_stores(monkeypatch, k, config, pairs, bulk):
    """The host asks for paired stores where K is even (ShuffleNet's 1x1 here), and for bulk
    tile stores where a tile holds whole rows (the heuristic's 128x64 tiles hold K=58; not
    ping-pong tiles, nor K past the N tile) of a plain output of 256 KiB or more (not with a
    residual, nor on a small batch); the numerics hold every way."""
    specs = []
    compile_kernel = cute_conv.dispatch.compile_kernel

    def recording(*args, epilogue, **kwargs):
        specs.append(epilogue)
        return compile_kernel(*args, epilogue=epilogue, **kwargs)

    monkeypatch.setattr(cute_conv.dispatch, "compile_kernel", recording)
    cute_conv.compile.clear_cache()  # and the plans that hold kernels: both calls plan anew
    run_and_check(8, 56, 56, 24, k, 1, 1, config=config)
    run_and_check(8, 56, 56, 24, k, 1, 1, config=config, beta=1.0)
    run_and_check(1, 7, 7, 24, k, 1, 1, config=config)
    flags = [(s.thread_store_pairs, s.bulk_tile_store) for s in specs]
    assert flags == [(pairs, bulk), (pairs, False), (pairs, False)]


@pytest.mark.parametrize("k", [12, 222, 23], ids=lambda k: f"k{k}")
def test_in_place_residual_of_unaligned_k(k):
    run_and_check(3, 7, 9, 32, k, 3, 3, geom=dict(padding=1), beta=1.0, in_place=True)
    halo = Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6)
    run_and_check(2, 13, 50, 64, k, 3, 3, geom=dict(padding=1), config=halo, beta=-1.0,
                  order="before_activation", in_place=True)  # fmt: skip


def test_halo_tiles_store_unaligned_k():
    halo = Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6)
    run_and_check(2, 13, 50, 64, 30, 3, 3, geom=dict(padding=1), config=halo)


@pytest.mark.parametrize(
    "shape",
    [(1, 1, 1, 48, 12), (8, 1, 1, 888, 84), (128, 1, 1, 120, 30), (1, 1, 1, 30, 336)],
    ids=["n1-c48-k12", "n8-c888-k84", "n128-c120-k30", "n1-c30-k336-c-padded"],
)
@pytest.mark.parametrize("tensor_cores", [False, True], ids=["default", "tensor-cores"])
def test_squeeze_excitation_convs(shape, tensor_cores):
    # A call takes the CUDA-core kernel for most of these (gemv_rule): the tensor-core
    # config of the same call too, as the heuristic gives it.
    n, h, w, c, k = shape
    config = None
    if tensor_cores:
        problem = cute_conv.Conv2dProblemShape.from_shapes((n, h, w, c), (k, 1, 1, c))
        num_sms = torch.cuda.get_device_properties(0).multi_processor_count
        config = heuristic_config(problem, num_sms, cuda_cores=False)
    run_and_check(n, h, w, c, k, 1, 1, activation="sigmoid", scale=False, config=config)


@pytest.mark.parametrize(
    "out_dtype, k",
    [(torch.float32, 6), (torch.float32, 4), (torch.float16, 20)],
    ids=["fp32-k6-by-threads", "fp32-k4-by-tma", "fp16-k20"],
)
def test_output_dtypes(out_dtype, k):
    run_and_check(2, 10, 10, 32, k, 3, 3, geom=dict(padding=1), out_dtype=out_dtype)


@pytest.mark.parametrize(
    "out_dtype, k",
    [(torch.bfloat16, 24), (torch.bfloat16, 12), (E4M3, 24)],
    ids=["bf16-k24-by-tma", "bf16-k12", "e4m3-k24"],
)
def test_fp8_inputs(out_dtype, k):
    run_fp8((2, 9, 10, 64, k, 3, 3, dict(padding=1)), out_dtype=out_dtype, bias=True)


def test_aligned_c_calls_launch_without_staging(monkeypatch):
    """C a multiple of 8: an odd K no longer goes through ``run_staged`` (no filter copy, no
    scratch output)."""

    def fail(*args, **kwargs):
        raise AssertionError("the call was staged")

    monkeypatch.setattr(cute_conv.dispatch, "run_staged", fail)
    run_and_check(4, 7, 7, 64, 50, 1, 1)
    run_and_check(4, 7, 7, 64, 50, 1, 1, beta=1.0, order="before_activation")
