"""The shipped SSA on this CPU, in-process: latency per k=5 set, how many sets skip the model, accuracy.

    python benchmarks/ssa_inference.py [--sets 60] [--dtypes auto float32 int8] [--avx2-dtypes auto int8] [--threads 2]

Sets are k=5 draws from the shipped build's *validation* problems (never the reserved ones): one LM's own five
candidates with sources anonymised (code002: the case of a user sampling one model), and mixed-source draws from
the 30-config pool. For each setting: median seconds per set (all sets, and those that reached the model), the
share that skipped the model (one distinct answer) and that deferred to the vote, and accuracy beside majority
vote on the same draws. The `avx2` rows rerun the same code in a child process with torch, MKL and oneDNN held to
AVX2 (`ATEN_CPU_CAPABILITY`, `MKL_ENABLE_INSTRUCTIONS`, `ONEDNN_MAX_CPU_ISA`), the closest this machine gets to
an AVX2-only one (dtype auto is then float32: no native bf16). All rows are measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.aggregators.trained import SHIPPED_SSA, load_trained_aggregator
from aggregate_graph.reading.answers import equivalent
from training.build import split_problems
from training.data import load_sample_sets, one_model, problem_key
from training.evaluate import subset

K = 5
BUILD = Path(__file__).parents[1] / "training" / "configs" / "ssa_choice_build.yaml"
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def validation_draws(count: int, seed: int = 0) -> dict[str, list[SampleSet]]:
    """k=5 draws from the problems the shipped model's build held out (its sources, seed and fraction)."""
    build = yaml.safe_load(BUILD.read_text())
    sets = [s for s in load_sample_sets(build["sample_sets"], problems="unreserved") if s.gold is not None]
    keys = [problem_key(s) for s in sets]
    held_out = split_problems(keys, build["validation_fraction"], random.Random(build["seed"]))
    faithful = [s for s in sets if problem_key(s) in held_out and s.metadata.get("source") == "faithful_cot_gsm8k"]
    rng = random.Random(seed)
    chosen = rng.sample(faithful, count)
    one_lm = [one_model(s, "code002") for s in chosen]
    return {
        "code002 ×5, anonymised": [subset(s, K, rng, True) for s in one_lm],
        "30-config pool, k=5": [subset(s, K, rng, True) for s in chosen],
    }


def measure(dtype: str, threads: int, sets: int, folder: str | Path = SHIPPED_SSA) -> dict[str, dict[str, float]]:
    import torch

    torch.set_num_threads(threads)
    aggregator = load_trained_aggregator(folder, dtype=dtype)
    aggregator.model.load()
    rows = {}
    for name, draws in validation_draws(sets).items():
        aggregator.invoke(draws[0])  # warm-up: the first call pays one-off costs (math-verify, kernels)
        latencies, called, right, skipped, deferred = [], [], 0, 0, 0
        for s in draws:
            started = time.perf_counter()
            result = aggregator.invoke(s)
            latencies.append(time.perf_counter() - started)
            right += equivalent(result.answer, s.gold)
            status = result.details.get("parse_status")
            skipped += status == "skipped"
            deferred += status == "deferred"
            if status != "skipped":
                called.append(latencies[-1])
        majority = sum(equivalent(MajorityVote().invoke(s).answer, s.gold) for s in draws)
        rows[name] = {
            "latency_s": statistics.median(latencies),
            "model_latency_s": statistics.median(called) if called else float("nan"),
            "skipped": 100 * skipped / len(draws),
            "deferred": 100 * deferred / len(draws),
            "accuracy": 100 * right / len(draws),
            "majority": 100 * majority / len(draws),
        }
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", type=int, default=60)
    p.add_argument("--ssa", default=str(SHIPPED_SSA), help="the trained choice SSA folder (default: the shipped one)")
    p.add_argument("--dtypes", nargs="+", default=["auto", "float32", "int8"])
    p.add_argument("--threads", type=int, nargs="+", default=[2])
    p.add_argument("--avx2-dtypes", nargs="*", default=["auto", "int8"], help="the AVX2-held rows (none: skip)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # dtype,threads: measure one setting and print JSON
    args = p.parse_args()
    if args.child:
        dtype, threads = args.child.split(",")
        print(json.dumps(measure(dtype, int(threads), args.sets, args.ssa)))
        return 0
    settings = [(d, t, False) for t in args.threads for d in args.dtypes]
    settings += [(d, t, True) for t in args.threads for d in args.avx2_dtypes]
    results = []
    for dtype, threads, avx2 in settings:
        env = os.environ | (AVX2 if avx2 else {})
        done = subprocess.run([sys.executable, __file__, "--child", f"{dtype},{threads}", "--sets", str(args.sets),
                               "--ssa", args.ssa],
                              env=env, capture_output=True, text=True, check=True)  # fmt: skip
        results.append((dtype + (" (avx2)" if avx2 else ""), threads, json.loads(done.stdout.strip().splitlines()[-1])))
    bf16 = "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    print(f"\nShipped SSA (SmolLM2-135M + LoRA, choice) in-process, k={K}, {args.sets} validation draws per row; "
          f"this CPU {'has' if bf16 else 'lacks'} avx512_bf16")  # fmt: skip
    print(f"{'dtype':<16} {'threads':>7} {'sets':<24} {'s/set':>6} {'s/model set':>11} {'skipped':>8} "
          f"{'deferred':>8} {'accuracy':>8} {'majority':>8} {'vs first':>8}")  # fmt: skip
    first = results[0][2]
    for dtype, threads, rows in results:
        for name, m in rows.items():
            ratio = first[name]["latency_s"] / m["latency_s"]
            print(f"{dtype:<16} {threads:>7} {name:<24} {m['latency_s']:>6.2f} {m['model_latency_s']:>11.2f} "
                  f"{m['skipped']:>7.0f}% {m['deferred']:>7.0f}% {m['accuracy']:>7.1f}% {m['majority']:>7.1f}% "
                  f"{ratio:>7.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
