"""Aggregators by name: the one registry the CLI, `wrap_openai`, the proxy and `aggregate-train evaluate` use.

`load_aggregator("ssa")` is the SSA model shipped inside this package (a LoRA adapter on the embedded
SmolLM2-135M-Instruct, trained on real LLM samples), run in-process on the CPU, offline. Any trained aggregator
folder (`aggregate-train export` writes one) loads with `load_trained_aggregator`: its `aggregator.json` records
the format and the render settings it was trained with, so the runtime shows it exactly what it learned on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from aggregate_graph.aggregators import (
    Aggregator,
    GSRAggregator,
    MajorityVote,
    SSAAggregator,
    SSAChoiceAggregator,
    SSAStyle,
    USCAggregator,
    WeightedVote,
)
from aggregate_graph.sample_set import Aggregation, SampleSet

AGGREGATOR_NAMES = ("majority", "weighted", "ssa", "gsr", "usc")
MODEL_AGGREGATORS: dict[str, type[Aggregator]] = {"ssa": SSAAggregator, "gsr": GSRAggregator, "usc": USCAggregator}
# The formats a trained folder's aggregator.json may record: the model aggregators', and the choice SSA (the shipped
# one: it picks one of the candidates' answers by letter), which is "ssa" by name.
TRAINED_FORMATS: dict[str, type[Aggregator]] = {**MODEL_AGGREGATORS, "ssa-choice": SSAChoiceAggregator}
AGGREGATOR_FILE, WEIGHTS_FILE = "aggregator.json", "weights.json"
SHIPPED_SSA = Path(__file__).parent / "trained" / "ssa_smollm2"
"""The shipped SSA: adapter, render settings (aggregator.json), vote weights and model card (README.md)."""
MAX_AGGREGATOR_TOKENS = 32  # the shipped SSA answers `<answer>…</answer>`: a handful of tokens
AggregatorSpec = Runnable[SampleSet, Aggregation] | str
"""An aggregator object, or its name in `AGGREGATOR_NAMES` (`resolve_aggregator`)."""


def known_aggregator(name: str) -> str:
    """`name` if it is a registered aggregator's; else the ValueError every entry point raises, listing them."""
    if name not in AGGREGATOR_NAMES:
        raise ValueError(f"unknown aggregator {name!r}; known: {', '.join(AGGREGATOR_NAMES)}")
    return name


def _served_model(base_url: str, model: str, api_key: str | None, max_tokens: int) -> BaseChatModel:
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise ImportError(
            "an aggregator at base_url needs langchain-openai: pip install 'aggregate-graph[openai]'"
        ) from exc
    return ChatOpenAI(
        base_url=base_url, api_key=api_key or "EMPTY", model=model, temperature=0, max_tokens=max_tokens, max_retries=2
    )


def local_model(
    model_path: str | None, adapter_path: str | None = None, *, max_tokens: int, dtype: str = "auto"
) -> BaseChatModel:
    """An aggregator's model run in-process: greedy, `max_tokens` new tokens (model_path None: SmolLM2)."""
    from aggregate_graph.local import LocalChatModel

    return LocalChatModel(
        model_path=model_path, adapter_path=adapter_path, temperature=0, max_new_tokens=max_tokens,
        dtype=dtype,  # type: ignore[arg-type]
    )  # fmt: skip


def read_trained_record(folder: str | Path) -> dict[str, Any]:
    """A trained aggregator folder's `aggregator.json` (format, k, style, weights file)."""
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
    if record["format"] not in ("ssa", "ssa-choice"):  # GSR / USC prompts are cut by the candidate budget alone
        options.setdefault("max_candidate_tokens", record.get("style", {}).get("max_candidate_tokens", 1024))
        return TRAINED_FORMATS[record["format"]](model, **options)
    if isinstance(weights, str | Path):
        weights = WeightedVote.load(weights)
    elif weights is None and record.get("weights"):
        weights = WeightedVote.load(folder / record["weights"])
    options.setdefault("k", record.get("k", 5))
    if record["format"] == "ssa-choice":  # its calibration, fit on validation, travels with the weights
        options.setdefault("temperature", record.get("temperature", 1.0))
        options.setdefault("threshold", record.get("threshold", 0.0))
        options.setdefault("vote_weight", record.get("vote_weight", 0.0))
    cls = TRAINED_FORMATS[record["format"]]
    return cls(model, style=SSAStyle.from_dict(record["style"]), weights=weights, **options)


def load_aggregator(
    name: str,
    *,
    model: BaseChatModel | Runnable | None = None,
    base_url: str | None = None,
    served_model_name: str = "aggregator",
    api_key: str | None = None,
    weights: str | Path | WeightedVote | None = None,
    max_tokens: int | None = None,
    **options: Any,
) -> Aggregator:
    """A ready aggregator by name.

    - `majority`: plurality vote.
    - `weighted`: `WeightedVote` from `weights` (a file written by `WeightedVote.save` / `aggregate-train weights`).
    - `ssa`: with neither `model` nor `base_url`, the shipped trained SSA on the embedded SmolLM2 (CPU,
      offline); with `base_url`, the same shipped adapter served there (e.g. vLLM `--lora-modules`), rendered
      with its settings; with `model`, SSA's prompt over that chat model. `weights` replaces the shipped vote
      weights in the tally the shipped SSA reads (fit them on your own sources).
    - `gsr`, `usc`: the prompted aggregators over `model`, or the model served at `base_url`.

    Other keyword options go to the aggregator (`k`, `max_candidate_tokens`, `fallback`, …).
    """
    if known_aggregator(name) == "majority":
        return MajorityVote(**options)
    if name == "weighted":
        if weights is None:
            raise ValueError("aggregator 'weighted' needs weights=: load_aggregator('weighted', weights=FILE), a "
                             "file from WeightedVote.save or `aggregate-train weights`")  # fmt: skip
        return weights if isinstance(weights, WeightedVote) else WeightedVote.load(weights)
    if model is None and base_url is not None:
        model = _served_model(base_url, served_model_name, api_key, max_tokens or (MAX_AGGREGATOR_TOKENS if name ==
                              "ssa" else 1024))  # fmt: skip
        if name == "ssa":
            return load_trained_aggregator(SHIPPED_SSA, model=model, weights=weights, **options)
    if name == "ssa" and model is None:
        return load_trained_aggregator(
            SHIPPED_SSA, max_tokens=max_tokens or MAX_AGGREGATOR_TOKENS, weights=weights, **options
        )
    if model is None:
        raise ValueError(f"aggregator {name!r} needs a model: load_aggregator({name!r}, model=CHAT_MODEL) or "
                         "base_url=URL (a served one)")  # fmt: skip
    return MODEL_AGGREGATORS[name](model, **options)


def resolve_aggregator(
    aggregator: AggregatorSpec | None, role: str = "aggregator"
) -> Runnable[SampleSet, Aggregation] | None:
    """What every entry point that takes an aggregator (`build_aggregate_graph`, `AggregateNode`,
    `AggregatingChatModel`, `AggregationMiddleware`) does with it: a name is `load_aggregator(name)`, loaded once
    here; an object is taken as it is; None stays None (the caller's default)."""
    if isinstance(aggregator, str):
        return load_aggregator(aggregator)
    if aggregator is not None and not isinstance(aggregator, Runnable):
        raise TypeError(
            f"{role} must be an Aggregator (a Runnable over a SampleSet) or one of the names "
            f"{', '.join(AGGREGATOR_NAMES)}; got {type(aggregator).__name__}"
        )
    return aggregator
