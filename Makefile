# cute-conv developer commands. Works on the CPU box and any machine with a package index.
# On the GPU machine (no index) run the scripts directly after
# `pip install --no-deps --no-build-isolation -e .` (see README).

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
# Pinned to the releases on the CPU box's disk. torchvision (the model definitions that
# optimize's and the corpus's tests build) imports only beside the torch build it was made
# for: the registry's torchvision fails next to the CPU-only torch 2.13.0 wheel, so this is the
# CUDA build of both (it runs on a CPU; ~5.5 GB in the venv).
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
# Written once the install succeeded; redone when pyproject.toml changes.
STAMP := $(VENV)/.cute-conv-installed

.PHONY: install test demo bench bench-fp8 bench-models bench-grouped bench-corpus bench-validation bench-compare lint clean distclean

install: $(STAMP)

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VPY)
	@if $(VPY) -c "import sys, torch; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then \
		echo "keeping the installed CUDA build of torch"; \
	else \
		echo "$(VPY) -m pip install $(TORCH_SPEC)"; \
		$(VPY) -m pip install $(TORCH_SPEC); \
	fi
	$(VPY) -m pip install -e ".[test]"
	@touch $@

test: install
	$(VPY) -m pytest -q -rs

demo: install
	$(VPY) examples/demo.py

bench: install
	$(VPY) benchmarks/bench.py

# fp8 (H100/H200): the suite's shapes against our bf16, cuDNN bf16 and the cuDNN frontend's fp8
# graph (benchmarks/FP8.md), and ResNet-50 optimize(dtype="fp8") against bf16 (FP8_MODELS.md).
bench-fp8: install
	$(VPY) benchmarks/bench_fp8.py
	cd benchmarks && ../$(VPY) models_fp8.py

# Whole models (H100/H200): a process per model and pair of batch sizes keeps each within a few
# minutes; each merges its rows into benchmarks/models.json and renders MODELS.md and the chart.
# Then the models' convs alone, back to back, with and without programmatic launch (CHAIN.md).
bench-models: install
	for model in resnet18 resnet50 vgg16 regnet_y_1_6gf mobilenet_v3_large resnext50_32x4d \
		efficientnet_b0 convnext_tiny; do for batches in "1 8" "32 128"; do \
		$(VPY) benchmarks/models.py --models $$model --batches $$batches || exit 1; \
	done; done
	$(VPY) benchmarks/models.py --models resnet50_fpn --batches 1 8
	$(VPY) benchmarks/conv_chain.py

# The conv corpus (H100/H200), one section of ~7 minutes per call: `make bench-corpus
# SECTION=3` (`benchmarks/bench_corpus.py --plan` lists them), CORPUS_ARGS for more options.
bench-corpus: install
	$(VPY) benchmarks/bench_corpus.py --section $(or $(SECTION),0) $(CORPUS_ARGS)

# The validation corpus (convs of models the corpus does not trace; nothing is fitted on it),
# the same way: `make bench-validation SECTION=K`, CORPUS_ARGS for more options.
bench-validation: install
	$(VPY) benchmarks/bench_corpus.py --corpus benchmarks/validation_corpus.json \
		--results benchmarks/validation_results.json --section $(or $(SECTION),0) $(CORPUS_ARGS)

# The grouped/depthwise kernel against cuDNN on models' grouped convs (H100/H200): the models
# cute_conv.grouped_rule was fitted on and those it was judged on
# (benchmarks/experiments/grouped_rule_fit.py: FIRST_FIT, HELD_OUT, HELD_OUT_NEXT), the
# depthwise ones, a process each; rows say whether the rule takes the kernel. Then cuDNN's
# fused conv + bias + ReLU against the three ops on the ResNeXt and RegNet grouped convs. Then
# the kernel's pixels per thread swept on the models grouped_rule.FITTED_PIXELS was fitted on
# and those it was judged on (grouped_pixels_sweep.py: FIT_MODELS, HELD_OUT_MODELS), and the
# depthwise row window's fit and held-out models (depthwise_rule_fit.py: WINDOW_FIT,
# WINDOW_HELD_OUT), which the depthwise bound and pixels were refitted and judged on.
GROUPED_MODELS ?= regnet_y_1_6gf resnext50_32x4d mobilenet_v3_large efficientnet_b0 \
	convnext_tiny regnet_y_400mf regnet_y_800mf regnet_x_3_2gf regnet_x_400mf \
	regnet_x_1_6gf regnet_y_8gf regnet_x_8gf resnext101_32x8d mobilenet_v2 mnasnet1_0 \
	regnet_x_800mf regnet_y_3_2gf resnext101_64x4d regnet_y_16gf regnet_x_16gf
bench-grouped: install
	for model in $(GROUPED_MODELS); do \
		$(VPY) benchmarks/experiments/grouped_direct_ab.py --models $$model --batches 1 8 32 \
			--out benchmarks/experiments/grouped_direct_ab_$$model.json || exit 1; \
	done
	$(VPY) benchmarks/experiments/grouped_cudnn_relu_ab.py --models resnext50_32x4d \
		regnet_y_8gf resnext101_32x8d --batches 1 8 32 \
		--out benchmarks/experiments/grouped_cudnn_relu_ab.json
	$(VPY) benchmarks/experiments/grouped_pixels_sweep.py --batches 1 8 32 --rounds 3 \
		--out benchmarks/experiments/grouped_pixels_sweep_fit.json
	$(VPY) benchmarks/experiments/grouped_pixels_sweep.py --models efficientnet_b3 \
		mobilenet_v2 mnasnet1_0 regnet_y_3_2gf regnet_x_3_2gf --batches 1 8 32 --rounds 3 \
		--out benchmarks/experiments/grouped_pixels_sweep_heldout.json
	$(VPY) benchmarks/experiments/grouped_pixels_sweep.py --models convnext_tiny \
		mobilenet_v3_large efficientnet_b3 mobilenet_v2 mnasnet1_0 --batches 1 8 32 --rounds 3 \
		--out benchmarks/experiments/grouped_pixels_sweep_window.json
	$(VPY) benchmarks/experiments/grouped_pixels_sweep.py --models convnext_base \
		efficientnet_b2 mnasnet0_75 mobilenet_v3_small --batches 1 8 32 --rounds 3 \
		--out benchmarks/experiments/grouped_pixels_sweep_window_heldout.json

# This checkout against an older commit's cute_conv, both in one process (H100/H200): each
# version's default configs on the suite, plain and fused; writes benchmarks/COMPARE.md.
BASE ?= 297a048
bench-compare: install
	$(VPY) benchmarks/compare_versions.py --base $(BASE)

lint: install
	$(VPY) -m ruff check .

clean:
	rm -rf build dist .pytest_cache .ruff_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
