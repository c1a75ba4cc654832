"""cute_conv.optimize: the rewritten graphs of torchvision models and hand-made ones (what is
fused, what is left and why), the rewritten model's function on a CPU (kernel functions
replaced by the float32 reference, see tests/test_nn.py; under torch.compile, cute_conv's ops
run by their CPU reference forward, see tests/test_autograd.py), errors, and (on a Hopper GPU)
ResNet logits against torch's own bf16 model, CUDA graphs and torch.compile."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

import cute_conv
from cute_conv.channel_norm import ChannelLayerNorm
from cute_conv.pooling import AvgPool2d, GlobalAvgPool2d, MaxPool2d, TiledMaxPool2d
from cute_conv.testing import compare_to_reference
from tests.gpu import requires_sm90
from tests.test_autograd import reference_forward_on_cpu
from tests.test_nn import kernel_calls, random_bn  # noqa: F401 - kernel_calls is a fixture

BF16 = torch.bfloat16


def torchvision_models():
    """``torchvision.models``: model definitions, built with weights=None (no network)."""
    try:
        import torchvision
    except Exception as exc:  # not installed, or a build made for another torch
        pytest.skip(f"torchvision does not import: {type(exc).__name__}: {exc}")
    return torchvision.models


def build(name: str, dtype=BF16, norm: str = "batch") -> nn.Module:
    """A torchvision model in eval mode, with random BatchNorm statistics (so that folding
    them matters); ``norm``: "batch" (BatchNorm2d), "frozen" (torchvision's
    FrozenBatchNorm2d, as pretrained detection backbones hold) or "sync" (SyncBatchNorm, as
    models trained across GPUs hold)."""
    torch.manual_seed(0)
    models = torchvision_models()
    kwargs = {"norm_layer": frozen_batch_norm_type()} if norm == "frozen" else {}
    if name in ("googlenet", "inception_v3"):  # eval-mode logits alone, torch's init
        kwargs |= {"aux_logits": False, "init_weights": False}
    model = getattr(models, name)(weights=None, **kwargs)
    for module in model.modules():
        if isinstance(module, (nn.BatchNorm2d, frozen_batch_norm_type())):
            module.load_state_dict(random_bn(module.running_mean.shape[0]).state_dict())
    if norm == "sync":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model.to(dtype).eval()


def frozen_batch_norm_type() -> type:
    import torchvision.ops

    return torchvision.ops.FrozenBatchNorm2d


def module_types(model: nn.Module) -> dict[type, int]:
    counts: dict[type, int] = {}
    for module in model.modules():
        counts[type(module)] = counts.get(type(module), 0) + 1
    return counts


# ------------------------------------------------------------------------------ torchvision graphs

RESNET_COUNTS = {
    # stem + one conv+bn+relu per block but the last conv, which adds the identity first;
    # the downsample convs (conv+bn) feed the add.
    "resnet18": {"conv+bn+relu": 9, "conv+bn+add+relu": 8, "conv+bn": 3},
    "resnet50": {"conv+bn+relu": 33, "conv+bn+add+relu": 16, "conv+bn": 4},
    "resnet101": {"conv+bn+relu": 67, "conv+bn+add+relu": 33, "conv+bn": 4},
}


@pytest.mark.parametrize("name", list(RESNET_COUNTS))
def test_resnets_fuse_every_conv(name):
    gm = cute_conv.optimize(build(name))
    report = gm.cute_conv_report
    assert isinstance(gm, fx.GraphModule)
    assert report.counts() == RESNET_COUNTS[name] and not report.left
    types = module_types(gm)
    assert types[cute_conv.nn.Conv2d] == sum(RESNET_COUNTS[name].values())
    assert nn.Conv2d not in types and nn.BatchNorm2d not in types and nn.ReLU not in types
    # The 3x3 stride-2 pool's windows overlap: one pass of cute_conv's pool kernel.
    assert nn.MaxPool2d not in types and types[MaxPool2d] == 1 and report.pools == ["maxpool"]
    assert not [n for n in gm.graph.nodes if n.op == "call_function" and "add" in n.name]
    fused = dict(gm.named_modules())
    for chain in report.fused:
        module = fused[chain.module]
        assert module.scale is not None and module.activation == (
            "relu" if chain.pattern.endswith("relu") else None
        )
        if "add" in chain.pattern:
            assert module.residual_order == "before_activation"
            (node,) = [n for n in gm.graph.nodes if n.target == chain.module]
            assert len(node.args) == 2  # (x, identity)


def test_frozen_batch_norms_fold_as_batch_norms():
    """Pretrained torchvision detection backbones hold FrozenBatchNorm2d: ResNet-50 with them
    fuses as with BatchNorm2d, and ResNeXt-50's grouped convs fuse theirs."""
    gm = cute_conv.optimize(build("resnet50", norm="frozen"))
    assert gm.cute_conv_report.counts() == RESNET_COUNTS["resnet50"]
    gm = cute_conv.optimize(build("resnext50_32x4d", norm="frozen"))
    assert gm.cute_conv_report.counts()["conv+bn+relu"] == 33
    assert not gm.cute_conv_report.left
    assert frozen_batch_norm_type() not in module_types(gm)
    # A detection model does not trace whole; its ResNet-50-FPN backbone does (the FPN's
    # lateral and output convs have no BatchNorm).
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    backbone = resnet_fpn_backbone(
        backbone_name="resnet50", weights=None, norm_layer=frozen_batch_norm_type()
    )
    gm = cute_conv.optimize(backbone.to(BF16).eval())
    # three lateral 1x1s with the top-down add (past the read of their shape), five alone
    assert gm.cute_conv_report.counts() == {**RESNET_COUNTS["resnet50"], "conv+add": 3, "conv": 5}


class TopDownAdd(nn.Module):
    """An FPN level: the lateral conv's output, read for its shape first (the size the coarser
    level is upsampled to, and its channels), plus that upsampling, then a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.lateral = nn.Conv2d(8, 16, 1)
        self.coarse = nn.Conv2d(8, 16, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        lateral = self.lateral(x)
        up = F.interpolate(self.coarse(x), size=lateral.shape[-2:], mode="nearest")
        return F.relu(lateral + up), lateral.size(1)


def test_shape_reads_do_not_stop_a_chain(kernel_calls):  # noqa: F811
    torch.manual_seed(11)
    model = TopDownAdd().eval()
    gm = cute_conv.optimize(copy_to(model, BF16))
    assert gm.cute_conv_report.counts() == {"conv": 1, "conv+add+relu": 1}
    x = torch.randn(2, 8, 9, 13).to(memory_format=torch.channels_last)
    with torch.no_grad():
        reference, _ = model(x)
        torch_bf16 = copy_to(model, BF16)(x.to(BF16))[0].float()
        ours, channels = gm(x.to(BF16))
    assert channels == 16 and len(kernel_calls) == 2 and kernel_calls[1][2] is not None
    assert_no_worse_than_torch(ours.float(), torch_bf16, reference)


def test_shape_reads_compile_into_one_graph_on_cpu():
    torch.manual_seed(11)
    model = TopDownAdd().eval()
    compiled = torch.compile(cute_conv.optimize(copy_to(model, BF16)), backend="eager",
                             fullgraph=True)  # fmt: skip
    x = torch.randn(2, 8, 9, 13).to(memory_format=torch.channels_last)
    with torch.no_grad(), reference_forward_on_cpu():
        reference, _ = model(x)
        torch_bf16 = copy_to(model, BF16)(x.to(BF16))[0].float()
        ours, channels = compiled(x.to(BF16))
    assert channels == 16
    assert_no_worse_than_torch(ours.float(), torch_bf16, reference)


def test_resnext_fuses_every_grouped_conv():
    """ResNeXt-50 32x4d's grouped 3x3s fuse with their BatchNorm and ReLU: those of 8, 16 and
    32 output channels per group for the grouped kernel, layer1's of 4 for cuDNN's."""
    gm = cute_conv.optimize(build("resnext50_32x4d"))
    report = gm.cute_conv_report
    assert report.counts() == {"conv+bn+relu": 33, "conv+bn+add+relu": 16, "conv+bn": 4}
    assert not report.left
    grouped = {
        name: m
        for name, m in gm.named_modules()
        if isinstance(m, cute_conv.nn.Conv2d) and m.groups > 1
    }
    assert len(grouped) == 16 and {m.groups for m in grouped.values()} == {32}
    cudnn_only = {name for name, m in grouped.items() if not m._grouped_kernel_takes}
    assert cudnn_only == {f"layer1.{i}.conv2" for i in range(3)}
    types = module_types(gm)
    assert nn.Conv2d not in types and nn.BatchNorm2d not in types


@pytest.mark.parametrize(
    "name, counts, depthwise",
    [
        ("mobilenet_v3_large", {"conv+bn+hardswish": 20, "conv+bn+add": 10, "conv+relu": 8,
                                "conv+hardsigmoid": 8, "conv+bn+relu": 11, "conv+bn": 5}, 15),
        ("mobilenet_v2", {"conv+bn+relu6": 35, "conv+bn+add": 10, "conv+bn": 7}, 17),
    ],
)  # fmt: skip
def test_mobilenets_fuse_their_activations(name, counts, depthwise):
    """ReLU6, Hardswish and the squeeze-excitation's Hardsigmoid run in the epilogue; the
    depthwise convs run the grouped kernel with their BatchNorm and activation."""
    gm = cute_conv.optimize(build(name))
    assert gm.cute_conv_report.counts() == counts and not gm.cute_conv_report.left
    grouped = [m for m in gm.modules() if isinstance(m, cute_conv.nn.Conv2d) and m.groups > 1]
    assert len(grouped) == depthwise
    assert all(m.groups == m.in_channels == m.out_channels for m in grouped)


def test_vgg16_fuses_conv_relu():
    gm = cute_conv.optimize(build("vgg16"))
    assert gm.cute_conv_report.counts() == {"conv+relu": 13}
    types = module_types(gm)
    assert nn.Conv2d not in types and types[nn.ReLU] == 2  # the classifier's
    assert all(m.scale is None for m in gm.modules() if isinstance(m, cute_conv.nn.Conv2d))
    # its 2x2 stride-2 pools tile the map: amax over a view, not torch's channels_last pool
    assert nn.MaxPool2d not in types and types[TiledMaxPool2d] == 5
    assert len(gm.cute_conv_report.pools) == 5
    assert "max and average pools run by cute_conv: 5" in str(gm.cute_conv_report)


@pytest.mark.parametrize(
    "name, avg_pools", [("efficientnet_b0", 17), ("mobilenet_v3_large", 9), ("resnet18", 1)]
)
def test_global_average_pools_become_gemvs(name, avg_pools):
    """Squeeze-excitation blocks' and classifier heads' ``nn.AdaptiveAvgPool2d(1)``."""
    gm = cute_conv.optimize(build(name))
    types = module_types(gm)
    assert nn.AdaptiveAvgPool2d not in types and types[GlobalAvgPool2d] == avg_pools
    assert len(gm.cute_conv_report.avg_pools) == avg_pools
    assert f"global average pools run as GEMVs: {avg_pools}" in str(gm.cute_conv_report)
    again = cute_conv.optimize(gm)  # a GlobalAvgPool2d traces as a leaf
    assert module_types(again)[GlobalAvgPool2d] == avg_pools and not again.cute_conv_report.avg_pools


class FunctionalMeans(nn.Module):
    """Global average pools written as functions and tensor methods, and means that are not."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            F.adaptive_avg_pool2d(x, 1),  # rewritten, as the next three
            x.mean((2, 3), keepdim=True),
            torch.mean(x, dim=[-2, -1]),
            F.adaptive_avg_pool2d(x, output_size=(1, 1)),
            x.mean((1, 2)),  # other dims
            x.mean((2, 3), dtype=torch.float32),  # a dtype
            F.adaptive_avg_pool2d(x, 2),  # other output sizes
            F.adaptive_avg_pool2d(x, (1, None)),
        )


class FunctionalMaxPools(nn.Module):
    """``F.max_pool2d`` calls: overlapping windows, windows that tile the map, ceil mode
    (rewritten), and one returning indices (left)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            F.max_pool2d(x, 3, 2, 1),
            F.max_pool2d(x, kernel_size=2),
            F.max_pool2d(x, 3, stride=2, ceil_mode=True),
            F.max_pool2d(x, 2, return_indices=True)[0],
        )


def test_functional_max_pools_become_modules():
    gm = cute_conv.optimize(FunctionalMaxPools().eval())
    pools = [m for m in gm.modules() if isinstance(m, (MaxPool2d, TiledMaxPool2d))]
    assert [type(p) for p in pools] == [MaxPool2d, TiledMaxPool2d, MaxPool2d]
    assert pools[2].ceil_mode and len(gm.cute_conv_report.pools) == 3
    x = torch.randn(2, 16, 9, 10).to(BF16).to(memory_format=torch.channels_last)
    for ours, expected in zip(gm(x), FunctionalMaxPools()(x), strict=True):  # on the CPU: torch's
        assert torch.equal(ours, expected)


class AveragePools(nn.Module):
    """Inception's ``F.avg_pool2d`` branch pool, a DenseNet transition's ``nn.AvgPool2d`` and
    one of ceil mode without the padding counted: all rewritten."""

    def __init__(self) -> None:
        super().__init__()
        self.transition = nn.AvgPool2d(2, stride=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            F.avg_pool2d(x, kernel_size=3, stride=1, padding=1),
            self.transition(x),
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        )


def test_average_pools_become_modules():
    gm = cute_conv.optimize(AveragePools().eval())
    pools = [m for m in gm.modules() if isinstance(m, AvgPool2d)]
    assert len(pools) == 3 and len(gm.cute_conv_report.pools) == 3
    assert pools[-1].ceil_mode and not pools[-1].count_include_pad
    x = torch.randn(2, 16, 9, 10).to(BF16).to(memory_format=torch.channels_last)
    for ours, expected in zip(gm(x), AveragePools()(x), strict=True):  # on the CPU: torch's
        assert torch.equal(ours, expected)
    compiled = torch.compile(gm, backend="eager", fullgraph=True)  # traced: CPU tensors, torch's
    for ours, expected in zip(compiled(x), AveragePools()(x), strict=True):
        assert torch.equal(ours, expected)


def test_ceil_mode_max_pools_become_modules():
    """GoogLeNet's 13 max pools all round their output sizes up."""
    gm = cute_conv.optimize(
        torchvision_models().googlenet(weights=None, aux_logits=False, init_weights=False)
        .to(BF16).eval()
    )  # fmt: skip
    pools = [m for m in gm.modules() if isinstance(m, MaxPool2d)]
    assert len(pools) == len(gm.cute_conv_report.pools) == 13 and all(p.ceil_mode for p in pools)


@pytest.mark.parametrize(
    ("name", "max_pools", "avg_pools"), [("inception_v3", 4, 9), ("densenet121", 1, 3)]
)
def test_models_average_pools_become_modules(name, max_pools, avg_pools):
    """Inception-v3's branch pools (``F.avg_pool2d``) and DenseNet-121's transitions
    (``nn.AvgPool2d``): every pool of the model is cute_conv's, no conv is left."""
    kwargs = {"aux_logits": False, "init_weights": False} if name == "inception_v3" else {}
    model = getattr(torchvision_models(), name)(weights=None, **kwargs)
    gm = cute_conv.optimize(model.to(BF16).eval())
    types = module_types(gm)
    assert types[AvgPool2d] == avg_pools and types[MaxPool2d] == max_pools
    assert len(gm.cute_conv_report.pools) == max_pools + avg_pools
    assert not gm.cute_conv_report.left
    assert not any(type(m) in (nn.AvgPool2d, nn.MaxPool2d) for m in gm.modules())


def test_functional_global_means_become_gemvs():
    gm = cute_conv.optimize(FunctionalMeans().eval())
    pools = [m for m in gm.modules() if isinstance(m, GlobalAvgPool2d)]
    assert [(p.dims, p.keepdim) for p in pools] == [
        (None, True), ((2, 3), True), ((-2, -1), False), (None, True)
    ]
    assert len(gm.cute_conv_report.avg_pools) == 4
    x = torch.randn(2, 16, 5, 7).to(BF16).to(memory_format=torch.channels_last)
    for ours, expected in zip(gm(x), FunctionalMeans()(x), strict=True):  # on the CPU: torch's ops
        assert ours.shape == expected.shape and torch.equal(ours, expected)


def test_float32_model_is_left_with_the_reason():
    gm = cute_conv.optimize(build("resnet18", torch.float32))
    report = gm.cute_conv_report
    assert not report.fused and len(report.left) == 20
    assert all("dtype torch.float32" in left.reason for left in report.left)
    assert "model.to(torch.bfloat16)" in str(report)
    assert module_types(gm)[nn.Conv2d] == 20


def test_report_reads(capsys):
    gm = cute_conv.optimize(build("resnet18"), verbose=True)
    printed = capsys.readouterr().out
    assert printed.strip() == str(gm.cute_conv_report)
    assert printed.startswith("cute_conv.optimize: 20 convs fused, 0 left to torch\n")
    assert "     8 x conv+bn+add+relu" in printed
    assert (
        "layer1.0.conv2: conv+bn+add+relu "
        "(layer1.0.conv2, layer1.0.bn2, add, layer1.0.relu)" in printed
    )


def test_inplace_false_leaves_the_model_and_inplace_true_shares_weights():
    model = build("resnet18").to(memory_format=torch.channels_last)
    copied = cute_conv.optimize(model)
    assert type(model.conv1) is nn.Conv2d and type(model.bn1) is nn.BatchNorm2d
    assert copied.conv1.weight.data_ptr() != model.conv1.weight.data_ptr()
    shared = cute_conv.optimize(model, inplace=True)
    assert shared.conv1.weight.data_ptr() == model.conv1.weight.data_ptr()


def test_an_optimized_model_traces_again_unchanged():
    gm = cute_conv.optimize(build("resnet18"))
    again = cute_conv.optimize(gm)
    assert not again.cute_conv_report.fused and not again.cute_conv_report.left
    assert module_types(again)[cute_conv.nn.Conv2d] == 20


# ------------------------------------------------------------------------------ errors


def test_training_mode_is_an_error():
    model = build("resnet18").train()
    with pytest.raises(ValueError, match="training mode .*call model.eval"):
        cute_conv.optimize(model)
    model.eval().layer2[0].bn1.train()
    with pytest.raises(ValueError, match="'layer2.0.bn1'"):
        cute_conv.optimize(model)


def test_not_a_module_is_an_error():
    with pytest.raises(TypeError, match="torch.nn.Module, got function"):
        cute_conv.optimize(F.relu)


# ------------------------------------------------------------------------------ hand-made models


class Mixed(nn.Module):
    """No BatchNorm; every way of writing an activation; chains that must stop early."""

    def __init__(self) -> None:
        super().__init__()

        def conv(**kwargs):
            return nn.Conv2d(16, 16, 3, padding=1, **kwargs)

        self.c1, self.act1 = nn.Conv2d(8, 16, 3, padding=1), nn.GELU("tanh")
        self.c2, self.c3, self.c4, self.c5, self.c7, self.shared = (conv() for _ in range(6))
        self.c6 = conv(padding_mode="reflect")
        self.grouped = conv(groups=4)  # 4 output channels per group: cuDNN's
        self.c8 = nn.Conv2d(16, 16, 3, padding=1, stride=9)

    def forward(self, x):
        y = self.act1(self.c1(x))  # conv+gelu_tanh
        y = F.leaky_relu(self.c2(y), negative_slope=0.01, inplace=True)  # conv+leaky_relu
        y = self.c3(y).sigmoid_()  # conv+sigmoid
        y = F.leaky_relu(self.c4(y), 0.2)  # conv; stopped: the slope
        y = torch.relu_(self.c5(y)) + y  # conv+relu+add (after the activation)
        y = self.c6(y)  # left: reflect padding
        a = self.c7(y)
        y = torch.tanh(a) + a  # conv alone: its output has two users
        y = self.shared(F.silu(self.shared(y)))  # two fused modules, one per call
        return self.grouped(y) + self.c8(y).mean()  # a residual that broadcasts; c8 left


def test_mixed_model_graph():
    gm = cute_conv.optimize(Mixed().to(BF16).eval())
    report = gm.cute_conv_report
    patterns = {chain.module: chain.pattern for chain in report.fused}
    assert patterns == {
        "c1": "conv+gelu_tanh", "c2": "conv+leaky_relu", "c3": "conv+sigmoid", "c4": "conv",
        "c5": "conv+relu+add", "c7": "conv", "shared_fused0": "conv+silu",
        "shared_fused1": "conv", "grouped": "conv+add",
    }  # fmt: skip
    stopped = {chain.module: chain.stopped for chain in report.fused if chain.stopped}
    assert list(stopped) == ["c4"] and "slope 0.01 only" in stopped["c4"]
    reasons = {left.name: left.reason for left in report.left}
    assert list(reasons) == ["c6", "c8"]
    assert "padding_mode='reflect'" in reasons["c6"]
    assert "stride must be in 1..8" in reasons["c8"]
    assert gm.c5.residual_order == "after_activation" and gm.c5.activation == "relu"
    assert not hasattr(gm, "shared")  # replaced by its two fused modules


def test_mixed_model_computes_the_same_on_cpu(kernel_calls):  # noqa: F811
    torch.manual_seed(6)
    model = Mixed().to(BF16).eval()
    x = torch.randn(2, 8, 12, 10).to(BF16).to(memory_format=torch.channels_last)
    gm = cute_conv.optimize(model)
    with torch.no_grad():
        expected = model.float()(x.float())
        out = gm(x)
    assert len(kernel_calls) == 8
    rel = ((out.float() - expected).norm() / expected.norm()).item()
    assert rel < 1e-2, rel


def test_patch_embedding_is_taken(kernel_calls):  # noqa: F811
    """A ViT-style patch embedding (a 16x16 filter at stride 16) is taken, not left to torch
    for its stride: its windows tile the input."""

    class PatchEmbed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Conv2d(3, 32, 16, stride=16)

        def forward(self, x):
            return self.proj(x).flatten(2).transpose(1, 2)

    torch.manual_seed(7)
    model = PatchEmbed().to(BF16).eval()
    gm = cute_conv.optimize(model)
    assert not gm.cute_conv_report.left and gm.cute_conv_report.counts() == {"conv": 1}
    x = torch.randn(2, 3, 64, 48).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = model.float()(x.float())
        out = gm(x)
    assert len(kernel_calls) == 1
    report = compare_to_reference(out, expected)
    assert report.ok, str(report)


def test_conv_bn_add_without_activation(kernel_calls):  # noqa: F811
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(16, 16, 3, padding=1, bias=False), random_bn(16)

        def forward(self, x):
            return torch.add(self.bn(self.conv(x)), x)

    torch.manual_seed(8)
    model = Block().to(BF16).eval()
    gm = cute_conv.optimize(model)
    assert [(c.module, c.pattern) for c in gm.cute_conv_report.fused] == [("conv", "conv+bn+add")]
    assert gm.conv.activation is None and gm.conv.scale is not None
    x = torch.randn(2, 16, 7, 7).to(BF16)
    with torch.no_grad():
        out = gm(x)
        expected = model.float()(x.float())
    ((_, _, source),) = kernel_calls
    assert source is not None
    report = compare_to_reference(out, expected)
    assert report.ok, str(report)


def test_eval_identities_join_the_chain(kernel_calls):  # noqa: F811
    """Dropout in eval mode and torchvision's stochastic depth (EfficientNet's residual
    blocks) return their input: the chain goes on past them; a dropout called with
    training=True does not."""
    stochastic_depth = pytest.importorskip("torchvision.ops").StochasticDepth

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.bn1 = nn.Conv2d(16, 16, 3, padding=1), random_bn(16)
            self.c2, self.c3 = nn.Conv2d(16, 16, 1), nn.Conv2d(16, 16, 1)
            self.drop, self.depth = nn.Dropout(0.3), stochastic_depth(0.2, "row")

        def forward(self, x):
            y = self.depth(self.drop(self.bn1(self.c1(x)))) + x  # conv+bn+add
            y = torch.relu(F.dropout(self.c2(y), 0.1, self.training))  # conv+relu
            return F.dropout(self.c3(y), 0.1, training=True)  # conv: a real dropout

    torch.manual_seed(11)
    model = Block().to(BF16).eval()
    gm = cute_conv.optimize(model)
    report = gm.cute_conv_report
    assert [(c.module, c.pattern) for c in report.fused] == [
        ("c1", "conv+bn+add"), ("c2", "conv+relu"), ("c3", "conv"),
    ]  # fmt: skip
    assert report.fused[0].nodes[:4] == ("c1", "bn1", "drop", "stochastic_depth")
    x = torch.randn(2, 16, 9, 7).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        out = gm.c2(gm.c1(x, x))  # the graph's last dropout is random: check the convs' part
        y = model.float()
        expected = y.c2(y.bn1(y.c1(x.float())) + x.float()).relu()
    assert len(kernel_calls) == 2
    check = compare_to_reference(out, expected)
    assert check.ok, str(check)


def test_functional_conv_and_unfusable_adds():
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 1)
            self.weight = nn.Parameter(torch.randn(8, 8, 1, 1))
            self.offset = nn.Parameter(torch.zeros(1, 8, 1, 1))

        def forward(self, x):
            y = F.conv2d(x, self.weight)
            z = self.conv(y)
            return torch.add(z + self.offset, y, alpha=2)  # a parameter, alpha != 1

    gm = cute_conv.optimize(Functional().to(BF16).eval())
    report = gm.cute_conv_report
    assert [(c.module, c.pattern) for c in report.fused] == [("conv", "conv")]
    assert [left.name for left in report.left] == ["conv2d"]
    assert "functional conv2d" in report.left[0].reason


class LeftConvs(nn.Module):
    """Convs left to torch with a BatchNorm after them: folded where it alone reads the conv
    and the conv is an nn.Conv2d module called with one input."""

    class Shifted(nn.Conv2d):
        def forward(self, x):
            return super().forward(x) + 1

    def __init__(self) -> None:
        super().__init__()
        self.grouped = nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=False, padding_mode="reflect")
        self.bn1 = random_bn(16)
        self.shifted = self.Shifted(16, 16, 3, padding=1, groups=2)
        self.bn2 = random_bn(16)
        self.shared = nn.Conv2d(16, 16, 1, groups=8, padding_mode="reflect")  # two calls, two BNs
        self.bn3, self.bn4 = random_bn(16), random_bn(16)
        self.read_twice = nn.Conv2d(16, 16, 1, groups=16)
        self.bn5 = random_bn(16)
        self.pointwise = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = torch.relu(self.bn1(self.grouped(x)))  # folded
        y = self.bn2(self.shifted(y))  # traced into: a functional conv, +1, then the BN
        y = self.bn4(self.shared(self.bn3(self.shared(y))))  # each call folded on its own
        z = self.read_twice(y)
        y = self.bn5(z) + z  # the BN does not alone read the conv: left with it
        return self.pointwise(y)  # fused


def test_left_convs_fold_the_batchnorm_after_them(kernel_calls):  # noqa: F811
    torch.manual_seed(9)
    model = LeftConvs().to(BF16).eval()
    gm = cute_conv.optimize(model)
    report = gm.cute_conv_report
    # read_twice is depthwise: fused alone (its output has two readers); bn2 (after the
    # functional conv's +1) and bn5 (after it) are lone BatchNorms: depthwise 1x1s
    assert [(c.module, c.pattern) for c in report.fused] == [
        ("bn2", "bn"), ("read_twice", "conv"), ("bn5", "bn"), ("pointwise", "conv"),
    ]  # fmt: skip
    assert [(left.name, left.folded_bn) for left in report.left] == [
        ("grouped", "bn1"), ("conv2d", None), ("shared_fused0", "bn3"), ("shared_fused1", "bn4"),
    ]  # fmt: skip
    assert nn.BatchNorm2d not in module_types(gm)
    assert gm.grouped.weight.dtype == gm.grouped.bias.dtype == BF16
    assert gm.grouped.weight.data_ptr() != model.grouped.weight.data_ptr()
    assert "grouped: padding_mode='reflect'" in str(report)
    assert "; bn1 folded into its weights" in str(report)
    x = torch.randn(2, 16, 9, 7).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        out = gm(x)
        expected = model.float()(x.float())
    assert len(kernel_calls) == 4
    check = compare_to_reference(out, expected)
    assert check.ok, str(check)


def test_left_conv_folds_in_float32():
    """A float32 model's convs are all left, their BatchNorms folded: the same function."""
    torch.manual_seed(10)
    model = build("resnet18", torch.float32)
    gm = cute_conv.optimize(model)
    assert all(left.folded_bn for left in gm.cute_conv_report.left)
    assert nn.BatchNorm2d not in module_types(gm)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ ResNet function


def float32_bf16_and_ours(model: nn.Module, gm: nn.Module, x: torch.Tensor):
    """``model``'s output on float32 ``x``, its bf16 copy's and ``gm``'s on bf16 ``x`` (the
    latter two in float32), without grad."""
    with torch.no_grad():
        reference = model(x)
        torch_bf16 = copy_to(model, BF16)(x.to(BF16)).float()
        return reference, torch_bf16, gm(x.to(BF16)).float()


def assert_no_worse_than_torch(
    ours: torch.Tensor, torch_bf16: torch.Tensor, reference: torch.Tensor
) -> None:
    """Our logits as close to the float32 ``reference`` as torch's own bf16 model's ("no
    worse": within 10%, the noise of two estimates of one rounding error)."""

    def rel(y):
        return ((y - reference).norm() / reference.norm()).item()

    assert rel(ours) <= 1.1 * rel(torch_bf16), (rel(ours), rel(torch_bf16))


@pytest.mark.parametrize(
    "name, norm, convs, residuals",
    [
        ("resnet18", "batch", 20, 8), ("resnet18", "frozen", 20, 8), ("resnet18", "sync", 20, 8),
        ("mobilenet_v3_small", "batch", 52, 6), ("efficientnet_b0", "batch", 81, 9),
        ("densenet121", "batch", 120 + 62, 0),  # its 62 lone BatchNorms: depthwise 1x1s
        ("squeezenet1_1", "batch", 26, 0),  # its expands writing their concatenations' halves
    ],
)
def test_optimized_model_computes_the_model_on_cpu(
    kernel_calls, name, norm, convs, residuals  # noqa: F811
):
    """The rewritten graph feeds each fused module its input and identity (ResNet), the
    epilogue's hardswish and hardsigmoid and the depthwise convs (the grouped kernel's
    contract) run as the model's (MobileNetV3, EfficientNet): the logits are as close to the float32 model's as
    torch's own bf16 model's are."""
    model = build(name, norm=norm)
    x = torch.randn(2, 3, 64, 64).to(memory_format=torch.channels_last)
    gm = cute_conv.optimize(model)
    with torch.no_grad():
        reference = build(name, torch.float32, norm)(x)
        torch_bf16 = model(x.to(BF16)).float()
        ours = gm(x.to(BF16)).float()
    assert len(kernel_calls) == convs and sum(s is not None for *_, s in kernel_calls) == residuals
    assert_no_worse_than_torch(ours, torch_bf16, reference)


def convnext_tiny(dtype=BF16) -> nn.Module:
    """ConvNeXt-T with layer scales of order one (torchvision initializes them to 1e-6, which
    would leave each block's pointwise branch out of the logits): drawn in float32, then
    ``dtype`` (the same model rounded, as ``build``'s)."""
    model = build("convnext_tiny", torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_scale"):
                p.uniform_(0.5, 1.5)
    return model.to(dtype)


def test_convnext_fuses_its_pointwise_linears():
    """ConvNeXt's blocks apply nn.Linear to the channels of an NHWC tensor: the first runs as
    a 1x1 conv with its GELU, the second with the layer scale and the block's residual add
    (NCHW again); the classifier's Linear, on a flattened tensor, stays torch's."""
    gm = cute_conv.optimize(convnext_tiny())
    report = gm.cute_conv_report
    assert report.counts() == {
        "conv": 4, "conv+layer_norm": 18, "linear+gelu": 18, "linear+permute+mul+add": 18
    }
    assert not report.left and module_types(gm)[nn.Linear] == 1  # the classifier
    second = gm.get_submodule("features.1.0.block.5")
    assert second.activation is None and second.residual_order == "after_activation"
    assert second.scale.dtype == torch.float32 and second.scale.shape == (96,)
    first = gm.get_submodule("features.1.0.block.3")
    assert first.activation == "gelu" and first.scale is None and first.weight.shape == (384, 1, 1, 96)
    assert "layer_scale" not in gm.code  # folded, its multiply gone
    # the stem's, the three downsampling layers' and the classifier's LayerNorm2d
    assert len(report.channel_norms) == module_types(gm)[ChannelLayerNorm] == 5
    assert "channel LayerNorms run by the grouped kernel: 5" in str(report)
    assert layer_norm_calls(gm) == 0


class PreActivation(nn.Module):
    """BatchNorm and ReLU on a value no conv wrote (a pre-activation block's, DenseNet's after
    its concatenations), then a conv: as ``norm``'s type is, the BatchNorm is fused or
    not."""

    def __init__(self, norm: type = nn.BatchNorm2d) -> None:
        super().__init__()
        self.conv = nn.Conv2d(16, 24, 3, padding=1)
        self.bn = norm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.relu(self.bn(torch.cat([x, x * 2], dim=1)))[:, :16])


def test_lone_batch_norms_run_on_the_grouped_kernel(kernel_calls):  # noqa: F811
    torch.manual_seed(5)
    model = PreActivation().eval()
    model.bn.load_state_dict(random_bn(32).state_dict())
    gm = cute_conv.optimize(copy_to(model, BF16))
    assert gm.cute_conv_report.counts() == {"bn+relu": 1, "conv": 1}
    assert nn.BatchNorm2d not in module_types(gm) and gm.bn.groups == 32
    x = torch.randn(2, 16, 7, 9).to(memory_format=torch.channels_last)
    reference, torch_bf16, ours = float32_bf16_and_ours(model, gm, x)
    assert len(kernel_calls) == 2
    assert_no_worse_than_torch(ours, torch_bf16, reference)


@pytest.mark.parametrize("norm", [nn.SyncBatchNorm, nn.BatchNorm2d])
def test_lone_batch_norms_left(norm):
    """A SyncBatchNorm (which takes any rank) and a float32 BatchNorm stay torch's."""
    model = PreActivation(norm).eval()
    gm = cute_conv.optimize(model if norm is nn.BatchNorm2d else copy_to(model, BF16))
    assert "bn+relu" not in gm.cute_conv_report.counts() and norm in module_types(gm)


class ChannelNorms(nn.Module):
    """``LayerNorm2d``'s pattern four times: over 16 channels (rewritten), as an
    ``nn.LayerNorm`` module between the permutes (rewritten), with its NHWC permute read by
    another op too (left), and over 13 channels (left: the grouped kernel takes even channel
    counts)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv16 = nn.Conv2d(8, 16, 1)
        self.conv13 = nn.Conv2d(16, 13, 1)
        self.w16, self.b16 = nn.Parameter(torch.rand(16) + 0.5), nn.Parameter(torch.randn(16))
        self.w13, self.b13 = nn.Parameter(torch.rand(13) + 0.5), nn.Parameter(torch.randn(13))
        self.norm = nn.LayerNorm(16, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(self.conv16(x).permute(0, 2, 3, 1), (16,), self.w16, self.b16, 1e-6)
        y = self.norm(y.permute(0, 3, 1, 2).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        nhwc = y.permute(0, 2, 3, 1)
        z = F.layer_norm(nhwc, (16,), eps=1e-6).permute(0, 3, 1, 2) + nhwc.permute(0, 3, 1, 2)
        v = self.conv13(z).permute(0, 2, 3, 1)
        return F.layer_norm(v, (13,), self.w13, self.b13, 1e-6).permute(0, 3, 1, 2)


def test_channel_layer_norms_where_the_pattern_holds(kernel_calls, monkeypatch):  # noqa: F811
    monkeypatch.setattr("cute_conv.channel_norm.KERNEL_MIN_ELEMENTS", 0)  # small maps too
    torch.manual_seed(3)
    model = ChannelNorms().eval()
    gm = cute_conv.optimize(copy_to(model, BF16))
    assert gm.cute_conv_report.channel_norms == ["channel_norm", "norm_channel_norm"]
    assert module_types(gm)[ChannelLayerNorm] == 2 and layer_norm_calls(gm) == 2
    assert nn.LayerNorm not in module_types(gm)
    x = torch.randn(2, 8, 5, 6).to(memory_format=torch.channels_last)
    with torch.no_grad():
        reference = model(x)
        torch_bf16 = copy_to(model, BF16)(x.to(BF16)).float()
        ours = gm(x.to(BF16)).float()
    assert len(kernel_calls) == 4  # two 1x1 convs, two normalizing identity convs
    assert_no_worse_than_torch(ours, torch_bf16, reference)


def test_float32_channel_layer_norms_stay_torch():
    gm = cute_conv.optimize(ChannelNorms().eval())
    assert not gm.cute_conv_report.channel_norms and layer_norm_calls(gm) == 3
    assert module_types(gm)[nn.LayerNorm] == 1


def layer_norm_calls(gm: fx.GraphModule) -> int:
    return sum(node.target is F.layer_norm for node in gm.graph.nodes)


def test_convnext_computes_the_model_on_cpu(kernel_calls, monkeypatch):  # noqa: F811
    monkeypatch.setattr("cute_conv.channel_norm.KERNEL_MIN_ELEMENTS", 0)  # small maps too
    model = convnext_tiny()
    x = torch.randn(2, 3, 64, 64).to(memory_format=torch.channels_last)
    gm = cute_conv.optimize(model)
    with torch.no_grad():
        reference = copy_to(model, torch.float32)(x)
        torch_bf16 = model(x.to(BF16)).float()
        ours = gm(x.to(BF16)).float()
    # 22 convs, 36 Linears, the 3 LayerNorm2d of 96 and 192 channels (ChannelLayerNorm: an
    # identity depthwise conv; those of 384 and 768 run torch's)
    assert len(kernel_calls) == 22 + 36 + 3 and sum(s is not None for *_, s in kernel_calls) == 18
    assert_no_worse_than_torch(ours, torch_bf16, reference)


def test_convnext_compiles_into_one_graph_on_cpu():
    """The fused Linears' permutes and 1x1 convs trace whole under torch.compile."""
    model = convnext_tiny()
    x = torch.randn(2, 3, 64, 64).to(memory_format=torch.channels_last)
    compiled = torch.compile(cute_conv.optimize(model), backend="eager", fullgraph=True)
    with torch.no_grad(), reference_forward_on_cpu():
        reference = copy_to(model, torch.float32)(x)
        torch_bf16 = model(x.to(BF16)).float()
        ours = compiled(x.to(BF16)).float()
    assert_no_worse_than_torch(ours, torch_bf16, reference)


def copy_to(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    return copy.deepcopy(model).to(dtype)


class PointwiseLinears(nn.Module):
    """Linears on NHWC channels that do not all fuse, and one on a flattened tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.act = nn.LeakyReLU(0.2)  # keeps the shape, though the epilogue does not run it
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.gamma = nn.Parameter(torch.rand(16, 1, 1) + 0.5)
        self.head = nn.Linear(16, 8)

    def forward(self, x):
        y = self.fc1(self.act(self.norm(x.permute(0, 2, 3, 1))))  # no activation after it
        y = F.gelu(self.fc2(y)).permute(0, 3, 1, 2) * self.gamma  # the mul after the GELU
        return self.head(y.mean((2, 3))), y


def test_pointwise_linears_fuse_what_the_epilogue_computes(kernel_calls):  # noqa: F811
    torch.manual_seed(8)
    model = PointwiseLinears().to(BF16).eval()
    gm = cute_conv.optimize(model)
    assert gm.cute_conv_report.counts() == {"linear": 1, "linear+gelu+permute": 1}
    assert isinstance(gm.head, nn.Linear)
    x = torch.randn(2, 16, 5, 7).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = copy_to(model, torch.float32)(x.float())
        out = gm(x)
    assert len(kernel_calls) == 2
    for y, ref in zip(out, expected, strict=True):
        assert y.shape == ref.shape
        rel = ((y.float() - ref).norm() / ref.norm()).item()
        assert rel < 1e-2, rel


class ScaledPointwise(nn.Module):
    """A Linear back to NCHW, times a per-channel buffer, plus the input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.register_buffer("gamma", torch.rand(1, 16, 1, 1) + 0.5)

    def forward(self, x):
        return self.fc(F.relu(x.permute(0, 2, 3, 1))).permute(0, 3, 1, 2) * self.gamma + x


def test_a_buffer_layer_scale_and_the_residual_fuse(kernel_calls):  # noqa: F811
    torch.manual_seed(9)
    model = ScaledPointwise().to(BF16).eval()
    gm = cute_conv.optimize(model)
    assert gm.cute_conv_report.counts() == {"linear+permute+mul+add": 1}
    x = torch.randn(2, 16, 5, 7).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = copy_to(model, torch.float32)(x.float())
        out = gm(x)
    assert len(kernel_calls) == 1 and kernel_calls[0][2] is not None  # the residual
    assert ((out.float() - expected).norm() / expected.norm()).item() < 1e-2


class NormedDepthwise(nn.Module):
    """ConvNeXt's depthwise conv -> LayerNorm -> Linear, the LayerNorm's value also returned
    where ``leak`` (then it cannot go)."""

    def __init__(self, leak: bool = False, affine: bool = True) -> None:
        super().__init__()
        self.leak = leak
        self.dw = nn.Conv2d(16, 16, 7, padding=3, groups=16)
        self.norm = nn.LayerNorm(16, eps=1e-6, elementwise_affine=affine)
        self.fc = nn.Linear(16, 32)
        if affine:
            with torch.no_grad():
                self.norm.weight.uniform_(0.5, 1.5)
                self.norm.bias.normal_(0, 0.5)

    def forward(self, x):
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        return (self.fc(y), y) if self.leak else self.fc(y)


@pytest.mark.parametrize("affine", [True, False])
def test_a_layer_norm_after_a_depthwise_conv_runs_in_its_kernel(kernel_calls, affine):  # noqa: F811
    """The depthwise conv normalizes its channels; the LayerNorm's affine is in the Linear."""
    torch.manual_seed(10)
    model = NormedDepthwise(affine=affine).to(BF16).eval()
    gm = cute_conv.optimize(model)
    assert gm.cute_conv_report.counts() == {"conv+layer_norm": 1, "linear": 1}
    assert not any(isinstance(m, nn.LayerNorm) for m in gm.modules())
    assert gm.dw.channel_norm_eps == 1e-6
    x = torch.randn(2, 16, 9, 11).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = copy_to(model, torch.float32)(x.float())
        out = gm(x)
    assert len(kernel_calls) == 2
    assert out.shape == expected.shape
    assert ((out.float() - expected).norm() / expected.norm()).item() < 1e-2


def test_a_layer_norm_read_elsewhere_stays():
    gm = cute_conv.optimize(NormedDepthwise(leak=True).to(BF16).eval())
    assert gm.cute_conv_report.counts() == {"conv": 1, "linear": 1}
    assert isinstance(gm.norm, nn.LayerNorm) and gm.dw.channel_norm_eps is None


def test_float32_linears_stay_torch():
    model = PointwiseLinears().eval()
    gm = cute_conv.optimize(model)
    assert gm.cute_conv_report.counts() == {} and module_types(gm)[nn.Linear] == 3


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_optimized_model_compiles_into_one_graph_on_cpu(name):
    """torch.compile(fullgraph=True) traces the optimized model whole: the fused modules'
    kernel calls are cute_conv's ops (run here by their CPU reference forward), the folded
    depthwise convs torch's."""
    model = build(name)
    x = torch.randn(2, 3, 64, 64).to(memory_format=torch.channels_last)
    compiled = torch.compile(cute_conv.optimize(model), backend="eager", fullgraph=True)
    with torch.no_grad(), reference_forward_on_cpu():
        reference = build(name, torch.float32)(x)
        ours = compiled(x.to(BF16)).float()
    assert ((ours - reference).norm() / reference.norm()).item() < 1e-2


def test_tiled_pools_compute_and_compile_on_cpu():
    """conv+relu -> 2x2 pool twice: the pools become TiledMaxPool2d, and under
    torch.compile(fullgraph=True) (the kernels' ops run by their CPU reference forward) the
    model computes what the float32 model does."""
    torch.manual_seed(7)
    model = nn.Sequential(
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, stride=2),
    ).eval()  # fmt: skip
    gm = cute_conv.optimize(model.to(BF16))
    assert module_types(gm)[TiledMaxPool2d] == 2 and gm.cute_conv_report.pools == ["2", "5"]
    x = torch.randn(2, 8, 13, 18).to(BF16).to(memory_format=torch.channels_last)
    compiled = torch.compile(gm, backend="eager", fullgraph=True)
    with torch.no_grad(), reference_forward_on_cpu():
        expected = model.float()(x.float())
        ours = compiled(x)
    assert ours.shape == expected.shape == (2, 16, 3, 4)
    assert ((ours.float() - expected).norm() / expected.norm()).item() < 1e-2


# ------------------------------------------------------------------------------ on the GPU


def _gpu_model(name, dtype=BF16):
    """``build``'s model (``convnext_tiny``'s for ConvNeXt-T) on the GPU, channels_last."""
    model = convnext_tiny(dtype) if name == "convnext_tiny" else build(name, dtype)
    return model.cuda().to(memory_format=torch.channels_last)


def _gpu_models(name):
    model = _gpu_model(name)
    return model, cute_conv.optimize(model)


@requires_sm90
@pytest.mark.parametrize(
    "name",
    [
        "resnet18", "resnet50", "vgg16", "convnext_tiny", "efficientnet_b0", "densenet121",
        "googlenet", "inception_v3",
    ],
)  # fmt: skip
def test_logits_no_worse_than_torch_bf16(name):
    """ConvNeXt-T: its pointwise Linears as fused 1x1 convs, its 7x7s on the row window;
    EfficientNet-B0: its squeeze-excitation pools as GEMVs; DenseNet-121: its lone
    BatchNorms as depthwise 1x1s, its convs writing their slices of the dense blocks'
    buffers; GoogLeNet and Inception-v3: their branches' convs writing their concatenations'
    channels."""
    model, gm = _gpu_models(name)
    x = torch.randn(8, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    reference_model = _gpu_model(name, torch.float32)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        reference = reference_model(x)
        torch_bf16 = model(x.to(BF16)).float()
        ours = gm(x.to(BF16)).float()
    torch.cuda.synchronize()
    assert not ours.isnan().any()
    assert_no_worse_than_torch(ours, torch_bf16, reference)


@requires_sm90
@pytest.mark.parametrize("model_type", ["pre_activation", "top_down_add"])
def test_small_rewrites_on_the_gpu(model_type):
    """A lone BatchNorm + ReLU as a depthwise 1x1 (``PreActivation``), and a conv + add past
    a read of the conv's shape (``TopDownAdd``): as close to float32 as torch's bf16."""
    torch.manual_seed(5)
    if model_type == "pre_activation":
        model = PreActivation().eval()
        model.bn.load_state_dict(random_bn(32).state_dict())
    else:
        model = TopDownAdd().eval()
    model = model.cuda()
    gm = cute_conv.optimize(copy_to(model, BF16))
    x = torch.randn(4, 16 if model_type == "pre_activation" else 8, 28, 30, device="cuda")
    x = x.to(memory_format=torch.channels_last)
    first = lambda y: y[0] if isinstance(y, tuple) else y  # noqa: E731
    with torch.no_grad():
        reference = first(model(x))
        torch_bf16 = first(copy_to(model, BF16)(x.to(BF16))).float()
        ours = first(gm(x.to(BF16))).float()
    assert not ours.isnan().any()
    assert_no_worse_than_torch(ours, torch_bf16, reference)


@requires_sm90
def test_optimized_resnet18_replays_in_a_cuda_graph():
    _, gm = _gpu_models("resnet18")
    static_x = torch.randn(4, 3, 112, 112, device="cuda").to(BF16)
    static_x = static_x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            gm(static_x)  # compiles and plans the kernels outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = gm(static_x)
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, gm(static_x))


@requires_sm90
def test_optimized_resnet18_under_torch_compile():
    _, gm = _gpu_models("resnet18")
    compiled = torch.compile(gm, fullgraph=True)
    x = torch.randn(4, 3, 112, 112, device="cuda").to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        eager, traced = gm(x).float(), compiled(x).float()
    torch.cuda.synchronize()
    assert ((traced - eager).norm() / eager.norm()).item() < 1e-2
