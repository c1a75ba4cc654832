"""``ChannelShuffle`` (what ``optimize`` makes of ShuffleNet's channel shuffle) against
torchvision's ``channel_shuffle``: exact (a permutation), channels_last out, its errors; the
rewrite's pattern in ``optimize`` (with and without the concatenation, left where the pattern
does not hold); ShuffleNetV2's logits through the kernels' reference forward (CPU) and on a
GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import cute_conv
from cute_conv.shuffle import ChannelShuffle
from tests.gpu import requires_sm90
from tests.test_nn import kernel_calls  # noqa: F401 - a fixture
from tests.test_optimize import BF16, assert_no_worse_than_torch, build, module_types


def torchvision_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    from torchvision.models.shufflenetv2 import channel_shuffle

    return channel_shuffle(x, groups)


def tensors(shapes, channels_last: bool) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(len(shapes))
    out = [torch.randn(shape, generator=gen).bfloat16() for shape in shapes]
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return [t.contiguous(memory_format=fmt) for t in out]


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize(
    ("shapes", "groups"),
    [
        ([(2, 6, 5, 7)] * 2, 2),  # ShuffleNetV2's: two branches, one copy (stack)
        ([(2, 6, 5, 7)] * 3, 3),
        ([(3, 12, 4, 4)], 3),  # one tensor
        ([(1, 4, 3, 3), (1, 8, 3, 3)], 2),  # unequal branches: the concatenation, then a copy
        ([(2, 8, 1, 1)] * 2, 4),  # two tensors, four groups
    ],
    ids=str,
)
def test_equals_torchvision_channel_shuffle(shapes, groups, channels_last):
    inputs = tensors(shapes, channels_last)
    ours = ChannelShuffle(groups)(*inputs)
    assert torch.equal(ours, torchvision_shuffle(torch.cat(inputs, 1), groups))
    assert ours.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize(
    ("groups", "error", "match"),
    [(2.0, TypeError, "groups must be an int"), (True, TypeError, "groups must be an int"),
     (0, ValueError, "groups must be >= 1")],  # fmt: skip
)
def test_bad_groups_raise(groups, error, match):
    with pytest.raises(error, match=match):
        ChannelShuffle(groups)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [((torch.zeros(2, 10, 3, 3),), "10 channels do not split into 3 groups"),
     ((torch.zeros(10, 3, 3),), "4-D"), ((), "4-D")],  # fmt: skip
)
def test_bad_inputs_raise_value_errors(inputs, match):
    with pytest.raises(ValueError, match=match):
        ChannelShuffle(3)(*inputs)


class Shuffles(nn.Module):
    """torchvision's shuffle of a concatenation (ShuffleNetV2's), of a value that another op
    reads too, with ``.shape`` and ``-1``, and a view that only looks like a shuffle."""

    def forward(self, a, b):
        from torchvision.models.shufflenetv2 import channel_shuffle

        first = channel_shuffle(torch.cat((a, b), dim=1), 2)
        doubled = first * 2  # read by the next shuffle and by the sum
        n, c, h, w = doubled.shape
        second = doubled.view(n, 4, c // 4, h, w).transpose(1, 2).contiguous().view(n, -1, h, w)
        n, c, h, w = second.size()
        flat = second.view(n, 2, c // 2, h * w).transpose(1, 2).contiguous().view(n, c, h, w)
        return flat + doubled


def test_optimize_replaces_the_pattern_only():
    model = Shuffles().eval()
    gm = cute_conv.optimize(model)
    assert module_types(gm)[ChannelShuffle] == 2
    assert len(gm.cute_conv_report.shuffles) == 2
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.cat not in calls  # the first shuffle took its concatenation
    assert sum(n.target == "contiguous" for n in gm.graph.nodes) == 1  # the flat view's
    a, b = tensors([(2, 8, 3, 5)] * 2, channels_last=True)
    assert torch.equal(gm(a, b), model(a, b))


def test_a_concatenation_read_elsewhere_stays():
    class ReadTwice(nn.Module):
        def forward(self, a, b):
            from torchvision.models.shufflenetv2 import channel_shuffle

            both = torch.cat([a, b], 1)
            return channel_shuffle(both, 2) + both

    model = ReadTwice().eval()
    gm = cute_conv.optimize(model)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert len(gm.cute_conv_report.shuffles) == 1 and torch.cat in calls
    a, b = tensors([(1, 8, 2, 3)] * 2, channels_last=False)
    assert torch.equal(gm(a, b), model(a, b))


def test_compiles_into_one_graph():
    inputs = tensors([(2, 8, 3, 3)] * 2, channels_last=True)
    compiled = torch.compile(ChannelShuffle(2), fullgraph=True, backend="eager")
    assert torch.equal(compiled(*inputs), ChannelShuffle(2)(*inputs))


def test_shufflenet_computes_the_model_on_cpu(kernel_calls):  # noqa: F811
    model = build("shufflenet_v2_x1_0")
    x = torch.randn(2, 3, 64, 64).to(memory_format=torch.channels_last)
    gm = cute_conv.optimize(model)
    assert len(gm.cute_conv_report.shuffles) == 16
    with torch.no_grad():
        reference = build("shufflenet_v2_x1_0", torch.float32)(x)
        torch_bf16 = model(x.to(BF16)).float()
        ours = gm(x.to(BF16)).float()
    assert kernel_calls  # the fused convs ran as the kernels' reference
    assert_no_worse_than_torch(ours, torch_bf16, reference)


@requires_sm90
def test_shufflenet_logits_on_the_gpu():
    model = build("shufflenet_v2_x1_0").cuda().to(memory_format=torch.channels_last)
    gm = cute_conv.optimize(model)
    x = torch.randn(8, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    reference_model = build("shufflenet_v2_x1_0", torch.float32).cuda()
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        reference = reference_model(x.to(memory_format=torch.channels_last))
        torch_bf16 = model(x.to(BF16)).float()
        ours = gm(x.to(BF16)).float()
    assert not ours.isnan().any()
    assert_no_worse_than_torch(ours, torch_bf16, reference)
