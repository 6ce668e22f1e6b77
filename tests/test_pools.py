"""The real multi-sample pools in ../shared/data load as sample sets, and MajorityVote with `answers.equivalent`
reproduces the reference numbers of ../shared/data/README.md.

The README grades by exact string match after a simple normalisation; we grade with `equivalent`. Every number
agrees to within two problems (0.15 points), and each disagreement is pinned below with the problems behind it.
"""

import pytest

from aggregate_graph import SampleSet
from aggregate_graph.aggregators import BestOfN, MajorityVote, score_from_params
from aggregate_graph.reading.answers import equivalent
from training.pools import (
    FAITHFUL_COT_CONFIGS,
    FAITHFUL_COT_LMS,
    FAITHFUL_COT_PROMPTS,
    GPT3_SYSTEMS,
    data_dir,
    faithful_cot_answer,
    faithful_cot_configs,
    load_benchmark,
    load_faithful_cot,
    load_gpt3_solutions,
    load_qwen_math,
    load_zeroeval,
    pool_metrics,
)

DATA = data_dir()

# pool: (problems, k, configs for Faithful-CoT pools), README (single, maj@k with ties to the first, pass@k)
REFERENCE = {
    "qwen_math": (100, 8, None, (91.12, 93.00, 97.00)),
    "gpt3": (1319, 4, None, (37.93, 44.28, 67.25)),
    "fcot_all": (1319, 30, FAITHFUL_COT_CONFIGS, (53.11, 90.60, 99.17)),
    "fcot_no_standard": (1319, 24, faithful_cot_configs(prompts=FAITHFUL_COT_PROMPTS[1:]), (60.01, 90.75, 99.09)),
    "fcot_cot": (1319, 6, faithful_cot_configs(prompts=["COT"]), (59.84, 79.76, 96.36)),
    "fcot_nl_sl": (1319, 6, faithful_cot_configs(prompts=["NL+SL"]), (66.93, 83.47, 97.04)),
    "fcot_gpt4": (1319, 5, faithful_cot_configs(lms=["gpt4"]), (85.96, 96.36, 97.88)),
    "fcot_code002": (1319, 5, faithful_cot_configs(lms=["code002"]), (52.75, 72.25, 88.55)),
}
# Where `equivalent` and the README's exact match legitimately differ, what we measure (rounded to 2 places):
MEASURED = {
    # COT × 6: problems 184 and 1169, where code001 answers the fractions "2/3" and "3/5". The README's rule does
    # not count a fraction as numeric and takes its last number, "3" and "5"; each then ties 2-2 with the gold
    # answer (25 and 2) and, being first, wins. Here they are the numbers 2/3 and 0.6, and the gold answer wins.
    "fcot_cot": {"maj": 79.91},
    # NL+SL × 6: problem 181 (gold 160, answers "[invalid]", "800/9", "[invalid]", 160, 0, "160.0") is a clear
    # 2-vote win for 160 here, but wrong in the README. We could reproduce that only by letting "[invalid]" vote,
    # which contradicts the README's other rows; the one problem is left unexplained.
    "fcot_nl_sl": {"maj": 83.55},
}

# ../shared/data/README.md, single-system accuracies; columns standard / COT / noNL / LtM / NL+SL
FAITHFUL_COT_SINGLE = {
    "code001": (5.08, 14.94, 32.30, 9.55, 26.31),
    "code002": (19.48, 63.38, 71.57, 37.68, 71.65),
    "text002": (15.31, 47.54, 61.71, 33.06, 61.79),
    "text003": (16.45, 59.59, 70.20, 34.42, 71.72),
    "gpt-3.5-turbo": (40.71, 80.06, 74.91, 68.16, 75.89),
    "gpt4": (55.88, 93.56, 93.56, 92.57, 94.24),
}
# text002_LtM: problem 1225 answers "10/3" (gold 3). The README's rule takes "3", the last number of a fraction it
# does not read as numeric, and counts it right; `equivalent` compares 10/3 with 3: wrong. 435 of 1319, not 436.
FAITHFUL_COT_SINGLE_MEASURED = {"text002_LtM": 32.98}
GPT3_SINGLE = {"6b_finetuning": 21.68, "6b_verification": 39.04, "175b_finetuning": 34.72, "175b_verification": 56.25}


@pytest.fixture(scope="module")
def faithful_cot() -> list[SampleSet]:
    return load_faithful_cot(data=DATA)


@pytest.fixture(scope="module")
def pools(faithful_cot) -> dict[str, list[SampleSet]]:
    """Every pool of the table; the Faithful-CoT ones are cut from the 30-config pool (loaded once)."""
    loaded = {"qwen_math": load_qwen_math(data=DATA), "gpt3": load_gpt3_solutions(data=DATA)}
    for name, (_, _, configs, _) in REFERENCE.items():
        if configs is not None:
            loaded[name] = only(faithful_cot, configs)
    return loaded


def only(sample_sets: list[SampleSet], configs) -> list[SampleSet]:
    """The sets with only the candidates of `configs`, re-indexed in order, as `load_faithful_cot(configs)` does."""
    keep = set(configs)
    out = []
    for s in sample_sets:
        kept = [c for c in s.candidates if f"{c.model}_{c.params['prompt']}" in keep]
        out.append(s.model_copy(update={"candidates": [c.model_copy(update={"index": i}) for i, c in enumerate(kept)]}))
    return out


def accuracy(sample_sets: list[SampleSet], index: int) -> float:
    return 100 * sum(equivalent(s.candidates[index].answer, s.gold) for s in sample_sets) / len(sample_sets)


@pytest.mark.parametrize("name", list(REFERENCE))
def test_pool_reproduces_the_reference_numbers(pools, name):
    problems, k, _, (single, maj, oracle) = REFERENCE[name]
    metrics = pool_metrics(pools[name], MajorityVote())
    assert (metrics["problems"], metrics["k"], metrics["unaggregated"]) == (problems, k, 0)
    measured = {key: round(metrics[key], 2) for key in ("single", "maj", "pass")}
    for key, reference in zip(("single", "maj", "pass"), (single, maj, oracle), strict=True):
        assert abs(measured[key] - reference) <= 1.0, (name, key, measured[key], reference)
        assert measured[key] == MEASURED.get(name, {}).get(key, reference), (name, key, measured[key], reference)


def test_faithful_cot_single_configs(faithful_cot):
    for i, config in enumerate(FAITHFUL_COT_CONFIGS):
        lm, prompt = config.rsplit("_", 1)
        reference = FAITHFUL_COT_SINGLE[lm][FAITHFUL_COT_PROMPTS.index(prompt)]
        measured = round(accuracy(faithful_cot, i), 2)
        assert abs(measured - reference) <= 1.0
        assert measured == FAITHFUL_COT_SINGLE_MEASURED.get(config, reference), (config, measured, reference)
    s = faithful_cot[1225]
    candidate = s.candidates[FAITHFUL_COT_CONFIGS.index("text002_LtM")]
    assert (s.gold, candidate.answer, equivalent(candidate.answer, s.gold)) == ("3", "10/3", False)


def test_gpt3_single_systems_equal_the_pools_own_verdicts(pools):
    sets = pools["gpt3"]
    for i, system in enumerate(GPT3_SYSTEMS):
        assert round(accuracy(sets, i), 2) == GPT3_SINGLE[system]
        assert all(equivalent(s.candidates[i].answer, s.gold) == s.candidates[i].params["is_correct"] for s in sets)


def test_qwen_math_against_its_sympy_scores_and_reward_model(pools):
    """The README's second Qwen row grades with the pool's own sympy `score`: single 91.00, pass@8 96.00, RM@8
    (best of 8 by the Qwen2.5-Math-RM-72B `pred_score`) 94.00. We measure 91.12, 97.00 and 95.00: the one
    candidate where `score` and `equivalent` disagree is idx 72, gold "10{,}000" (LaTeX's thousands separator)
    and answer "10000", which sympy's normaliser misses; it is also the reward model's pick there."""
    sets = pools["qwen_math"]
    disagree = [
        (s.id, s.gold, c.answer)
        for s in sets
        for c in s.candidates
        if equivalent(c.answer, s.gold) != c.params["score"]
    ]
    assert disagree == [("math-test-72", "10{,}000", "10000")]
    by_score = sum(c.params["score"] for s in sets for c in s.candidates) / 8
    assert by_score == 91.0
    rm = pool_metrics(sets, BestOfN(score_from_params("pred_score")))
    assert rm["maj"] == 95.0
    picked = BestOfN(score_from_params("pred_score")).invoke(sets[72])
    assert picked.answer == "10000" and sets[72].candidates[picked.support[0]].params["score"] is False


def test_faithful_cot_loader(faithful_cot):
    assert len(faithful_cot) == 1319 and len(FAITHFUL_COT_CONFIGS) == 30
    s = faithful_cot[0]
    assert s.question.startswith("Janet") and s.gold == "18" and s.metadata["problem_id"] == 0
    assert [(c.model, c.params) for c in s.candidates[:2]] == [
        ("code001", {"prompt": "standard"}),
        ("code001", {"prompt": "COT"}),
    ]
    assert {c.model for c in s.candidates} == set(FAITHFUL_COT_LMS)
    gpt4 = load_faithful_cot(configs=reversed(faithful_cot_configs(lms=["gpt4"])), data=DATA)
    assert [c.params["prompt"] for c in gpt4[7].candidates] == list(FAITHFUL_COT_PROMPTS)  # the fixed order
    assert gpt4[7].candidates == only(faithful_cot, faithful_cot_configs(lms=["gpt4"]))[7].candidates
    with pytest.raises(ValueError, match="unknown Faithful-CoT configs"):
        load_faithful_cot(configs=["gpt5_COT"], data=DATA)


def test_faithful_cot_answer_rule():
    assert faithful_cot_answer(18) == "18" and faithful_cot_answer("$5,000") == "$5,000"
    assert faithful_cot_answer("10/3") == "10/3"  # a fraction is numeric here (see text002_LtM above)
    assert faithful_cot_answer("$30.00 - $2.00 = $28.00") == "28.00"
    assert faithful_cot_answer("It is 11,500 dollars") == "11,500"
    assert faithful_cot_answer("[invalid]") is None and faithful_cot_answer("None") is None


def test_gpt3_and_qwen_loaders(pools):
    s = pools["gpt3"][0]
    assert s.gold == "18" and [c.model for c in s.candidates] == list(GPT3_SYSTEMS)
    assert [c.answer for c in s.candidates] == ["26", "224", "4", "18"]
    q = pools["qwen_math"][0]
    assert (q.id, q.gold, len(q.candidates), q.candidates[0].answer) == ("math-test-0", "420", 8, "420")
    assert q.candidates[0].params["pred_score"] == [3.546875] and q.candidates[0].text.startswith("To find")


def test_load_benchmark(tmp_path):
    gsm8k = load_benchmark("gsm8k", data=DATA)
    assert len(gsm8k) == 1319 and gsm8k[0].gold == "18" and not gsm8k[0].candidates
    math500 = load_benchmark("math500", data=DATA)
    assert len(math500) == 500 and math500[0].gold == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert math500[0].metadata["unique_id"] == "test/precalculus/807.json"
    assert len(load_benchmark("math_train", data=DATA)) == 7474
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "1+1?", "answer": "1+1=2\\n#### 2"}\n')
    assert [(s.question, s.gold) for s in load_benchmark(path)] == [("1+1?", "2")]


def test_missing_data_names_the_path_and_the_variable(monkeypatch, tmp_path):
    from training.pools import data_dir

    monkeypatch.setenv("AGGREGATE_GRAPH_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"nowhere.*AGGREGATE_GRAPH_DATA"):
        data_dir()
    with pytest.raises(FileNotFoundError, match="AGGREGATE_GRAPH_DATA"):
        load_qwen_math()


def test_data_is_found_from_the_working_directory(monkeypatch, tmp_path):
    """Without AGGREGATE_GRAPH_DATA, `shared/data` in the working directory or a parent: `<repo>/../shared/data`
    from anywhere in a checkout, wherever the package is installed (tests/test_install.py installs it)."""
    monkeypatch.delenv("AGGREGATE_GRAPH_DATA", raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "repo" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "repo" / "sub")
    assert data_dir() == (tmp_path / "shared" / "data").resolve()


def test_pools_screen_abstentions_by_the_runtimes_rule(faithful_cot):
    """The loaders apply `answers.screen_answer`, as the runtime does: "[invalid]", "None" and sentences such as
    "The answer cannot be determined …" do not vote and keep their reason. This changes seven gpt-3.5-turbo_standard
    candidates whose last number used to count (all wrong) and no reference number above."""
    reasons = {}
    for s in faithful_cot:
        for c in s.candidates:
            if c.abstention is not None:
                assert c.answer is None
                reasons[c.abstention] = reasons.get(c.abstention, 0) + 1
    assert (reasons["[invalid]"], reasons["none"], reasons["cannot be determined"]) == (941, 67, 62)
    legacy = load_faithful_cot(faithful_cot_configs(lms=["gpt-3.5-turbo"], prompts=["standard"]), DATA, abstentions=())
    column = FAITHFUL_COT_CONFIGS.index("gpt-3.5-turbo_standard")
    changed = {
        i: (legacy[i].candidates[0].answer, s.candidates[column].abstention)
        for i, s in enumerate(faithful_cot)
        if s.candidates[column].answer != legacy[i].candidates[0].answer
    }
    assert changed == {
        157: ("40", "cannot be determined"),
        162: ("20", "cannot be determined"),
        257: ("10", "cannot be determined"),
        181: ("5", "don't know"),  # "… we don't know how many … at least r red roses by 5 pm": 5 pm is no answer
        750: ("4", "impossible to calculate"),
        818: ("20", "cannot be determined"),
        1218: ("-7", "impossible to calculate"),
    }
    assert not any(equivalent(answer, faithful_cot[i].gold) for i, (answer, _) in changed.items())


def test_gsm8k_test_15_abstentions_do_not_vote(faithful_cot):
    """GSM8K test problem 15 (gold 125): gpt-3.5-turbo_standard answers "The answer cannot be determined as we do
    not have enough information …"; it abstains with that reason, and the vote is 125."""
    s = faithful_cot[15]
    result = MajorityVote().invoke(s)
    assert (s.gold, result.answer, result.votes["125"]) == ("125", "125", 13.0)
    column = FAITHFUL_COT_CONFIGS.index("gpt-3.5-turbo_standard")
    assert result.details["abstentions"][str(column)] == "cannot be determined"
    assert s.candidates[column].answer is None and s.candidates[column].text.startswith("The answer cannot")
    assert sorted(result.details["abstentions"].values()).count("[invalid]") == 6


def test_zeroeval_loads_only_the_build_split_and_grades_with_the_runtime_reader():
    sets = load_zeroeval("build")
    assert len(sets) == 180 and all(s.metadata["problem_id"] % 4 == 1 for s in sets)
    assert all(len(s.candidates) > 35 for s in sets)  # one reply per model of the 43 (a few missing)
    first = next(s for s in sets if s.metadata["problem_id"] == 1)
    athene = next(c for c in first.candidates if c.model == "Athene-70B")
    assert athene.answer == "7" and athene.params["correct"] is False and first.gold == "18"  # its JSON `answer`
    accuracy = {
        model: sum(c.params["correct"] for s in sets for c in s.candidates if c.model == model) / len(sets)
        for model in ("o1-mini-2024-09-12", "gemma-2-2b-it")
    }
    assert accuracy["o1-mini-2024-09-12"] > 0.85 and accuracy["gemma-2-2b-it"] < 0.1  # the card's 89% and 4%
    with pytest.raises(ValueError, match="split must be one of build, report"):
        load_zeroeval("even")
