"""``ChannelScale`` (what ``optimize`` makes of a squeeze-excitation block's ``scale * x``): the
kernel compiled for sm_90a and sm_100a (16-byte loads and store), its argument errors, the
torch path (CPU, other shapes); which multiplies ``optimize`` takes; on a GPU, the kernel
against torch's product bit for bit (bf16, fp16, maps of 1 to 112x112 pixels), a CUDA-graph
replay and ``torch.compile(fullgraph=True)``."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import cute_conv
from cute_conv.channel_scale import ChannelScale, kernel_takes
from cute_conv.compile import compile_channel_scale
from cute_conv.pooling import GlobalAvgPool2d
from tests.gpu import requires_sm90
from tests.test_optimize import BF16, build, module_types


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_kernel_loads_and_stores_16_byte_vectors(arch, dtype):
    """x's and the scale's vectors in flight together (neither waits on the other), one
    16-byte store."""
    from tests.sass import loads_waiting_on_loads, sass_of_ptx

    ptx = compile_channel_scale(arch, dtype).ptx
    loads = re.findall(r"ld\.global(?:\.\w+)*?\.v(\d)\.[a-z]+(\d+)", ptx)
    stores = re.findall(r"st\.global(?:\.\w+)*?\.v(\d)\.[a-z]+(\d+)", ptx)
    assert [int(lanes) * int(bits) // 8 for lanes, bits in loads] == [16, 16]  # x and scale
    assert [int(lanes) * int(bits) // 8 for lanes, bits in stores] == [16]
    assert len(re.findall(r"mul(?:\.rn)?\.(?:bf16x2|f16x2|f32)", ptx)) >= 4
    assert loads_waiting_on_loads(sass_of_ptx(ptx, arch)) == 0


@pytest.mark.parametrize(
    ("arch", "dtype", "error", "match"),
    [("sm_90a", "float32", TypeError, "dtype=float32"), ("sm_80", "bfloat16", ValueError, "sm_80")],
)
def test_compile_names_the_bad_argument(arch, dtype, error, match):
    with pytest.raises(error, match=match):
        compile_channel_scale(arch, dtype)


@pytest.mark.parametrize(
    ("scale_shape", "x_shape"), [((2, 16, 1, 1), (2, 16, 5, 7)), ((1, 16, 1, 1), (3, 16, 2, 2))]
)
def test_other_inputs_are_torch_s_product(scale_shape, x_shape):
    """CPU tensors, and a scale broadcast over images: torch's ``scale * x``, exactly."""
    scale, x = (torch.randn(s).to(BF16) for s in (scale_shape, x_shape))
    x = x.contiguous(memory_format=torch.channels_last)
    assert not kernel_takes(scale, x)
    assert torch.equal(ChannelScale()(scale, x), scale * x)


def test_compiles_into_one_graph_on_cpu():
    scale, x = torch.rand(2, 8, 1, 1), torch.randn(2, 8, 3, 3)
    compiled = torch.compile(ChannelScale(), fullgraph=True, backend="eager")
    assert torch.equal(compiled(scale, x), scale * x)


class Excitation(nn.Module):
    """A squeeze-excitation block (the multiply in both orders), and a multiply of two maps."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(16, 8, 1), nn.Conv2d(8, 16, 1)

    def forward(self, x):
        scale = torch.sigmoid(self.fc2(torch.relu(self.fc1(self.pool(x)))))
        y = x * scale
        return scale * y + y * x  # the scale is not y's: left


@pytest.mark.parametrize(("name", "blocks"), [("efficientnet_b0", 16), ("mobilenet_v3_large", 8)])
def test_optimize_takes_the_excitation_multiplies(name, blocks):
    gm = cute_conv.optimize(build(name))
    assert len(gm.cute_conv_report.channel_scales) == blocks
    assert module_types(gm)[ChannelScale] == blocks


def test_optimize_takes_only_a_scale_of_the_map_it_scales():
    model = Excitation().eval()
    gm = cute_conv.optimize(model)
    assert gm.cute_conv_report.channel_scales == ["channel_scale"]
    assert module_types(gm)[GlobalAvgPool2d] == 1
    x = torch.randn(2, 16, 5, 4)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x))


# ------------------------------------------------------------------------------ on the GPU


@requires_sm90
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "shape", [(1, 16, 1, 1), (8, 96, 112, 112), (3, 1152, 7, 7), (2, 40, 9, 13)], ids=str
)
@pytest.mark.parametrize("scale_channels_last", [False, True])
def test_matches_torch_s_product_bit_for_bit(shape, dtype, scale_channels_last):
    gen = torch.Generator("cuda").manual_seed(shape[1])
    x = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    scale = torch.rand(*shape[:2], 1, 1, device="cuda", generator=gen).to(dtype)
    if scale_channels_last:
        scale = scale.contiguous(memory_format=torch.channels_last)
    assert kernel_takes(scale, x)
    ours = ChannelScale()(scale, x)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(ours, scale * x)


@requires_sm90
def test_graph_replay_and_compile():
    x = torch.randn(4, 64, 14, 14, device="cuda").to(BF16)
    x = x.contiguous(memory_format=torch.channels_last)
    scale = torch.rand(4, 64, 1, 1, device="cuda").to(BF16)
    module = ChannelScale()
    compiled = torch.compile(module, fullgraph=True)
    assert torch.equal(compiled(scale, x), scale * x)
    static = torch.zeros_like(x)
    module(scale, static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = module(scale, static)
    static.copy_(x)
    graph.replay()
    assert torch.equal(out, scale * x)
