"""CPU tests of the Nsight Compute summary (the profile itself needs a GPU and ncu)."""

import ncu_conv
import pytest

RAW_HEADER = ["ID", "Kernel Name", "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second"]
STALLS = "smsp__pcsamp_warps_issue_stalled_"


def fake_ncu(args: tuple[str, ...]) -> list[list[str]]:
    """What ``ncu --import REPORT --csv ...`` prints for two kernels, by the page asked for."""
    if "source" in args:
        kernel = int(args[args.index("--launch-skip") + 1])
        head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
        body = [
            ["0x10", "  HGMMA.64x256x16.F32.BF16 R24", "30", "100"],
            ["0x20", "  @!P0 NANOSLEEP.SYNCS 0x989680", "10" if kernel else "70", "5"],
            ["0x30", "  EXIT", "0", "1"],
        ]
        return [["Kernel Name", f"kernel{kernel}"], head, *body]
    if any(a.startswith("regex:") for a in args):
        header = [
            "ID",
            "Kernel Name",
            f"{STALLS}barrier",
            f"{STALLS}wait",
            f"{STALLS}wait_not_issued",
        ]
        return [
            header,
            ["", "", "", "", ""],
            ["0", "ours", "3", "1", "99"],
            ["1", "nvjet", "1", "3", "0"],
        ]
    units = ["", "", "usecond", "Ghz"]
    return [
        RAW_HEADER,
        units,
        ["0", "ours_kernel", "57.8", "1.75"],
        ["1", "nvjet_kernel", "50.4", "1.72"],
    ]


@pytest.fixture
def summary(monkeypatch) -> str:
    monkeypatch.setattr(ncu_conv, "ncu_csv", lambda report, *args: fake_ncu(args))
    return ncu_conv.summarize("report.ncu-rep")


def test_each_kernel_gets_its_headline_metrics(summary):
    assert "== kernel 0: ours_kernel" in summary
    assert "  gpu__time_duration.sum = 50.4" in summary
    assert "sm__throughput" not in summary  # a metric the report lacks is left out


def test_stall_reasons_are_shares_of_the_issued_samples(summary):
    # not-issued counts are a subset of the same samples: left out of the shares
    assert "== stalls, kernel 0: barrier 75%, wait 25%" in summary
    assert "== stalls, kernel 1: wait 75%, barrier 25%" in summary


def test_the_most_sampled_sass_comes_first_per_kernel(summary):
    lines = summary.splitlines()
    first = lines.index("== most-sampled SASS, kernel 0")
    assert "NANOSLEEP" in lines[first + 1] and lines[first + 1].strip().startswith("70.0%")
    second = lines.index("== most-sampled SASS, kernel 1")
    assert "HGMMA" in lines[second + 1] and lines[second + 1].strip().startswith("75.0%")
