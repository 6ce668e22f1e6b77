"""`aggregate-train collect`: sample sets for training, appended to a JSONL file.

Generating: every question of a benchmark (`gsm8k`, `math500`, … or any JSONL of question + gold answer) goes
through the runtime's prebuilt graph with majority vote, so candidate drawing, retries, timeouts and answer
extraction are the ones served in production. The policy is any model spec (`local`, `openai:…`) or, with
`base_url`, a served model (a vLLM server). Importing: a real pool (`faithful_cot`, …) or a sample-set JSONL such as
the runtime's log (`aggregate_graph.log.export_sample_sets`: the data flywheel) is appended as it is.
A rerun skips the sample sets already in the output, so an interrupted collection resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from tqdm.auto import tqdm

from aggregate_graph import CandidatePolicy, SampleSet, build_aggregate_graph
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.errors import AggregateGraphError
from aggregate_graph.jsonl import read_jsonl
from training.data import POOLS, load_sample_sets
from training.pools import load_benchmark


@dataclass
class CollectConfig:
    dataset: str = field(
        metadata={
            "help": "to generate: gsm8k, gsm8k_train, math500, math_train or a question/answer JSONL; "
            "to import: faithful_cot, gpt3_solutions, qwen_math or a sample-set JSONL (the runtime's log)"
        }
    )
    output: str = field(metadata={"help": "sample-set JSONL, appended to"})
    model: str = field(default="local", metadata={"help": "policy: a model spec, or the served name with base_url"})
    base_url: str | None = field(default=None, metadata={"help": "an OpenAI-compatible server (vLLM, …)"})
    api_key: str | None = None
    n: int = field(default=8, metadata={"help": "candidates per question"})
    temperature: float = 0.8
    max_tokens: int = 1024
    timeout: float = field(default=300.0, metadata={"help": "seconds per candidate attempt"})
    attempts: int = field(default=3, metadata={"help": "attempts per candidate on transient errors"})
    concurrency: int = field(default=4, metadata={"help": "questions in flight at once"})
    limit: int | None = field(default=None, metadata={"help": "the first N questions only"})
    seed: int | None = field(default=None, metadata={"help": "sampling seed of the local model"})


def is_sample_set_file(dataset: str) -> bool:
    """A JSONL whose rows are sample sets (they have candidates) rather than questions."""
    path = Path(dataset)
    if dataset in POOLS or dataset.startswith("faithful_cot:"):
        return True
    if not path.is_file() or path.suffix != ".jsonl":
        return False
    return "candidates" in next(read_jsonl(path), {})


def done_ids(output: Path) -> set[str]:
    if not output.is_file():
        return set()
    return {row["id"] for row in read_jsonl(output)}


def policy_model(config: CollectConfig) -> Any:
    from aggregate_graph.drawing.models import load_chat_model, served_model

    if config.base_url is not None:  # sampled at the server's default temperature; the graph's policy retries
        options = {"temperature": None, "timeout": config.timeout, "max_retries": 0}
        return served_model(config.base_url, config.model, config.api_key, config.max_tokens, **options)
    if config.model.split(":", 1)[0] in ("local", "smollm2"):
        return load_chat_model(config.model, max_new_tokens=config.max_tokens, seed=config.seed)
    return load_chat_model(config.model, max_tokens=config.max_tokens, max_retries=0)


def _sampled(problem: SampleSet, state: dict[str, Any] | BaseException) -> SampleSet | None:
    """The graph's sample set under the problem's id and gold; None when no candidate succeeded (retried later)."""
    if isinstance(state, AggregateGraphError):
        drawn = state.sample_set
    elif isinstance(state, BaseException):
        raise state
    else:
        drawn = state["sample_set"]
    if drawn is None or not drawn.succeeded:
        return None
    return drawn.model_copy(
        update={"id": problem.id, "gold": problem.gold, "metadata": {**problem.metadata, **drawn.metadata}}
    )


def collect(config: CollectConfig) -> int:
    """Append the missing sample sets to `output`; returns how many were written by this run."""
    output = Path(config.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    done = done_ids(output)
    importing = is_sample_set_file(config.dataset)
    source = load_sample_sets(config.dataset, config.limit) if importing else load_benchmark(config.dataset)
    todo = [s for s in source[: config.limit] if s.id not in done]
    written = 0
    with output.open("a", encoding="utf-8") as f, tqdm(total=len(todo), desc="sample sets") as bar:
        if importing:
            for s in todo:
                f.write(s.model_dump_json() + "\n")
                written += 1
                bar.update()
            return written
        graph = build_aggregate_graph(
            policy_model(config),
            n=config.n,
            aggregator=MajorityVote(),
            temperatures=[config.temperature],
            policy=CandidatePolicy(timeout_s=config.timeout, max_attempts=config.attempts),
        )
        for start in range(0, len(todo), config.concurrency):
            batch = todo[start : start + config.concurrency]
            states = graph.batch(
                [{"messages": [HumanMessage(p.question)]} for p in batch],
                config={"max_concurrency": config.concurrency},
                return_exceptions=True,
            )
            for problem, state in zip(batch, states, strict=True):
                if (sampled := _sampled(problem, state)) is not None:
                    f.write(sampled.model_dump_json() + "\n")
                    written += 1
            f.flush()  # a finished batch survives an interruption
            bar.update(len(batch))
    return written
