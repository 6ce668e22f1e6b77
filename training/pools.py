"""Loaders for the real multi-sample pools and benchmarks in ../shared/data, as `SampleSet`s.

The data lives beside the repository, never inside it: `data_dir()` is `$AGGREGATE_GRAPH_DATA`, else the first
`shared/data` folder in the working directory or one of its parents (`<repo>/../shared/data` from a checkout), else
beside the package's own folder (an editable install). Its README.md defines the pools and the reference numbers
that `pool_metrics` reproduces (tests/test_pools.py); answers are graded with `answers.equivalent`, the package's
one grader.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.runnables import Runnable

from aggregate_graph.aggregators.majority import MajorityVote
from aggregate_graph.errors import AggregationError
from aggregate_graph.jsonl import read_jsonl
from aggregate_graph.reading.answers import ABSTENTIONS, equivalent, normalize_answer, numeric_value, screen_answer
from aggregate_graph.sample_set import Candidate, SampleSet

ENV_VAR = "AGGREGATE_GRAPH_DATA"

FAITHFUL_COT_LMS = ("code001", "code002", "text002", "text003", "gpt-3.5-turbo", "gpt4")
FAITHFUL_COT_PROMPTS = ("standard", "COT", "noNL", "LtM", "NL+SL")
# Every config in the README's order (by LM, then by prompt, as listed there). This order gives the candidate
# indices, hence majority vote's tie-breaks, and reproduces the README's maj@k; sorted names would not (213 of the
# 1319 code002 × 5 votes are ties: 74.30 instead of 72.25).
FAITHFUL_COT_CONFIGS = tuple(f"{lm}_{prompt}" for lm in FAITHFUL_COT_LMS for prompt in FAITHFUL_COT_PROMPTS)
GPT3_SYSTEMS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
QWEN_MATH_MODEL = "Qwen2.5-Math-Instruct"

BENCHMARKS = {
    "gsm8k": "gsm8k/test.jsonl",
    "gsm8k_train": "gsm8k/train.jsonl",
    "math500": "math500/test.jsonl",
    "math_train": "math_train_deepscaler/math.json",
}

_LAST_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


def data_dir() -> Path:
    """The shared data folder: `$AGGREGATE_GRAPH_DATA`, else `shared/data` in the working directory or a parent,
    else in the package's folder or a parent (an editable install: `<repo>/../shared/data`)."""
    if configured := os.environ.get(ENV_VAR):
        if not Path(configured).is_dir():
            raise FileNotFoundError(f"{ENV_VAR}={configured} is not a folder: point {ENV_VAR} at the shared data")
        return Path(configured)
    starts = (Path.cwd(), Path(__file__).resolve().parents[1])
    for start in starts:
        for folder in (start, *start.parents):
            if (folder / "shared" / "data").is_dir():
                return folder / "shared" / "data"
    raise FileNotFoundError(
        f"no shared data folder: {ENV_VAR} is not set and there is no shared/data in {starts[0]}, {starts[1]} or "
        f"their parents; set {ENV_VAR}=/path/to/shared/data (the folder holding gsm8k/ and samples/)"
    )


def _file(data: str | Path | None, relative: str) -> Path:
    path = (Path(data) if data is not None else data_dir()) / relative
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the data folder is {ENV_VAR}, else ../shared/data)")
    return path


RESERVED_MODULUS = 5


def question_key(question: str) -> str:
    """What identifies a problem across sources: its question text, whitespace normalised."""
    return " ".join(question.split())


def reserved_questions(data: str | Path | None = None) -> frozenset[str]:
    """The project's reserved evaluation problems: GSM8K test ids with `id % 5 == 0` (264 questions, whitespace
    normalised). Nothing is built, trained, early-stopped or chosen on them; they are evaluated once."""
    rows = read_jsonl(_file(data, BENCHMARKS["gsm8k"]))
    return frozenset(question_key(row["question"]) for i, row in enumerate(rows) if i % RESERVED_MODULUS == 0)


def is_reserved(sample_set: SampleSet, reserved: frozenset[str] | None = None) -> bool:
    """Whether the set's question is a reserved evaluation problem (decided by its text, so sample sets from
    any source — pools, `collect`, the runtime's log — are recognised)."""
    return question_key(sample_set.question) in (reserved_questions() if reserved is None else reserved)


def _pool_set(id: str, question: str, gold: str | None, candidates: list[Candidate], **metadata: Any) -> SampleSet:
    """A pool's sample set: every candidate asked for, and where it comes from (`source`, `problem_id`, …)."""
    return SampleSet(
        id=id, question=question, gold=gold, candidates=candidates, requested_n=len(candidates), metadata=metadata
    )


def _gsm8k_gold(solution: str) -> str:
    return solution.rsplit("####", 1)[-1].strip()


def faithful_cot_answer(raw: Any) -> str | None:
    """The README's rule for Faithful-CoT's `answer` field: kept when numeric, else its last number
    ("[invalid]" and sentences without a number give None). Numeric means a plain number to `normalize_answer`,
    fractions like "10/3" included; the README's own numbers took the "3" of such a fraction (tests/test_pools.py)."""
    if raw is None:
        return None
    text = str(raw).strip()
    form = normalize_answer(text)
    if form is not None and numeric_value(form) is not None:
        return text
    numbers = _LAST_NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _screened(
    raw: str | None, abstentions: Sequence[str], rule: Callable[[str], str | None] | None = None
) -> dict[str, str | None]:
    """A candidate's `answer` and `abstention` from a pool's recorded answer, by the runtime's rule
    (`answers.screen_answer`): an abstention ("The answer cannot be determined …") does not vote and its reason is
    kept; any other answer goes through `rule`, the pool's own extraction."""
    answer, reason = screen_answer(raw, abstentions)
    return {"answer": rule(answer) if rule is not None and answer is not None else answer, "abstention": reason}


def faithful_cot_configs(lms: Iterable[str] | None = None, prompts: Iterable[str] | None = None) -> list[str]:
    """Config names for some LMs × prompts (default all), e.g. `faithful_cot_configs(prompts=["COT"])`."""
    lms = set(FAITHFUL_COT_LMS if lms is None else lms)
    prompts = set(FAITHFUL_COT_PROMPTS if prompts is None else prompts)
    return [c for c in FAITHFUL_COT_CONFIGS if c.rsplit("_", 1)[0] in lms and c.rsplit("_", 1)[1] in prompts]


def load_faithful_cot(
    configs: Iterable[str] | None = None, data: str | Path | None = None, *, abstentions: Sequence[str] = ABSTENTIONS
) -> list[SampleSet]:
    """GSM8K test (1319 problems) with one candidate per Faithful-CoT config (`<LM>_<prompt>`, default all 30).

    Candidates come in `FAITHFUL_COT_CONFIGS` order (index 0..k-1), whatever order `configs` lists them in;
    `model` is the LM, `params` is `{"prompt": …}`, `text` the completion (reasoning or Python program).
    The `answer` field goes through `faithful_cot_answer`, unless it is an abstention ("[invalid]", "The answer
    cannot be determined …", see `answers.ABSTENTIONS`; `abstentions=()` keeps the README's rule alone).
    """
    wanted = {configs} if isinstance(configs, str) else set(FAITHFUL_COT_CONFIGS if configs is None else configs)
    if unknown := sorted(wanted - set(FAITHFUL_COT_CONFIGS)):
        raise ValueError(f"unknown Faithful-CoT configs {unknown}; known: {list(FAITHFUL_COT_CONFIGS)}")
    chosen = [c for c in FAITHFUL_COT_CONFIGS if c in wanted]
    if not chosen:
        raise ValueError("no Faithful-CoT config chosen")
    problems = list(read_jsonl(_file(data, BENCHMARKS["gsm8k"])))
    by_config = {}
    for config in chosen:
        predictions = _file(data, f"samples/faithful_cot_gsm8k/{config}/predictions.jsonl")
        rows = {row["id"]: row for row in read_jsonl(predictions)}
        if sorted(rows) != list(range(len(problems))):
            raise ValueError(f"{config}: ids do not cover the {len(problems)} GSM8K test problems")
        by_config[config] = rows
    sets = []
    for i, problem in enumerate(problems):
        candidates = []
        for index, config in enumerate(chosen):
            lm, prompt = config.rsplit("_", 1)
            row = by_config[config][i]
            raw = row.get("answer")
            candidates.append(
                Candidate(
                    index=index,
                    text=row.get("completion") or "",
                    **_screened(None if raw is None else str(raw), abstentions, faithful_cot_answer),
                    model=lm,
                    params={"prompt": prompt},
                )
            )
        sets.append(
            _pool_set(
                f"gsm8k-test-{i}",
                problem["question"],
                _gsm8k_gold(problem["answer"]),
                candidates,
                source="faithful_cot_gsm8k",
                problem_id=i,
            )
        )
    return sets


def _after_last_a(solution: str) -> str | None:
    if "A:" not in solution:
        return None
    return solution.rsplit("A:", 1)[-1].strip() or None


def load_gpt3_solutions(data: str | Path | None = None, *, abstentions: Sequence[str] = ABSTENTIONS) -> list[SampleSet]:
    """GSM8K test with the 4 GPT-3 systems of Cobbe et al. 2021 as candidates, in `GPT3_SYSTEMS` order.
    The answer is the text after the last `A:` (an abstention does not vote, see `load_faithful_cot`);
    `params["is_correct"]` is the dataset's own verdict."""
    rows = read_jsonl(_file(data, "samples/gsm8k_example_model_solutions/example_model_solutions.jsonl"))
    return [
        SampleSet(
            id=f"gsm8k-test-{i}",
            question=row["question"],
            gold=_after_last_a(row["ground_truth"]),
            candidates=[
                Candidate(
                    index=index,
                    text=row[system]["solution"],
                    **_screened(_after_last_a(row[system]["solution"]), abstentions),
                    model=system,
                    params={"is_correct": row[system]["is_correct"]},
                )
                for index, system in enumerate(GPT3_SYSTEMS)
            ],
            requested_n=len(GPT3_SYSTEMS),
            metadata={"source": "gsm8k_example_model_solutions", "problem_id": i},
        )
        for i, row in enumerate(rows)
    ]


def load_qwen_math(data: str | Path | None = None, *, abstentions: Sequence[str] = ABSTENTIONS) -> list[SampleSet]:
    """MATH test problems 0-99 with 8 Qwen2.5-Math-Instruct CoT samples each. `answer` is the pool's `pred`
    (an abstention does not vote, see `load_faithful_cot`);
    `params` keeps its sympy verdict `score` and the Qwen2.5-Math-RM-72B reward `pred_score` (`[float]`),
    e.g. for `BestOfN(score_from_params("pred_score"))`."""
    rows = read_jsonl(_file(data, "samples/qwen25math_math_cot_100/math_cot_100.jsonl"))
    sets = []
    for row in rows:
        responses, preds, scores, rewards = row["response"], row["pred"], row["score"], row["pred_score"]
        if not len(responses) == len(preds) == len(scores) == len(rewards):
            raise ValueError(f"qwen25math idx {row['idx']}: per-sample lists differ in length")
        candidates = [
            Candidate(
                index=j,
                text=responses[j],
                **_screened(preds[j] if preds[j] not in (None, "") else None, abstentions),
                model=QWEN_MATH_MODEL,
                params={"score": scores[j], "pred_score": rewards[j]},
            )
            for j in range(len(responses))
        ]
        sets.append(
            _pool_set(
                f"math-test-{row['idx']}",
                row["question"],
                row["gt"],
                candidates,
                source="qwen25math_math_cot_100",
                problem_id=int(row["idx"]),
                level=row["level"],
            )
        )
    return sets


ZEROEVAL_SPLITS = {"build": 1, "report": 3}  # id % 4: build, train and choose on 1; read 3 once, for the final report


def load_zeroeval(
    split: str, data: str | Path | None = None, *, abstentions: Sequence[str] = ABSTENTIONS
) -> list[SampleSet]:
    """ZeroEval MATH level 5: one greedy reply from each of 43 LLMs of 2024 per problem (odd problem ids only).

    `split` is "build" (`id % 4 == 1`: build, train, calibrate and choose on it) or "report" (`id % 4 == 3`: read
    once, for a final report). The even ids are held back for evaluation outside the team: they are not in the
    file and no split names them. Each reply's answer is read by the runtime's reader (`read_answers`, as
    "math": JSON `answer` fields, `\\boxed{}`, stated answers), not the file's `answer` field; `params["correct"]`
    is graded here with the runtime's equivalence against `gold` (the file's own verdict is crude)."""
    from aggregate_graph.reading.answer_types import read_answers

    if split not in ZEROEVAL_SPLITS:
        raise ValueError(f"split must be one of {', '.join(ZEROEVAL_SPLITS)}, got {split!r}")
    sets = []
    for row in read_jsonl(_file(data, "samples/zeroeval_math_l5/pools_odd.jsonl")):
        if row["id"] % 2 == 0:
            raise ValueError(f"zeroeval id {row['id']} is even: those problems are held back, never read them")
        if row["id"] % 4 != ZEROEVAL_SPLITS[split]:
            continue
        texts = [sample["output"] or "" for sample in row["samples"]]
        reading = read_answers(row["problem"], texts, "math", abstentions=abstentions)
        candidates = [
            Candidate(
                index=j,
                text=text,
                answer=answer,
                abstention=abstention,
                model=sample["model"],
                params={"correct": answer is not None and equivalent(answer, row["gold"])},
            )
            for j, (sample, text, answer, abstention) in enumerate(
                zip(row["samples"], texts, reading.answers, reading.abstentions, strict=True)
            )
        ]
        sets.append(
            _pool_set(
                f"zeroeval-math-l5-{row['id']}",
                row["problem"],
                row["gold"],
                candidates,
                source="zeroeval_math_l5",
                problem_id=row["id"],
                split=split,
            )
        )
    return sets


def load_benchmark(name_or_path: str | Path, data: str | Path | None = None) -> list[SampleSet]:
    """A benchmark as question + gold sample sets without candidates: a name from `BENCHMARKS` (`gsm8k`,
    `gsm8k_train`, `math500`, `math_train`) or a path to a GSM8K-style (`question`, `answer` ending in `#### N`)
    or MATH-style (`problem`, `answer`) JSONL file or JSON array."""
    name = str(name_or_path)
    path = _file(data, BENCHMARKS[name]) if name in BENCHMARKS else Path(name_or_path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; known benchmark names: {sorted(BENCHMARKS)}")
    rows = json.loads(path.read_text(encoding="utf-8")) if path.suffix == ".json" else read_jsonl(path)
    stem = name if name in BENCHMARKS else path.stem
    sets = []
    for i, row in enumerate(rows):
        if "problem" in row:  # MATH: the answer field is the gold answer itself
            question, gold = row["problem"], row["answer"]
        else:  # GSM8K: the gold answer follows `#### ` at the end of the solution
            question, gold = row["question"], _gsm8k_gold(row["answer"])
        extra = {k: row[k] for k in ("unique_id", "subject", "level", "type", "difficulty") if k in row}
        sets.append(SampleSet(id=f"{stem}-{i}", question=question, gold=gold, metadata={"source": stem, **extra}))
    return sets


def pool_metrics(sample_sets: Sequence[SampleSet], aggregator: Runnable | None = None) -> dict[str, Any]:
    """Accuracy in percent, graded with `answers.equivalent` against each set's gold:
    `single` (mean per-candidate accuracy), `maj` (the aggregator's answer; a set it cannot aggregate counts as
    wrong), `pass` (any candidate correct, i.e. pass@k); plus `problems`, `k` (most candidates in a set),
    `unaggregated` (sets the aggregator raised AggregationError on) and `ties` (aggregations reporting a tie)."""
    aggregator = aggregator if aggregator is not None else MajorityVote()
    candidates = correct_candidates = majority = oracle = unaggregated = ties = 0
    for s in sample_sets:
        verdicts = [c.ok and equivalent(c.answer, s.gold) for c in s.candidates]
        candidates += len(verdicts)
        correct_candidates += sum(verdicts)
        oracle += any(verdicts)
        try:
            result = aggregator.invoke(s)
        except AggregationError:
            unaggregated += 1
            continue
        majority += equivalent(result.answer, s.gold)
        ties += result.tie is not None
    n = len(sample_sets)
    return {
        "problems": n,
        "k": max((len(s.candidates) for s in sample_sets), default=0),
        "single": 100 * correct_candidates / candidates if candidates else 0.0,
        "maj": 100 * majority / n if n else 0.0,
        "pass": 100 * oracle / n if n else 0.0,
        "unaggregated": unaggregated,
        "ties": ties,
    }
