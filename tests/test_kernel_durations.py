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


def test_cuda_cores_false_overrides_the_tensor_core_config_of_a_direct_conv():
    from cute_conv import Conv2dConfig, Conv2dProblemShape, GroupedDirectConfig

    stem = Conv2dProblemShape.from_shapes((8, 224, 224, 3), (32, 3, 3, 3), stride=2, padding=1)
    assert isinstance(kernel_durations.overridden_default(stem, 132, {}), GroupedDirectConfig)
    overrides = {"cuda_cores": False, "gather": True, "pack_taps": True, "tile_m": 64}
    config = kernel_durations.overridden_default(stem, 132, overrides, has_residual=True)
    assert isinstance(config, Conv2dConfig)
    assert config.gather and config.pack_taps and config.tile_m == 64
    assert overrides["cuda_cores"] is False  # the caller's overrides are left as they were
