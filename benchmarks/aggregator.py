"""Aggregator cost on CPU: SSAAggregator over the local engine (the real SmolLM2 over HTTP, as vLLM would be
in production), per sample set of k = 5 real Qwen2.5-Math MATH solutions from ../shared/data.

    python benchmarks/aggregator.py        (or `make bench`)

Prints, per candidate budget, the aggregator's prompt tokens, completion tokens and latency per set.
"""

from __future__ import annotations

import statistics
import sys
import time

from langchain_openai import ChatOpenAI

from aggregate_graph.aggregators import SSAAggregator
from aggregate_graph.local import smollm2_path
from aggregate_graph.serve.local import create_app
from aggregate_graph.testing import running
from training.pools import load_qwen_math

K, SETS, OUTPUT_TOKENS = 5, 3, 16


def main() -> int:
    sets = load_qwen_math()[:SETS]
    rows = []
    with running(create_app(smollm2_path())) as url:
        model = ChatOpenAI(
            base_url=url,
            api_key="unused",
            model="aggregator",
            max_tokens=OUTPUT_TOKENS,
            temperature=0,
            max_retries=0,
            timeout=600,
        )
        for budget in (256, 1024):
            aggregator = SSAAggregator(model, k=K, max_candidate_tokens=budget)
            aggregator.invoke(sets[0])  # warm-up
            prompt, completion, latency = [], [], []
            for s in sets:
                started = time.perf_counter()
                result = aggregator.invoke(s)
                latency.append(time.perf_counter() - started)
                prompt.append(result.usage.prompt_tokens)
                completion.append(result.usage.completion_tokens)
            rows.append((budget, statistics.mean(prompt), statistics.mean(completion), statistics.mean(latency)))
    print(f"SSAAggregator on the local engine (SmolLM2-135M, CPU), k={K}, {SETS} real MATH sample sets")
    print(
        f"{'budget/candidate':>16}  {'prompt tok/set':>14}  {'completion tok':>14}  {'latency/set':>11}  prompt tok/s"
    )
    for budget, p, c, lat in rows:
        print("  ".join(f"{v:>16}" for v in (budget, f"{p:.0f}", f"{c:.0f}", f"{lat:.2f}s", f"{p / lat:.0f}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
