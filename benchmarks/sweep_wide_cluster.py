"""1x4 clusters for 64-wide tiles of long mainloops against the config's own (CUDA graphs).

The variant: ``small_grid_rules.wide_cluster_config`` shares each activation tile among 4
CTAs along N (1x4 clusters, a stream-K split dropped) for plain 16-bit convs of several taps
on 64-wide tiles with at least 4 N tiles and 36 k-tiles, where the SMs its clusters occupy are
a share of them within two bounds; the fit of ``WIDE_CLUSTER_MIN_SHARE`` and
``WIDE_CLUSTER_MAX_SHARE``.

    python benchmarks/sweep_wide_cluster.py [--form fused] [--max-seconds 500]   # H100
    python benchmarks/sweep_wide_cluster.py [--form fused] --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the form's H100 file
(``wide_cluster_sweep_H100.json``, ``wide_cluster_fused_sweep_H100.json``), e.g. an H200's
(``*_H200.json``); ``--joint`` fits both GPUs' train rows of the form together, as the rule's
bounds are. The fused form (``relu(conv + b) + r``) measures the rule with its
``take_residual`` on, which it ships off: both GPUs' fused train rows fit no bounds.

Why: the autotuner's candidates (2-CTA clusters at most) left the batch-1 3x3s of C=K=512
below cuDNN: 64-wide tiles load mostly their activation tile, which 4 CTAs can share. A
scratch probe (NOTES, session 42) ran VGG-16's batch-1 28x28 3x3 in 17.4 us at 64x64 1x4
against 22.6 at 64x64 (cuDNN 17.3), and 1x4 clusters 1.7-1.8x slower once they need the
whole GPU (not every 4-CTA cluster is resident at once).

The problems: every corpus conv whose call's config in the form (``untuned.untuned_config``, the
other rules at their fitted bounds) changes when the bounds take every share up to the
whole GPU (``SELECTED``). Per problem, in one process: both configs, each checked against
the float32 reference from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's
replay beside them; a rerun skips the problems already there.

``--fit`` scores each pair of bounds of ``SHARE_GRID`` on the train problems (geomean of the
config's own time over the time of the config the bounds give), picks the best (the middle
of ties), and reports the same on the held-out problems, which the fit never sees;
``--joint`` does so on the geomean of both GPUs' scores.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, rule_bound_config  # noqa: E402

FORMS = ("plain", "fused")
RESULTS_PATHS = {
    "plain": HERE / "wide_cluster_sweep_H100.json",
    "fused": HERE / "wide_cluster_fused_sweep_H100.json",
}
JOINT_PATHS = {
    form: (path, path.with_name(path.name.replace("_H100", "_H200")))
    for form, path in RESULTS_PATHS.items()
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
OFF = (math.inf, math.inf)
SELECTED = (0.0, 1.0)  # past the whole GPU: not every cluster resident (a structural bound)
SHARE_GRID = (
    OFF,
    *itertools.product((0.0, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6), (0.7, 0.75, 0.8, 0.85, 0.9, 1.0)),
)
FITTED = dict(
    single_warpgroup_max_k_tiles=None, single_warpgroup_widen_max_k_tiles=None,
    whole_source_min_k=None, halo_min_column_fill=None, halo_narrow_min_column_fill=None,
    wide_epilogue_max_k_tiles=None, min_waves_tall=None, min_waves_tall_wide=None,
)  # fmt: skip

SWEEP = BoundSweep(
    rule_bound_config(
        ("wide_cluster_min_share", "wide_cluster_max_share"), NUM_SMS, wide_cluster_residual=True,
        **FITTED,
    ),
    off=OFF, on=SELECTED, baseline="own_cluster", variant="wide_cluster", grid=SHARE_GRID,
    constants=dict.fromkeys(FORMS, ("WIDE_CLUSTER_MIN_SHARE", "WIDE_CLUSTER_MAX_SHARE")),
    constants_module="cute_conv.small_grid_rules",
)  # fmt: skip
configs_of, wide_cluster_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
