"""A trained aggregator folder (what `aggregate-train export` writes, and the SSA shipped inside this package):
its `aggregator.json` records the format and the render settings the model was trained with, so the runtime
shows it exactly what it learned on. Each format's aggregator class reads its own settings (`from_trained`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from aggregate_graph.aggregators.base import Aggregator
from aggregate_graph.aggregators.llm import TRAINED_FORMATS
from aggregate_graph.aggregators.registry import check_options, constructor_options
from aggregate_graph.aggregators.weighted import WeightedVote
from aggregate_graph.drawing.models import local_model

AGGREGATOR_FILE, WEIGHTS_FILE = "aggregator.json", "weights.json"
SHIPPED_SSA = Path(__file__).parents[1] / "trained" / "ssa_smollm2"
"""The shipped SSA: adapter, render settings (aggregator.json), vote weights and model card (README.md)."""
MAX_AGGREGATOR_TOKENS = 32  # the shipped SSA answers with a letter, an older one `<answer>…</answer>`: a handful


def read_trained_record(folder: str | Path) -> dict[str, Any]:
    """A trained aggregator folder's `aggregator.json` (format, k, style, weights file, calibration)."""
    path = Path(folder) / AGGREGATOR_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder}: no {AGGREGATOR_FILE} (a folder written by `aggregate-train build/sft/export`)"
        )
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("format") not in TRAINED_FORMATS:
        raise ValueError(f"{path}: unknown aggregator format {record.get('format')!r}")
    return record


def load_trained_aggregator(
    folder: str | Path,
    *,
    model: BaseChatModel | Runnable | None = None,
    base_model: str | None = None,
    dtype: str = "auto",
    max_tokens: int = MAX_AGGREGATOR_TOKENS,
    weights: str | Path | WeightedVote | None = None,
    **options: Any,
) -> Aggregator:
    """The aggregator a trained folder describes, rendering as it was trained. The model is `model` when given
    (e.g. the same weights served by vLLM), else the folder's adapter on `base_model` (default: the embedded
    SmolLM2), or the folder's own full weights, run in-process by `LocalChatModel`. `weights` replaces the
    folder's vote weights (e.g. ones fit on your own sources' logs) in the tally the model reads."""
    folder = Path(folder)
    record = read_trained_record(folder)
    if model is None:
        is_adapter = (folder / "adapter_config.json").is_file()
        model = local_model(base_model if is_adapter else str(folder), str(folder) if is_adapter else None,
                            max_tokens=max_tokens, dtype=dtype)  # fmt: skip
    cls = TRAINED_FORMATS[record["format"]]
    check_options(f"{folder.name} ({record['format']})", cls, options)
    if isinstance(weights, str | Path):
        weights = WeightedVote.load(weights)
    elif weights is None and record.get("weights") and "weights" in constructor_options(cls):
        weights = WeightedVote.load(folder / record["weights"])  # the tally the model was trained to read
    return cls.from_trained(model, record, weights=weights, **options)
