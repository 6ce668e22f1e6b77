"""`aggregate-train build`: SSA / GSR training examples from sample sets.

Each example shows a random k-subset of one problem's candidates (k fixed or drawn from a range, as the SSA paper
draws 3–5). Subsets whose majority is wrong are "hard" (AggLM): `hard_fraction` sets their share by dropping
surplus easy or hard ones. Problems, not examples, are split between train and validation, so no problem is on both
sides. The rows are conversational (`prompt`, `completion`) for SFT, with `gold` for GRPO's reward.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import MajorityVote, SSAStyle, WeightedVote
from aggregate_graph.aggregators.fitting import fit_weighted_vote
from aggregate_graph.aggregators.llm import CHARS_PER_TOKEN
from aggregate_graph.aggregators.trained import AGGREGATOR_FILE, WEIGHTS_FILE
from aggregate_graph.errors import AggregationError
from aggregate_graph.jsonl import write_jsonl
from aggregate_graph.reading.answers import equivalent, group_equivalent
from training.data import (
    PROBLEMS_HELP,
    Problems,
    anonymised,
    load_sample_sets,
    problem_key,
    write_json,
)
from training.targets import FORMATS, Format, reference_solution, teacher_targets


@dataclass
class BuildConfig:
    sample_sets: str = field(metadata={"help": "sample-set JSONL (collect's output) or a pool name: faithful_cot, …"})
    output_dir: str = field(metadata={"help": "writes train.jsonl, validation.jsonl and build.json here"})
    format: Literal["ssa", "ssa-choice", "verify", "gsr"] = "ssa"
    k_min: int = field(default=3, metadata={"help": "fewest candidates per example"})
    k_max: int = field(default=5, metadata={"help": "most candidates per example (k_min = k_max: fixed k)"})
    subsets_per_problem: int = field(default=4, metadata={"help": "random subsets drawn per problem"})
    within_model_subsets: int = field(
        default=0,
        metadata={
            "help": "more subsets per problem drawn within one model's candidates, sources anonymised (one label), "
            "so that only their content tells them apart: the case of a user sampling one model n times"
        },
    )
    min_answers: int = field(
        default=1, metadata={"help": "drop subsets with fewer distinct answers (2: the choice SSA never sees one)"}
    )
    hard_fraction: float | None = field(
        default=0.5, metadata={"help": "share of examples whose subset majority is wrong; unset keeps the drawn mix"}
    )
    problems: Problems = field(default="all", metadata={"help": PROBLEMS_HELP})
    max_candidate_tokens: int = field(default=1024, metadata={"help": "per-candidate budget, as the aggregator's"})
    tail_only: bool = field(default=False, metadata={"help": "keep each candidate's tail only (compact SSA)"})
    chars_per_token: float = field(default=CHARS_PER_TOKEN, metadata={"help": "cuts text to the token budget"})
    show_answers: bool = field(default=False, metadata={"help": "SSA: a 'Final: <answer>' line per candidate"})
    show_sources: bool = field(default=False, metadata={"help": "SSA: each candidate's source in its header"})
    show_tally: bool = field(default=False, metadata={"help": "SSA: a 'Votes:' line (weighted with --weights)"})
    weights: str | None = field(
        default=None,
        metadata={"help": "WeightedVote file for the tally, or `fit`: fit it (supervised) on the train problems"},
    )
    short_instruction: bool = field(default=False, metadata={"help": "SSA: ask for the answer alone, in one line"})
    answer_only_targets: bool = field(default=False, metadata={"help": "SSA targets are just <answer>gold</answer>"})
    drop_unsolvable: bool = field(
        default=False, metadata={"help": "drop subsets where no candidate reaches gold (nothing to choose)"}
    )
    max_prompt_tokens: int | None = field(default=None, metadata={"help": "drop examples with longer prompts"})
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "model folder (or smollm2) whose tokenizer counts tokens (default: 4 characters a token)"},
    )
    validation_fraction: float = field(default=0.1, metadata={"help": "share of problems held out"})
    targets: Literal["gold", "teacher", "reference"] = field(
        default="gold",
        metadata={
            "help": "programmatic targets from the gold answer, a teacher's traces, or (GSR) a real candidate "
            "solution from the same problem's pool that states the gold answer"
        },
    )
    gsr_plain_fraction: float = field(
        default=0.0,
        metadata={
            "help": "GSR's hybrid data: this share of examples asks the question alone and is answered with a "
            "reference solution (the same model learns to solve and to refine)"
        },
    )
    teacher_model: str | None = field(default=None, metadata={"help": "teacher: served model name or model spec"})
    teacher_base_url: str | None = field(default=None, metadata={"help": "teacher: an OpenAI-compatible server"})
    teacher_api_key: str | None = None
    teacher_samples: int = field(default=4, metadata={"help": "tries per example before it is dropped"})
    teacher_temperature: float = 0.7
    teacher_max_tokens: int = 2048
    concurrency: int = 8
    limit: int | None = field(default=None, metadata={"help": "use the first N sample sets only"})
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k_max:
            raise ValueError(f"need 1 <= k_min <= k_max, got {self.k_min}, {self.k_max}")
        if self.gsr_plain_fraction > 0 and (self.format != "gsr" or not self.gsr_plain_fraction < 1):
            raise ValueError("gsr_plain_fraction is for --format gsr and must be below 1")
        if self.format == "verify" and (self.k_max != 1 or self.targets != "gold"):
            raise ValueError(
                "the verifier reads one candidate against the gold answer: k_min = k_max = 1, targets gold"
            )
        if self.format == "ssa-choice" and self.targets != "gold":
            raise ValueError("the choice SSA's target is the right option's letter: targets must be gold")
        if self.targets == "teacher" and self.teacher_model is None:
            raise ValueError("targets=teacher needs --teacher_model (and --teacher_base_url for a served model)")


def _subset_sizes(config: BuildConfig, available: int) -> list[int]:
    low, high = min(config.k_min, available), min(config.k_max, available)
    return list(range(low, high + 1))


def _distinct_subsets(
    usable: list[Candidate], config: BuildConfig, wanted: int, rng: random.Random, seen: set[tuple[int, ...]]
) -> list[list[Candidate]]:
    """Up to `wanted` random k-subsets of `usable` not in `seen` (by position; `seen` is updated)."""
    if not usable or wanted < 1:
        return []
    sizes, subsets = _subset_sizes(config, len(usable)), []
    for _ in range(wanted * 4):  # distinct subsets may be fewer than asked for
        chosen = tuple(sorted(rng.sample(range(len(usable)), rng.choice(sizes))))
        if chosen not in seen:
            seen.add(chosen)
            subsets.append([usable[i] for i in chosen])
        if len(subsets) == wanted:
            break
    return subsets


def draw_subsets(sample_set: SampleSet, config: BuildConfig, rng: random.Random) -> list[list[Candidate]]:
    """Distinct random k-subsets of the candidates with text, each kept in request order; then
    `within_model_subsets` more, each within one model's candidates and with the sources anonymised."""
    usable = [c for c in sample_set.succeeded if c.text.strip()]
    if config.k_min < 1:
        return []
    subsets = _distinct_subsets(usable, config, config.subsets_per_problem, rng, set())
    models = sorted({c.model for c in usable})
    by_model = {m: [c for c in usable if c.model == m] for m in models}
    eligible = [m for m in models if len(by_model[m]) >= max(config.k_min, 2)]
    seen: dict[str, set[tuple[int, ...]]] = {m: set() for m in eligible}  # distinct within each model too
    for _ in range(config.within_model_subsets if eligible else 0):
        model = rng.choice(eligible)
        for chosen in _distinct_subsets(by_model[model], config, 1, rng, seen[model]):
            hidden = anonymised(SampleSet(question=sample_set.question, candidates=chosen))
            subsets.append(list(hidden.candidates))
    return subsets


def is_hard(subset: list[Candidate], gold: str, weights: WeightedVote | None = None) -> bool:
    """The subset's vote (weighted by `weights`, the tally the model is shown) is wrong, or there is none:
    aggregation has to beat the vote."""
    try:
        answer = (weights or MajorityVote()).invoke(SampleSet(question="", candidates=subset)).answer
    except AggregationError:
        return True
    return not equivalent(answer, gold)


def mix(examples: list[dict[str, Any]], hard_fraction: float | None, rng: random.Random) -> list[dict[str, Any]]:
    """The largest subsample with the requested share of hard examples."""
    if hard_fraction is None:
        return examples
    hard = [e for e in examples if e["hard"]]
    easy = [e for e in examples if not e["hard"]]
    if hard_fraction <= 0 or hard_fraction >= 1:
        return easy if hard_fraction <= 0 else hard
    total = min(len(hard) / hard_fraction, len(easy) / (1 - hard_fraction))
    n_hard, n_easy = round(total * hard_fraction), round(total * (1 - hard_fraction))
    kept = rng.sample(hard, min(n_hard, len(hard))) + rng.sample(easy, min(n_easy, len(easy)))
    return sorted(kept, key=lambda e: e["order"])


def split_problems(keys: list[str], fraction: float, rng: random.Random) -> set[str]:
    """The held-out problems: a seeded shuffle of the distinct problems, never a split of examples."""
    distinct = sorted(set(keys))
    rng.shuffle(distinct)
    held = math.ceil(len(distinct) * fraction) if fraction > 0 else 0
    return set(distinct[: min(held, len(distinct) - 1)]) if len(distinct) > 1 else set()


def _token_counter(config: BuildConfig):  # type: ignore[no-untyped-def]
    if config.tokenizer is None:
        return lambda text: math.ceil(len(text) / CHARS_PER_TOKEN)
    from transformers import AutoTokenizer

    from aggregate_graph.serve import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(config.tokenizer), local_files_only=True)
    return lambda text: len(tokenizer(text)["input_ids"])


def style_of(config: BuildConfig) -> SSAStyle:
    """The render settings the examples are built with (the config's fields of the same names); the trained model
    records them (aggregator.json)."""
    return SSAStyle(**{f.name: getattr(config, f.name) for f in fields(SSAStyle)})


def load_sets(config: BuildConfig) -> list[SampleSet]:
    """The sample sets examples are built from: those with a gold answer, within `limit` and `problems`."""
    return [s for s in load_sample_sets(config.sample_sets, config.limit, config.problems) if s.gold is not None]


def subset_examples(
    sets: list[SampleSet], config: BuildConfig, fmt: Format, weights: WeightedVote | None, rng: random.Random
) -> list[dict[str, Any]]:
    count_tokens = _token_counter(config) if config.max_prompt_tokens is not None else None
    style = style_of(config)
    examples, too_long, unsolvable = [], 0, 0
    for sample_set in tqdm(sets, desc="building examples"):
        for subset in draw_subsets(sample_set, config, rng):
            if config.drop_unsolvable and not any(equivalent(c.answer, sample_set.gold) for c in subset):
                unsolvable += 1
                continue
            if len(group_equivalent([c.answer for c in subset if c.answer is not None])) < config.min_answers:
                continue
            prompt = fmt.render(sample_set.question, subset, style, weights)
            target = fmt.target(sample_set.gold, subset, config.answer_only_targets, weights)
            if target is None:  # the choice format: no option is the gold answer
                continue
            if config.targets == "reference" and (target := reference_solution(sample_set)) is None:
                continue
            if count_tokens is not None and count_tokens(prompt) > config.max_prompt_tokens:
                too_long += 1
                continue
            examples.append(
                {
                    "order": len(examples),
                    "id": f"{sample_set.id}/{'-'.join(str(c.index) for c in subset)}",
                    "problem": problem_key(sample_set),
                    "prompt": [{"role": "user", "content": prompt}],
                    "completion": [{"role": "assistant", "content": target}],
                    "gold": sample_set.gold,
                    "answer_key": fmt.key(sample_set.gold, target),
                    "k": len(subset),
                    "hard": is_hard(subset, sample_set.gold, weights),
                    "format": fmt.name,
                }
            )
    if too_long:
        tqdm.write(f"dropped {too_long} examples over {config.max_prompt_tokens} prompt tokens")
    if unsolvable:
        tqdm.write(f"dropped {unsolvable} subsets with no candidate reaching the gold answer")
    return examples


def plain_examples(sets: list[SampleSet], config: BuildConfig, refinements: int, rng: random.Random) -> list[dict]:
    """GSR's hybrid half: the question alone, answered with a reference solution, so one model both solves
    (as a candidate) and refines (as the aggregator). `gsr_plain_fraction` of all examples; one per problem."""
    if config.gsr_plain_fraction <= 0:
        return []
    wanted = round(refinements * config.gsr_plain_fraction / (1 - config.gsr_plain_fraction))
    rows = []
    for sample_set in rng.sample(sets, len(sets)):
        if len(rows) == wanted:
            break
        if (solution := reference_solution(sample_set)) is not None:
            rows.append(
                {
                    "order": refinements + len(rows),
                    "id": f"{sample_set.id}/plain",
                    "problem": problem_key(sample_set),
                    "prompt": [{"role": "user", "content": sample_set.question}],
                    "completion": [{"role": "assistant", "content": solution}],
                    "gold": sample_set.gold,
                    "answer_key": sample_set.gold,
                    "k": 0,
                    "hard": False,
                    "format": "gsr",
                }
            )
    return rows


def _teacher(config: BuildConfig):  # type: ignore[no-untyped-def]
    if config.teacher_base_url is None:
        from aggregate_graph.drawing.models import load_chat_model

        return load_chat_model(config.teacher_model)
    from aggregate_graph.drawing.models import served_model

    url, key, model = config.teacher_base_url, config.teacher_api_key, config.teacher_model
    return served_model(url, model, key, config.teacher_max_tokens, temperature=config.teacher_temperature)


def teacher_completions(
    examples: list[dict[str, Any]], config: BuildConfig, fmt: Format
) -> tuple[list[dict[str, Any]], int]:
    """GSR's distillation: each example's completion replaced by a teacher's trace that reaches the gold answer
    (rejection sampling, `teacher_samples` tries); examples without one are dropped. Returns the kept examples and
    how many were rejected."""
    traces = teacher_targets(
        _teacher(config),
        [e["prompt"][0]["content"] for e in examples],
        [e["gold"] for e in examples],
        fmt,
        config.teacher_samples,
        config.concurrency,
    )
    kept = [
        {**e, "completion": [{"role": "assistant", "content": trace}]}
        for e, trace in zip(examples, traces, strict=True)
        if trace is not None
    ]
    return kept, len(examples) - len(kept)


def split_rows(examples: list[dict[str, Any]], held_out: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The written rows of each split: the held-out problems' examples are the validation split."""
    rows = [{key: value for key, value in e.items() if key != "order"} for e in examples]
    return {
        "train": [r for r in rows if r["problem"] not in held_out],
        "validation": [r for r in rows if r["problem"] in held_out],
    }


def write_build(
    out: Path,
    config: BuildConfig,
    splits: dict[str, list[dict[str, Any]]],
    held_out_sets: list[SampleSet],
    weighted: bool,
    rejected: int,
) -> dict[str, Any]:
    """train.jsonl / validation.jsonl, the held-out sample sets, build.json (the summary, returned) and
    aggregator.json (the format and render settings the trained model keeps)."""
    summary: dict[str, Any] = {"config": asdict(config), "teacher_rejected": rejected}
    for name, rows in splits.items():
        write_jsonl(out / f"{name}.jsonl", rows)
        summary[name] = {
            "examples": len(rows),
            "problems": len({r["problem"] for r in rows}),
            "hard": sum(r["hard"] for r in rows),
        }
    # The held-out sample sets themselves, so `evaluate` can score the trained aggregator on unseen problems.
    write_jsonl(out / "validation_sets.jsonl", (s.model_dump(mode="json") for s in held_out_sets))
    write_json(out / "build.json", summary)
    record = {"format": config.format, "k": config.k_max, "style": style_of(config).to_dict()}
    write_json(out / AGGREGATOR_FILE, record | {"weights": WEIGHTS_FILE if weighted else None})
    return summary


def build(config: BuildConfig) -> dict[str, Any]:
    """Write train.jsonl / validation.jsonl / build.json to `output_dir`; returns the summary (build.json)."""
    fmt, rng = FORMATS[config.format], random.Random(config.seed)
    out = Path(config.output_dir)
    sets = load_sets(config)
    # Problems are split before any example exists, so the split does not depend on sampling or mixing.
    held_out = split_problems([problem_key(s) for s in sets], config.validation_fraction, rng)
    weights = _weights(config, [s for s in sets if problem_key(s) not in held_out], out)
    examples = mix(subset_examples(sets, config, fmt, weights, rng), config.hard_fraction, rng)
    examples += plain_examples(sets, config, len(examples), rng)
    rejected = 0
    if config.targets == "teacher":
        examples, rejected = teacher_completions(examples, config, fmt)
    held_out_sets = [s for s in sets if problem_key(s) in held_out]
    return write_build(out, config, split_rows(examples, held_out), held_out_sets, weights is not None, rejected)


def _weights(config: BuildConfig, train_sets: list[SampleSet], out: Path) -> WeightedVote | None:
    """The WeightedVote behind the tally: read from a file, or fit on the train problems only (never on the
    validation problems the model is chosen on), and saved beside the examples as weights.json."""
    if config.weights is None:
        return None
    weights = fit_weighted_vote(train_sets) if config.weights == "fit" else WeightedVote.load(config.weights)
    weights.save(out / WEIGHTS_FILE)
    return weights
