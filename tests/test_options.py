"""One options type for every surface: `build_aggregate_graph`, `AggregateNode`, `AggregatingChatModel`,
`AggregationMiddleware` and `wrap_openai` take the same `AggregationOptions` object, or its fields as keywords,
and refuse the same bad option with the same message; the proxy's settings and the CLI's flags map onto it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from openai import OpenAI
from pydantic import ValidationError

from aggregate_graph import (
    AdaptiveSampling,
    AggregateNode,
    AggregatingChatModel,
    AggregationMiddleware,
    build_aggregate_graph,
)
from aggregate_graph.aggregators import MajorityVote, Medoid
from aggregate_graph.cli.main import _options as cli_options
from aggregate_graph.cli.main import parser
from aggregate_graph.openai_compat import sample_sets_from, wrap_openai
from aggregate_graph.openai_compat.proxy_config import ProxyConfig
from aggregate_graph.options import AggregationOptions
from tests.conftest import chat

ASK = {"messages": [HumanMessage("What is 6 times 7?")]}


def surfaces(server: Any) -> dict[str, Callable[..., Any]]:
    return {
        "graph": lambda **kw: build_aggregate_graph(chat(server), **kw),
        "node": lambda **kw: AggregateNode(chat(server), **kw),
        "chat model": lambda **kw: AggregatingChatModel(chat(server), **kw),
        "middleware": lambda **kw: AggregationMiddleware(**kw),
        "wrap_openai": lambda **kw: wrap_openai(OpenAI(base_url=server.base_url, api_key="test", max_retries=0), **kw),
    }


BAD = [
    ({"n": 0}, ValueError, "n must be at least 1, got 0"),
    ({"n": "5"}, TypeError, "n must be an integer, got '5'"),
    ({"n": 600}, ValueError, "n=600 is over the cap of 512 candidates; raise max_n if you really mean it"),
    ({"n": 3, "min_candidates": 4}, ValueError, "min_candidates must be between 1 and n=3, got 4"),
    ({"n": 2, "adaptive": AdaptiveSampling(min_agreeing=3)}, ValueError, "adaptive.min_agreeing=3 can never be"),
    ({"aggregator": "median"}, ValueError, "unknown aggregator 'median'; known: "),
    ({"answer_type": "number"}, ValueError, "answer_type must be one of auto, math, choice, boolean, span"),
    ({"max_concurrency": 0}, ValueError, "max_concurrency: Input should be greater than or equal to 1"),
    ({"n_candidates": 5}, TypeError, "unknown aggregation option 'n_candidates'; the options are n, aggregator, "),
    (
        {"policy": {"max_concurrency": 4}},
        TypeError,
        "unknown policy setting 'max_concurrency'; the settings are timeout_s",
    ),
]


@pytest.mark.parametrize(
    ("bad", "error", "message"), BAD, ids=[next(iter(b)) + str(i) for i, (b, _, _) in enumerate(BAD)]
)
def test_every_surface_refuses_a_bad_option_with_the_same_message(serve, bad, error, message):
    server = serve(["#### 42"])
    seen = {}
    for name, make in surfaces(server).items():
        with pytest.raises(error) as caught:
            make(**bad)
        seen[name] = str(caught.value)
    with pytest.raises(error) as direct:
        AggregationOptions.of(**bad)
    assert set(seen.values()) == {str(direct.value)} and str(direct.value).startswith(message)


def test_every_surface_takes_the_same_options_object(serve):
    server = serve(["#### 42", "#### 41", "#### 42", "#### 42"])
    options = AggregationOptions(n=4, aggregator="majority", fallback=None, answer_type="math")
    model = AggregatingChatModel(chat(server), options=options)
    middleware = AggregationMiddleware(options=options)
    assert model.options is options and middleware.options is options
    assert middleware.aggregating(chat(server)).options is options  # no copy, no second SSA model
    sets = [
        build_aggregate_graph(chat(server), options=options).invoke(ASK)["sample_set"].model_dump(mode="json"),
        AggregateNode(chat(server), options=options).invoke(ASK)["messages"][-1].response_metadata["sample_set"],
        model.invoke("What is 6 times 7?").response_metadata["sample_set"],
    ]
    wrapped = wrap_openai(OpenAI(base_url=server.base_url, api_key="test", max_retries=0), options=options)
    reply = wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is 6 times 7?"}])
    sets.append(sample_sets_from(reply)[0].model_dump(mode="json"))
    assert [s["aggregation"]["answer"] for s in sets] == ["42", "42", "42", "42"]
    assert [len(s["candidates"]) for s in sets] == [4, 4, 4, 4]
    assert {s["metadata"]["answer_type"] for s in sets} == {"math"}


def test_the_proxy_settings_and_the_cli_flags_map_onto_the_options(serve):
    config = ProxyConfig(upstream="http://127.0.0.1:1/v1", n=4, min_candidates=2, answer_type="boolean", settle=False)
    mapped = config.aggregation_options()
    assert (mapped.n, mapped.min_candidates, mapped.answer_type, mapped.settle) == (4, 2, "boolean", False)
    with pytest.raises(ValidationError, match="min_candidates must be between 1 and n=3, got 4"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", n=3, min_candidates=4)
    with pytest.raises(ValidationError, match="policy\n  Extra inputs are not permitted"):  # no silent default
        ProxyConfig(upstream="http://127.0.0.1:1/v1", policy={"use_n": False})
    argv = ["ask", "q", "--n", "3", "--answer-type", "choice", "--temperatures", "0.2", "1.0", "--no-settle"]
    flags = cli_options(parser().parse_args(argv))
    assert (flags.n, flags.answer_type, flags.temperatures, flags.settle) == (3, "choice", (0.2, 1.0), False)
    assert cli_options(parser().parse_args(["ask", "q"])).settle is True


def test_the_chat_model_binds_the_standard_params_to_its_candidates(serve):
    server = serve(["#### 42"])
    model = AggregatingChatModel(chat(server), n=2, temperature=0.3, max_tokens=50, stop=[], timeout=9, max_retries=1)
    assert model.call_options == {"temperature": 0.3, "max_tokens": 50}
    assert (model.options.policy.timeout_s, model.options.policy.max_attempts) == (9, 2)
    model.invoke("What is 6 times 7?")
    sent = {(r["temperature"], r.get("max_completion_tokens", r.get("max_tokens"))) for r in server.requests}
    assert sent == {(0.3, 50)}
    with pytest.raises(TypeError, match="unknown aggregation option 'temprature'"):
        AggregatingChatModel(chat(server), temprature=0.3)


def test_keywords_beside_options_replace_its_fields_and_the_defaults_are_the_documented_ones():
    options = AggregationOptions(n=4, answer_type="boolean")
    changed = AggregationOptions.of(options, n=7)
    assert (changed.n, changed.answer_type, options.n) == (7, "boolean", 4)
    assert AggregationOptions.of(options) is options
    defaults = AggregationOptions()
    assert defaults.n == 5 and isinstance(defaults.aggregator, MajorityVote)
    assert isinstance(defaults.fallback, Medoid) and defaults.answer_type == "auto" and defaults.min_candidates == 1
    with pytest.raises(TypeError, match="options must be an AggregationOptions, got dict"):
        AggregationOptions.of({"n": 3})  # type: ignore[arg-type]
