"""Where the first `aggregate-graph ask` run's time goes: the embedded SmolLM2, n=3, 48 tokens, as `make demo` asks.

    python benchmarks/first_run.py [--rounds 2]

Each row is a fresh Python process, as a user's command is: importing the package and torch, loading the cached
weights, then the prebuilt graph answering "What is 7 times 6? Answer with a number." with n=3 candidates of at
most 48 tokens; it reports when the first candidate landed and when all had. Settings:

- `before`: what `ask` did until now: float32 weights, torch's default threads (one per core), the three
  candidates as one `n` request (all land together at the end).
- `after`: what `ask` does now: dtype `auto` (bfloat16 where the CPU computes it natively), one torch thread,
  the candidates as three calls decoded in one batch, each landing when its own row ends.

Each setting runs on an idle machine and beside a busy neighbour (one process spinning on one core: the test
suite, a browser, an IDE indexing). A second OpenMP thread spinning against such a neighbour is where "the
minute" went: torch's parallel regions wait for a thread the kernel has descheduled. The `avx2` rows hold torch,
MKL and oneDNN to AVX2 (an AVX2-only machine: dtype auto is then float32). Ratios are `before / after`, measured
in one run; each cell is the median over `--rounds` processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUESTION = "What is 7 times 6? Answer with a number."
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
SETTINGS = {
    "before": {"dtype": "float32", "threads": None, "one_n_request": True},
    "after": {"dtype": "auto", "threads": 1, "one_n_request": False},
}


def child(setting: dict) -> dict[str, float]:
    """One run, in this (fresh) process: the phases' seconds."""
    started = time.perf_counter()
    import torch
    from langchain_core.messages import HumanMessage

    from aggregate_graph import CandidatePolicy, build_aggregate_graph
    from aggregate_graph.local import LocalChatModel

    imported = time.perf_counter()
    model = LocalChatModel(max_new_tokens=48, dtype=setting["dtype"], torch_threads=setting["threads"])
    model.load()
    loaded = time.perf_counter()
    policy = CandidatePolicy(use_n=True) if setting["one_n_request"] else CandidatePolicy()
    graph = build_aggregate_graph(model, n=3, policy=policy)
    landed = []
    for mode, _ in graph.stream({"messages": [HumanMessage(QUESTION)]}, stream_mode=["custom", "values"]):
        if mode == "custom":
            landed.append(time.perf_counter())
    return {
        "import": imported - started,
        "load": loaded - imported,
        "first candidate": landed[0] - loaded,
        "all candidates": landed[-1] - loaded,
        "total": time.perf_counter() - started,
        "threads": torch.get_num_threads(),
    }


def run(setting: str, avx2: bool, busy: bool, limit_s: float) -> dict[str, float] | None:
    """One fresh process's phases; None when it ran past `limit_s` (the stalled threads this measures)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(AVX2 if avx2 else {})}
    env.pop("OMP_NUM_THREADS", None)  # the setting decides the threads
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(SETTINGS[setting])],
            env=env, capture_output=True, text=True, timeout=limit_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    # The result line is printed before exit: torch's worker threads have been seen to abort the interpreter's
    # teardown after a stalled run, which does not change what was measured.
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the {setting} run failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit", type=float, default=300.0, help="seconds a run may take (default 300)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    phases = ("import", "load", "first candidate", "all candidates", "total")
    print(f"CPU: {_cpu()}; {os.cpu_count()} cores; median of {args.rounds} fresh processes per cell\n")
    print(f"| machine | neighbour | setting | {' | '.join(phases)} | total before/after |")
    print("|---|---|---|" + "---:|" * (len(phases) + 1))
    for avx2 in (False, True):
        for busy in (False, True):
            medians: dict[str, dict[str, float]] = {}
            for setting in SETTINGS:
                runs = [run(setting, avx2, busy, args.limit) for _ in range(args.rounds)]
                # a run past the limit counts as the limit: the medians (and the ratio) are then lower bounds
                medians[setting] = {
                    p: statistics.median(args.limit if r is None else r[p] for r in runs) for p in phases
                }
            for setting, cells in medians.items():
                ratio = medians["before"]["total"] / medians["after"]["total"] if setting == "after" else None
                print(
                    f"| {'avx2-held' if avx2 else 'native'} | {'busy core' if busy else 'idle'} | {setting} | "
                    + " | ".join(f"{cells[p]:.1f} s" if cells[p] < args.limit else f"≥ {args.limit:.0f} s"
                                 for p in phases)
                    + f" | {f'{ratio:.1f}×' if ratio else ''} |",
                    flush=True,
                )  # fmt: skip


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    return f"{name} ({'avx512_bf16' if ' avx512_bf16' in info else 'no avx512_bf16'})"


if __name__ == "__main__":
    main()
