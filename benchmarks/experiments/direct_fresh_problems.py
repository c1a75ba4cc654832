"""Fresh few-channel convs inside ``direct_rule``'s bounds, drawn at random for a fit and a
judgment of the rule on problems in no corpus, in two families:

    python benchmarks/experiments/direct_fresh_problems.py            # unstaged, seed 99
    python benchmarks/experiments/direct_fresh_problems.py --staged   # staged at wide K
    python benchmarks/experiments/direct_dense_ab.py --routed \\
        --corpus benchmarks/experiments/direct_unstaged_problems.json --out ...

- Unstaged (``direct_unstaged_problems.json``): convs the tensor cores run without a copy of
  the activation (C of 8 or 16: whole 16-byte TMA rows), inside the rule's bounds for staged
  convs (those it held for every conv before its bounds for unstaged ones). The rule's case
  for the CUDA-core kernel is the tensor-core path's staging launch, and the corpus's train
  part had one unstaged problem it took (a 1x1 of C=K=8). Timed in
  ``direct_unstaged_ab_H200.json`` before the rule's unstaged bounds; since, ``--routed``
  times only the draws it still takes.
- Staged at wide K (``direct_staged_wide_k_problems.json``, ``--staged``): convs the tensor
  cores stage (C in 3..7 or 9..15) with K of 48 or more inside the rule's bounds, past the
  train rows' K (at most 32), where the KRSC filter's scalar loads grow with K.

Each draw: a 1x1 or a 3x3 (stride 1 or 2, padding 1), K a multiple of 8 within the rule's
multiply-adds per pixel, a batch and a square map such that the output pixels and the total
multiply-adds are inside its bounds. Problems are written in ``corpus.json``'s form, split by
``corpus.split_of``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import corpus  # noqa: E402

from cute_conv.direct_rule import direct_dense_config  # noqa: E402
from cute_conv.staging import copies_activation  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = {False: HERE / "direct_unstaged_problems.json",
       True: HERE / "direct_staged_wide_k_problems.json"}  # fmt: skip
SEED = {False: 99, True: 100}
COUNT = 24
CHANNELS = {False: (8, 16), True: (3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15)}
STAGED_MIN_K = 48  # past the corpus's train rows of the staged direct form
BATCHES = (1, 2, 4, 8, 16, 32)
SIZES = (32, 48, 56, 64, 80, 96, 112, 128, 160, 224)


def draw(rng: random.Random, staged: bool) -> corpus.ConvSite:
    c = rng.choice(CHANNELS[staged])
    kernel = rng.choice((1, 3))
    stride = rng.choice((1, 2)) if kernel == 3 else 1
    low = STAGED_MIN_K // 8 if staged else 1
    k = 8 * rng.randint(low, max(low, 1024 // (kernel * kernel * c * 8)))
    size = rng.choice(SIZES)
    family = "staged" if staged else "unstaged"
    return corpus._site(f"direct-{family}:{c}c{kernel}x{kernel}", size, c, k, kernel, stride,
                        kernel // 2)  # fmt: skip


def generate(staged: bool = False, seed: int | None = None, count: int = COUNT) -> dict:
    """``count`` distinct problems inside the rule's bounds for staged convs that the tensor
    cores run unstaged (``staged`` False) or stage (True)."""
    seed = SEED[staged] if seed is None else seed
    rng = random.Random(seed)
    sites: list[tuple[corpus.ConvSite, int]] = []
    keys: set[str] = set()
    while len(sites) < count:
        site, n = draw(rng, staged), rng.choice(BATCHES)
        problem = corpus._problem(site, n)
        key = corpus.problem_key(problem)
        if key in keys or copies_activation(problem, 2) != staged:
            continue
        # The rule's bounds of staged convs but their K bound (which these draws fitted).
        if direct_dense_config(problem, 2, 2, staged=True, staged_max_k=math.inf) is None:
            continue
        keys.add(key)
        sites.append((site, n))
    built = corpus.build_corpus([([site], (n,)) for site, n in sites])
    built["about"] = (
        f"direct_fresh_problems.py{' --staged' if staged else ''}, seed {seed}: fresh draws, "
        f"in no corpus"
    )
    return built


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--staged", action="store_true", help="staged convs at wide K")
    staged = parser.parse_args().staged
    OUT[staged].write_text(corpus.dumps(generate(staged)))
    print(f"wrote {OUT[staged]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
