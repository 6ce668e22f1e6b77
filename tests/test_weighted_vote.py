"""WeightedVote: per-source reliability fit with labels (gold) or without (Dawid–Skene EM), saved as JSON, and
its gain over majority vote on the real Faithful-CoT pool (fit and scored on disjoint unreserved problems)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import MajorityVote, WeightedVote, source_of
from aggregate_graph.aggregators.fitting import fit_weighted_vote
from aggregate_graph.aggregators.weighted import MIN_WEIGHT
from aggregate_graph.reading.answers import equivalent
from aggregate_graph.reading.kinds import VOTE_CLASSES, content_kind, vote_class
from training.cli import main as train_cli
from training.data import one_model
from training.evaluate import subset
from training.pools import is_reserved, load_faithful_cot, reserved_questions
from training.report import ReportConfig, report


def answered(gold: str | None, answers: dict[str, str | None]) -> SampleSet:
    candidates = [Candidate(index=i, text=f"#### {a}", answer=a, model=m) for i, (m, a) in enumerate(answers.items())]
    return SampleSet(question="q", gold=gold, candidates=candidates)


def history(problems: int = 30, seed: int = 0, gold: bool = True) -> list[SampleSet]:
    """`good`, `also_good` and `third` are right; `noisy_b` and `noisy_c` are wrong, each in its own way."""
    rng = random.Random(seed)
    sets = []
    for p in range(problems):
        right = str(p)
        noise = {"noisy_b": str(1000 + rng.randrange(50)), "noisy_c": str(2000 + rng.randrange(50))}
        sets.append(answered(right if gold else None, {"good": right, "also_good": right, "third": right, **noise}))
    return sets


# The hard case: the two unreliable sources happen to agree, against the reliable one.
OUTVOTED = answered("7", {"good": "7", "noisy_b": "8", "noisy_c": "8"})


@pytest.mark.parametrize("gold", [True, False], ids=["supervised", "unsupervised"])
def test_learned_weights_overrule_an_unreliable_majority(gold: bool) -> None:
    vote = fit_weighted_vote(history(gold=gold))
    assert vote.method == ("supervised" if gold else "unsupervised")
    assert vote.source_weights["good"] > vote.default_weight > vote.source_weights["noisy_b"]
    assert MajorityVote().invoke(OUTVOTED).answer == "8"
    result = vote.invoke(OUTVOTED)
    assert result.answer == "7" and result.method == "weighted" and result.support == [0]


@pytest.mark.parametrize("gold", [True, False], ids=["supervised", "unsupervised"])
def test_a_source_worse_than_chance_still_votes_for_its_most_common_answer(gold: bool) -> None:
    """`noisy_b` is always wrong: its log-odds are negative, and unfloored, a set of its samples alone would vote
    for the answer it gave least often."""
    vote = fit_weighted_vote(history(gold=gold))
    assert vote.source_weights["noisy_b"] == MIN_WEIGHT
    alone = SampleSet(question="q", candidates=[
        Candidate(index=i, text=f"#### {a}", answer=a, model="noisy_b") for i, a in enumerate("334")])  # fmt: skip
    assert vote.invoke(alone).answer == "3"


def test_supervision_is_chosen_by_gold_and_can_be_forced() -> None:
    with pytest.raises(ValueError, match="needs sample sets with `gold`"):
        fit_weighted_vote(history(gold=False), supervised=True)
    assert fit_weighted_vote(history(gold=True), supervised=False).method == "unsupervised"
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_weighted_vote([answered("1", {"a": None})])
    with pytest.raises(ValueError, match="spread must be positive"):
        fit_weighted_vote(history(), spread=0)


def test_save_load_round_trip_and_unseen_sources(tmp_path: Path) -> None:
    vote = fit_weighted_vote(history())
    path = vote.save(tmp_path / "w" / "weights.json")
    loaded = WeightedVote.load(path)
    assert loaded.source_weights == pytest.approx(vote.source_weights)
    assert loaded.default_weight == pytest.approx(vote.default_weight) and loaded.method == "supervised"
    assert loaded.invoke(OUTVOTED).answer == "7"
    assert loaded.kind_weights == pytest.approx(vote.kind_weights) and set(loaded.kind_weights) == {"bare"}
    # A set of sources never seen in fitting, all of one content kind, is decided as majority vote decides it.
    stranger = answered("1", {"x": "1", "y": "2", "z": "2"})
    assert loaded.weight_of(stranger.candidates[0]) == loaded.kind_weights["bare"]
    assert loaded.invoke(stranger).answer == MajorityVote().invoke(stranger).answer == "2"
    assert path.stat().st_size < 10_000


def worked(answer: str) -> str:
    return f"She buys 3 bags of 4 apples each.\nSo she has 3 * 4 = 12 apples.\nThe answer is {answer}."


def test_unseen_sources_are_weighed_by_what_their_work_looks_like(tmp_path: Path) -> None:
    """One model sampled n times (every candidate the same unknown source): kind weights fit beside the sources
    let one worked solution outvote two bare answers, while a set of one kind stays a plain majority vote —
    even of bare answers, whose weight is kept positive though they are mostly wrong."""
    rng = random.Random(0)
    sets = []
    for p in range(40):  # bare answers are mostly wrong, worked ones mostly right
        bare = [str(p) if rng.random() < 0.2 else str(900 + rng.randrange(99)) for _ in range(2)]
        texts = [(f"The answer is {a}.", a) for a in bare] + [(worked(str(p)), str(p))]
        sets.append(SampleSet(question=f"q{p}", gold=str(p), candidates=[
            Candidate(index=i, text=t, answer=a, model="logged") for i, (t, a) in enumerate(texts)]))  # fmt: skip
    vote = WeightedVote.load(fit_weighted_vote(sets).save(tmp_path / "w.json"))
    assert vote.kind_weights["checked_once"] > 1 > vote.kind_weights["bare"] > 0  # one equation, which holds
    mine = [("The answer is 5.", "5"), ("The answer is 5.", "5"), (worked("12"), "12")]
    one_model = SampleSet(question="q", candidates=[
        Candidate(index=i, text=t, answer=a, model="my-own-model") for i, (t, a) in enumerate(mine)])  # fmt: skip
    assert MajorityVote().invoke(one_model).answer == "5" and vote.invoke(one_model).answer == "12"
    all_bare = answered(None, {"m1": "5", "m2": "5", "m3": "6"})
    assert vote.invoke(all_bare).answer == "5"
    without_kinds = fit_weighted_vote(sets, kinds=False)
    assert without_kinds.kind_weights == {} and without_kinds.invoke(one_model).answer == "5"


def program(answer: str) -> str:
    return f"bags = 3\napples_per_bag = 4\nanswer = {answer}"


def steps(answer: str) -> str:
    return f"Q1. How many apples?\n3 * 4 = 12 apples.\nQ2. How many left?\n12 - 2 = 10 apples.\nThe answer is {answer}."


def test_work_is_weighed_by_how_much_of_its_arithmetic_holds_not_by_its_kind() -> None:
    """Work is classed by how many of its equations could be checked (all holding): none (a program), one or two
    and more, whatever its content kind; prose and sub-questions with as much checked arithmetic share a weight,
    and the weights follow each class's reliability in fitting."""
    sets = []
    for p in range(40):  # two checked equations right 90% of the time, one 60%, programs 75%, bare answers 20%
        texts = [steps(str(p) if p % 10 else "-1"), worked(str(p) if p % 5 < 3 else "-2"),
                 program(str(p) if p % 4 else "-4"), f"The answer is {p if p % 5 == 0 else -3}."]  # fmt: skip
        sets.append(SampleSet(question=f"q{p}", gold=str(p), candidates=[
            Candidate(index=i, text=t, answer=t.split()[-1].rstrip("."), model="logged")
            for i, t in enumerate(texts)]))  # fmt: skip
    classes = [vote_class(c) for c in sets[1].candidates]
    assert classes == ["checked", "checked_once", "unchecked", "bare"] and "slipped" in VOTE_CLASSES
    assert [content_kind(c) for c in sets[1].candidates] == ["steps", "prose", "code", "bare"]
    vote = fit_weighted_vote(sets)
    w = vote.kind_weights
    assert w["checked"] > w["unchecked"] > w["checked_once"] > 1 > w["bare"] > 0
    assert 0.8 < vote.kind_reliability["checked"] < 36 / 40  # one model: its rate, drawn a little to the mean
    prose_twice = "She buys 3 bags of 4 apples each, 3 * 4 = 12 apples.\nShe eats 2: 12 - 2 = 10.\nThe answer is 7."
    mine = Candidate(index=0, text=prose_twice, answer="7", model="mine")
    assert content_kind(mine) == "prose" and vote.weight_of(mine) == w["checked"]
    others = [Candidate(index=1, text=steps("9"), answer="9", model="mine"),
              Candidate(index=2, text=program("5"), answer="5", model="mine")]  # fmt: skip
    tie = SampleSet(question="q", candidates=[mine, *others])
    assert vote.invoke(tie).tie == ["7", "9"]  # same class, same weight: majority's tie


def test_a_class_is_credited_with_what_it_adds_over_its_own_models_rate() -> None:
    """A weak model writes mostly arithmetic and a strong one mostly programs: pooled, checked work would look
    worse than unchecked work (its writers are weaker), though within each model it is right more often. The fit
    reads each class at the average model, so your own model's checked work outweighs its unchecked work."""
    sets = []
    for p in range(60):
        weak = [steps(str(p) if p % 10 < 4 else "-1"), program(str(p) if p % 10 < 2 else "-2")] + [
            steps(str(p) if p % 10 < 4 else str(-10 - i)) for i in range(3)]  # fmt: skip
        strong = [steps(str(p) if p % 10 < 9 else "-3")] + [
            program(str(p) if p % 10 < 7 else str(-20 - i)) for i in range(4)]  # fmt: skip
        texts = [("weak", t) for t in weak] + [("strong", t) for t in strong]
        sets.append(SampleSet(question=f"q{p}", gold=str(p), candidates=[
            Candidate(index=i, text=t, answer=t.split()[-1].rstrip("."), model=m, params={"prompt": str(i)})
            for i, (m, t) in enumerate(texts)]))  # fmt: skip
    pooled = {k: sum(equivalent(c.answer, s.gold) for s in sets for c in s.candidates if vote_class(c) == k)
              for k in ("checked", "unchecked")}  # fmt: skip
    assert pooled["checked"] < pooled["unchecked"]  # 150 of 300 right against 180 of 300
    vote = fit_weighted_vote(sets)
    assert vote.kind_weights["checked"] > vote.kind_weights["unchecked"]


def test_slipped_work_weighs_as_slipped_work_whatever_its_source(tmp_path: Path) -> None:
    """Work with a false equation is nearly always wrong, from a reliable source too: each source is fit on its
    work without slips, and a slip weighs as the `slipped` kind; a file fit before the kind existed weighs the
    work by its look."""
    sets = []
    for p in range(40):  # `careful` is right; `sloppy` slips and is wrong, or is right without a slip
        slips = p % 2 == 0
        texts = {"careful": worked(str(p)), "sloppy": slipped_work(str(900 + p)) if slips else worked(str(p)),
                 "bare": f"The answer is {900 + p}."}  # fmt: skip
        sets.append(SampleSet(question=f"q{p}", gold=str(p), candidates=[
            Candidate(index=i, text=t, answer=t.split()[-1].rstrip("."), model=m)
            for i, (m, t) in enumerate(texts.items())]))  # fmt: skip
    vote = fit_weighted_vote(sets)
    assert vote.reliability["sloppy"] > 0.9 and vote.kind_weights["slipped"] == MIN_WEIGHT  # fit on its clean work
    outvoted = SampleSet(question="q", candidates=[
        Candidate(index=0, text=slipped_work("5"), answer="5", model="sloppy"),
        Candidate(index=1, text=worked("6"), answer="6", model="my-own-model")])  # fmt: skip
    assert vote.weight_of(outvoted.candidates[0]) == MIN_WEIGHT and vote.invoke(outvoted).answer == "6"
    stranger = outvoted.candidates[0].model_copy(update={"model": "x"})
    # versions 2 and 3 kept one weight per content kind; version 2 had no `slipped` kind
    per_kind = {k: {"weight": w} for k, w in (("bare", 0.1), ("steps", 1.1), ("prose", 1.2), ("code", 1.3))}
    for version, kinds in ((3, per_kind | {"slipped": {"weight": 0.05}}), (2, per_kind)):
        old_file = vote.to_dict() | {"version": version, "kinds": kinds}
        (tmp_path / "before.json").write_text(json.dumps(old_file), encoding="utf-8")
        old = WeightedVote.load(tmp_path / "before.json")
        assert old.weight_of(stranger) == (0.05 if version == 3 else 1.2)  # version 2: the work by its look
        assert old.weight_of(outvoted.candidates[0]) == (0.05 if version == 3 else old.source_weights["sloppy"])
        assert old.weight_of(outvoted.candidates[1]) == 1.2  # prose, whose equation holds


@pytest.mark.parametrize("gold", [True, False], ids=["supervised", "unsupervised"])
def test_a_fit_on_slipped_work_alone(gold: bool) -> None:
    """Every candidate's work slips: no source keeps work to be fit on, and the pooled default weight is the
    slipped work's."""
    sets = [SampleSet(question=f"q{p}", gold=str(p) if gold else None, candidates=[
        Candidate(index=i, text=slipped_work(str(p + i % 2)), answer=str(p + i % 2), model=f"m{i}")
        for i in range(3)]) for p in range(10)]  # fmt: skip
    vote = fit_weighted_vote(sets)
    assert vote.source_weights == {} and vote.default_weight >= MIN_WEIGHT
    assert vote.invoke(sets[0]).answer == "0"  # two of three: majority among slipped work


def slipped_work(answer: str) -> str:
    return f"She buys 3 bags of 4 apples each.\nSo she has 3 * 4 = 13 apples.\nThe answer is {answer}."


def test_content_kinds_of_real_solutions() -> None:
    """Each Faithful-CoT prompt's solutions (code002, unreserved problems) are mostly of the kind its prompt asks
    for: a bare answer, prose, numbered sub-questions, a program, a commented program (slips aside: a third of
    code002's sub-question walk-throughs have one)."""
    expected = {"standard": "bare", "COT": "prose", "LtM": "steps", "noNL": "code", "NL+SL": "commented_code"}
    sets = [s for s in load_faithful_cot([f"code002_{p}" for p in expected]) if not is_reserved(s)][:200]
    for prompt, kind in expected.items():
        kinds = [content_kind(c, check_arithmetic=False) for s in sets for c in s.candidates
                 if c.params.get("prompt") == prompt]  # fmt: skip
        assert len(kinds) >= 150 and kinds.count(kind) / len(kinds) >= 0.9, (prompt, Counter(kinds).most_common(3))


def test_version_1_weights_files_still_load(tmp_path: Path) -> None:
    data = fit_weighted_vote(history()).to_dict() | {"version": 1}
    del data["kinds"]
    (tmp_path / "v1.json").write_text(json.dumps(data), encoding="utf-8")
    loaded = WeightedVote.load(tmp_path / "v1.json")
    assert loaded.kind_weights == {} and loaded.invoke(OUTVOTED).answer == "7"
    assert loaded.weight_of(Candidate(index=0, text="The answer is 2.", answer="2")) == loaded.default_weight


def test_load_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no WeightedVote weights file"):
        WeightedVote.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        WeightedVote.load(bad)
    bad.write_text(json.dumps({"sources": {}}))
    with pytest.raises(ValueError, match="not a WeightedVote weights file"):
        WeightedVote.load(bad)


def test_source_is_model_plus_params() -> None:
    c = Candidate(index=0, model="gpt4", params={"prompt": "COT", "system_prompt": "You are terse.", "temperature": 1})
    assert source_of(c).startswith("gpt4[prompt=COT,system_prompt=") and source_of(c).endswith(",temperature=1]")
    assert source_of(Candidate(index=0, model="m")) == "m"
    # Per-sample records (a pool's verdict, a reward) are not part of the source: they would leak the label.
    assert source_of(Candidate(index=0, model="m", params={"is_correct": True, "score": 0.9})) == "m"


def _draws(sets: list[SampleSet], k: int, draws: int, seed: int) -> list[SampleSet]:
    rng = random.Random(seed)
    return [
        s.model_copy(update={"candidates": sorted(rng.sample(s.candidates, k), key=lambda c: c.index)})
        for s in sets
        for _ in range(draws)
    ]


def _accuracy(aggregator: MajorityVote, sets: list[SampleSet]) -> float:
    return 100 * sum(equivalent(aggregator.invoke(s).answer, s.gold) for s in sets) / len(sets)


def test_on_real_llm_samples_the_learned_vote_beats_majority() -> None:
    """Faithful-CoT GSM8K (6 OpenAI LMs × 5 prompts): fit on 700 unreserved problems, score k=5 draws of 150
    others. Reserved problems (id % 5 == 0) are never touched."""
    reserved = reserved_questions()
    sets = [s for s in load_faithful_cot() if not is_reserved(s, reserved)]
    assert len(sets) == 1319 - 264
    fit_on, scored = sets[:700], _draws(sets[700:850], k=5, draws=2, seed=0)
    majority = _accuracy(MajorityVote(), scored)
    supervised = _accuracy(fit_weighted_vote(fit_on), scored)
    unsupervised = _accuracy(fit_weighted_vote([s.model_copy(update={"gold": None}) for s in fit_on]), scored)
    assert supervised >= majority + 4 and unsupervised >= majority + 4, (majority, supervised, unsupervised)


def test_on_one_models_real_samples_the_class_weights_beat_majority() -> None:
    """Each LM's own five candidates with sources anonymised (a user's one model, n samples), in three shuffled
    orders each (a tie goes to whichever tied answer comes first; the pool's own order puts the bare answer
    first, which hands majority's ties to the least reliable candidate and doubles the gain): the class weights
    fit on 700 unreserved problems beat majority on 150 others by 1.5 points on average over the four LMs of the
    acceptance, and none falls below it (measured: +3.8, +1.8, +2.4, +0.2)."""
    sets = [s for s in load_faithful_cot() if not is_reserved(s)]
    vote = fit_weighted_vote(sets[:700])
    rng = random.Random(0)
    gains = []
    for lm in ("code002", "text002", "text003", "gpt-3.5-turbo"):
        own = [one_model(s, lm) for s in sets[700:850]]
        assert all(vote.weight_of(c) in vote.kind_weights.values() for c in own[0].candidates)
        drawn = [subset(s, len(s.candidates), rng, shuffle=True) for s in own for _ in range(3)]
        gains.append(_accuracy(vote, drawn) - _accuracy(MajorityVote(), drawn))
    assert sum(gains) / len(gains) >= 1.5 and min(gains) >= 0, gains


def test_weights_step_fits_from_a_runtime_log_without_labels(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(s.model_dump_json() + "\n" for s in history(gold=False)), encoding="utf-8")
    assert train_cli(["weights", "--sample_sets", str(log), "--output", str(tmp_path / "w.json")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == "unsupervised" and summary["sources"] == 5
    assert WeightedVote.load(tmp_path / "w.json").invoke(OUTVOTED).answer == "7"


def test_report_compares_evaluations_pairwise(tmp_path: Path) -> None:
    """Two `evaluate` runs on the same unreserved problems, then `report`: the weighted vote's gain over maj@5
    comes with a paired interval, and a run on other problems is refused."""
    later = tmp_path / "later.jsonl"  # fit on unreserved problems after the first 300, which are scored
    sets = [s for s in load_faithful_cot() if not is_reserved(s)][300:]
    later.write_text("".join(s.model_dump_json() + "\n" for s in sets), encoding="utf-8")
    weights = tmp_path / "w.json"
    assert train_cli(["weights", "--sample_sets", str(later), "--output", str(weights)]) == 0
    common = ["--sample_sets", "faithful_cot", "--problems", "unreserved", "--k", "5", "--draws", "2",
              "--curve", "false", "--bootstrap", "200"]  # fmt: skip
    runs = {"majority": [], "weighted": ["--aggregator", "weighted", "--weights", str(weights)]}
    for name, extra in runs.items():
        assert train_cli(["evaluate", *common, "--limit", "300", "--output_dir", str(tmp_path / name), *extra]) == 0
    table = report(ReportConfig(evaluations=[str(tmp_path / n) for n in runs], reference=str(tmp_path / "majority")))
    row = next(line for line in table.splitlines() if line.startswith("| weighted |"))
    gain = row.split("|")[3].strip()  # "+x.x [low, high]" against maj@5
    assert float(gain.split()[0]) > 0 and float(gain.split("[")[1].split(",")[0]) > 0, table
    assert train_cli(["evaluate", *common, "--limit", "200", "--output_dir", str(tmp_path / "other")]) == 0
    with pytest.raises(ValueError, match="other problems"):
        report(ReportConfig(evaluations=[str(tmp_path / "majority"), str(tmp_path / "other")]))
