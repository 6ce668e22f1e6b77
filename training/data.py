"""Where sample sets come from (a JSONL file or a named real pool) and how step outputs are written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from aggregate_graph import SampleSet
from aggregate_graph.log import read_sample_sets
from training.pools import (
    is_reserved,
    load_faithful_cot,
    load_gpt3_solutions,
    load_qwen_math,
    load_zeroeval,
    question_key,
    reserved_questions,
)

Problems = Literal["all", "unreserved", "reserved"]
PROBLEMS_HELP = (
    "which problems: all, unreserved (never the reserved GSM8K test problems, ids divisible by 5: build, train "
    "and choose on these), or reserved (the final evaluation, once)"
)

# The real pools in ../shared/data, by the names the CLI accepts wherever a sample-set file is expected.
POOLS: dict[str, Callable[[], list[SampleSet]]] = {
    "faithful_cot": load_faithful_cot,
    "gpt3_solutions": load_gpt3_solutions,
    "qwen_math": load_qwen_math,
    "zeroeval_build": lambda: load_zeroeval("build"),  # id % 4 == 1; the report split is read once, by name
}


def load_sample_sets(source: str | Path, limit: int | None = None, problems: Problems = "all") -> list[SampleSet]:
    """A pool name (`faithful_cot`, `gpt3_solutions`, `qwen_math`, or `faithful_cot:CFG1,CFG2`), a sample-set
    JSONL file (what `collect` writes, or the runtime's log exported by `export_sample_sets`), or several of these
    joined by `+` (`faithful_cot+gpt3_solutions`, `runs/x/validation_sets.jsonl+zeroeval_build`); `problems` keeps
    the reserved evaluation problems out (`unreserved`) or keeps only them (`reserved`)."""
    parts = str(source).split("+")  # several sources together, e.g. faithful_cot+gpt3_solutions (split by problem)
    if len(parts) > 1 and all(part.partition(":")[0] in POOLS or Path(part).is_file() for part in parts):
        # (not a config's "NL+SL", whose halves are neither)
        return [s for part in parts for s in load_sample_sets(part, None, problems)][:limit]
    name, _, configs = str(source).partition(":")
    if name == "faithful_cot" and configs:
        sets = load_faithful_cot(configs.split(","))
    elif str(source) in POOLS:
        sets = POOLS[str(source)]()
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"{source}: no such sample-set JSONL file, nor a pool name ({', '.join(POOLS)})")
        sets = list(read_sample_sets(path))
    if problems != "all":
        if problems not in ("unreserved", "reserved"):
            raise ValueError(f"problems must be all, unreserved or reserved, got {problems!r}")
        reserved = reserved_questions()
        sets = [s for s in sets if is_reserved(s, reserved) == (problems == "reserved")]
    return sets[:limit] if limit is not None else sets


ANONYMOUS_SOURCE = "anonymous"  # one label for every candidate: a source no vote weight knows


def anonymised(sample_set: SampleSet) -> SampleSet:
    """The set with every candidate's source replaced by one label, so that only content tells them apart (a
    user sampling one model n times), the vote weights know none of them, and a pool's per-sample params (its
    verdicts) are gone."""
    hidden = [c.model_copy(update={"model": ANONYMOUS_SOURCE, "params": {}}) for c in sample_set.candidates]
    return sample_set.model_copy(update={"candidates": hidden})


def one_model(sample_set: SampleSet, model: str) -> SampleSet:
    """Only `model`'s candidates, anonymised: a user sampling that one model n times."""
    own = [c for c in sample_set.candidates if c.model == model]
    return anonymised(sample_set.model_copy(update={"candidates": own}))


def problem_key(sample_set: SampleSet) -> str:
    """What identifies a problem across sample sets: the question text (the flywheel logs the same problem under
    many set ids, so ids cannot keep a problem out of both sides of a split)."""
    return question_key(sample_set.question)


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
