"""Which tile should grouped convs take on the tensor cores? (H100/H200)

    python benchmarks/experiments/grouped_tensor_core_tiles.py --models regnet_x_3_2gf \
        --batches 1 8 32 --out grouped_tensor_core_tiles.json

``grouped_conv2d_tensor_cores`` takes 128-row tiles of the widest ``tile_n`` that divides a
group's output channels by default. At batch 1 it ran 1.09-1.45x the time of the same work as
one dense conv (``grouped_tensor_core_bound.py``'s ``as_batch``), whose rules pick smaller
tiles on small grids. This times each wide-group call (the bound's ``wide_groups``) at
64-, 128- and 256-row tiles (256 where ``tile_n`` is at most 128) of the default width, and
at 64 and 128 rows of half that width where it is a tile width and still divides the group,
against cuDNN; every output is checked against float32.
"""

from __future__ import annotations

from cute_conv.kernels.sm90.config import MAX_TILE_ELEMS, TILE_N_CHOICES
from grouped_direct_ab import ab_calls, checks, run_ab
from grouped_tensor_core_bound import MIN_GROUP, tensor_core_call, wide_groups
from models import replayed_us  # on the path grouped_direct_ab puts benchmarks/ on
from torch import nn

from cute_conv import Conv2dConfig
from cute_conv.grouped_tensor_cores import default_tile_n

METHODS = ("cudnn", "m64", "m128", "m256", "m64_half", "m128_half")


def tile_configs(group_out: int, groups: int) -> dict[str, Conv2dConfig]:
    """The configs timed for a call of ``groups`` groups of ``group_out`` output channels."""
    width = default_tile_n(group_out)
    configs = {}
    for name, tile_n in (("", width), ("_half", width // 2)):
        if tile_n not in TILE_N_CHOICES or group_out % tile_n:
            continue
        for tile_m in (64, 128, 256):
            if tile_m * tile_n <= MAX_TILE_ELEMS and (name == "" or tile_m < 256):
                configs[f"m{tile_m}{name}"] = Conv2dConfig(tile_m=tile_m, tile_n=tile_n,
                                                           groups=groups)  # fmt: skip
    return configs


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, rounds: int) -> dict:
    cudnn, _, ref = ab_calls(conv, shape, activation)
    fns = {"cudnn": cudnn}
    for name, config in tile_configs(conv.out_channels // conv.groups, conv.groups).items():
        fns[name] = tensor_core_call(conv, shape, activation, config)
    return {"module": repr(conv), "input": list(shape), "activation": activation,
            "checks": checks(fns, ref), "graph_us": replayed_us(fns, rounds)}  # fmt: skip


if __name__ == "__main__":
    run_ab(__doc__.splitlines()[0], measure, METHODS, ["regnet_x_3_2gf"], takes=wide_groups,
           min_group_in=MIN_GROUP)  # fmt: skip
