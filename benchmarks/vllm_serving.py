"""The shipped SSA served by a real vLLM against the same model in-process, on this machine, in one run.

    python benchmarks/vllm_serving.py [--sets 12]          (needs `make vllm-env`)

The same k=5 draws from the shipped build's validation problems (`ssa_inference.validation_draws`; never the
reserved ones) go to the in-process model first, with nothing else running, then to `aggregate-graph
serve-aggregator ssa --engine vllm` started as a user starts it (its start-up time is a row too). Each row:
median seconds per set that reached the model (sets with one distinct answer skip it on both), and how many sets
got the same answer from both. vLLM's engine busy-polls a core while it runs, so the in-process rows are measured
before it starts.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from ssa_inference import validation_draws

from aggregate_graph import load_aggregator

ROOT = Path(__file__).parents[1]


def timed(aggregator, draws):  # type: ignore[no-untyped-def]
    """Each set's answer, and the seconds of the sets that reached the model."""
    aggregator.invoke(draws[0])  # warm-up: one-off costs (kernels, math-verify, the HTTP connection)
    answers, seconds = [], []
    for sample_set in draws:
        started = time.perf_counter()
        result = aggregator.invoke(sample_set)
        answers.append(result.answer)
        if result.details.get("parse_status") != "skipped":
            seconds.append(time.perf_counter() - started)
    return answers, seconds


def start_vllm(port: int) -> tuple[subprocess.Popen[str], float]:
    """`serve-aggregator ssa --engine vllm` on `port`, and the seconds until it said it was ready. Its output is
    read on to the end in the background (a full pipe would stall vLLM)."""
    started = time.perf_counter()
    command = ["serve-aggregator", "ssa", "--engine", "vllm", "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "aggregate_graph.cli", *command],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("ready: "):
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, time.perf_counter() - started
    raise SystemExit(f"vLLM did not start (exit status {process.wait()}); run `make vllm-env` first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=12, help="validation problems (two draws each)")
    args = parser.parse_args()
    draws = [s for sets in validation_draws(args.sets).values() for s in sets]
    local_answers, local_s = timed(load_aggregator("ssa"), draws)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process, startup_s = start_vllm(port)
    try:
        served = load_aggregator("ssa", base_url=f"http://127.0.0.1:{port}/v1", served_model_name="aggregator")
        served_answers, served_s = timed(served, draws)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    same = sum(a == b for a, b in zip(local_answers, served_answers, strict=True))
    local_median, served_median = statistics.median(local_s), statistics.median(served_s)
    print(f"{len(draws)} sets, {len(local_s)} reached the model; same answer from both: {same}/{len(draws)}")
    print("| engine | s/set (median, sets that reached the model) | × in-process |")
    print("|---|---|---|")
    print(f"| in-process (LocalChatModel, dtype auto) | {local_median:.2f} | 1.00 |")
    print(f"| vLLM (serve-aggregator ssa --engine vllm) | {served_median:.2f} | {served_median / local_median:.2f} |")
    print(f"vLLM start-up (the CLI until 'ready'): {startup_s:.0f} s")


if __name__ == "__main__":
    main()
