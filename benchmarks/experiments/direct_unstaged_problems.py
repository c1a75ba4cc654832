"""Fresh few-channel convs inside ``direct_rule``'s bounds for staged convs (those it held
for every conv before its bounds for unstaged ones) whose tensor-core path needs no
staging (C a whole 16-byte TMA row: 8 or 16 bf16 channels), drawn at random for a fit and a
judgment of the rule on problems in no corpus:

    python benchmarks/experiments/direct_unstaged_problems.py   # writes the .json beside it
    python benchmarks/experiments/direct_dense_ab.py --routed \\
        --corpus benchmarks/experiments/direct_unstaged_problems.json --out ...

The direct rule's case for the CUDA-core kernel is the tensor-core path's staging launch; the
corpus's train part has one unstaged problem the rule takes (a 1x1 of C=K=8), so where the
bounds sit for unstaged convs is not settled by it. Each draw: C of 8 or 16, a 1x1 or a 3x3
(stride 1 or 2, padding 1), K a multiple of 8 within the rule's multiply-adds per pixel, a
batch and a square map such that the output pixels and the total multiply-adds are inside
its bounds. Problems are written in ``corpus.json``'s form, split by ``corpus.split_of``.
``experiments/direct_unstaged_ab_H200.json`` timed them before the rule's bounds for unstaged
convs; since, ``--routed`` times only the draws the rule still takes.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import corpus  # noqa: E402

from cute_conv.direct_rule import direct_dense_config  # noqa: E402
from cute_conv.staging import copies_activation  # noqa: E402

OUT = Path(__file__).with_suffix(".json")
SEED, COUNT = 99, 24
BATCHES = (1, 2, 4, 8, 16, 32)
SIZES = (32, 48, 56, 64, 80, 96, 112, 128, 160, 224)


def draw(rng: random.Random) -> corpus.ConvSite:
    c = rng.choice((8, 16))
    kernel = rng.choice((1, 3))
    stride = rng.choice((1, 2)) if kernel == 3 else 1
    k = 8 * rng.randint(1, max(1, 1024 // (kernel * kernel * c * 8)))
    size = rng.choice(SIZES)
    return corpus._site(f"direct-unstaged:{c}c{kernel}x{kernel}", size, c, k, kernel, stride,
                        kernel // 2)  # fmt: skip


def generate(seed: int = SEED, count: int = COUNT) -> dict:
    """``count`` distinct problems the rule takes and the tensor cores run unstaged."""
    rng = random.Random(seed)
    sites: list[tuple[corpus.ConvSite, int]] = []
    keys: set[str] = set()
    while len(sites) < count:
        site, n = draw(rng), rng.choice(BATCHES)
        problem = corpus._problem(site, n)
        key = corpus.problem_key(problem)
        if key in keys or copies_activation(problem, 2):
            continue
        if direct_dense_config(problem, 2, 2, staged=True) is None:  # the bounds of all convs
            continue
        keys.add(key)
        sites.append((site, n))
    built = corpus.build_corpus([([site], (n,)) for site, n in sites])
    built["about"] = f"direct_unstaged_problems.py, seed {seed}: fresh draws, in no corpus"
    return built


def main() -> int:
    OUT.write_text(corpus.dumps(generate()))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
