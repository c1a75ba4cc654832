"""CPU tests of the kernel-duration probe's reporting (the probe itself needs a GPU)."""

import kernel_durations


def test_the_summary_totals_each_measured_calls_kernels():
    row = {
        "ours": {"kernels": ["conv", "zero"], "us": [2.0, 0.5]},
        "cudnn": {"kernels": ["implicit_gemm"], "us": [1.5]},
        "ours_fused": {"kernels": ["conv"], "us": [3.0]},
        "frontend_fused": None,  # no frontend plan checked
    }
    line = kernel_durations.summary_line(row)
    assert line == "ours    2.50 us  cudnn    1.50 us  ours_fused    3.00 us"


def test_the_summary_of_a_plain_row_names_ours_and_cudnn_alone():
    row = {"ours": {"us": [4.25]}, "cudnn": {"us": [3.0, 1.0]}}
    assert kernel_durations.summary_line(row) == "ours    4.25 us  cudnn    4.00 us"
