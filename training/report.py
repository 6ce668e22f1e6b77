"""`aggregate-train report`: several `evaluate` runs on the same problems, side by side, in one table.

Each row is one aggregator's accuracy with its 95% interval, and its difference from majority vote and from a
chosen reference aggregator, each with a *paired* bootstrap interval (the same resampled problems for both
sides, from the per-problem values `evaluate` stores). Model-backed rows add parse rate, generated tokens and
seconds per set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class ReportConfig:
    evaluations: list[str] = field(metadata={"help": "`evaluate` output folders, one row each (same problems)"})
    output: str | None = field(default=None, metadata={"help": "also write the table (markdown) here"})
    reference: str | None = field(default=None, metadata={"help": "a folder to compare every row with, too"})
    bootstrap: int = 2000
    seed: int = 0


def _load(folder: str) -> dict[str, Any]:
    result = json.loads((Path(folder) / "metrics.json").read_text(encoding="utf-8"))
    if "per_problem" not in result:
        raise ValueError(f"{folder}: metrics.json has no per-problem values (rerun `aggregate-train evaluate`)")
    return result


def paired_interval(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> tuple[float, float, float]:
    """Mean of a − b over problems and its 95% percentile-bootstrap interval (problems resampled, paired)."""
    diff = np.asarray(a) - np.asarray(b)
    draws = np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))
    low, high = np.percentile(diff[draws].mean(axis=1), [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)


def report(config: ReportConfig) -> str:
    results = [(folder, _load(folder)) for folder in config.evaluations]
    reference = _load(config.reference) if config.reference else None
    ids = results[0][1]["per_problem"]["ids"]
    for folder, result in results[1:] + ([(config.reference, reference)] if reference else []):
        if result["per_problem"]["ids"] != ids:
            raise ValueError(f"{folder} was evaluated on other problems than {config.evaluations[0]}")
    first = results[0][1]
    k = first["k"]
    title = f"`{first['sample_sets']}`, {first['problems']} problems, k = {k}"
    draws = f", {first['draws']} draws each" if first.get("draws", 1) > 1 else ""
    ref_column = f" − {Path(config.reference).name} |" if config.reference else ""
    lines = [
        f"{title}{draws}; 95% bootstrap intervals, differences paired over problems",
        "",
        f"| aggregator | accuracy % | − maj@{k} |{ref_column} parsed | tokens | s/set |",
        "|---|---|---|" + ("---|" if reference else "") + "---|---|---|",
    ]
    m = first["metrics"]
    for name, label in (("single", "single sample"), ("maj", f"maj@{k}"), ("pass", f"pass@{k}")):
        lines.append(f"| {label} | {m[name]['mean']:.1f} [{m[name]['ci_low']:.1f}, {m[name]['ci_high']:.1f}] | |"
                     + (" |" if reference else "") + " | | |")  # fmt: skip
    for folder, result in results:
        values = np.array(result["per_problem"]["aggregator"])
        acc = result["metrics"]["aggregator"]
        gap = paired_interval(values, np.array(result["per_problem"]["maj"]), config.bootstrap, config.seed)
        cells = [f"{Path(folder).name}", f"{acc['mean']:.1f} [{acc['ci_low']:.1f}, {acc['ci_high']:.1f}]",
                 f"{gap[0]:+.1f} [{gap[1]:+.1f}, {gap[2]:+.1f}]"]  # fmt: skip
        if reference:
            ref = paired_interval(
                values, np.array(reference["per_problem"]["aggregator"]), config.bootstrap, config.seed
            )
            cells.append(f"{ref[0]:+.1f} [{ref[1]:+.1f}, {ref[2]:+.1f}]")
        stats = result.get("model")
        cells += (
            [f"{stats['parse_rate']:.1f}%", f"{stats['mean_generated_tokens']:.1f}", f"{stats['median_latency_s']:.2f}"]
            if stats
            else ["", "", ""]
        )
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    if config.output:
        Path(config.output).parent.mkdir(parents=True, exist_ok=True)
        Path(config.output).write_text(table, encoding="utf-8")
    return table
