"""One grouped conv on the tensor cores at the limits of its 3-d im2col view
(``validation.IM2COL_3D``): whether the call is taken or refused, and, with the limits lifted
to the 4-d view's (``IM2COL_2D``), whether the GPU computes it right past them (H100/H200):

    python benchmarks/experiments/grouped_view_limits.py PAD DILATION R checked|lifted

prints one JSON line: the case, ``refused`` (the error) or ``ran`` (relative error against
float32 ``F.conv2d``, NaN count of the NaN-poisoned output). Run each lifted case in its own
process with ``CUDA_LAUNCH_BLOCKING=1``: past the limits a launch may fault and poison the
context. The conv: 2 images of 40x40, 96 channels in 2 groups of 48, R x R filter.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

import cute_conv.grouped_tensor_cores as gtc
from cute_conv.validation import IM2COL_2D


def main(pad: int, dil: int, r: int, mode: str) -> dict:
    if mode == "lifted":
        gtc.IM2COL_3D = IM2COL_2D  # the launcher's check reads the module's name at call time
    torch.manual_seed(pad * 1000 + dil * 10 + r)
    n, hw, c, k, groups = 2, 40, 96, 96, 2
    x = torch.randn(n, hw, hw, c, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(k, r, r, c // groups, device="cuda", dtype=torch.bfloat16)
    w /= r * (c // groups) ** 0.5
    p = hw + 2 * pad - dil * (r - 1)
    row = {"pad": pad, "dil": dil, "r": r, "mode": mode, "span": dil * (r - 1),
           "corner": pad - dil * (r - 1), "p": p}  # fmt: skip
    out = torch.full((n, p, p, k), float("nan"), device="cuda", dtype=torch.bfloat16)
    try:
        gtc.grouped_conv2d_tensor_cores(x, w, groups=groups, padding=pad, dilation=dil, out=out)
        torch.cuda.synchronize()
    except ValueError as e:
        return row | {"result": "refused", "error": str(e)[:200]}
    ref = F.conv2d(x.permute(0, 3, 1, 2).float(), w.permute(0, 3, 1, 2).float(),
                   padding=pad, dilation=dil, groups=groups).permute(0, 2, 3, 1)  # fmt: skip
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ok = err < 1e-2 and not out.isnan().any()
    return row | {"result": "ran", "rel_err": err, "nan": int(out.isnan().sum()), "ok": bool(ok)}


if __name__ == "__main__":
    pad, dil, r = (int(a) for a in sys.argv[1:4])
    print(json.dumps(main(pad, dil, r, sys.argv[4])), flush=True)
