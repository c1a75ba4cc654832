"""Growing concatenations in one buffer (``cute_conv.concat``, DenseNet's dense blocks under
``optimize``): the buffer's prefixes equal ``torch.cat`` of the growing lists, a piece of
another size is refused, which chains ``optimize`` takes and which it leaves, the kernels'
reads of the prefixes in place, and torch.compile's trace."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import cute_conv
from cute_conv.concat import concat_buffer, concat_prefix, concat_slice, concat_write
from tests.gpu import requires_sm90
from tests.test_nn import conv_outs, kernel_calls, random_bn  # noqa: F401 - fixtures
from tests.test_optimize import (
    BF16,
    assert_no_worse_than_torch,
    build,
    copy_to,
    float32_bf16_and_ours,
)


def growing(first, pieces):
    """The buffer's prefix views after each piece, as ``optimize``'s graph makes them."""
    after = sum(p.shape[1] for p in pieces)
    buffer = concat_buffer(first, after)
    views = [concat_prefix(buffer, after)]
    for piece in pieces:
        after -= piece.shape[1]
        buffer = concat_write(buffer, piece, after)
        views.append(concat_prefix(buffer, after))
    return views


@pytest.mark.parametrize("channels_last", [True, False])
def test_prefixes_equal_torch_cat_of_the_growing_lists(channels_last):
    gen = torch.Generator().manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    first = torch.randn(2, 16, 5, 3, generator=gen).contiguous(memory_format=fmt)
    pieces = [torch.randn(2, c, 5, 3, generator=gen) for c in (8, 24, 8)]
    views = growing(first, pieces)
    for i, view in enumerate(views):
        assert torch.equal(view, torch.cat([first, *pieces[:i]], 1))
        assert view.permute(0, 2, 3, 1).stride() == (15 * 56, 3 * 56, 56, 1)  # one buffer
    assert views[-1].is_contiguous(memory_format=torch.channels_last)


def test_a_piece_of_another_size_is_refused():
    buffer = concat_buffer(torch.zeros(2, 8, 4, 4), 8)
    with pytest.raises(ValueError, match=r"shape \(1, 8, 4, 4\) does not concatenate"):
        concat_write(buffer, torch.zeros(1, 8, 4, 4), 0)  # would broadcast
    with pytest.raises(ValueError, match=r"shape \(2, 8, 4, 5\) does not concatenate"):
        concat_write(buffer, torch.zeros(2, 8, 4, 5), 0)


class _AtenOps(TorchDispatchMode):
    """The aten ops run inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def test_a_piece_written_in_its_slice_is_not_copied_again():
    first, piece = torch.randn(2, 16, 5, 3), torch.randn(2, 8, 5, 3)
    buffer = concat_buffer(first, 16)
    part = concat_slice(buffer, 8, 8)  # the channels after the first, before the last 8
    part.copy_(piece)  # as the piece's conv writes it (out=part)
    with _AtenOps() as ops:
        assert concat_write(buffer, part, 8) is buffer
    assert "copy_" not in ops.names
    with _AtenOps() as ops:
        concat_write(buffer, piece, 8)  # a tensor of its own: copied
    assert "copy_" in ops.names
    assert torch.equal(concat_prefix(buffer, 8), torch.cat([first, piece], 1))


def test_traces_into_one_graph():
    first, a, b = (torch.randn(1, c, 3, 3) for c in (8, 8, 16))
    compiled = torch.compile(lambda *t: growing(t[0], t[1:])[-1] * 2, fullgraph=True,
                             backend="eager")  # fmt: skip
    assert torch.equal(compiled(first, a, b), torch.cat([first, a, b], 1) * 2)


class DenseBlock(nn.Module):
    """DenseNet's block: each layer a BatchNorm + ReLU of the concatenation so far, then a
    3x3 conv of ``growth`` channels; ``read_elsewhere``: the last concatenation also read by
    a torch op (no buffer then)."""

    def __init__(self, channels: int, growth: int, layers: int, read_elsewhere=False) -> None:
        super().__init__()
        self.norms = nn.ModuleList(random_bn(channels + i * growth) for i in range(layers + 1))
        self.convs = nn.ModuleList(
            nn.Conv2d(channels + i * growth, growth, 3, padding=1, bias=False)
            for i in range(layers)
        )
        self.read_elsewhere = read_elsewhere

    def forward(self, x):
        features = [x]
        for norm, conv in zip(self.norms, self.convs, strict=False):
            features.append(conv(torch.relu(norm(torch.cat(features, 1)))))
        both = torch.cat(features, 1)
        y = torch.relu(self.norms[-1](both))
        return y + both.mean() if self.read_elsewhere else y


def cat_calls(gm) -> int:
    return sum(n.target is torch.cat for n in gm.graph.nodes)


def test_optimize_keeps_a_dense_block_in_one_buffer(kernel_calls, conv_outs):  # noqa: F811
    torch.manual_seed(1)
    model = DenseBlock(16, 8, 3).eval()
    gm = cute_conv.optimize(copy_to(model, BF16))
    assert gm.cute_conv_report.concats == [
        "x: 4 concatenations, 3 of 3 pieces written in place by their convs"
    ]
    assert cat_calls(gm) == 0
    x = torch.randn(2, 16, 6, 5).to(memory_format=torch.channels_last)
    reference, torch_bf16, ours = float32_bf16_and_ours(model, gm, x)
    # 4 BatchNorm + ReLU (depthwise 1x1s of the grouped kernel) and 3 convs
    assert len(kernel_calls) == 7
    wide = [t for t, _, _ in kernel_calls if t.stride(2) == 40]  # the buffer: 16 + 3 * 8
    assert len(wide) == 4 and len({t.data_ptr() for t in wide}) == 1  # read in place
    # Each conv wrote its 8 channels of that buffer (NHWC slices), in order after the first 16.
    buffer = wide[0].data_ptr()
    assert [o.stride() for o in conv_outs] == [(6 * 5 * 40, 5 * 40, 40, 1)] * 3
    assert [(o.data_ptr() - buffer) // 2 for o in conv_outs] == [16, 24, 32]
    assert_no_worse_than_torch(ours, torch_bf16, reference)


def test_a_concatenation_read_by_a_torch_op_leaves_the_chain():
    model = DenseBlock(16, 8, 2, read_elsewhere=True).eval()
    gm = cute_conv.optimize(copy_to(model, BF16))
    assert not gm.cute_conv_report.concats and cat_calls(gm) == 3


class Branches(nn.Module):
    """Inception's block: branches of conv + BatchNorm + ReLU on one input (one of them two
    convs deep, one past a pool), concatenated; ``read_elsewhere``: the first branch's output
    also added to the result; ``pool_piece``: the pool's output itself one more piece."""

    def __init__(self, read_elsewhere=False, pool_piece=False) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(16, 8, 1), random_bn(8), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(16, 8, 1), nn.ReLU(), nn.Conv2d(8, 24, 3, padding=1))
        self.c = nn.Sequential(nn.AvgPool2d(3, 1, 1), nn.Conv2d(16, 16, 1), nn.ReLU())
        self.read_elsewhere, self.pool_piece = read_elsewhere, pool_piece

    def forward(self, x):
        a = self.a(x)
        pieces = [a, self.b(x), self.c(x)] + ([F.max_pool2d(x, 3, 1, 1)] if self.pool_piece else [])
        y = torch.cat(pieces, 1)
        return y + a.mean() if self.read_elsewhere else y


def test_optimize_has_branch_convs_write_their_channels_of_one_buffer(conv_outs):  # noqa: F811
    torch.manual_seed(2)
    model = Branches().eval()
    gm = cute_conv.optimize(copy_to(model, BF16))
    assert gm.cute_conv_report.concat_writes == [
        "cat: 3 of 3 pieces written in place by their convs"
    ]
    assert cat_calls(gm) == 0
    x = torch.randn(2, 16, 7, 6).to(memory_format=torch.channels_last)
    reference, torch_bf16, ours = float32_bf16_and_ours(model, gm, x)
    # The branches' last convs: 8, 24 and 16 channels.
    written = [o for o in conv_outs if o is not None]
    assert [o.shape[3] for o in written] == [8, 24, 16]
    assert [o.stride() for o in written] == [(7 * 6 * 48, 6 * 48, 48, 1)] * 3
    buffer = written[0].data_ptr()
    assert [(o.data_ptr() - buffer) // 2 for o in written] == [0, 8, 32]
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert_no_worse_than_torch(ours, torch_bf16, reference)


@pytest.mark.parametrize(
    "branches, expected",
    [
        (dict(read_elsewhere=True), ["cat: 2 of 3 pieces written in place by their convs"]),
        (dict(pool_piece=True), []),  # a piece of channels unknown before it runs
    ],
    ids=["a-piece-read-elsewhere-is-copied", "a-pool-piece-leaves-torch-cat"],
)
def test_concatenations_only_partly_or_not_written_by_their_convs(kernel_calls, branches, expected):  # noqa: F811
    torch.manual_seed(3)  # the weights too: built here, not when the module is collected
    model = Branches(**branches).eval()
    gm = cute_conv.optimize(copy_to(model, BF16))
    assert gm.cute_conv_report.concat_writes == expected
    assert cat_calls(gm) == (0 if expected else 1)
    x = torch.randn(2, 16, 5, 4).to(memory_format=torch.channels_last)
    reference, torch_bf16, ours = float32_bf16_and_ours(model, gm, x)
    assert_no_worse_than_torch(ours, torch_bf16, reference)


@pytest.mark.parametrize(
    "name, concatenations, written, pieces",
    [("googlenet", 9, 36, 36), ("inception_v3", 15, 44, 50), ("squeezenet1_1", 8, 16, 16)],
)
def test_torchvision_models_concatenations_written_by_their_convs(
    name, concatenations, written, pieces
):
    """GoogLeNet's nine inception blocks and SqueezeNet's eight fire modules: every piece a
    conv's, written in place. Inception-v3: its A and C blocks likewise; its B and D blocks'
    max pool of the block before copied in (its channels known from that block's buffer);
    its E blocks' inner pairs written in place, then copied into the outer buffer."""
    import torchvision

    kwargs = {"aux_logits": False, "init_weights": False} if name != "squeezenet1_1" else {}
    model = getattr(torchvision.models, name)(weights=None, **kwargs).eval().to(BF16)
    report = cute_conv.optimize(model).cute_conv_report
    counts = [
        re.fullmatch(r"\w+: (\d+) of (\d+) pieces written in place by their convs", line)
        for line in report.concat_writes
    ]
    assert len(counts) == concatenations and all(counts), report.concat_writes
    assert sum(int(c[1]) for c in counts) == written
    assert sum(int(c[2]) for c in counts) == pieces


def test_optimized_inception_v3_computes_the_model_on_cpu(kernel_calls):  # noqa: F811
    """Its 15 concatenations rewritten (pieces written in place, pools and inner pairs
    copied in at the offsets the graph gives them): the logits as close to the float32
    model's as torch's own bf16 model's."""
    model = build("inception_v3")
    x = torch.randn(1, 3, 96, 96).to(memory_format=torch.channels_last)
    gm = cute_conv.optimize(model)
    with torch.no_grad():
        reference = build("inception_v3", torch.float32)(x)
        torch_bf16 = model(x.to(BF16)).float()
        ours = gm(x.to(BF16)).float()
    assert len(gm.cute_conv_report.concat_writes) == 15 and cat_calls(gm) == 0
    assert_no_worse_than_torch(ours, torch_bf16, reference)


class _Traced(Exception):
    """Raised by ``_capture``: the graph was traced whole, nothing runs."""


def _capture(graphs):
    def backend(graph, example_inputs):
        graphs.append(graph)
        raise _Traced

    return backend


@pytest.mark.parametrize("block, convs", [("dense", 3), ("branches", 4)])
def test_optimized_concatenations_trace_whole(block, convs):
    """Under ``torch.compile(fullgraph=True)`` the rewritten blocks trace into one graph (on
    CPU tensors, the backend stopping before anything runs): nothing reads a tensor's address
    while tracing; the convs return their pieces, which are copied in."""
    torch.manual_seed(1)
    model = (DenseBlock(16, 8, 3) if block == "dense" else Branches()).eval()
    gm = cute_conv.optimize(copy_to(model, BF16))
    x = torch.randn(2, 16, 6, 5).to(memory_format=torch.channels_last).to(BF16)
    graphs = []
    with torch.no_grad(), pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as failed:
        torch.compile(gm, fullgraph=True, backend=_capture(graphs))(x)
    assert isinstance(failed.value.inner_exception, _Traced) and len(graphs) == 1
    ops = [n for n in graphs[0].graph.nodes if "cute_conv.conv2d_fprop" in str(n.target)]
    assert len(ops) == convs


@requires_sm90
@pytest.mark.parametrize("block", ["dense", "branches"])
def test_optimized_concatenations_on_the_gpu(block):
    """A dense block and Inception's branches, the convs writing their channels of the
    buffers; eager, and under ``torch.compile(fullgraph=True)`` (where the fused modules copy
    the prefix views, a tensor's offset does not trace, and every piece is copied in): as
    close to float32 as torch's bf16."""
    torch.manual_seed(1)
    model = (DenseBlock(16, 8, 3) if block == "dense" else Branches()).eval().cuda()
    gm = cute_conv.optimize(copy_to(model, BF16))
    x = torch.randn(4, 16, 28, 30, device="cuda").to(memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # a float32 reference
        reference, torch_bf16, ours = float32_bf16_and_ours(model, gm, x)
    assert not ours.isnan().any()
    assert_no_worse_than_torch(ours, torch_bf16, reference)
    with torch.no_grad():
        compiled = torch.compile(gm, fullgraph=True)(x.to(BF16)).float()
    assert_no_worse_than_torch(compiled, torch_bf16, reference)
