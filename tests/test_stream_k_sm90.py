"""Stream-K on the GPU: split tiles summed right, deterministic, counters left at zero."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.repeated_calls import assert_repeated_calls_match

pytestmark = pytest.mark.gpu

Config = cute_conv.Conv2dConfig
STREAM_K_CONFIGS = [
    Config(tile_n=128, stream_k=True),
    Config(tile_n=256, cluster_n=2, stream_k=True),
    Config(tile_n=128, cluster_m=2, stream_k=True),
    Config(tile_m=256, tile_n=64, stream_k=True),
    Config(tile_n=96, tile_k=32, stream_k=True),
    Config(tile_m=192, tile_n=128, cluster_n=2, stream_k=True),
    # Bounded splits: each tile's k-tiles over 2, 3 or 5 CTAs (shares straddle tiles where
    # the k-tiles do not divide).
    Config(tile_n=128, stream_k=True, stream_k_split=3),
    Config(tile_n=256, cluster_n=2, stream_k=True, stream_k_split=2),
    Config(tile_n=128, cluster_m=2, stream_k=True, stream_k_split=5),
    # The split tiles of default_config (wide_split_shape): wide, and 128x128 ones.
    Config(tile_n=256, cluster_m=2, stream_k=True, stream_k_split=3),
    Config(tile_m=256, tile_n=128, cluster_n=2, stream_k=True, stream_k_split=4),
    Config(tile_n=128, cluster_n=2, stream_k=True, stream_k_split=3),
]
# (N, H, W, C, K, R, S, padding): few tiles of many k-tiles (tiles split between several
# CTAs), M and K tails, C not a multiple of the k-tile, a 1x1 conv of 4 k-tiles.
SHAPES = [
    (2, 7, 7, 512, 512, 3, 3, 1),
    (3, 9, 11, 200, 328, 3, 3, 1),
    (1, 5, 5, 256, 96, 1, 1, 0),
]


def _inputs(shape):
    n, h, w, c, k, r, s, pad = shape
    act, flt = random_conv_inputs(n, h, w, c, k, r, s)
    return act, flt, pad


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:7])))
@pytest.mark.parametrize(
    "config",
    STREAM_K_CONFIGS,
    ids=lambda c: f"m{c.tile_m}n{c.tile_n}k{c.tile_k}-{c.cluster_m}x{c.cluster_n}"
    f"-split{c.stream_k_split}",
)
def test_stream_k_matches_the_reference(shape, config):
    act, flt, pad = _inputs(shape)
    assert_repeated_calls_match(act, flt, pad, config)


def test_stream_k_is_deterministic():
    act, flt, pad = _inputs(SHAPES[0])
    config = Config(tile_n=128, stream_k=True)
    first = cute_conv.conv2d_fprop(act, flt, padding=pad, config=config)
    for _ in range(3):
        assert torch.equal(cute_conv.conv2d_fprop(act, flt, padding=pad, config=config), first)


def test_stream_k_on_two_streams_at_once():
    """Each stream has its own workspace: two convs running concurrently do not mix."""
    config = Config(tile_n=128, stream_k=True)
    cases = [_inputs(SHAPES[0]), _inputs(SHAPES[0])]
    refs = [conv2d_reference(act, flt, padding=pad) for act, flt, pad in cases]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = []
    for (act, flt, pad), stream in zip(cases, streams, strict=True):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            outs.append(
                [cute_conv.conv2d_fprop(act, flt, padding=pad, config=config) for _ in range(20)]
            )
    torch.cuda.synchronize()
    for results, ref in zip(outs, refs, strict=True):
        for out in results:
            report = compare_to_reference(out, ref)
            assert report.ok, str(report)


def test_default_config_takes_stream_k_for_a_small_batch():
    act, flt, pad = _inputs((8, 7, 7, 512, 512, 3, 3, 1))
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=pad)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert cute_conv.default_config(problem, num_sms).stream_k
    out = cute_conv.conv2d_fprop(act, flt, padding=pad)
    report = compare_to_reference(out, conv2d_reference(act, flt, padding=pad))
    assert report.ok, str(report)


def test_default_config_takes_wide_split_tiles_for_a_long_mainloop():
    act, flt, pad = _inputs((1, 32, 32, 1280, 1280, 3, 3, 1))  # 180 k-tiles per tile
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=pad)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    config = cute_conv.default_config(problem, num_sms)
    assert (config.tile_n, config.stream_k) == (256, True) and config.stream_k_split >= 2
    assert_repeated_calls_match(act, flt, pad, None)


def test_default_config_takes_128x128_split_tiles_where_they_split():
    act, flt, pad = _inputs((1, 32, 32, 1280, 640, 3, 3, 1))  # SD's K=640 3x3 at 32x32
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=pad)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    config = cute_conv.default_config(problem, num_sms)
    assert (config.tile_m, config.tile_n, config.stream_k) == (128, 128, True)
    assert config.stream_k_split >= 2
    assert cute_conv.default_config(problem, num_sms, has_residual=True) == config
    assert_repeated_calls_match(act, flt, pad, None)  # plain and fused


def test_each_capture_takes_its_own_workspace():
    """A captured launch's counters are its graph's own: not the capture stream's eager
    buffers, nor another graph's; one capture's launches share theirs."""
    from cute_conv.workspace import kernel_workspace

    stream = torch.cuda.Stream()
    device = torch.cuda.current_device()
    eager = kernel_workspace(device, stream.cuda_stream, 1024, 8)
    captured = []
    for _ in range(2):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            first = kernel_workspace(device, stream.cuda_stream, 1024, 8)
            again = kernel_workspace(device, stream.cuda_stream, 512, 4)
        assert again == first
        captured.append(first)
    assert len({eager, *captured}) == 3


def _graph_nodes(graph: torch.cuda.CUDAGraph) -> list[str]:
    """The node types of a graph captured with ``keep_graph=True``."""
    from cuda.bindings import runtime

    raw = graph.raw_cuda_graph()
    handle = raw if isinstance(raw, runtime.cudaGraph_t) else runtime.cudaGraph_t(int(raw))
    _, _, count = runtime.cudaGraphGetNodes(handle, 0)
    err, nodes, _ = runtime.cudaGraphGetNodes(handle, count)
    assert err == runtime.cudaError_t.cudaSuccess
    return [runtime.cudaGraphNodeGetType(node)[1].name for node in nodes]


def test_a_capture_after_an_eager_call_zeroes_no_counters():
    """A capture that follows an eager call (the usual warm-up) takes the zeroed counters
    that call left spare: its graph is the conv's kernel alone, with no zeroing before it
    for every replay to run. Two such captures get counters of their own and replay right,
    interleaved; a capture with no eager call before it zeroes its counters itself."""
    config = Config(tile_n=128, stream_k=True)
    act, flt, pad = _inputs(SHAPES[0])
    ref = conv2d_reference(act, flt, padding=pad)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graphs, outs = [], []
    for warm_up in (True, True, False):
        out = torch.full(ref.shape, float("nan"), device="cuda", dtype=act.dtype)
        if warm_up:
            with torch.cuda.stream(stream):
                cute_conv.conv2d_fprop(act, flt, padding=pad, config=config, out=out)
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(graph, stream=stream):
            cute_conv.conv2d_fprop(act, flt, padding=pad, config=config, out=out)
        graphs.append(graph)
        outs.append(out.fill_(float("nan")))
    kernel = "cudaGraphNodeTypeKernel"
    assert [_graph_nodes(graph) for graph in graphs] == [[kernel], [kernel], [kernel] * 2]
    for _ in range(20):
        for graph in graphs:
            graph.replay()
    torch.cuda.synchronize()
    for out in outs:
        report = compare_to_reference(out, ref)
        assert report.ok, str(report)


def test_graphs_of_one_capture_stream_replayed_on_two_streams_at_once():
    """Two graphs captured on the same stream (torch.cuda.graph's default), replayed
    concurrently: each has its own stream-K counters and partials, so neither sees the
    other's."""
    config = Config(tile_n=128, stream_k=True)
    cases = [_inputs(SHAPES[0]), _inputs(SHAPES[1])]
    refs = [conv2d_reference(act, flt, padding=pad) for act, flt, pad in cases]
    graphs, outs = [], []
    for act, flt, pad in cases:
        cute_conv.conv2d_fprop(act, flt, padding=pad, config=config)  # compile, plan
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs.append(cute_conv.conv2d_fprop(act, flt, padding=pad, config=config))
        graphs.append(graph)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    for _ in range(200):
        for graph, stream in zip(graphs, streams, strict=True):
            with torch.cuda.stream(stream):
                graph.replay()
    torch.cuda.synchronize()
    for out, ref in zip(outs, refs, strict=True):
        report = compare_to_reference(out, ref)
        assert report.ok, str(report)


@pytest.mark.parametrize("split", [2, 3, 6])
def test_bounded_splits_replayed_from_a_graph(split):
    """A bounded split's grid (``stream_k_split`` CTAs per tile) replayed many times from a
    CUDA graph, beside eager calls of the whole-grid kernel on the same stream: the sums and
    the counters stay right."""
    act, flt, pad = _inputs(SHAPES[0])
    ref = conv2d_reference(act, flt, padding=pad)
    bounded = Config(tile_n=64, stream_k=True, stream_k_split=split)
    whole = Config(tile_n=64, stream_k=True)
    cute_conv.conv2d_fprop(act, flt, padding=pad, config=bounded)  # compile, plan
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphed = cute_conv.conv2d_fprop(act, flt, padding=pad, config=bounded)
    eager = []
    for _ in range(50):
        graph.replay()
        eager.append(cute_conv.conv2d_fprop(act, flt, padding=pad, config=whole))
    torch.cuda.synchronize()
    for out in (graphed, eager[0], eager[-1]):
        report = compare_to_reference(out, ref)
        assert report.ok, str(report)


# (N, H, W, C, K, R, S, padding) past one wave on 132 SMs: 128x128 tiles of a 3x3, 2.5 waves
# (the ranges split 198 tiles, 132 run whole); a 1x1 of 2 k-tiles per tile, 3.02 waves of
# 128x128 tiles (ranges of about 2 k-tiles).
PAST_ONE_WAVE = [(8, 66, 80, 64, 128, 3, 3, 1), (4, 65, 65, 128, 384, 1, 1, 0)]


@pytest.mark.parametrize("shape", PAST_ONE_WAVE, ids=lambda s: "x".join(map(str, s[:7])))
@pytest.mark.parametrize(
    "config",
    [
        Config(tile_n=128, stream_k=True),
        Config(tile_n=256, cluster_n=2, stream_k=True),
        Config(tile_m=192, tile_n=128, cluster_n=2, stream_k=True),
        Config(tile_m=256, tile_n=64, stream_k=True),
    ],
    ids=lambda c: f"m{c.tile_m}n{c.tile_n}-{c.cluster_m}x{c.cluster_n}",
)
def test_stream_k_past_one_wave_splits_the_first_tiles(shape, config):
    """Past two waves the clusters' ranges split the first tiles and the rest run whole
    (``stream_k_tile_count``): every k-tile summed once, plain and fused, call after call."""
    act, flt, pad = _inputs(shape)
    assert_repeated_calls_match(act, flt, pad, config)
