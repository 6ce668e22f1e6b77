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

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.aggregators.registry import load_aggregator, registration
from aggregate_graph.aggregators.trained import AGGREGATOR_FILE, load_trained_aggregator
from aggregate_graph.drawing.models import local_model
from aggregate_graph.errors import AggregationError
from aggregate_graph.reading.answers import equivalent
from training.data import PROBLEMS_HELP, Problems, anonymised, load_sample_sets, write_json
from training.pools import pool_metrics

METRICS = ("single", "maj", "pass", "aggregator", "gap")


@dataclass
class EvaluateConfig:
    sample_sets: str = field(metadata={"help": "sample-set JSONL or a pool name (faithful_cot, qwen_math, …)"})
    output_dir: str = field(metadata={"help": "writes metrics.json, metrics.md and accuracy_vs_k.png"})
    aggregator: str = field(default="majority", metadata={"help": "a registered aggregator's name"})
    problems: Problems = field(default="all", metadata={"help": PROBLEMS_HELP})
    model_dir: str | None = field(
        default=None,
        metadata={"help": "model-backed aggregator: a local model folder (a trained one renders as it was trained)"},
    )
    adapter: str | None = field(default=None, metadata={"help": "a LoRA adapter on model_dir (or on SmolLM2)"})
    weights: str | None = field(default=None, metadata={"help": "weighted: the WeightedVote file"})
    dtype: str = field(default="auto", metadata={"help": "in-process model: auto (bf16 where native), float32, …"})
    base_url: str | None = field(default=None, metadata={"help": "model-backed aggregator: an OpenAI-compatible URL"})
    served_model_name: str = "aggregator"
    api_key: str | None = None
    k: int | None = field(default=None, metadata={"help": "candidates per problem (default: all)"})
    draws: int = field(
        default=1, metadata={"help": "random k-subsets per problem for the main table (1: the first k candidates)"}
    )
    anonymise: bool = field(
        default=False, metadata={"help": "hide the candidates' sources (one label): one model sampled n times"}
    )
    shuffle: bool = field(
        default=False,
        metadata={"help": "each draw is a random k-subset (even with --draws 1) in a random order (ties break by it)"},
    )
    curve: bool = field(default=True, metadata={"help": "also the accuracy-against-k curve"})
    curve_ks: list[int] | None = field(default=None, metadata={"help": "k values of the curve (default: 1, 2, 4, …)"})
    curve_draws: int = field(default=3, metadata={"help": "random k-subsets per problem and k"})
    bootstrap: int = field(default=1000, metadata={"help": "bootstrap resamples of the problems"})
    max_tokens: int = 1024
    concurrency: int = 4
    limit: int | None = None
    seed: int = 0


def aggregator_for(config: EvaluateConfig) -> Any:
    """The runtime's aggregator named by `config` (the registry's), backed by a served or an in-process model
    when it needs one. A trained folder (with aggregator.json) renders its prompts as it was trained."""
    trained = next(
        (f for f in (config.adapter, config.model_dir) if f is not None and (Path(f) / AGGREGATOR_FILE).is_file()),
        None,
    )
    named = registration(config.aggregator)
    options: dict[str, Any] = {"k": config.k} if config.k and named.takes("k") else {}
    if config.base_url is None and trained is not None:
        base = config.model_dir if config.adapter is not None else None
        return load_trained_aggregator(trained, base_model=base, dtype=config.dtype, max_tokens=config.max_tokens,
                                       **options)  # fmt: skip
    model: Any = None
    if config.base_url is None and config.model_dir is not None:
        model = local_model(config.model_dir, config.adapter, max_tokens=config.max_tokens, dtype=config.dtype)
    if named.takes("max_tokens"):
        options["max_tokens"] = config.max_tokens
    if config.base_url is not None:
        options.update(base_url=config.base_url, served_model_name=config.served_model_name, api_key=config.api_key)
    return load_aggregator(config.aggregator, model=model, weights=config.weights, **options)


def subset(sample_set: SampleSet, k: int, rng: random.Random | None, shuffle: bool = False) -> SampleSet:
    """The first k candidates, or k random ones kept in request order (the order breaks vote ties: landing times,
    which a set the graph drew carries and which would break them instead, are dropped); `shuffle`: in a random
    order instead, renumbered in it."""
    chosen = [c.model_copy(update={"landed_at": None}) for c in sample_set.candidates]
    if rng is not None and k < len(chosen):
        chosen = sorted(rng.sample(chosen, k), key=lambda c: c.index)
    chosen = chosen[:k]
    if shuffle and rng is not None:
        rng.shuffle(chosen)
        chosen = [c.model_copy(update={"index": i}) for i, c in enumerate(chosen)]
    return sample_set.model_copy(update={"candidates": chosen, "aggregation": None})


def verdicts(
    sets: list[SampleSet], aggregator: Any, concurrency: int, desc: str, record: list[Any] | None = None
) -> dict[str, np.ndarray]:
    """Per problem, in percent: single (mean over candidates), maj, pass, the aggregator, and its gap over maj.
    `record` collects each aggregation (or the AggregationError) for the model-backed statistics."""
    rows = [pool_metrics([s]) for s in tqdm(sets, desc=f"{desc}: voting", leave=False)]
    if type(aggregator) is MajorityVote:  # pool_metrics already voted (subclasses such as WeightedVote vote anew)
        chosen = [r["maj"] for r in rows]
    else:
        results = aggregator.batch(sets, config={"max_concurrency": concurrency}, return_exceptions=True)
        chosen = []
        for s, result in zip(sets, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, AggregationError):
                raise result
            chosen.append(0.0 if isinstance(result, Exception) else 100.0 * equivalent(result.answer, s.gold))
            if record is not None:
                record.append(result)
    out = {name: np.array([r[name] for r in rows], dtype=float) for name in ("single", "maj", "pass")}
    out["aggregator"] = np.array(chosen, dtype=float)
    out["gap"] = out["aggregator"] - out["maj"]
    return out


def model_statistics(results: list[Any]) -> dict[str, float] | None:
    """For a model-backed aggregator: how often its output parsed into an answer (a choice SSA's deferral to the
    vote counts: it chose, unsure), how many tokens it generated, how long a set took (median, over all sets and
    over those that reached the model), and the shares of sets that skipped the model (one answer) or deferred."""
    aggregations = [r for r in results if not isinstance(r, Exception)]
    shown = [a for a in aggregations if "parse_status" in a.details]
    called = [a for a in shown if a.details["parse_status"] != "skipped"]
    if not shown:
        return None
    tokens = [a.usage.completion_tokens for a in called if a.usage is not None]
    status = [a.details["parse_status"] for a in called]

    def median_latency(items: list[Any]) -> float:
        return float(np.median([a.latency_s for a in items if a.latency_s is not None])) if items else float("nan")

    return {
        "sets": len(results),
        "parse_rate": 100.0 * sum(s in ("parsed", "deferred") for s in status) / max(len(called), 1),
        "mean_generated_tokens": float(np.mean(tokens)) if tokens else float("nan"),
        "median_latency_s": median_latency(shown),
        "median_model_latency_s": median_latency(called),
        "skipped_model": 100.0 * (len(shown) - len(called)) / len(shown),
        "deferred": 100.0 * status.count("deferred") / len(shown),
    }


def _draw_mean(
    sets: list[SampleSet], k: int, draws: int, rng: random.Random | None, aggregator: Any, config: EvaluateConfig,
    record: list[Any] | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Each problem's metrics averaged over `draws` k-subsets, so intervals still resample problems."""
    subsets = [[subset(s, k, rng, config.shuffle) for s in sets] for _ in range(draws)]
    per_draw = [verdicts(d, aggregator, config.concurrency, f"k={k}", record) for d in subsets]
    return {name: np.mean([v[name] for v in per_draw], axis=0) for name in METRICS}


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
    draws = f", {result['draws']} random draws each" if result.get("draws", 1) > 1 else ""
    lines = [head + f"k = {result['k']}{draws}; 95% paired bootstrap intervals)", ""]
    lines += ["| metric | accuracy % | 95% CI |", "|---|---|---|"]
    names = {"single": "single sample", "maj": f"maj@{result['k']}", "pass": f"pass@{result['k']}"}
    names |= {"aggregator": "aggregator", "gap": "Refinement Gap (aggregator − maj)"}
    for name in METRICS:
        m = result["metrics"][name]
        lines.append(f"| {names[name]} | {m['mean']:.2f} | [{m['ci_low']:.2f}, {m['ci_high']:.2f}] |")
    if stats := result.get("model"):
        lines += ["", f"Model: parsed {stats['parse_rate']:.1f}% of {stats['sets']} sets, "
                  f"{stats['mean_generated_tokens']:.1f} generated tokens on average, "
                  f"{stats['median_latency_s']:.2f} s per set (median)."]  # fmt: skip
    if not result["curve"]:
        return "\n".join(lines) + "\n"
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
    if config.draws < 1:
        raise ValueError(f"draws must be at least 1, got {config.draws}")
    sets = [s for s in load_sample_sets(config.sample_sets, config.limit, config.problems) if s.gold is not None]
    if config.anonymise:
        sets = [anonymised(s) for s in sets]
    if not sets:
        raise ValueError(f"{config.sample_sets}: no sample sets with a gold answer")
    k = config.k or max(len(s.candidates) for s in sets)
    aggregator = aggregator_for(config)
    rng = random.Random(config.seed)
    results: list[Any] = []
    # One draw is the first k candidates (deterministic); several are random k-subsets, each kept in request order.
    random_draws = config.draws > 1 or config.shuffle
    main = _draw_mean(sets, k, config.draws, rng if random_draws else None, aggregator, config, results)
    result: dict[str, Any] = {
        "aggregator": config.aggregator,
        "sample_sets": config.sample_sets,
        "problems": len(sets),
        "k": k,
        "draws": config.draws,
        "metrics": summarise(main, config.bootstrap, config.seed),
        "model": model_statistics(results),
        # per problem (mean over draws), so two aggregators evaluated apart can be compared pairwise
        "per_problem": {"ids": [s.id for s in sets], **{name: main[name].tolist() for name in ("maj", "aggregator")}},
        "curve": [],
        "config": asdict(config),
    }
    for point_k in tqdm(curve_ks(config, k) if config.curve else [], desc="accuracy against k"):
        values = _draw_mean(sets, point_k, config.curve_draws, rng, aggregator, config)
        result["curve"].append({"k": point_k, **summarise(values, config.bootstrap, config.seed)})
    out = Path(config.output_dir)
    write_json(out / "metrics.json", result)
    (out / "metrics.md").write_text(markdown(result), encoding="utf-8")
    if result["curve"]:
        plot(result, out / "accuracy_vs_k.png")
    return result
