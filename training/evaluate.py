"""`aggregate-train evaluate`: how much an aggregator gains over voting on a sample-set file.

Reports single-sample accuracy, maj@k, pass@k (the runtime's `pool_metrics`, per problem), the aggregator's
accuracy and its Refinement Gap (aggregator − maj@k), with bootstrap confidence intervals over problems, and the
same against k on random k-subsets. Writes metrics.json, metrics.md and accuracy_vs_k.png. Seeded: reruns agree.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from aggregate_graph import GSRAggregator, MajorityVote, SampleSet, SSAAggregator, USCAggregator, equivalent
from aggregate_graph.aggregators import AggregationError
from aggregate_graph.pools import pool_metrics
from training.data import load_sample_sets, write_json

MODEL_AGGREGATORS = {"ssa": SSAAggregator, "gsr": GSRAggregator, "usc": USCAggregator}
METRICS = ("single", "maj", "pass", "aggregator", "gap")


@dataclass
class EvaluateConfig:
    sample_sets: str = field(metadata={"help": "sample-set JSONL or a pool name (faithful_cot, qwen_math, …)"})
    output_dir: str = field(metadata={"help": "writes metrics.json, metrics.md and accuracy_vs_k.png"})
    aggregator: str = field(default="majority", metadata={"help": "majority, ssa, gsr or usc"})
    model_dir: str | None = field(default=None, metadata={"help": "model-backed aggregator: a local model folder"})
    adapter: str | None = field(default=None, metadata={"help": "a LoRA adapter on model_dir"})
    base_url: str | None = field(default=None, metadata={"help": "model-backed aggregator: an OpenAI-compatible URL"})
    served_model_name: str = "aggregator"
    api_key: str | None = None
    k: int | None = field(default=None, metadata={"help": "candidates per problem (default: all)"})
    curve_ks: list[int] | None = field(default=None, metadata={"help": "k values of the curve (default: 1, 2, 4, …)"})
    curve_draws: int = field(default=3, metadata={"help": "random k-subsets per problem and k"})
    bootstrap: int = field(default=1000, metadata={"help": "bootstrap resamples of the problems"})
    max_tokens: int = 1024
    concurrency: int = 4
    limit: int | None = None
    seed: int = 0


def aggregator_for(config: EvaluateConfig) -> Any:
    """The runtime's aggregator named by `config`, backed by a served or an in-process model when it needs one."""
    if config.aggregator == "majority":
        return MajorityVote()
    if config.aggregator not in MODEL_AGGREGATORS:
        raise ValueError(f"unknown aggregator {config.aggregator!r}: majority, {', '.join(MODEL_AGGREGATORS)}")
    if config.base_url is not None:
        from langchain_openai import ChatOpenAI

        model: Any = ChatOpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "EMPTY",
            model=config.served_model_name,
            temperature=0,
            max_tokens=config.max_tokens,
            max_retries=2,
        )
    elif config.model_dir is not None:
        from aggregate_graph.local import LocalChatModel

        model = LocalChatModel(
            model_path=config.model_dir, adapter_path=config.adapter, temperature=0, max_new_tokens=config.max_tokens
        )
    else:
        raise ValueError(f"aggregator {config.aggregator!r} needs --model_dir or --base_url")
    return MODEL_AGGREGATORS[config.aggregator](model, k=config.k)


def subset(sample_set: SampleSet, k: int, rng: random.Random | None) -> SampleSet:
    """The first k candidates, or k random ones kept in request order (the order breaks vote ties)."""
    chosen = list(sample_set.candidates)
    if rng is not None and k < len(chosen):
        chosen = sorted(rng.sample(chosen, k), key=lambda c: c.index)
    return sample_set.model_copy(update={"candidates": chosen[:k], "aggregation": None})


def verdicts(sets: list[SampleSet], aggregator: Any, concurrency: int, desc: str) -> dict[str, np.ndarray]:
    """Per problem, in percent: single (mean over candidates), maj, pass, the aggregator, and its gap over maj."""
    rows = [pool_metrics([s]) for s in tqdm(sets, desc=f"{desc}: voting", leave=False)]
    if isinstance(aggregator, MajorityVote):
        chosen = [r["maj"] for r in rows]
    else:
        results = aggregator.batch(sets, config={"max_concurrency": concurrency}, return_exceptions=True)
        chosen = []
        for s, result in zip(sets, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, AggregationError):
                raise result
            chosen.append(0.0 if isinstance(result, Exception) else 100.0 * equivalent(result.answer, s.gold))
    out = {name: np.array([r[name] for r in rows], dtype=float) for name in ("single", "maj", "pass")}
    out["aggregator"] = np.array(chosen, dtype=float)
    out["gap"] = out["aggregator"] - out["maj"]
    return out


def summarise(values: dict[str, np.ndarray], resamples: int, seed: int) -> dict[str, dict[str, float]]:
    """Mean and 95% percentile-bootstrap interval of each metric (problems resampled, paired across metrics)."""
    n = len(next(iter(values.values())))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n)) if resamples and n else None
    summary = {}
    for name, per_problem in values.items():
        low = high = float("nan")
        if draws is not None:
            means = per_problem[draws].mean(axis=1)
            low, high = (float(x) for x in np.percentile(means, [2.5, 97.5]))
        summary[name] = {"mean": float(per_problem.mean()) if n else 0.0, "ci_low": low, "ci_high": high}
    return summary


def curve_ks(config: EvaluateConfig, k: int) -> list[int]:
    if config.curve_ks:
        return sorted({x for x in config.curve_ks if 1 <= x <= k})
    ks, x = [], 1
    while x < k:
        ks.append(x)
        x *= 2
    return [*ks, k]


def markdown(result: dict[str, Any]) -> str:
    """The evaluation table (also the model card's)."""
    head = f"Aggregator `{result['aggregator']}` on `{result['sample_sets']}` ({result['problems']} problems, "
    lines = [head + f"k = {result['k']}; 95% bootstrap intervals)", ""]
    lines += ["| metric | accuracy % | 95% CI |", "|---|---|---|"]
    names = {"single": "single sample", "maj": f"maj@{result['k']}", "pass": f"pass@{result['k']}"}
    names |= {"aggregator": "aggregator", "gap": "Refinement Gap (aggregator − maj)"}
    for name in METRICS:
        m = result["metrics"][name]
        lines.append(f"| {names[name]} | {m['mean']:.2f} | [{m['ci_low']:.2f}, {m['ci_high']:.2f}] |")
    lines += ["", "| k | single | maj@k | pass@k | aggregator | gap |", "|---|---|---|---|---|---|"]
    for point in result["curve"]:
        cells = " | ".join(f"{point[name]['mean']:.2f}" for name in METRICS)
        lines.append(f"| {point['k']} | {cells} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on training machines
    import matplotlib.pyplot as plt

    ks = [p["k"] for p in result["curve"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    # maj@k dashed and on top: with majority vote as the aggregator the two curves coincide.
    for name, label, style in (("single", "single", "-"), ("pass", "pass@k", "-"), ("aggregator", "aggregator", "-"),
                               ("maj", "maj@k", "--")):  # fmt: skip
        means = [p[name]["mean"] for p in result["curve"]]
        ax.plot(ks, means, marker="o", linestyle=style, label=label)
        ax.fill_between(
            ks, [p[name]["ci_low"] for p in result["curve"]], [p[name]["ci_high"] for p in result["curve"]], alpha=0.15
        )
    ax.set(xlabel="k (candidates)", ylabel="accuracy %", title=f"{result['aggregator']} on {result['sample_sets']}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def evaluate(config: EvaluateConfig) -> dict[str, Any]:
    """Score, write metrics.json / metrics.md / accuracy_vs_k.png to `output_dir`, and return the result."""
    sets = [s for s in load_sample_sets(config.sample_sets, config.limit) if s.gold is not None]
    if not sets:
        raise ValueError(f"{config.sample_sets}: no sample sets with a gold answer")
    k = config.k or max(len(s.candidates) for s in sets)
    aggregator = aggregator_for(config)
    full = [subset(s, k, None) for s in sets]
    result: dict[str, Any] = {
        "aggregator": config.aggregator,
        "sample_sets": config.sample_sets,
        "problems": len(sets),
        "k": k,
        "metrics": summarise(verdicts(full, aggregator, config.concurrency, f"k={k}"), config.bootstrap, config.seed),
        "curve": [],
        "config": asdict(config),
    }
    rng = random.Random(config.seed)
    for point_k in tqdm(curve_ks(config, k), desc="accuracy against k"):
        draws = [[subset(s, point_k, rng) for s in sets] for _ in range(config.curve_draws)]
        per_draw = [verdicts(d, aggregator, config.concurrency, f"k={point_k}") for d in draws]
        # Each problem's mean over its draws, so intervals still resample problems.
        values = {name: np.mean([v[name] for v in per_draw], axis=0) for name in METRICS}
        result["curve"].append({"k": point_k, **summarise(values, config.bootstrap, config.seed)})
    out = Path(config.output_dir)
    write_json(out / "metrics.json", result)
    (out / "metrics.md").write_text(markdown(result), encoding="utf-8")
    plot(result, out / "accuracy_vs_k.png")
    return result
