"""The shipped SSA on this CPU, in-process: what precision and thread count cost or buy.

    python benchmarks/ssa_inference.py [--sets 60] [--dtypes float32 bfloat16 int8] [--threads 1 2]

For each setting: prefill tokens/s (one forward pass over a compact k=5 prompt), milliseconds per generated token,
median latency of a whole aggregation (prompt + answer), and accuracy and parse rate on k=5 draws from the
build's *validation* problems (never the reserved ones), with majority vote on the same draws for reference.
All rows are measured in one run, so their ratios compare like with like.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from aggregate_graph import MajorityVote, SampleSet, equivalent
from aggregate_graph.registry import SHIPPED_SSA, load_trained_aggregator
from training.build import split_problems
from training.data import load_sample_sets, problem_key

K = 5


def validation_draws(count: int, seed: int = 0) -> list[SampleSet]:
    """k=5 draws from the problems the shipped model's build held out (its seed and validation fraction)."""
    sets = [s for s in load_sample_sets("faithful_cot", problems="unreserved") if s.gold is not None]
    held_out = split_problems([problem_key(s) for s in sets], 0.15, random.Random(0))
    rng = random.Random(seed)
    chosen = rng.sample([s for s in sets if problem_key(s) in held_out], count)
    return [s.model_copy(update={"candidates": sorted(rng.sample(s.candidates, K), key=lambda c: c.index)})
            for s in chosen]  # fmt: skip


def measure(dtype: str, threads: int, draws: list[SampleSet]) -> dict[str, float]:
    import torch

    torch.set_num_threads(threads)
    aggregator = load_trained_aggregator(SHIPPED_SSA, dtype=dtype)
    chat = aggregator.model
    chat.load()
    prompt = aggregator.render(draws[0], draws[0].candidates)
    tokenizer, model = chat._load()  # the loaded weights, to time prefill apart from decoding
    encoded = chat._encode(tokenizer, prompt)
    with torch.inference_mode():
        model(**encoded)  # warm-up
        started = time.perf_counter()
        for _ in range(3):
            model(**encoded)
        prefill_s = (time.perf_counter() - started) / 3
        new = 16
        started = time.perf_counter()
        model.generate(**encoded, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        per_token_s = max(time.perf_counter() - started - prefill_s, 0) / new
    latencies, right, parsed = [], 0, 0
    for s in draws:
        started = time.perf_counter()
        result = aggregator.invoke(s)
        latencies.append(time.perf_counter() - started)
        right += equivalent(result.answer, s.gold)
        parsed += result.details.get("parse_status") == "parsed"
    return {
        "prompt_tokens": encoded["input_ids"].shape[1],
        "prefill_tok_s": encoded["input_ids"].shape[1] / prefill_s,
        "ms_per_token": 1000 * per_token_s,
        "latency_s": statistics.median(latencies),
        "accuracy": 100 * right / len(draws),
        "parsed": 100 * parsed / len(draws),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", type=int, default=60)
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16", "int8"])
    p.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    args = p.parse_args()
    draws = validation_draws(args.sets)
    majority = 100 * sum(equivalent(MajorityVote().invoke(s).answer, s.gold) for s in draws) / len(draws)
    rows = [(d, t, measure(d, t, draws)) for t in args.threads for d in args.dtypes]
    base = rows[0][2]
    print(f"\nShipped SSA (SmolLM2-135M + LoRA) in-process, k={K}, {len(draws)} validation draws "
          f"(majority vote on them: {majority:.1f}%)")  # fmt: skip
    print(f"{'dtype':<9} {'threads':>7} {'prefill tok/s':>13} {'ms/token':>9} {'s/set':>6} {'vs first':>9} "
          f"{'accuracy':>9} {'parsed':>7}")  # fmt: skip
    for dtype, threads, m in rows:
        print(f"{dtype:<9} {threads:>7} {m['prefill_tok_s']:>13.0f} {m['ms_per_token']:>9.1f} {m['latency_s']:>6.2f} "
              f"{base['latency_s'] / m['latency_s']:>8.2f}x {m['accuracy']:>8.1f}% {m['parsed']:>6.1f}%")  # fmt: skip
    print(f"(prompt of the timed set: {base['prompt_tokens']} tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
