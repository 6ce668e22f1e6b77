"""`load_aggregator`, the one registry of aggregators by name, and every surface that takes a name: the library,
`aggregate-graph ask`, `wrap_openai` and the proxy — each against real OpenAI-compatible servers on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from openai import OpenAI
from pydantic import ValidationError

from aggregate_graph import (
    AggregateNode,
    AggregatingChatModel,
    AggregationMiddleware,
    Candidate,
    SampleSet,
    build_aggregate_graph,
    extract_answer,
    sample_sets_from,
)
from aggregate_graph.aggregators import GSRAggregator, MajorityVote, SSAAggregator, USCAggregator, WeightedVote
from aggregate_graph.aggregators.fitting import fit_weighted_vote
from aggregate_graph.aggregators.registry import aggregator_names, load_aggregator, resolve_aggregator
from aggregate_graph.openai_compat import wrap_openai
from aggregate_graph.openai_compat.proxy_config import ProxyConfig
from tests.conftest import chat
from tests.test_cli import run
from tests.test_proxy import CLIENT_KEY, proxy_for
from tests.test_wrap_openai import QUESTION, client, math_replies

# Each model-backed aggregator's reply picks the minority answer, 41: an answer majority vote would not give.
MODEL_REPLIES = {
    "ssa": "<think>Answer 2 multiplies correctly.</think> <answer>41</answer>",
    "gsr": "Recomputing, the total is \\boxed{41}.",
    "usc": "The most consistent response is Response 2.",
}
MODEL_CLASSES = {"ssa": SSAAggregator, "gsr": GSRAggregator, "usc": USCAggregator}
Source = tuple[str, dict[str, float]]  # a candidate's model and params: what WeightedVote weighs
GOOD, NOISY = ("good", {}), ("noisy", {})


def candidates_set(*texts: str) -> SampleSet:
    return SampleSet(
        question="What is 6 times 7?",
        candidates=[Candidate(index=i, text=t, answer=extract_answer(t)) for i, t in enumerate(texts)],
    )


def logged(gold: str, votes: list[tuple[Source, str]]) -> SampleSet:
    """A logged sample set with its gold answer: each candidate's source and answer."""
    candidates = [
        Candidate(index=i, text=f"#### {answer}", answer=answer, model=model, params=params)
        for i, ((model, params), answer) in enumerate(votes)
    ]
    return SampleSet(question="q", gold=gold, candidates=candidates)


def save_weights(path: Path, reliable: Source, unreliable: Source) -> Path:
    """Weights fit on hand-made history in which `reliable` is always right and `unreliable` always wrong."""
    history = [logged(str(p), [(reliable, str(p)), (unreliable, str(p + 100))]) for p in range(4)]
    return fit_weighted_vote(history).save(path)


KNOWN = "best_of_n, gsr, majority, medoid, recursive, ssa, structured_vote, usc, weighted"


def test_every_shipped_aggregator_is_registered_by_its_class_name() -> None:
    assert ", ".join(aggregator_names()) == KNOWN


def test_majority_and_weighted_resolve_without_a_model(tmp_path: Path) -> None:
    assert type(load_aggregator("majority")) is MajorityVote
    weighted = load_aggregator("weighted", weights=save_weights(tmp_path / "weights.json", GOOD, NOISY))
    assert isinstance(weighted, WeightedVote) and weighted.method == "supervised"
    # the two unreliable candidates agree on 8; the reliable one's 7 outweighs them
    outvoted = logged("7", [(GOOD, "7"), (NOISY, "8"), (NOISY, "8")])
    assert MajorityVote().invoke(outvoted).answer == "8"
    result = weighted.invoke(outvoted)
    assert result.answer == "7" and result.method == "weighted"
    assert load_aggregator("weighted", weights=weighted) is weighted  # an already loaded vote is taken as it is


@pytest.mark.parametrize("name", sorted(MODEL_REPLIES))
def test_model_aggregators_resolve_over_a_given_model_or_a_served_one(serve, name: str) -> None:
    server = serve([MODEL_REPLIES[name]])
    given = load_aggregator(name, model=chat(server), k=3)
    assert type(given) is MODEL_CLASSES[name] and given.k == 3  # other options reach the aggregator
    result = given.invoke(candidates_set("#### 42", "#### 41", "#### 42"))
    assert (result.method, result.answer, result.details["parse_status"]) == (name, "41", "parsed")
    if name == "ssa":
        return  # ssa at a base_url is the shipped adapter served there: it renders with the shipped settings
    served = load_aggregator(name, base_url=server.base_url, served_model_name="judge", api_key="agg-key")
    assert served.invoke(candidates_set("#### 42", "#### 41", "#### 42")).answer == "41"
    assert server.requests[-1]["model"] == "judge" and server.authorizations[-1] == "Bearer agg-key"


def test_unknown_names_and_missing_inputs_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=rf"unknown aggregator 'median'; known: {KNOWN}$"):
        load_aggregator("median")
    with pytest.raises(ValueError, match="aggregator 'best_of_n' needs scorer="):
        load_aggregator("best_of_n")
    assert load_aggregator("weighted").kind_weights  # without weights=, the shipped ones
    with pytest.raises(ValueError, match="aggregator 'gsr' needs a model"):
        load_aggregator("gsr")


def test_ask_with_weighted_vote_overrules_the_majority(serve, tmp_path: Path) -> None:
    # a pool of two temperatures: 0.2 draws candidates 0 and 2 (answer 42), 1.0 draws candidate 1 (answer 41)
    server = serve(lambda body, _: "#### 41" if body.get("temperature") == 1.0 else "#### 42")
    path = save_weights(
        tmp_path / "weights.json", ("test-model", {"temperature": 1.0}), ("test-model", {"temperature": 0.2})
    )
    ask = ("ask", "What is 6 times 7?", "--n", "3", "--model", "test-model", "--base-url", server.base_url)
    done = run(*ask, "--temperatures", "0.2", "1.0", "--aggregator", "weighted", "--aggregator-weights", str(path))
    assert done.returncode == 0, done.stderr
    assert "Votes (weighted): 41: " in done.stdout
    assert done.stdout.rstrip().endswith("Final answer: 41")

    drawn = server.calls
    no_server = run(*ask, "--aggregator", "usc")
    assert no_server.returncode == 2 and "--aggregator usc needs --aggregator-base-url" in no_server.stderr
    no_scorer = run(*ask, "--aggregator", "best_of_n")  # no flag gives its scorer: not offered
    assert no_scorer.returncode == 2 and "invalid choice: 'best_of_n'" in no_scorer.stderr
    assert server.calls == drawn  # refused before any candidate was drawn
    shipped = run(*ask, "--aggregator", "weighted")  # without --aggregator-weights, the shipped weights
    assert shipped.returncode == 0 and "Votes (weighted): " in shipped.stdout, shipped.stderr


def test_ask_with_a_served_aggregator(serve) -> None:
    upstream, judge = serve(["#### 42", "#### 41", "#### 42"]), serve([MODEL_REPLIES["usc"]])
    done = run(
        "ask", "What is 6 times 7?", "--n", "3", "--model", "test-model", "--base-url", upstream.base_url,
        "--aggregator", "usc", "--aggregator-base-url", judge.base_url, "--aggregator-model", "judge",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Votes (usc)" in done.stdout and done.stdout.rstrip().endswith("Final answer: 41")
    assert [r["model"] for r in judge.requests] == ["judge"]


def test_serve_aggregator_ssa_is_the_shipped_adapter_alone() -> None:
    done = run("serve-aggregator", "ssa", "--adapter", "elsewhere", "--engine", "local")
    assert done.returncode == 2 and "takes no --adapter" in done.stderr


def test_wrap_openai_votes_with_the_weights_file(serve, tmp_path: Path) -> None:
    upstream = serve(math_replies)  # 42, 42, 41
    path = save_weights(tmp_path / "weights.json", ("gpt-test", {}), ("other", {}))
    weight = WeightedVote.load(path).source_weights["gpt-test"]
    wrapped = wrap_openai(client(upstream), n=3, aggregator="weighted", aggregator_weights=path)
    response = wrapped.chat.completions.create(model="gpt-test", messages=QUESTION)
    [sample_set] = sample_sets_from(response)
    assert sample_set.aggregation.method == "weighted" and response.choices[0].message.content
    assert weight > 1 and sample_set.aggregation.votes == pytest.approx({"42": 2 * weight, "41": weight})
    # a copy made with with_options keeps the weights
    copied = wrapped.with_options(timeout=30).chat.completions.create(model="gpt-test", messages=QUESTION)
    assert sample_sets_from(copied)[0].aggregation.method == "weighted"


def test_wrap_openai_refuses_what_it_cannot_build(serve) -> None:
    upstream = serve(math_replies)
    with pytest.raises(ValueError, match="aggregator='best_of_n' needs scorer=, which neither wrap_openai nor"):
        wrap_openai(client(upstream), aggregator="best_of_n")
    with pytest.raises(FileNotFoundError, match="no WeightedVote weights file"):
        wrap_openai(client(upstream), aggregator="weighted", aggregator_weights="/nonexistent/weights.json")
    assert upstream.calls == 0
    wrapped = wrap_openai(client(upstream), n=3)  # a request's `weighted` votes with the shipped weights
    response = wrapped.chat.completions.create(
        model="m", messages=QUESTION, extra_body={"aggregation": {"method": "weighted"}}
    )
    assert sample_sets_from(response)[0].aggregation.method == "weighted"


def test_proxy_answers_with_weighted_vote(serve, tmp_path: Path) -> None:
    upstream = serve(math_replies)
    path = save_weights(tmp_path / "weights.json", ("gpt-test", {}), ("other", {}))
    with proxy_for(upstream, n=3, aggregator="weighted", aggregator_weights=path) as url:
        proxied = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        response = proxied.chat.completions.create(model="gpt-test", messages=QUESTION)
        ids = [m.id for m in proxied.models.list()]
    assert sample_sets_from(response)[0].aggregation.method == "weighted"
    assert "weighted/test-model" in ids


def test_proxy_config_checks_the_aggregator(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="unknown aggregator 'median'"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", aggregator="median")
    with pytest.raises(ValidationError, match="aggregator 'best_of_n' needs scorer=, which the proxy cannot give"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", aggregator="best_of_n")
    assert ProxyConfig(upstream="http://127.0.0.1:1/v1", aggregator="weighted").aggregator == "weighted"
    with pytest.raises(ValidationError, match="no such file"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", aggregator="weighted", aggregator_weights=tmp_path / "none.json")


def test_every_entry_point_that_takes_an_aggregator_takes_its_name(serve, tmp_path: Path) -> None:
    """`build_aggregate_graph`, `AggregateNode`, `AggregatingChatModel` and `AggregationMiddleware` resolve a name
    through `resolve_aggregator` (the registry), once; an unknown name lists the known ones."""
    server = serve(["#### 42", "#### 41", "#### 42"])
    graph = build_aggregate_graph(chat(server), n=3, aggregator="majority", fallback="majority")
    assert graph.invoke({"messages": [HumanMessage("6×7?")]})["sample_set"].aggregation.answer == "42"
    node = AggregateNode(chat(server), n=3, aggregator="majority")
    assert node.invoke({"messages": [HumanMessage("6×7?")]})["messages"][-1].content
    model = AggregatingChatModel(chat(server), n=3, aggregator="majority", fallback="majority")
    assert isinstance(model.options.aggregator, MajorityVote) and isinstance(model.options.fallback, MajorityVote)
    middleware = AggregationMiddleware(n=3, aggregator="majority")
    assert isinstance(middleware.options.aggregator, MajorityVote)
    weights = save_weights(tmp_path / "weights.json", GOOD, NOISY)
    assert isinstance(resolve_aggregator(load_aggregator("weighted", weights=weights)), WeightedVote)
    assert resolve_aggregator(None) is None

    known = f"unknown aggregator 'median'; known: {KNOWN}"
    for make in (
        lambda: build_aggregate_graph(chat(server), aggregator="median"),
        lambda: AggregateNode(chat(server), aggregator="median"),
        lambda: AggregatingChatModel(chat(server), aggregator="median"),
        lambda: AggregationMiddleware(aggregator="median"),
        lambda: build_aggregate_graph(chat(server), fallback="median"),
    ):
        with pytest.raises(ValueError, match=known):
            make()
    with pytest.raises(ValueError, match=r"aggregator 'best_of_n' needs scorer="):
        build_aggregate_graph(chat(server), aggregator="best_of_n")  # a name that needs more than its name
    with pytest.raises(TypeError, match=r"aggregator must be an Aggregator .* or one of the names best_of_n, gsr, ma"):
        build_aggregate_graph(chat(server), aggregator=42)
    assert server.calls == 2  # the graph's and the node's: nothing was drawn for a refused option
