"""Which tile should grouped convs take on the tensor cores? (H100/H200)

    python benchmarks/experiments/grouped_tensor_core_tiles.py --models regnet_x_3_2gf \
        --batches 1 8 32 --out grouped_tensor_core_tiles.json

Session 87 measured 128-row tiles of ``default_tile_n``'s width against 64- and 256-row ones
(256 where ``tile_n`` is at most 128) and 64 and 128 rows of half that width (where it is a
tile width and still divides the group): ``grouped_conv2d_tensor_cores`` took the 64-row part
of the rule fitted on them. Since, it also times 64- and 128-row tiles of 32- and 16-channel
k-tiles (the default is 64): a group of 48 input channels fills 3/4 of a 64-wide
k-tile's multiply-adds, 24 channels 3/8, where 16-wide k-tiles waste none (half-step widths,
48, 80, ..., take k-tiles of at least 32 channels). Run on an H200 (session 88,
``grouped_tensor_core_ktiles_H200.json``), the narrower k-tiles ran 1.1-1.9x the 64-channel
ones' time per forward on RegNetY-8GF and RegNetX-8GF: not taken. Session 91 ran them on
16-, 24- and 32-wide groups (``--min-group-in 16``), where they won on every call but one
(``grouped_tensor_core_ktiles_16wide_H200.json``): ``default_tile_k``. Session 92 judged
their 256-row tiles (``grouped_tensor_core_ktiles_256rows_H200.json``): taken from 1.4
waves of them. Since, it also times the default tiles on the ping-pong and dynamic
schedules (``schedule_configs``); session 93 ran them on ResNeXt-50 at batch 8 and 32
(``grouped_tensor_core_schedules_H200.json``): ping-pong 0.96-1.03x the static 128-row
tiles' time (1.02-1.10x the rule's choice), dynamic 1.1-1.3x: neither taken. Each
wide-group call (the bound's ``wide_groups``) against cuDNN; every output is checked against
float32.
"""

from __future__ import annotations

from cute_conv.kernels.sm90.config import (
    HALF_STEP_MIN_K_TILE_BYTES,
    MAX_TILE_ELEMS,
    TILE_N_CHOICES,
    is_half_step,
)
from grouped_direct_ab import ab_calls, checks, run_ab
from grouped_tensor_core_bound import MIN_GROUP, tensor_core_call, wide_groups
from models import replayed_us  # on the path grouped_direct_ab puts benchmarks/ on
from torch import nn

from cute_conv import Conv2dConfig
from cute_conv.grouped_tensor_cores import ELEMENT_BYTES, default_tile_k, default_tile_n

TILE_METHODS = ("m64", "m128", "m256", "m64_half", "m128_half")
K_TILE_METHODS = ("m64_k32", "m128_k32", "m256_k32", "m64_k16", "m128_k16", "m256_k16")
SCHEDULE_METHODS = ("m128_pingpong", "m128_dynamic")
METHODS = ("cudnn", *TILE_METHODS, *K_TILE_METHODS, *SCHEDULE_METHODS)


def tile_configs(group_out: int, groups: int) -> dict[str, Conv2dConfig]:
    """The configs timed for a call of ``groups`` groups of ``group_out`` output channels:
    the tile shapes, and the narrower k-tiles of the default width."""
    width = default_tile_n(group_out)
    configs = {}
    for name, tile_n in (("", width), ("_half", width // 2)):
        if name and (tile_n not in TILE_N_CHOICES or group_out % tile_n):
            continue
        for tile_m in (64, 128, 256):
            if tile_m * tile_n <= MAX_TILE_ELEMS and (name == "" or tile_m < 256):
                configs[f"m{tile_m}{name}"] = Conv2dConfig(tile_m=tile_m, tile_n=tile_n,
                                                           groups=groups)  # fmt: skip
    for tile_k in (32, 16):
        if is_half_step(width) and tile_k * ELEMENT_BYTES < HALF_STEP_MIN_K_TILE_BYTES:
            continue
        for tile_m in (64, 128, 256):
            if tile_m * width > MAX_TILE_ELEMS:
                continue
            configs[f"m{tile_m}_k{tile_k}"] = Conv2dConfig(
                tile_m=tile_m, tile_n=width, tile_k=tile_k, groups=groups
            )
    return configs


def schedule_configs(group_in: int, group_out: int, groups: int) -> dict[str, Conv2dConfig]:
    """128-row tiles of the default width and k-tile on the kernel's other schedules:
    ping-pong (one consumer's epilogue under the other's mainloop; tiles at most 128 wide)
    and tiles taken from a counter. Compare with ``m128`` / ``m128_k*``, the same tiles
    statically scheduled by both consumers."""
    width = default_tile_n(group_out)
    tile = dict(tile_m=128, tile_n=width, tile_k=default_tile_k(group_in, width), groups=groups)
    configs = {"m128_dynamic": Conv2dConfig(**tile, dynamic_schedule=True)}
    if width <= 128:
        configs["m128_pingpong"] = Conv2dConfig(**tile, pingpong=True)
    return configs


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, rounds: int) -> dict:
    cudnn, _, ref = ab_calls(conv, shape, activation)
    fns = {"cudnn": cudnn}
    group_in, group_out = conv.in_channels // conv.groups, conv.out_channels // conv.groups
    configs = tile_configs(group_out, conv.groups) | schedule_configs(
        group_in, group_out, conv.groups
    )
    for name, config in configs.items():
        fns[name] = tensor_core_call(conv, shape, activation, config)
    return {"module": repr(conv), "input": list(shape), "activation": activation,
            "checks": checks(fns, ref), "graph_us": replayed_us(fns, rounds)}  # fmt: skip


if __name__ == "__main__":
    run_ab(__doc__.splitlines()[0], measure, METHODS, ["regnet_x_3_2gf"], takes=wide_groups,
           min_group_in=MIN_GROUP)  # fmt: skip
