"""The whole training chain on CPU with a tiny Qwen2 built offline: build → sft → grpo → evaluate → export →
served by the local engine (`serve-aggregator --engine local`) → used by SSAAggregator in the prebuilt graph.

Every step runs through `aggregate-train`'s own entry point, so the flags are checked with the steps."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import torch
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from aggregate_graph import build_aggregate_graph
from aggregate_graph.aggregators import SSAAggregator
from aggregate_graph.aggregators.ssa import parse_ssa_output
from aggregate_graph.local import LocalChatModel
from aggregate_graph.log import read_sample_sets
from tests.conftest import chat
from tests.training_fixtures import build_tiny_qwen2, corpus, toy_sample_sets
from training.cli import main

pytestmark = pytest.mark.slow
TRACE = "<think>Most answers agree.</think> <answer>42</answer>"


def run(step: str, **flags: object) -> None:
    argv = [step]
    for name, value in flags.items():
        argv += [f"--{name}", *(str(v) for v in value)] if isinstance(value, list) else [f"--{name}", str(value)]
    assert main(argv) == 0


@contextmanager
def serve_aggregator_cli(model_dir: Path, name: str) -> Iterator[str]:
    """`aggregate-graph serve-aggregator MODEL_DIR --engine local` in its own process, as a user runs it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "aggregate_graph.cli", "serve-aggregator", str(model_dir), "--engine", "local"]
    process = subprocess.Popen([*command, "--port", str(port), "--served-model-name", name])
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/models").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "serve-aggregator did not start"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_training_chain_to_served_graph(tmp_path: Path, serve) -> None:
    torch.set_num_threads(1)
    sets = toy_sample_sets(32)
    base = build_tiny_qwen2(tmp_path / "base", corpus(sets))
    pool = tmp_path / "sets.jsonl"
    pool.write_text("".join(s.model_dump_json() + "\n" for s in sets), encoding="utf-8")

    # GSR-style distillation: a teacher (any OpenAI-compatible server) writes the targets; build keeps the traces
    # that reach the gold answer. One short trace is all a model this small learns reliably.
    teacher = serve([TRACE])
    data = tmp_path / "data"
    run(
        "build",
        targets="teacher",
        teacher_model="test-model",
        teacher_base_url=teacher.base_url,
        sample_sets=pool,
        output_dir=data,
        k_min=3,
        k_max=5,
        subsets_per_problem=8,
        hard_fraction=0.25,
        validation_fraction=0.25,
        max_prompt_tokens=400,
        tokenizer=base,
    )
    summary = json.loads((data / "build.json").read_text())
    assert summary["teacher_rejected"] == 0 and teacher.calls >= summary["train"]["examples"]
    assert summary["train"]["examples"] >= 16 and summary["validation"]["problems"] >= 1

    sft_dir = tmp_path / "sft"
    sft_flags = {
        "model": base, "data_dir": data, "output_dir": sft_dir, "learning_rate": 1e-2, "max_steps": 120,
        "per_device_train_batch_size": 4, "lora_r": 64, "lora_alpha": 64, "lora_dropout": 0.0, "logging_steps": 20,
        "save_steps": 40,
    }  # fmt: skip
    run("sft", **sft_flags)
    assert (sft_dir / "adapter_config.json").is_file() and (sft_dir / "checkpoint-120").is_dir()
    # Interrupted after step 80: a rerun resumes from checkpoint-80 (kept as it was) instead of starting over.
    shutil.rmtree(sft_dir / "checkpoint-120")
    saved_80 = (sft_dir / "checkpoint-80" / "trainer_state.json").stat().st_mtime_ns
    run("sft", **sft_flags)
    assert (sft_dir / "checkpoint-120").is_dir()
    assert (sft_dir / "checkpoint-80" / "trainer_state.json").stat().st_mtime_ns == saved_80

    grpo_dir = tmp_path / "grpo"
    grpo_flags = {
        "model": base, "adapter": sft_dir, "data_dir": data, "output_dir": grpo_dir, "num_generations": 4,
        "per_device_train_batch_size": 4, "max_completion_length": 48, "temperature": 0.1, "max_steps": 2,
        "learning_rate": 1e-4, "logging_steps": 1, "save_steps": 2,
    }  # fmt: skip
    run("grpo", **grpo_flags)
    assert (grpo_dir / "adapter_config.json").is_file()
    assert json.loads((grpo_dir / "training_step.json").read_text())["base_model"] == str(base)
    # The reward reached the trainer: rollouts of the SFT model parse and are graded right by the runtime's grader.
    logged = json.loads((grpo_dir / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    assert max(entry.get("rewards/correctness/mean", 0) for entry in logged) > 0

    merged = tmp_path / "export"
    run("export", checkpoint=grpo_dir, output_dir=merged, merge=True)
    evaluation = tmp_path / "eval"
    run(
        "evaluate",
        sample_sets=data / "validation_sets.jsonl",
        output_dir=evaluation,
        aggregator="ssa",
        model_dir=merged,
        k=5,
        curve_ks=[1, 5],
        curve_draws=1,
        bootstrap=200,
        max_tokens=48,
    )
    metrics = json.loads((evaluation / "metrics.json").read_text())["metrics"]
    assert metrics["aggregator"]["mean"] == 100.0 and metrics["gap"]["mean"] >= 0
    assert (evaluation / "accuracy_vs_k.png").stat().st_size > 1000
    run("export", checkpoint=grpo_dir, output_dir=merged, merge=True, evaluation=evaluation)
    card = (merged / "README.md").read_text()
    assert "Refinement Gap" in card and f"serve-aggregator {merged}" in card

    # The exported folder, served by the local engine over HTTP, aggregates inside the prebuilt graph.
    # Candidates and question in the toy data's style: the tiny model has learned nothing beyond it.
    candidates = serve([f"Working on it: the result is {a}.\n#### {a}" for a in ("42", "13", "42")])
    with serve_aggregator_cli(merged, "ssa-tiny") as url:
        model = ChatOpenAI(base_url=url, api_key="x", model="ssa-tiny", max_tokens=48, temperature=0, max_retries=0)
        graph = build_aggregate_graph(chat(candidates), n=3, aggregator=SSAAggregator(model, k=3))
        out = graph.invoke({"messages": [HumanMessage("The grey cat asks: what is 6 times 7?")]})
        # evaluate reaches a served aggregator the same way (vLLM in production)
        run("evaluate", sample_sets=data / "validation_sets.jsonl", output_dir=tmp_path / "eval_served",
            aggregator="ssa", base_url=url, served_model_name="ssa-tiny", k=5, curve_ks=[5], curve_draws=1,
            bootstrap=100, max_tokens=48)  # fmt: skip
    served = json.loads((tmp_path / "eval_served" / "metrics.json").read_text())["metrics"]
    assert served["aggregator"]["mean"] == metrics["aggregator"]["mean"]
    aggregation = out["sample_set"].aggregation
    assert aggregation.method == "ssa", aggregation
    assert aggregation.details["parse_status"] == "parsed", aggregation.details["raw_output"]
    assert aggregation.answer == "42" and "fallback" not in aggregation.details

    # The adapter kept unmerged serves on its base just the same.
    adapter = tmp_path / "adapter"
    run("export", checkpoint=grpo_dir, output_dir=adapter, merge=False)
    assert f"serve-aggregator {base} --adapter {adapter}" in (adapter / "README.md").read_text()
    local = LocalChatModel(
        model_path=str(base), adapter_path=str(adapter), temperature=0, max_new_tokens=48, dtype="float32"
    )  # a token-exact decode: bfloat16 rounding may tip it
    validation = list(read_sample_sets(data / "validation_sets.jsonl"))
    reply = SSAAggregator(local, k=5).invoke(validation[0])
    assert parse_ssa_output(reply.details["raw_output"]).status == "parsed", reply.details["raw_output"]
    assert reply.answer == "42"

    # GSR on the same model: it never learned `\boxed{}`, so every set falls back to majority vote, recorded.
    run("evaluate", sample_sets=data / "validation_sets.jsonl", output_dir=tmp_path / "eval_gsr", aggregator="gsr",
        model_dir=merged, k=3, curve_ks=[3], curve_draws=1, bootstrap=50, max_tokens=16, limit=2)  # fmt: skip
    gsr = json.loads((tmp_path / "eval_gsr" / "metrics.json").read_text())["metrics"]
    assert gsr["aggregator"]["mean"] == gsr["maj"]["mean"]

    # collect with an in-process local policy (here the trained model itself) through the prebuilt graph
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"question": "What is 6 times 7?", "answer": "6 * 7 = 42\n#### 42"}) + "\n")
    run("collect", dataset=questions, output=tmp_path / "collected.jsonl", model=f"local:{merged}", n=2,
        max_tokens=16, seed=0)  # fmt: skip
    (collected,) = read_sample_sets(tmp_path / "collected.jsonl")
    assert collected.gold == "42" and len(collected.succeeded) == 2 and collected.candidates[0].model
