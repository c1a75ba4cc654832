"""Gathered operands on the CPU: the config rules and errors, the heuristic's choice, the
kernel problem (unstaged), the role table and the compiled PTX (activation and filter read by
plain loads, no TMA loads of them, a proxy fence before each arrive)."""

from __future__ import annotations

import re

import pytest
from cute_conv.kernels.common.barriers import NamedBarrierConv
from cute_conv.kernels.sm90.gather import k_tiles_per_batch
from cute_conv.kernels.sm90.pipeline_checks import Sm90Roles, sm90_barrier_specs

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.gather_rule import (
    MAX_GATHER_LOADS_PER_SM,
    gather_loads_per_sm,
    gathered_config,
    packed_k_tiles,
    with_gathered_operands,
)
from cute_conv.problem import Conv2dProblemShape
from cute_conv.schedule import schedule_shape
from cute_conv.staging import (
    channels_padded,
    gather_replaces,
    kernel_problem_for,
)
from cute_conv.untuned import heuristic_config
from tests.sass import loads_waiting_on_loads, sass_of


def conv(n, h, c, k, r, **geom):
    return Conv2dProblemShape.from_shapes((n, h, h, c), (k, r, r, c), **geom)


@pytest.mark.parametrize(
    "fields",
    [dict(cluster_m=2), dict(cluster_n=2), dict(stream_k=True), dict(dynamic_schedule=True),
     dict(pingpong=True), dict(tile_w=64, halo_h=4)],
    ids=lambda f: next(iter(f)),
)  # fmt: skip
def test_gather_a_excludes_the_other_schedules(fields):
    with pytest.raises(ValueError, match="gather needs cluster_m=cluster_n=1"):
        Conv2dConfig(gather=True, **fields)


def test_gather_a_needs_16_bit_inputs():
    config = Conv2dConfig(tile_k=128, gather=True)
    with pytest.raises(ValueError, match="gather needs 16-bit inputs"):
        cute_conv.compile_kernel("sm_90a", act_dtype="float8_e4m3fn", config=config)


def test_gather_a_is_typed():
    with pytest.raises(TypeError, match="gather"):
        Conv2dConfig(gather=1)


def test_the_staging_a_gather_spares():
    assert gather_replaces(conv(1, 16, 12, 64, 3, padding=1)) == "pad"
    assert gather_replaces(conv(1, 16, 16, 64, 3, padding=1)) is None  # no staging at all
    assert gather_replaces(conv(1, 224, 3, 64, 7, stride=2, padding=3)) is None  # space-to-depth
    assert gather_replaces(conv(1, 224, 8, 64, 7, stride=2, padding=3)) is None  # super pixels
    assert gather_replaces(conv(1, 64, 3, 64, 3, padding=1)) == "im2col"
    assert gather_replaces(conv(1, 16, 12, 64, 3, padding=1), element_bytes=1) == "pad"  # fp8: 16


def test_channels_padded():
    problem = conv(2, 16, 12, 40, 3, padding=1, stride=2)
    padded = channels_padded(problem)
    assert padded.C == 16 and padded.filter_shape == (40, 3, 3, 16)
    assert (padded.P, padded.Q, padded.padding) == (problem.P, problem.Q, problem.padding)
    aligned = conv(2, 16, 16, 40, 3, padding=1)
    assert channels_padded(aligned) is aligned


def test_a_gathered_kernel_problem_is_the_problem():
    problem = conv(2, 16, 12, 40, 3, padding=1)
    assert kernel_problem_for(problem).C == 16
    assert kernel_problem_for(problem, gathered=True) is problem
    stem = conv(1, 224, 3, 64, 7, stride=2, padding=3)  # staged for speed all the same
    assert kernel_problem_for(stem, gathered=True) == kernel_problem_for(stem)
    rgb = conv(1, 64, 3, 64, 3, padding=1)  # gathered as it is, not unfolded
    assert kernel_problem_for(rgb).R == 1 and kernel_problem_for(rgb, gathered=True) is rgb


def small_and_large():
    return conv(1, 16, 16, 64, 1), conv(64, 128, 16, 64, 3, padding=1)


def test_gathered_config_takes_small_convs_only():
    small, large = small_and_large()
    base = Conv2dConfig(tile_n=64, tile_k=16, cluster_m=2)
    chosen = gathered_config(base, small, 132, channels=15)
    assert chosen.gather and chosen.cluster_shape_mn == (1, 1) and chosen.gather_vector == 1
    assert chosen.tile_shape_mnk == base.tile_shape_mnk
    assert gathered_config(base, small, 132, replaces="im2col", channels=15) == chosen
    assert gathered_config(base, large, 132, channels=15) is None
    assert gathered_config(base, small, 132, element_bytes=1, channels=15) is None


def test_gathered_config_threshold_is_loads_per_sm():
    """A load moves gather_vector channels: C=12 convs issue a quarter of C=9's loads, and
    the bound counts loads."""
    config = Conv2dConfig(tile_n=64, tile_k=16)
    for n in range(1, 80):
        problem = conv(n, 16, 16, 64, 3, padding=1)
        tiles, k_tiles = schedule_shape(problem, 128, 64, 16)
        elems = -(-tiles // 132) * k_tiles * (128 + 64) * 16
        for channels, vector in ((9, 1), (10, 2), (12, 4), (14, 2)):
            gathered = with_gathered_operands(config, channels)
            assert gather_loads_per_sm(gathered, problem) == elems // vector
            for replaces, bound in MAX_GATHER_LOADS_PER_SM.items():
                chosen = gathered_config(config, problem, replaces=replaces, channels=channels)
                assert (chosen is not None) == (elems // vector <= bound)


@pytest.mark.parametrize(
    "channels,r,s,tile_k,packed",
    [(1, 1, 7, 16, True),  # 7 taps of one channel: 7 k-tiles -> 1
     (3, 3, 3, 16, True),  # 27 elements: 9 -> 2
     (12, 3, 3, 16, True),  # 108: 9 -> 7
     (20, 3, 3, 32, True),  # 180: 9 -> 6 (cp.async copies of 4 channels)
     (40, 3, 3, 32, True),  # 2 k-tiles a tap, 18 -> 12 (360 / 32)
     (13, 1, 1, 16, False),  # one tap: nothing to pack
     (16, 3, 3, 16, False),  # whole k-tiles a tap already
     (3, 3, 3, 32, False),  # register gathers pack 16-channel k-tiles only
     (10, 3, 3, 64, False)],
    ids=str,
)  # fmt: skip
def test_gathered_config_packs_the_taps_where_that_takes_fewer_k_tiles(
    channels, r, s, tile_k, packed
):
    problem = Conv2dProblemShape.from_shapes((1, 12, 12, 8), (32, r, s, 8))
    chosen = gathered_config(Conv2dConfig(tile_m=64, tile_n=32, tile_k=tile_k), problem,
                             channels=channels)  # fmt: skip
    taps_k_tiles = r * s * -(-channels // tile_k)
    assert packed_k_tiles(chosen, r * s, channels) == -(-r * s * channels // tile_k)
    fewer = packed_k_tiles(chosen, r * s, channels) < taps_k_tiles
    register_gather = chosen.gather_vector < 4
    assert chosen.pack_taps == (fewer and not (register_gather and tile_k > 16)) == packed


def test_packed_k_tiles_checks_its_arguments():
    config = Conv2dConfig(tile_k=16, gather=True)
    with pytest.raises(TypeError, match="config must be a Conv2dConfig"):
        packed_k_tiles(None, 9, 3)
    with pytest.raises(TypeError, match="taps must be an int"):
        packed_k_tiles(config, 9.0, 3)
    with pytest.raises(ValueError, match="taps must be >= 1"):
        packed_k_tiles(config, 0, 3)
    with pytest.raises(ValueError, match="channels must be >= 1"):
        packed_k_tiles(config, 9, 0)


def test_pack_taps_needs_gather_and_shows_only_when_set():
    with pytest.raises(ValueError, match="pack_taps .* needs gather=True"):
        Conv2dConfig(pack_taps=True)
    assert "pack_taps" not in repr(Conv2dConfig(gather=True))
    assert repr(Conv2dConfig(gather=True, pack_taps=True)).endswith("pack_taps=True)")


def test_with_gathered_operands_turns_off_what_it_excludes():
    config = Conv2dConfig(tile_m=256, tile_n=64, dynamic_schedule=True, tile_w=64, halo_h=6)
    gathered = with_gathered_operands(config, 3)
    assert gathered == Conv2dConfig(tile_m=256, tile_n=64, gather=True)
    assert with_gathered_operands(Conv2dConfig(pingpong=True), 5) == Conv2dConfig(gather=True)


@pytest.mark.parametrize("channels,vector", [(1, 1), (3, 1), (6, 2), (12, 4), (84, 4), (222, 2)])
def test_the_gather_loads_the_widest_vector_that_divides_c(channels, vector):
    assert with_gathered_operands(Conv2dConfig(), channels).gather_vector == vector
    if channels <= 16:  # one k-tile: gathered at any bound fitted so far
        config = heuristic_config(conv(1, 4, channels, 64, 1), 132, cuda_cores=False)
        assert config.gather_vector == vector  # on tensor cores: the call itself runs a gemv


def test_gather_vector_is_checked_against_c_and_the_config():
    with pytest.raises(ValueError, match=r"gather_vector must be one of \(1, 2, 4\)"):
        Conv2dConfig(gather=True, gather_vector=8)
    with pytest.raises(ValueError, match="1 without gather"):
        Conv2dConfig(gather_vector=2)
    with pytest.raises(ValueError, match="C must be a multiple of it, got C=6"):
        cute_conv.check_config_fits(Conv2dConfig(gather=True, gather_vector=4), conv(1, 8, 6, 8, 1))
    with pytest.raises(ValueError, match=r"channels must be >= 1 \(the conv's C\), got 0"):
        with_gathered_operands(Conv2dConfig(), 0)
    with pytest.raises(TypeError, match="channels must be an int"):
        with_gathered_operands(Conv2dConfig(), "12")


def test_gathered_config_checks_its_arguments():
    small, _ = small_and_large()
    with pytest.raises(TypeError, match="config must be a Conv2dConfig"):
        gathered_config(cute_conv.Conv2dConfigSm100(), small, channels=15)
    with pytest.raises(ValueError, match="num_sms"):
        gathered_config(Conv2dConfig(), small, 0, channels=15)
    with pytest.raises(ValueError, match="element_bytes"):
        gathered_config(Conv2dConfig(), small, 132, element_bytes=4, channels=15)
    with pytest.raises(ValueError, match="replaces must be one of pad, im2col"):
        gathered_config(Conv2dConfig(), small, 132, replaces="space-to-depth", channels=15)
    with pytest.raises(ValueError, match="max_loads_per_sm must be None or a dict of pad"):
        gathered_config(Conv2dConfig(), small, channels=15, max_loads_per_sm={"pad": 1})
    with pytest.raises(TypeError, match="pack_taps must be a bool"):
        gathered_config(Conv2dConfig(), small, channels=15, pack_taps=1)


def test_a_sweeps_variant_of_the_gather_rule_takes_its_bounds_and_packing():
    """``max_loads_per_sm`` replaces the fitted bounds and ``pack_taps=False`` leaves the
    taps unpacked: the rule as sweeps run before the refit and the packing measured it."""
    problem = conv(1, 12, 12, 8, 3, padding=1)
    base = Conv2dConfig(tile_m=64, tile_n=32, tile_k=16)
    loads = gather_loads_per_sm(with_gathered_operands(base, 3), problem)
    assert gathered_config(base, problem, channels=3).pack_taps  # 27 elements: 9 -> 2
    assert not gathered_config(base, problem, channels=3, pack_taps=False).pack_taps
    tight = {"pad": loads - 1, "im2col": loads - 1}
    assert gathered_config(base, problem, channels=3, max_loads_per_sm=tight) is None
    at = {"pad": loads, "im2col": loads}
    assert gathered_config(base, problem, channels=3, max_loads_per_sm=at) is not None


def test_heuristic_config_gathers_small_padded_and_unfolded_convs():
    small_pad, small_rgb = conv(1, 16, 12, 64, 1), conv(1, 8, 3, 64, 2)
    assert heuristic_config(small_pad, 132).gather
    rgb = heuristic_config(small_rgb, 132)
    assert rgb.gather and rgb.tile_k == 16  # sized on the padded conv, not its columns
    assert not heuristic_config(conv(64, 128, 12, 64, 3, padding=1), 132).gather
    assert not heuristic_config(conv(1, 224, 3, 64, 7, stride=2, padding=3), 132).gather
    assert not heuristic_config(small_pad, 132, element_bytes=1).gather
    with pytest.raises(ValueError, match="arch must be one of"):
        heuristic_config(small_pad, 132, arch="sm_80")


def test_the_gathered_ring_in_the_role_table():
    specs = sm90_barrier_specs(Conv2dConfig(gather=True), has_residual=True)
    assert specs["ab.full"].count == 64  # every gather thread
    assert specs["ab.empty"].count == 256  # every thread of the two consumer warpgroups
    assert specs["named.epilogue_load"].arrivals[0].role == "first gather warp"
    plain = sm90_barrier_specs(Conv2dConfig(), has_residual=True)
    assert (plain["ab.full"].count, plain["ab.empty"].count) == (1, 8)


@pytest.mark.parametrize(
    "config,loads_source_by_tma,warps",
    [
        (Conv2dConfig(tile_n=64, tile_k=16, gather=True, gather_vector=2), False, 4),
        (Conv2dConfig(tile_n=64, tile_k=16, gather=True, gather_vector=2), True, 4),  # C by TMA
        (Conv2dConfig(tile_n=32, tile_k=16, gather=True, gather_vector=4), False, 2),  # 64 runs
        (Conv2dConfig(tile_n=32, tile_k=16, gather=True, gather_vector=4), True, 2),
        (Conv2dConfig(tile_n=96, tile_k=32, gather=True, gather_vector=4), False, 4),
        (Conv2dConfig(tile_n=64, tile_k=16, gather=True), False, 2),  # scalar loads
    ],
)  # fmt: skip
def test_the_whole_producer_warpgroup_gathers_where_it_can(config, loads_source_by_tma, warps):
    roles = Sm90Roles.of(config, loads_source_by_tma)
    assert (roles.gather_warps, roles.first_gather_warp) == (warps, 4 - warps)
    # Warp 1 loads C between its gathers where it gathers; else it is the source-load warp.
    assert roles.source_loader_gathers == (loads_source_by_tma and warps == 4)
    specs = sm90_barrier_specs(config, has_residual=loads_source_by_tma)
    assert specs["ab.full"].count == 32 * warps
    if loads_source_by_tma:
        assert ("named.epilogue_load" in specs) == (warps == 2)
        assert specs["source.full"].count == 1


@pytest.mark.parametrize(
    "config,epilogue",
    [(Conv2dConfig(tile_n=64, tile_k=16, gather=True), cute_conv.EpilogueSpec()),
     (Conv2dConfig(tile_m=256, tile_n=32, tile_k=32, gather=True),
      cute_conv.EpilogueSpec(has_residual=True, has_bias=True, activation="relu")),
     (Conv2dConfig(tile_n=128, gather=True), cute_conv.EpilogueSpec(store_by_threads=True))],
    ids=["plain", "residual", "thread-store"],
)  # fmt: skip
def test_a_gathering_kernel_loads_its_operands_by_threads(config, epilogue):
    kernel = cute_conv.compile_kernel("sm_90a", config=config, epilogue=epilogue)
    ptx = kernel.ptx
    # No TMA load of A or B (the residual's C loads are 2D tiles into shared::cluster/cta).
    assert not re.search(r"cp\.async\.bulk\.tensor\.[45]d\.shared", ptx)
    assert "im2col" not in ptx
    assert re.search(r"ld\.global(\.\w+)*\.b16", ptx)
    assert "fence.proxy.async.shared::cta" in ptx
    # The gather warps get registers enough not to spill their loads: 104, consumers 200.
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+104;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+200;", ptx)
    plain = cute_conv.compile_kernel("sm_90a", config=Conv2dConfig(), epilogue=epilogue)
    assert "im2col" in plain.ptx
    assert re.search(r"cp\.async\.bulk\.tensor\.4d\.shared", plain.ptx)


def test_a_gathering_warp_loads_the_residual_before_its_first_gathers():
    """Where all four producer warps gather (64 filter runs a warp, vector loads), warp 1
    issues C's TMA loads itself: its first tile's before any of its gathers. In the PTX the
    first 2D TMA load (C; the operands are gathered) precedes the first gathered load, and
    no EpilogueLoad barrier is left."""
    config = Conv2dConfig(tile_m=64, tile_n=64, stages=3, gather=True, gather_vector=4)
    assert Sm90Roles.of(config, loads_source_by_tma=True).source_loader_gathers
    spec = cute_conv.EpilogueSpec(has_residual=True, has_bias=True, activation="relu")
    ptx = cute_conv.compile_kernel("sm_90a", config=config, epilogue=spec).ptx
    c_load = re.search(r"cp\.async\.bulk\.tensor\.2d\.shared", ptx)
    first_gather = re.search(r"ld\.global(\.\w+)*\.b(16|32|64)\s|cp\.async\.ca\.shared", ptx)
    assert c_load is not None and first_gather is not None
    assert c_load.start() < first_gather.start()
    barrier = int(NamedBarrierConv.EpilogueLoad)
    assert not re.search(rf"bar(rier)?(\.cta)?\.(arrive|sync)(\.aligned)?\s+{barrier},", ptx)


@pytest.mark.parametrize("vector", [2, 4])
def test_the_residual_loads_open_before_the_first_gather(vector):
    """Where two warps gather (64 filter runs) and warp 1 loads C, the first gather warp lets
    it start (its arrive on the EpilogueLoad barrier) before it gathers the first tile, whose
    k-tiles each wait a round trip: in the PTX the arrive precedes the operands' first loads
    (or copies)."""
    config = Conv2dConfig(
        tile_m=64, tile_n=32, tile_k=16, stages=3, gather=True, gather_vector=vector
    )
    assert Sm90Roles.of(config, loads_source_by_tma=True).gather_warps == 2
    spec = cute_conv.EpilogueSpec(has_residual=True, has_bias=True, activation="relu")
    ptx = cute_conv.compile_kernel("sm_90a", config=config, epilogue=spec).ptx
    barrier = int(NamedBarrierConv.EpilogueLoad)
    arrive = re.search(rf"bar(rier)?(\.cta)?\.arrive(\.aligned)?\s+{barrier},", ptx)
    first_gather = re.search(r"ld\.global(\.\w+)*\.b(16|32)\s|cp\.async\.ca\.shared", ptx)
    assert arrive is not None and first_gather is not None
    assert arrive.start() < first_gather.start()


@pytest.mark.parametrize(
    "tile_mnk", [(128, 64, 16), (128, 64, 64), (256, 64, 32), (128, 128, 64)], ids=str
)
@pytest.mark.parametrize("vector", [1, 2, 4])
def test_gather_loads_are_in_flight_together(tile_mnk, vector):
    """A thread's loads of a group of units all issue before any is waited for: no load
    writes a register another load of the group wrote (when the runs were packed as they
    were loaded, ptxas reused registers and serialized the loads: 2-3x slower). Loads are
    as wide as ``gather_vector`` allows."""
    tile_m, tile_n, tile_k = tile_mnk
    config = Conv2dConfig(
        tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, gather=True, gather_vector=vector
    )
    kernel = cute_conv.compile_kernel("sm_90a", config=config)
    sass = sass_of(kernel.cubin)
    assert loads_waiting_on_loads(sass) == 0
    widths = set(re.findall(r"\bLDG\.E(\.\S+)?\s", sass))  # 16 or 32 bits
    copies = set(re.findall(r"\bLDGSTS\.E(\.\S+)?\s", sass))  # cp.async, 64 bits
    assert (widths, copies) == {1: ({".U16"}, set()), 2: ({""}, set()), 4: (set(), {".64"})}[vector]


@pytest.mark.parametrize("tile_mnk", [(128, 64, 64), (64, 32, 64)], ids=str)
@pytest.mark.parametrize("vector", [2, 4])
def test_gather_loads_stay_in_flight_where_warp_1_loads_the_residual(tile_mnk, vector):
    """With a residual loaded by TMA, warp 1 gathers and loads C: the gathers keep their
    loads in flight together, with no spilled registers."""
    tile_m, tile_n, tile_k = tile_mnk
    config = Conv2dConfig(
        tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, gather=True, gather_vector=vector
    )
    spec = cute_conv.EpilogueSpec(has_residual=True, has_bias=True, activation="relu")
    assert Sm90Roles.of(config, loads_source_by_tma=spec.loads_source_by_tma).source_loader_gathers
    sass = sass_of(cute_conv.compile_kernel("sm_90a", config=config, epilogue=spec).cubin)
    assert loads_waiting_on_loads(sass) == 0
    assert not re.search(r"\b(STL|LDL)\b", sass)


def test_8_byte_gathers_are_async_copies_counted_by_the_full_barrier():
    """4-channel vectors are cp.async copies into the stage: each gather thread arrives on
    the full barrier once its copies land (noinc: the barrier's count is the threads), and
    the consumers fence the async proxy after each wait, before their WGMMAs read it."""
    config = Conv2dConfig(tile_n=64, gather=True, gather_vector=4)
    ptx = cute_conv.compile_kernel("sm_90a", config=config).ptx
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 8", ptx)
    assert "cp.async.mbarrier.arrive.noinc.shared" in ptx
    wait = ptx.index("mbarrier.try_wait.parity")
    assert "fence.proxy.async.shared::cta" in ptx[wait:]
    two = Conv2dConfig(tile_n=64, gather=True, gather_vector=2)
    assert "cp.async.ca" not in cute_conv.compile_kernel("sm_90a", config=two).ptx


def test_a_stored_autotuner_choice_is_not_replaced_by_the_gather(tmp_path, monkeypatch):
    """The gather rule replaces the heuristic's guess only: a config the autotuner stored for
    a small C-padded conv runs as stored, and a config passed in runs as passed."""
    import torch
    from cute_conv.kernels.common.epilogue import EpilogueSpec

    from cute_conv import dispatch, tuning
    from cute_conv.arch import ARCHS

    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_device_name", lambda index: "Fake H100")
    problem = conv(1, 16, 12, 64, 1)
    bf16 = torch.bfloat16
    x = torch.empty(problem.activation_shape, dtype=bf16, device="meta")
    args = (ARCHS["sm_90a"], problem, kernel_problem_for(problem), x, problem.filter_shape,
            bf16, 132, EpilogueSpec())  # fmt: skip
    guessed = dispatch._config_for_call(None, *args)
    assert guessed.gather and guessed == heuristic_config(problem, 132)
    stored = Conv2dConfig(tile_n=128, tile_k=16)
    tuning._store(torch.device("cuda", 0), tuning.problem_key(problem, bf16, bf16), stored, {})
    assert dispatch._config_for_call(None, *args) == stored
    given = Conv2dConfig(tile_n=64)
    assert dispatch._config_for_call(given, *args) == given


def _longest_load_batch(sass: str) -> int:
    """The most global loads issued in a row before a shared-memory store."""
    longest = run = 0
    for line in sass.splitlines():
        if re.search(r"\bLDG\b|\bLDG\.", line):
            run += 1
        elif re.search(r"\bSTS\b", line) and run:
            longest, run = max(longest, run), 0
    return longest


@pytest.mark.parametrize(
    "tile_mnk, vector, warps, batch",
    [
        ((64, 32, 16), 2, 2, 5),  # 2 A units + 1 B unit a k-tile, 16 a batch
        ((128, 64, 16), 2, 4, 5),
        ((64, 64, 16), 2, 4, 8),  # 1 + 1 units a k-tile
        ((64, 32, 64), 2, 4, 2),  # 4 + 2: RegNet's 1-pixel C=222 convs
        ((64, 32, 16), 1, 2, 0),  # 16-bit loads: not batched
        ((64, 32, 16), 4, 2, 0),  # cp.async copies: no registers
        ((128, 64, 64), 2, 4, 0),  # 8 + 4 units a k-tile: one k-tile a batch, as before
    ],
)  # fmt: skip
def test_small_register_gathers_load_several_k_tiles_before_storing(tile_mnk, vector, warps, batch):
    """``k_tiles_per_batch``: where a k-tile's units of both operands fit the units a thread
    keeps in flight, a thread issues the loads of that many k-tiles before its first store
    (4 loads of 2 channels a unit), so it waits on global memory once per batch."""
    assert k_tiles_per_batch(vector, tile_mnk, warps * 32) == batch
    if batch == 0:
        return
    tile_m, tile_n, tile_k = tile_mnk
    config = Conv2dConfig(
        tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, gather=True, gather_vector=vector
    )
    assert Sm90Roles.of(config).gather_warps == warps
    sass = sass_of(cute_conv.compile_kernel("sm_90a", config=config).cubin)
    units = sum(rows * tile_k // 8 // (warps * 32) for rows in (tile_m, tile_n))
    assert _longest_load_batch(sass) == batch * units * 8 // vector
    assert loads_waiting_on_loads(sass) == 0
    assert not re.search(r"\b(STL|LDL)\b", sass), "no spills"


@pytest.mark.parametrize(
    "tile_mnk,vector",
    [((64, 32, 16), 1), ((64, 64, 16), 1), ((64, 32, 32), 4), ((128, 128, 16), 4),
     ((128, 64, 16), 2)],
    ids=str,
)  # fmt: skip
def test_packed_taps_keep_the_gather_loads_in_flight(tile_mnk, vector):
    """With packed taps each vector's tap is stepped from the run's first (one division a
    run, not one a vector): such tiles keep their loads in flight together, without
    spills, and read no TMA operand. (Not every tile the rule packs: at 128x128x16 with
    1-channel vectors 5 loads wait on others, 1 unpacked.)"""
    tile_m, tile_n, tile_k = tile_mnk
    config = Conv2dConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, gather=True,
                          gather_vector=vector, pack_taps=True)  # fmt: skip
    kernel = cute_conv.compile_kernel("sm_90a", config=config)
    assert "im2col" not in kernel.ptx
    sass = sass_of(kernel.cubin)
    assert loads_waiting_on_loads(sass) == 0
    assert not re.search(r"\b(STL|LDL)\b", sass)
