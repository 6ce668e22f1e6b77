"""The SSA shipped inside the package: a LoRA adapter on the embedded SmolLM2, loaded offline, choosing among
real sample sets' answers with calibrated probabilities, and reachable by name from the registry, the CLI and the
demo.

Its accuracy is measured by `make ssa-eval` (the model card's tables), not here: these tests check that what ships
loads, renders as it was trained, decides real sets with one letter, and picks among the candidates' answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aggregate_graph import Candidate, SampleSet
from aggregate_graph.aggregators import MajorityVote, SSAChoiceAggregator, SSAStyle, WeightedVote
from aggregate_graph.aggregators.registry import load_aggregator
from aggregate_graph.aggregators.trained import SHIPPED_SSA, load_trained_aggregator
from aggregate_graph.aggregators.weighted import MIN_WEIGHT
from aggregate_graph.cli.demo import load_demo_sets
from aggregate_graph.cli.demo import main as demo_main
from aggregate_graph.local.chat_model import cpu_has_bf16
from aggregate_graph.reading.answers import equivalent
from aggregate_graph.reading.kinds import VOTE_CLASSES

BUILD_CONFIG = Path(__file__).parents[1] / "training" / "configs" / "ssa_choice_build.yaml"


def test_the_shipped_folder_is_small_and_records_how_it_renders() -> None:
    adapter = SHIPPED_SSA / "adapter_model.safetensors"
    assert adapter.stat().st_size <= 25 * 2**20
    record = json.loads((SHIPPED_SSA / "aggregator.json").read_text())
    build = yaml.safe_load(BUILD_CONFIG.read_text())
    # The render settings are the build config's: the runtime renders exactly what training rendered.
    assert SSAStyle.from_dict(record["style"]) == SSAStyle(
        **{name: build[name] for name in SSAStyle.__dataclass_fields__ if name in build}
    )
    assert record["format"] == "ssa-choice" and record["k"] == build["k_max"]
    assert record["temperature"] > 0 and 0 <= record["threshold"] <= 1  # fit on validation by `calibrate`
    assert WeightedVote.load(SHIPPED_SSA / record["weights"]).method == "supervised"
    card = (SHIPPED_SSA / "README.md").read_text()
    assert "make ssa-model" in card and "make ssa-eval" in card and "reserved" in card


def test_the_shipped_vote_weighs_unknown_sources_by_vote_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """Your own model's candidates are sources the shipped weights never saw: they vote by what their work looks
    like (fit on the training problems): work whose equations hold, the more of them checked the more (a program's,
    checked by none, in between), over work with an arithmetic slip and over a bare answer."""
    vote = WeightedVote.load(SHIPPED_SSA / "weights.json")
    w = vote.kind_weights
    assert set(w) == set(VOTE_CLASSES) and w["checked"] > w["unchecked"] > w["checked_once"] > MIN_WEIGHT
    assert w["bare"] == w["slipped"] == MIN_WEIGHT
    assert min(vote.source_weights.values()) > 0  # a source worse than chance still counts for its own answer
    worked = "She buys 3 bags of 4 apples.\nSo she has 3 * 4 = 12 apples.\nThe answer is 12."
    mine = [("The answer is 5.", "5"), ("The answer is 5.", "5"), (worked, "12")]
    one_model = SampleSet(question="q", candidates=[
        Candidate(index=i, text=t, answer=a, model="my-model") for i, (t, a) in enumerate(mine)])  # fmt: skip
    assert vote.invoke(one_model).answer == "12"
    slipped = worked.replace("3 * 4 = 12", "3 * 4 = 13").replace("is 12", "is 13")
    sloppy = SampleSet(question="q", candidates=[
        Candidate(index=i, text=t, answer=a, model="my-model")
        for i, (t, a) in enumerate([(slipped, "13"), (slipped, "13"), (worked, "12")])])  # fmt: skip
    assert MajorityVote().invoke(sloppy).answer == "13" and vote.invoke(sloppy).answer == "12"
    # dtype="auto" takes bfloat16 only where the CPU computes it natively; a process held to AVX2 does not.
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert not cpu_has_bf16()


def test_shipped_ssa_decides_real_sets_with_calibrated_choices(smollm2_dir: Path) -> None:
    aggregator = load_trained_aggregator(SHIPPED_SSA, base_model=str(smollm2_dir))
    assert isinstance(aggregator, SSAChoiceAggregator) and aggregator.weights is not None
    asked = 0
    for sample_set in load_demo_sets():  # real GSM8K problems the model was not trained on
        result = aggregator.invoke(sample_set)
        assert result.method == "ssa" and result.support
        assert any(equivalent(result.answer, c.answer) for c in sample_set.candidates)  # never an invented answer
        if result.details["parse_status"] == "skipped":
            assert result.usage is None  # one answer: no model call
            continue
        asked += 1
        assert result.details["parse_status"] in ("parsed", "deferred"), result.details
        probs = result.details["choice_probs"]
        assert sum(probs.values()) == pytest.approx(1, abs=1e-3) and result.details["choice"] in probs
        confident = result.details["confidence"] >= aggregator.threshold and aggregator.threshold < 1  # 1: the vote
        assert result.details["deferred"] is not confident
        assert result.usage is not None and result.usage.completion_tokens <= 2
    assert asked >= 4  # the demo's sets disagree: most reach the model


def test_registry_cli_and_demo_use_the_shipped_ssa(serve, capsys: pytest.CaptureFixture[str]) -> None:
    assert isinstance(load_aggregator("ssa"), SSAChoiceAggregator)
    server = serve(["Six sevens make 42.\n#### 42", "#### 41", "The answer is 42."])
    done = subprocess.run(
        [sys.executable, "-m", "aggregate_graph.cli", "ask", "What is 6 times 7?", "--n", "3", "--model", "m",
         "--base-url", server.base_url, "--aggregator", "ssa", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    aggregation = json.loads(done.stdout)["aggregation"]
    assert aggregation["method"] == "ssa" and aggregation["details"]["parse_status"] in ("parsed", "deferred")
    assert aggregation["answer"] in ("42", "41")
    assert demo_main([]) == 0
    printed = capsys.readouterr().out
    summary = printed.strip().splitlines()[-1]
    assert "trained SSA right" in summary and "weighted vote right" in summary
    if json.loads((SHIPPED_SSA / "aggregator.json").read_text())["threshold"] >= 1:  # calibrated to keep the vote
        assert "(threshold 1: the vote always does)" in printed and "model unsure" not in printed
