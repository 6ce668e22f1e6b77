"""The open registry: an aggregator of your own, registered once (`register`, or an installed package's entry
point), is taken by name on every surface — the library, the graph, `wrap_openai`, the proxy and the CLI — and each
shipped aggregator is selectable by name, built from the options its class declares."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from openai import OpenAI

from aggregate_graph import Aggregation, Aggregator, Candidate, SampleSet, build_aggregate_graph, sample_sets_from
from aggregate_graph.aggregators import BestOfN, Medoid, RecursiveAggregator, StructuredVote
from aggregate_graph.aggregators import registry as registry_module
from aggregate_graph.aggregators.registry import aggregator_names, load_aggregator, register, registration
from aggregate_graph.errors import AggregatorOptionError
from aggregate_graph.openai_compat import RequestError, wrap_openai
from tests.conftest import chat
from tests.test_proxy import CLIENT_KEY, proxy_for
from tests.test_wrap_openai import QUESTION, client, math_replies  # the upstream answers 42, 42, 41

REPO = Path(__file__).resolve().parents[1]


class LastWord(Aggregator):
    """A user's aggregator: the last successful candidate decides (`first=True`: the first)."""

    name = "last_word"

    def __init__(self, first: bool = False) -> None:
        self.first = first

    def aggregate(self, sample_set: SampleSet, config: RunnableConfig | None = None) -> Aggregation:
        chosen = sample_set.succeeded[0 if self.first else -1]
        return Aggregation(method=self.name, answer=chosen.answer, text=chosen.text, support=[chosen.index])


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test end with it."""
    aggregator_names()  # the shipped ones are registered first
    monkeypatch.setattr(registry_module, "_registry", dict(registry_module._registry))


def three(*answers: str, **params: Any) -> SampleSet:
    candidates = [Candidate(index=i, text=f"#### {a}", answer=a, params=params) for i, a in enumerate(answers)]
    return SampleSet(question="What is 6 times 7?", candidates=candidates)


def test_a_registered_aggregator_is_taken_by_name_everywhere(serve, scratch_registry) -> None:
    assert register(LastWord) is LastWord and "last_word" in aggregator_names()
    assert registration("last_word").options == {"first"}  # read from the class's own signature
    assert load_aggregator("last_word", first=True).first

    upstream = serve(math_replies)
    graph = build_aggregate_graph(chat(upstream), n=3, aggregator="last_word")
    result = graph.invoke({"messages": [HumanMessage("6×7?")]})["sample_set"].aggregation
    assert (result.method, result.answer) == ("last_word", "41")  # the last candidate; majority would say 42

    wrapped = wrap_openai(client(upstream), n=3)  # default majority; a request names the user's method
    response = wrapped.chat.completions.create(
        model="gpt-test", messages=QUESTION, extra_body={"aggregation": {"method": "last_word"}}
    )
    assert sample_sets_from(response)[0].aggregation.answer == "41"

    with proxy_for(upstream, n=3, aggregator="last_word") as url:
        proxied = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        answered = proxied.chat.completions.create(model="gpt-test", messages=QUESTION)
        ids = [m.id for m in proxied.models.list()]
    assert sample_sets_from(answered)[0].aggregation.method == "last_word" and "last_word/test-model" in ids


def test_register_takes_a_function_and_refuses_a_taken_name(scratch_registry) -> None:
    def first_word(*, reverse: bool = False) -> LastWord:
        return LastWord(first=not reverse)

    register("first_word", first_word)
    assert load_aggregator("first_word").invoke(three("42", "41", "41")).answer == "42"
    with pytest.raises(ValueError, match=r"aggregator 'majority' is registered already; .*replace=True"):
        register("majority", first_word)
    register("majority", first_word, replace=True)
    assert isinstance(load_aggregator("majority"), LastWord)
    with pytest.raises(AggregatorOptionError, match=r"'first_word' takes no weights= \(its options: reverse\)"):
        load_aggregator("first_word", weights="w.json")
    with pytest.raises(TypeError, match="register"):
        register("nameless")  # type: ignore[call-overload]


def test_every_shipped_aggregator_is_built_by_name_from_its_options(serve) -> None:
    votes = three("42", "41", "42")
    assert isinstance(load_aggregator("medoid"), Medoid) and load_aggregator("medoid").invoke(votes).answer == "42"
    json_set = SampleSet(question="q", candidates=[Candidate(index=i, text=t) for i, t in enumerate(['{"a": 1}'] * 2)])
    assert isinstance(load_aggregator("structured_vote"), StructuredVote)
    assert load_aggregator("structured_vote").invoke(json_set).answer == '{"a":1}'

    rewarded = SampleSet(
        question="q",
        candidates=[Candidate(index=i, text=f"#### {a}", answer=a, params={"reward": r}) for i, (a, r) in
                    enumerate([("42", 0.1), ("41", 0.9), ("42", 0.2)])],
    )  # fmt: skip
    best = load_aggregator("best_of_n", scorer="reward")  # a params key: the reward stored on each candidate
    assert isinstance(best, BestOfN) and best.invoke(rewarded).answer == "41"
    assert load_aggregator("best_of_n", scorer=lambda s, c: -int(c.answer)).invoke(rewarded).answer == "41"
    with pytest.raises(AggregatorOptionError, match="aggregator 'best_of_n' needs scorer="):
        load_aggregator("best_of_n")

    refiner = serve(["Recomputing: \\boxed{41}"] * 12)
    recursive = load_aggregator("recursive", model=chat(refiner), rounds=1, subset=2, population=2)
    assert isinstance(recursive, RecursiveAggregator) and recursive.invoke(votes).answer == "41"
    assert refiner.calls == 2  # population × rounds refinements by the base, gsr over the given model


def test_options_a_name_does_not_take_or_needs_are_named(tmp_path: Path) -> None:
    with pytest.raises(AggregatorOptionError, match=r"aggregator 'majority' takes no weights= \(its options: none\)"):
        load_aggregator("majority", weights=tmp_path / "w.json")
    with pytest.raises(AggregatorOptionError, match="aggregator 'gsr' asks one model: model= or base_url=, not"):
        load_aggregator("gsr", model=object(), base_url="http://127.0.0.1:9/v1")
    assert load_aggregator("majority", weights=None).name == "majority"  # None is "not given"
    with pytest.raises(AggregatorOptionError) as raised:
        load_aggregator("best_of_n")
    assert (raised.value.aggregator, raised.value.option, raised.value.missing) == ("best_of_n", "scorer", True)


def test_a_method_the_proxy_cannot_give_options_to_is_not_offered(serve, scratch_registry) -> None:
    upstream = serve(math_replies)
    with proxy_for(upstream, n=3) as url:
        ids = [m.id for m in OpenAI(base_url=url, api_key=CLIENT_KEY).models.list()]
    assert "medoid/test-model" in ids and "recursive/test-model" in ids
    assert "weighted/test-model" in ids and "best_of_n/test-model" not in ids  # the shipped weights / no scorer
    wrapped = wrap_openai(client(upstream), n=3)
    with pytest.raises(RequestError, match="method 'best_of_n': aggregator 'best_of_n' needs scorer="):
        wrapped.chat.completions.create(
            model="m", messages=QUESTION, extra_body={"aggregation": {"method": "best_of_n"}}
        )
    with pytest.raises(ValueError, match="aggregator='best_of_n' needs scorer=, which neither wrap_openai nor"):
        wrap_openai(client(upstream), aggregator="best_of_n")


def test_an_installed_package_registers_through_its_entry_point(serve, tmp_path: Path) -> None:
    """A plugin package, installed (its dist-info on the path), adds a name the CLI takes with no code of ours."""
    (tmp_path / "shortest_answer.py").write_text(textwrap.dedent('''
        from aggregate_graph import Aggregation, Aggregator

        class ShortestAnswer(Aggregator):
            def aggregate(self, sample_set, config=None):
                chosen = min((c for c in sample_set.succeeded if c.answer), key=lambda c: len(c.text))
                return Aggregation(method="shortest", answer=chosen.answer, text=chosen.text, support=[chosen.index])
    '''))  # fmt: skip
    dist = tmp_path / "shortest_answer-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shortest-answer\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[aggregate_graph.aggregators]\nshortest = shortest_answer:ShortestAnswer\n")
    server = serve(["Six sevens are 42, so the answer is 42.\n#### 42", "#### 41", "Six sevens: 42.\n#### 42"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-m", "aggregate_graph.cli", "ask", "What is 6 times 7?", "--n", "3", "--model", "test-model",
         "--base-url", server.base_url, "--aggregator", "shortest"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("Final answer: 41")  # the shortest text; majority would say 42


def test_cli_names_the_flag_an_aggregator_does_not_take_or_needs(tmp_path: Path) -> None:
    from tests.test_cli import run

    weights = tmp_path / "w.json"
    weights.write_text("{}")
    done = run("ask", "q", "--model", "test-model", "--base-url", "http://127.0.0.1:9/v1", "--aggregator-weights",
               str(weights))  # fmt: skip
    assert done.returncode == 2
    assert "error: --aggregator-weights does not apply to --aggregator majority" in done.stderr
    needs = run("ask", "q", "--model", "test-model", "--base-url", "http://127.0.0.1:9/v1", "--aggregator", "gsr")
    assert needs.returncode == 2 and "error: --aggregator gsr needs --aggregator-base-url URL" in needs.stderr


def test_an_option_a_models_aggregator_does_not_take_is_named_not_a_type_error(serve, tmp_path: Path) -> None:
    from tests.test_cli import run

    with pytest.raises(AggregatorOptionError, match=r"aggregator 'gsr' takes no weights= \(its options: .*rounds"):
        load_aggregator("gsr", model=object(), weights=tmp_path / "w.json")
    with pytest.raises(AggregatorOptionError, match="aggregator 'ssa' takes no threshold="):
        load_aggregator("ssa", model=object(), threshold=0.5)  # the shipped SSA's calibration, not a prompt's
    assert load_aggregator("ssa", model=object(), k=None).k is None  # None is a value here: every candidate
    weights = tmp_path / "w.json"
    weights.write_text("{}")
    done = run("ask", "q", "--model", "test-model", "--base-url", "http://127.0.0.1:9/v1", "--aggregator", "gsr",
               "--aggregator-base-url", "http://127.0.0.1:9/v1", "--aggregator-weights", str(weights))  # fmt: skip
    assert done.returncode == 2 and "error: --aggregator-weights does not apply to --aggregator gsr" in done.stderr


def test_a_trained_folder_reads_its_weights_only_where_its_format_does(tmp_path: Path) -> None:
    """`aggregate-train build --weights` records a weights file for any format; a GSR folder loads without it."""
    import json

    from aggregate_graph.aggregators import GSRAggregator, WeightedVote
    from aggregate_graph.aggregators.trained import load_trained_aggregator

    WeightedVote({"m": 2.0}).save(tmp_path / "weights.json")
    record = {"format": "gsr", "k": 5, "style": {"max_candidate_tokens": 256}, "weights": "weights.json"}
    (tmp_path / "aggregator.json").write_text(json.dumps(record))
    loaded = load_trained_aggregator(tmp_path, model=object(), k=3)
    assert isinstance(loaded, GSRAggregator) and (loaded.k, loaded.max_candidate_tokens) == (3, 256)
    with pytest.raises(AggregatorOptionError, match="takes no temperature="):
        load_trained_aggregator(tmp_path, model=object(), temperature=2.0)


def test_structured_output_takes_the_methods_that_vote_on_json(serve) -> None:
    upstream = serve(['{"answer": 42}', '{"answer": 42}', '{"answer": 41}'])
    wrapped = wrap_openai(client(upstream), n=3)
    json_object = {"type": "json_object"}
    for method in ("majority", "structured_vote"):
        response = wrapped.chat.completions.create(
            model="m", messages=QUESTION, response_format=json_object, extra_body={"aggregation": {"method": method}}
        )
        assert response.choices[0].message.content == '{"answer": 42}'
    with pytest.raises(RequestError, match="method 'medoid' does not apply \\(use majority or structured_vote,"):
        wrapped.chat.completions.create(
            model="m", messages=QUESTION, response_format=json_object, extra_body={"aggregation": {"method": "medoid"}}
        )
