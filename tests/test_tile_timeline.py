"""The per-tile timeline probe's summary (benchmarks/experiments/tile_timeline.py), on marks made
up here: which tile counts as a CTA's first, and each part's cycles; the problems it takes."""

from __future__ import annotations

import pytest
import tile_timeline


def mark(tile_no: int, work: int, start: int, wait: int, mainloop: int, epilogue: int) -> list:
    """A ``TL`` line's fields: block, tile_no, work, then the five clock64 marks."""
    ready = start + 2
    first = ready + wait
    return [0, tile_no, work, start, ready, first, first + mainloop, first + mainloop + epilogue]


def test_summary_splits_each_ctas_first_tile_from_the_rest():
    # Two CTAs of a static schedule on 2 SMs: CTA 0 runs works 0 and 2, CTA 1 works 1 and 3.
    marks = [
        mark(1, 2, 9000, 50, 5600, 1500),
        mark(0, 0, 0, 2400, 6000, 1520),
        mark(0, 1, 10, 2500, 6100, 1530),
        mark(1, 3, 9100, 60, 5700, 1540),
    ]
    waits = [[0, 900, 400], [0, 1100, 500], [1, 0, 0]]  # TW: block, waited, longest
    result = tile_timeline.summary(marks, num_ctas=2, waits=waits)
    cycles = result["cycles"]
    assert result["tiles"] == 4
    assert cycles["first_tile_wait_first_stage"]["median"] == 2450
    assert cycles["first_tile_mainloop_after_it"]["median"] == 6050
    assert cycles["later_tiles_wait_first_stage"]["median"] == 55
    assert cycles["later_tiles_mainloop_after_it"]["median"] == 5650
    assert cycles["epilogue"]["n"] == 4 and cycles["epilogue"]["median"] == 1525
    assert cycles["k_tile_waits_per_tile"]["median"] == 900
    assert cycles["longest_k_tile_wait"]["p90"] == 500
    assert "k_tile_waits_per_tile" not in tile_timeline.summary(marks, num_ctas=2)["cycles"]


def test_totals_reduce_each_warpgroups_sums_to_cycles_per_tile():
    # TS: block, warpgroup, tiles, cycles, first-stage waits, mainloops, epilogues, k-tile waits
    lines = [[0, 0, 6, 48000, 600, 36000, 9000, 1200], [0, 1, 6, 48600, 1200, 36000, 9000, 0],
             [1, 0, 0, 100, 0, 0, 0, 0]]  # fmt: skip
    result = tile_timeline.totals(lines)
    assert result["cycles"] == 8050  # the median of 8000 and 8100 (no-tile warpgroups left out)
    assert result["mainloop"] == 6000 and result["epilogue"] == 1500
    assert result["first_stage_wait"] == 150  # 100 and 200
    assert result["other"] == 8050 - 150 - 6000 - 1500
    assert result["k_tile_waits_in_mainloop"] == 100
    assert "sm_mhz" not in result  # lines without the loop's nanoseconds


def test_totals_give_the_sm_clock_of_lines_with_nanoseconds():
    lines = [[0, 0, 6, 48000, 600, 36000, 9000, 1200, 30000],
             [0, 1, 6, 48600, 1200, 36000, 9000, 0, 32400]]  # fmt: skip
    assert tile_timeline.totals(lines)["sm_mhz"] == 1550  # the median of 1600 and 1500


def test_spans_count_microseconds_from_the_first_ctas_entry():
    # TS fields 9-12: entry, loop begin, loop end, exit (absolute %globaltimer ns)
    head = [0, 0, 6, 48000, 600, 36000, 9000, 1200, 30000]
    lines = [head + [1_000, 3_000, 33_000, 34_000], head + [2_000, 5_000, 41_000, 43_000],
             head + [1_500, 4_000, 37_000, 37_500]]  # fmt: skip
    result = tile_timeline.spans(lines)
    assert result["warpgroups"] == 3
    assert result["entry_spread_us"] == 1.0
    assert result["setup_us"] == 2.5  # the median of 2, 3 and 2.5 us
    assert result["loop_us"] == 33.0  # of 30, 36 and 33
    assert result["drain_us"] == 1.0  # of 1, 2 and 0.5
    assert result["loop_end_median_us"] == 36.0 and result["loop_end_last_us"] == 40.0
    assert result["loop_end_p10_us"] == 32.0
    assert result["last_exit_us"] == 42.0
    assert tile_timeline.spans([head]) == {}  # lines from before the timestamps


def test_producer_totals_split_the_load_warps_time_into_waits_and_issue():
    # TP: block, tiles, cycles, time in load_tile, of it waits for free ring stages
    lines = [[0, 6, 48000, 30000, 21000], [1, 6, 49200, 31200, 22200], [2, 0, 50, 0, 0]]
    result = tile_timeline.producer_totals(lines)
    assert result["cycles"] == 8100  # the median of 8000 and 8200 (no-tile CTAs left out)
    assert result["load_tile"] == 5100 and result["waits_for_free_stages"] == 3600
    assert result["issue"] == 1500
    assert result["tiles"] == 6


def test_epilogue_parts_reduce_each_warpgroups_sums_to_cycles_per_tile():
    # TE: block, warpgroup, tiles, C waits, subtile 0's compute, the others', stores
    lines = [[0, 0, 3, 300, 3000, 4200, 9000], [0, 1, 3, 600, 3600, 4800, 9600],
             [1, 0, 0, 0, 0, 0, 0]]  # fmt: skip
    result = tile_timeline.epilogue_parts(lines)
    assert result["c_waits"] == 150  # the median of 100 and 200 (no-tile warpgroups left out)
    assert result["compute_subtile0"] == 1100 and result["compute_rest"] == 1500
    assert result["stores"] == 3100
    assert result["tiles"] == 3


def test_problems_are_suite_shapes_or_corpus_keys():
    assert tile_timeline.shape_of("r50-c3-3x3")["C"] == 128
    key = "n128_h14_w14_c1024_k512_r1_s1_pad0.0.0.0_str1.1_dil1.1"
    shape = tile_timeline.shape_of(key)
    assert (shape["N"], shape["H"], shape["C"], shape["K"], shape["R"]) == (128, 14, 1024, 512, 1)
    with pytest.raises(ValueError, match="not in the corpus"):
        tile_timeline.shape_of("no-such-shape")


def test_an_unknown_form_is_rejected_before_anything_runs():
    with pytest.raises(ValueError, match="bf16, fp8, fused"):
        tile_timeline.one_call("r50-c3-3x3", "fp16", 132, {})
