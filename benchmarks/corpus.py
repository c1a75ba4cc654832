"""Generate the conv corpus, ``benchmarks/corpus.json``: every distinct conv of a set of models.

    python benchmarks/corpus.py            # writes benchmarks/corpus.json
    python benchmarks/corpus.py --check    # exit 1 unless corpus.json equals a fresh generation

Sources, traced or written out here (no weights, no network):
- torchvision classification nets (ResNet-18/50/101, ResNeXt-50 32x4d, VGG-16, RegNetY-1.6GF,
  RegNetX-3.2GF) at 224x224, batches ``CLASSIFICATION_BATCHES``: each model is built on the meta
  device with ``weights=None`` and every ``nn.Conv2d`` call is recorded by a forward hook;
- torchvision detection and segmentation nets (Faster R-CNN and RetinaNet ResNet-50 FPN at
  800x1344, DeepLabV3 and FCN ResNet-50 at 520x520), backbone, FPN and heads, batches
  ``DENSE_BATCHES``;
- SD/SDXL/FLUX VAE and SD1.5/SDXL UNet conv stacks from their published channel plans
  (``VAE_PLAN``, ``UNET_PLANS``), batches ``DENSE_BATCHES``;
- ``RANDOM_COUNT`` odd geometries drawn with a fixed seed.

Exact duplicates are merged (one problem, all its sources). A problem the package rejects
(grouped convs; anything ``cute_conv.validation.validate_conv_inputs`` refuses) or one over the
size caps (``MAX_FLOPS``, ``MAX_TENSOR_BYTES``: no benchmark section could run it) goes to the
``rejected`` list with the reason. Each problem carries tags (``TAGS``; several may apply) and a
fixed train/held-out split from a hash of its key.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import random
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cute_conv import Conv2dProblemShape
from cute_conv.validation import validate_conv_inputs

HERE = Path(__file__).resolve().parent
CORPUS_PATH = HERE / "corpus.json"

CLASSIFICATION_BATCHES = (1, 8, 32, 128)
# Detection, segmentation and diffusion models run at small batches on big maps.
DENSE_BATCHES = (1, 8)
# Caps: a 2 TFLOP conv takes ~4 ms at cuDNN's rate, and ~100 such calls per timing; a 4 GiB
# bf16 tensor needs ~5x that in float32 for the reference check.
MAX_FLOPS = 2 * 10**12
MAX_TENSOR_BYTES = 4 * 2**30
SEED = 22
RANDOM_COUNT = 75
RANDOM_BATCHES = (1, 2, 3, 4, 8, 16)
TRAIN_PERCENT = 70
# problem_key's form: its numbers, in order.
_KEY = re.compile(
    r"n(\d+)_h(\d+)_w(\d+)_c(\d+)_k(\d+)_r(\d+)_s(\d+)_pad(\d+)\.(\d+)\.(\d+)\.(\d+)"
    r"_str(\d+)\.(\d+)_dil(\d+)\.(\d+)"
)

TAGS = {
    "1x1": "R = S = 1",
    "3x3 s1": "R = S = 3, stride 1",
    "strided": "stride > 1 in some dimension",
    "stem": "the first conv a model applies to its input (image or latent)",
    "few channels": "C < 16",
    "small batch": "N <= 2",
    "tiny map": "P*Q <= 64",
    "large": "GEMM M >= 32768 and GEMM K >= 1152",
    "odd channels": "C or K not a multiple of 8",
    "dilated": "dilation > 1",
    "big kernel": "R or S >= 5 (5x5, 7x7, 1x7, ...)",
    "asymmetric": "asymmetric padding, or a kernel, stride or dilation that differs along H and W",
    "non-square map": "H != W",
}


@dataclass(frozen=True)
class ConvSite:
    """One conv as a model applies it (batch 1), before batches are expanded."""

    source: str  # "model:layer"
    H: int
    W: int
    C: int
    K: int
    R: int
    S: int
    padding: tuple[tuple[int, int], tuple[int, int]]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    groups: int = 1
    stem: bool = False


@dataclass
class Entry:
    problem: Conv2dProblemShape
    groups: int
    sources: list[str] = field(default_factory=list)
    stem: bool = False


# ---- torchvision models, traced ----


def _torchvision():
    """torchvision, or a clear error: a torchvision wheel built for another torch fails at
    import with a RuntimeError, not an ImportError."""
    try:
        import torchvision
    except Exception as e:  # noqa: BLE001 - both kinds of failure mean the same here
        raise RuntimeError(
            f"corpus.py needs an importable torchvision to trace the models ({e})"
        ) from e
    return torchvision


def trace_convs(
    model_name: str, module: torch.nn.Module, run: Callable[[], object]
) -> list[ConvSite]:
    """Every ``nn.Conv2d`` call made by ``run()``, in call order; the first one is the stem."""
    sites: list[ConvSite] = []

    def hook(name):
        def record(mod: torch.nn.Conv2d, args, _output):
            _, c, h, w = args[0].shape
            ph, pw = mod.padding
            sites.append(
                ConvSite(
                    source=f"{model_name}:{name}", H=h, W=w, C=c, K=mod.out_channels,
                    R=mod.kernel_size[0], S=mod.kernel_size[1], padding=((ph, ph), (pw, pw)),
                    stride=tuple(mod.stride), dilation=tuple(mod.dilation), groups=mod.groups,
                    stem=not sites,
                )
            )  # fmt: skip

        return record

    handles = [
        m.register_forward_hook(hook(name))
        for name, m in module.named_modules()
        if isinstance(m, torch.nn.Conv2d)
    ]
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return sites


def _meta_image(h: int, w: int) -> torch.Tensor:
    return torch.empty(1, 3, h, w, device="meta")


def _meta_model(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """``build()`` on the meta device (no weights allocated), in eval mode."""
    try:
        with torch.device("meta"):
            return build().eval()
    except NotImplementedError:  # RegNet computes its widths with tensors, unreadable on meta
        return build().to("meta").eval()


def classification_sites() -> list[ConvSite]:
    models = _torchvision().models
    names = (
        "resnet18", "resnet50", "resnet101", "resnext50_32x4d", "vgg16", "regnet_y_1_6gf",
        "regnet_x_3_2gf",
    )  # fmt: skip
    sites = []
    for name in names:
        model = _meta_model(functools.partial(getattr(models, name), weights=None))
        sites += trace_convs(name, model, lambda m=model: m(_meta_image(224, 224)))
    return sites


def detection_sites() -> list[ConvSite]:
    """Backbone + FPN + RPN head (Faster R-CNN), + the RetinaNet head, at 800x1344 (COCO's
    800-pixel short side, padded to a multiple of 32)."""
    detection = _torchvision().models.detection
    sites = []
    for name, head in (("fasterrcnn_resnet50_fpn", "rpn"), ("retinanet_resnet50_fpn", "head")):
        model = _meta_model(
            functools.partial(getattr(detection, name), weights=None, weights_backbone=None)
        )

        def run(model=model, head=head):
            features = list(model.backbone(_meta_image(800, 1344)).values())
            getattr(model, head).head(features) if head == "rpn" else model.head(features)

        sites += trace_convs(name, model, run)
    return sites


def segmentation_sites() -> list[ConvSite]:
    """DeepLabV3 (dilated backbone, ASPP) and FCN heads at 520x520."""
    segmentation = _torchvision().models.segmentation
    sites = []
    for name in ("deeplabv3_resnet50", "fcn_resnet50"):
        model = _meta_model(
            functools.partial(getattr(segmentation, name), weights=None, weights_backbone=None)
        )
        sites += trace_convs(name, model, lambda m=model: m(_meta_image(520, 520)))
    return sites


# ---- diffusion conv stacks, from their published channel plans ----

# (layer, C, K, kernel, stride, padding, map divisor): the map is the image size divided by the
# divisor. The VAE of SD 1.x/2.x/XL and FLUX (block channels 128, 256, 512, 512, two resnet
# blocks per level going down, three going up); its downsamples pad only bottom/right.
_DOWN_PAD = ((0, 1), (0, 1))
VAE_PLAN = (
    ("enc.conv_in", 3, 128, 3, 1, 1, 1),
    ("enc.res128", 128, 128, 3, 1, 1, 1),
    ("enc.down128", 128, 128, 3, 2, _DOWN_PAD, 1),
    ("enc.res256.conv1", 128, 256, 3, 1, 1, 2),
    ("enc.res256.shortcut", 128, 256, 1, 1, 0, 2),
    ("enc.res256", 256, 256, 3, 1, 1, 2),
    ("enc.down256", 256, 256, 3, 2, _DOWN_PAD, 2),
    ("enc.res512.conv1", 256, 512, 3, 1, 1, 4),
    ("enc.res512.shortcut", 256, 512, 1, 1, 0, 4),
    ("enc.res512", 512, 512, 3, 1, 1, 4),
    ("enc.down512", 512, 512, 3, 2, _DOWN_PAD, 4),
    ("enc.res512.latent", 512, 512, 3, 1, 1, 8),
    ("dec.res512.latent", 512, 512, 3, 1, 1, 8),
    ("dec.up512.conv", 512, 512, 3, 1, 1, 4),
    ("dec.res512", 512, 512, 3, 1, 1, 4),
    ("dec.up512.conv2", 512, 512, 3, 1, 1, 2),
    ("dec.res256.conv1", 512, 256, 3, 1, 1, 2),
    ("dec.res256.shortcut", 512, 256, 1, 1, 0, 2),
    ("dec.res256", 256, 256, 3, 1, 1, 2),
    ("dec.up256.conv", 256, 256, 3, 1, 1, 1),
    ("dec.res128.conv1", 256, 128, 3, 1, 1, 1),
    ("dec.res128.shortcut", 256, 128, 1, 1, 0, 1),
    ("dec.res128", 128, 128, 3, 1, 1, 1),
    ("dec.conv_out", 128, 3, 3, 1, 1, 1),
)
# The latent ends differ: (layer, C, K, kernel) at the latent map (image / 8).
VAE_LATENT_ENDS = {
    "sd_vae": (
        ("enc.conv_out", 512, 8, 3), ("quant_conv", 8, 8, 1), ("post_quant_conv", 4, 4, 1),
        ("dec.conv_in", 4, 512, 3),
    ),
    "flux_vae": (("enc.conv_out", 512, 32, 3), ("dec.conv_in", 16, 512, 3)),
}  # fmt: skip
VAE_IMAGE_SIZES = (512, 1024)

# UNets: (layer, C, K, kernel, stride, map divisor of the latent). SD 1.5 (320, 640, 1280,
# 1280 at latent/1../8, 1x1 proj_in/proj_out around its transformers) at a 64x64 latent (512
# image); SDXL (320, 640, 1280 at latent/1../4, linear projections) at 128x128 (1024 image).
UNET_PLANS = {
    "sd15_unet": (
        64,
        (
            ("conv_in", 4, 320, 3, 1, 1), ("res320", 320, 320, 3, 1, 1),
            ("proj320", 320, 320, 1, 1, 1), ("down320", 320, 320, 3, 2, 1),
            ("res640.conv1", 320, 640, 3, 1, 2), ("res640.shortcut", 320, 640, 1, 1, 2),
            ("res640", 640, 640, 3, 1, 2), ("proj640", 640, 640, 1, 1, 2),
            ("down640", 640, 640, 3, 2, 2), ("res1280.conv1", 640, 1280, 3, 1, 4),
            ("res1280.shortcut", 640, 1280, 1, 1, 4), ("res1280", 1280, 1280, 3, 1, 4),
            ("proj1280", 1280, 1280, 1, 1, 4), ("down1280", 1280, 1280, 3, 2, 4),
            ("res1280.low", 1280, 1280, 3, 1, 8), ("up.res2560.low", 2560, 1280, 3, 1, 8),
            ("up.shortcut2560.low", 2560, 1280, 1, 1, 8), ("up.conv1280.low", 1280, 1280, 3, 1, 4),
            ("up.res2560", 2560, 1280, 3, 1, 4), ("up.shortcut2560", 2560, 1280, 1, 1, 4),
            ("up.res1920", 1920, 1280, 3, 1, 4), ("up.shortcut1920", 1920, 1280, 1, 1, 4),
            ("up.conv1280", 1280, 1280, 3, 1, 2), ("up.res1920to640", 1920, 640, 3, 1, 2),
            ("up.shortcut1920to640", 1920, 640, 1, 1, 2), ("up.res1280to640", 1280, 640, 3, 1, 2),
            ("up.shortcut1280to640", 1280, 640, 1, 1, 2), ("up.res960to640", 960, 640, 3, 1, 2),
            ("up.shortcut960to640", 960, 640, 1, 1, 2), ("up.conv640", 640, 640, 3, 1, 1),
            ("up.res960to320", 960, 320, 3, 1, 1), ("up.shortcut960to320", 960, 320, 1, 1, 1),
            ("up.res640to320", 640, 320, 3, 1, 1), ("up.shortcut640to320", 640, 320, 1, 1, 1),
            ("conv_out", 320, 4, 3, 1, 1),
        ),
    ),
    "sdxl_unet": (
        128,
        (
            ("conv_in", 4, 320, 3, 1, 1), ("res320", 320, 320, 3, 1, 1),
            ("down320", 320, 320, 3, 2, 1), ("res640.conv1", 320, 640, 3, 1, 2),
            ("res640.shortcut", 320, 640, 1, 1, 2), ("res640", 640, 640, 3, 1, 2),
            ("down640", 640, 640, 3, 2, 2), ("res1280.conv1", 640, 1280, 3, 1, 4),
            ("res1280.shortcut", 640, 1280, 1, 1, 4), ("res1280", 1280, 1280, 3, 1, 4),
            ("up.res2560", 2560, 1280, 3, 1, 4), ("up.shortcut2560", 2560, 1280, 1, 1, 4),
            ("up.res1920", 1920, 1280, 3, 1, 4), ("up.shortcut1920", 1920, 1280, 1, 1, 4),
            ("up.conv1280", 1280, 1280, 3, 1, 2), ("up.res1920to640", 1920, 640, 3, 1, 2),
            ("up.shortcut1920to640", 1920, 640, 1, 1, 2), ("up.res1280to640", 1280, 640, 3, 1, 2),
            ("up.shortcut1280to640", 1280, 640, 1, 1, 2), ("up.res960to640", 960, 640, 3, 1, 2),
            ("up.shortcut960to640", 960, 640, 1, 1, 2), ("up.conv640", 640, 640, 3, 1, 1),
            ("up.res960to320", 960, 320, 3, 1, 1), ("up.shortcut960to320", 960, 320, 1, 1, 1),
            ("up.res640to320", 640, 320, 3, 1, 1), ("up.shortcut640to320", 640, 320, 1, 1, 1),
            ("conv_out", 320, 4, 3, 1, 1),
        ),
    ),
}  # fmt: skip


def _site(source, size, c, k, kernel, stride, padding, stem=False) -> ConvSite:
    pad = padding if isinstance(padding, tuple) else ((padding, padding), (padding, padding))
    return ConvSite(
        source, size, size, c, k, kernel, kernel, pad, (stride, stride), (1, 1), stem=stem
    )


def diffusion_sites() -> list[ConvSite]:
    sites = []
    for vae, ends in VAE_LATENT_ENDS.items():
        for image in VAE_IMAGE_SIZES:
            for layer, c, k, kernel, stride, pad, div in VAE_PLAN:
                stem = layer == "enc.conv_in"
                sites.append(
                    _site(f"{vae}@{image}:{layer}", image // div, c, k, kernel, stride, pad, stem)
                )
            for layer, c, k, kernel in ends:
                stem = layer == "dec.conv_in"  # the decoder's input is the latent
                sites.append(
                    _site(f"{vae}@{image}:{layer}", image // 8, c, k, kernel, 1, kernel // 2, stem)
                )
    for unet, (latent, plan) in UNET_PLANS.items():
        for layer, c, k, kernel, stride, div in plan:
            stem = layer == "conv_in"
            pad = kernel // 2
            sites.append(_site(f"{unet}:{layer}", latent // div, c, k, kernel, stride, pad, stem))
    return sites


# ---- random odd geometries ----

_ODD_CHANNELS = (1, 3, 5, 7, 12, 13, 20, 24, 37, 50, 63, 100, 129, 200, 255, 257, 300, 513)
_KERNELS = ((1, 1), (3, 3), (5, 5), (7, 7), (1, 7), (7, 1), (1, 3), (3, 1), (5, 3), (2, 2))


def random_sites(count: int = RANDOM_COUNT, seed: int = SEED) -> list[tuple[ConvSite, int]]:
    """``count`` odd geometries and their batch sizes from ``random.Random(seed)``: odd
    channel counts, strides 1..3 (per dimension), dilation 1..3, 5x5/7x7/1x7 kernels,
    asymmetric padding and small, non-square maps. A draw whose output would be empty is drawn
    again."""
    rng = random.Random(seed)
    draws: list[tuple[ConvSite, int]] = []
    while len(draws) < count:
        r, s = rng.choice(_KERNELS)
        dil = (rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 2, 3))) if rng.random() < 0.3 else (1, 1)
        stride = (
            (rng.randint(1, 3), rng.randint(1, 3))
            if rng.random() < 0.3
            else (rng.randint(1, 3),) * 2
        )
        h, w = rng.randint(3, 64), rng.randint(3, 64)
        pad_h = (rng.randint(0, r // 2 * dil[0]), rng.randint(0, r // 2 * dil[0]))
        pad_w = (rng.randint(0, s // 2 * dil[1]), rng.randint(0, s // 2 * dil[1]))
        c = rng.choice(_ODD_CHANNELS) if rng.random() < 0.7 else rng.randint(1, 512)
        k = rng.choice(_ODD_CHANNELS) if rng.random() < 0.7 else rng.randint(1, 512)
        n = rng.choice(RANDOM_BATCHES)
        site = ConvSite(f"random:{len(draws)}", h, w, c, k, r, s, (pad_h, pad_w), stride, dil)
        if _problem(site, n).P >= 1 and _problem(site, n).Q >= 1:
            draws.append((site, n))
    return draws


# ---- problems, tags, split ----


def _problem(site: ConvSite, n: int) -> Conv2dProblemShape:
    return Conv2dProblemShape(
        n, site.H, site.W, site.C, site.K, site.R, site.S, padding=site.padding,
        stride=site.stride, dilation=site.dilation,
    )  # fmt: skip


def problem_key(p: Conv2dProblemShape) -> str:
    """A canonical name: equal keys mean the same problem."""
    (t, b), (lft, rgt) = p.padding
    return (
        f"n{p.N}_h{p.H}_w{p.W}_c{p.C}_k{p.K}_r{p.R}_s{p.S}_pad{t}.{b}.{lft}.{rgt}"
        f"_str{p.stride[0]}.{p.stride[1]}_dil{p.dilation[0]}.{p.dilation[1]}"
    )


def problem_of_key(key: str) -> Conv2dProblemShape:
    """The problem ``problem_key`` names (its inverse)."""
    match = _KEY.fullmatch(key)
    if match is None:
        raise ValueError(f"not a problem key: {key!r}")
    n, h, w, c, k, r, s, top, bottom, left, right, *stride_dilation = map(int, match.groups())
    return Conv2dProblemShape(
        n, h, w, c, k, r, s, padding=((top, bottom), (left, right)),
        stride=tuple(stride_dilation[:2]), dilation=tuple(stride_dilation[2:]),
    )  # fmt: skip


def split_of(key: str) -> str:
    """``"train"`` or ``"heldout"``, from a hash of the key (stable across runs and Pythons)."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 100
    return "train" if bucket < TRAIN_PERCENT else "heldout"


def tags_of(p: Conv2dProblemShape, *, stem: bool) -> list[str]:
    """The ``TAGS`` that apply to ``p``, in ``TAGS`` order."""
    (t, b), (lft, rgt) = p.padding
    checks = {
        "1x1": p.R == p.S == 1,
        "3x3 s1": p.R == p.S == 3 and p.stride == (1, 1),
        "strided": p.stride != (1, 1),
        "stem": stem,
        "few channels": p.C < 16,
        "small batch": p.N <= 2,
        "tiny map": p.P * p.Q <= 64,
        "large": p.gemm_m >= 32768 and p.gemm_k >= 1152,
        "odd channels": p.C % 8 != 0 or p.K % 8 != 0,
        "dilated": p.dilation != (1, 1),
        "big kernel": max(p.R, p.S) >= 5,
        "asymmetric": t != b
        or lft != rgt
        or p.R != p.S
        or p.stride[0] != p.stride[1]
        or p.dilation[0] != p.dilation[1],
        "non-square map": p.H != p.W,
    }
    return [tag for tag, applies in checks.items() if applies]


def rejection(p: Conv2dProblemShape, groups: int) -> str | None:
    """Why the corpus cannot hold ``p`` (None: it can)."""
    if groups > 1:
        return f"groups={groups} > 1: grouped/depthwise convs are not supported"
    x = torch.empty(p.activation_shape, dtype=torch.bfloat16, device="meta")
    w = torch.empty(p.filter_shape, dtype=torch.bfloat16, device="meta")
    try:
        validate_conv_inputs(x, w, stride=p.stride, padding=p.padding, dilation=p.dilation)
    except (ValueError, TypeError) as e:
        return f"rejected by the package: {e}"
    if p.flops > MAX_FLOPS:
        return f"{p.flops / 1e12:.2f} TFLOP is over the corpus cap of {MAX_FLOPS / 1e12:g} TFLOP"
    biggest = 2 * max(p.N * p.H * p.W * p.C, p.N * p.P * p.Q * p.K)
    if biggest > MAX_TENSOR_BYTES:
        return (
            f"a {biggest / 2**30:.1f} GiB bf16 tensor is over the corpus cap of "
            f"{MAX_TENSOR_BYTES / 2**30:g} GiB"
        )
    return None


def _expand(sites: Iterable[ConvSite], batches: tuple[int, ...]) -> Iterator[tuple[ConvSite, int]]:
    for site in sites:
        for n in batches:
            yield site, n


def _record(entry: Entry, key: str) -> dict:
    p = entry.problem
    return {
        "key": key,
        **{d: getattr(p, d) for d in ("N", "H", "W", "C", "K", "R", "S")},
        "padding": [list(p.padding[0]), list(p.padding[1])],
        "stride": list(p.stride),
        "dilation": list(p.dilation),
        "gflop": round(p.flops / 1e9, 4),
        "model": entry.sources[0].split(":")[0],
        "sources": entry.sources,
        "tags": tags_of(p, stem=entry.stem),
        "split": split_of(key),
    }


def build_corpus(groups: Iterable[tuple[list[ConvSite], tuple[int, ...]]]) -> dict:
    """The corpus of ``(sites, batches)`` groups: deduplicated in first-seen order, tagged,
    split, and the problems the package cannot hold set apart."""
    entries: dict[str, Entry] = {}
    for sites, batches in groups:
        for site, n in _expand(sites, batches):
            problem = _problem(site, n)
            key = problem_key(problem) + (f"_g{site.groups}" if site.groups > 1 else "")
            entry = entries.setdefault(key, Entry(problem, site.groups))
            if site.source not in entry.sources:
                entry.sources.append(site.source)
            entry.stem |= site.stem
    problems, rejected = [], []
    for key, entry in entries.items():
        record = _record(entry, key)
        reason = rejection(entry.problem, entry.groups)
        if reason is None:
            problems.append(record)
        else:
            rejected.append({**record, "groups": entry.groups, "reason": reason})
    return {
        "about": (
            "Conv2D fprop problems from model definitions (NHWC [N,H,W,C], KRSC [K,R,S,C]), "
            "generated by benchmarks/corpus.py; do not edit by hand."
        ),
        "seed": SEED,
        "train_percent": TRAIN_PERCENT,
        "caps": {"max_flops": MAX_FLOPS, "max_tensor_bytes": MAX_TENSOR_BYTES},
        "tags": TAGS,
        "problems": problems,
        "rejected": rejected,
    }


def table_groups() -> list[tuple[list[ConvSite], tuple[int, ...]]]:
    """The sources that need no torchvision: the diffusion tables and the random draws."""
    return [(diffusion_sites(), DENSE_BATCHES)] + [([site], (n,)) for site, n in random_sites()]


def all_groups() -> list[tuple[list[ConvSite], tuple[int, ...]]]:
    return [
        (classification_sites(), CLASSIFICATION_BATCHES),
        (detection_sites(), DENSE_BATCHES),
        (segmentation_sites(), DENSE_BATCHES),
        *table_groups(),
    ]


def generate() -> dict:
    return build_corpus(all_groups())


def dumps(corpus: dict) -> str:
    return json.dumps(corpus, indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--output", type=Path, default=CORPUS_PATH)
    args = parser.parse_args()
    corpus = generate()
    text = dumps(corpus)
    if args.check:
        same = args.output.exists() and args.output.read_text() == text
        print(f"{args.output}: {'up to date' if same else 'differs from a fresh generation'}")
        return 0 if same else 1
    args.output.write_text(text)
    splits = [p["split"] for p in corpus["problems"]]
    print(
        f"wrote {args.output}: {len(splits)} problems ({splits.count('train')} train, "
        f"{splits.count('heldout')} held out), {len(corpus['rejected'])} rejected"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
