"""`serve-aggregator`: the vLLM command line, and the CPU engine as a real HTTP server over the real SmolLM2.

The local server runs in a thread on a free 127.0.0.1 port and is driven by the real `openai` client,
raw HTTP and `ChatOpenAI`. Generations are kept to 8 tokens (SmolLM2 decodes ~10 tokens/s here).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from aggregate_graph.serve import vllm as vllm_engine
from aggregate_graph.serve.local import create_app
from aggregate_graph.serve.vllm import (
    VLLMNotFoundError,
    check_port_free,
    find_vllm,
    max_model_len_for,
    served_names,
    vllm_command,
)
from aggregate_graph.testing import running

pytestmark = pytest.mark.slow

KEY = "sk-serve-test"
PROMPT = [{"role": "user", "content": "Count from 1 to 10."}]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aggregate_graph.cli", "serve-aggregator", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )


# --- the vLLM engine: its command line ---------------------------------------------------------


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "aggregator-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    return folder


@pytest.fixture
def vllm_stand_in(tmp_path: Path) -> Path:
    """A vLLM environment whose python prints the arguments it was started with and the key it was handed."""
    script = tmp_path / "vllm-env" / "bin" / "python"
    script.parent.mkdir(parents=True)
    script.write_text('#!/bin/sh\necho "vllm-stand-in $*"\necho "VLLM_API_KEY=$VLLM_API_KEY"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_vllm_command_without_adapter(model_folder: Path, vllm_stand_in: Path) -> None:
    # the environment's folder, its python and its vllm executable all name the same environment
    for named in (vllm_stand_in.parents[1], vllm_stand_in, vllm_stand_in.parent / "vllm"):
        command = vllm_command(model_folder, host="127.0.0.1", port=8001, dtype="float32", vllm=named)
        assert command == [
            str(vllm_stand_in), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_folder),
            "--served-model-name", "aggregator",
            "--host", "127.0.0.1", "--port", "8001",
            "--max-model-len", "8192",  # max_model_len_for(8) is 10240, capped at the model's own context
            "--dtype", "float32",
            "--enable-prefix-caching",
        ]  # fmt: skip


def test_vllm_command_with_adapter_serves_the_base_under_another_name(
    model_folder: Path, vllm_stand_in: Path, tmp_path: Path
) -> None:
    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 32, "peft_type": "LORA"}))
    command = vllm_command(
        model_folder,
        adapter=adapter,
        served_model_name="ssa",
        host="0.0.0.0",
        port=9000,
        max_model_len=4096,
        dtype="bfloat16",
        vllm=vllm_stand_in,
    )
    assert command == [
        str(vllm_stand_in), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_folder),
        "--served-model-name", "ssa-base",
        "--enable-lora", "--lora-modules", f"ssa={adapter}",
        "--max-lora-rank", "32",  # above vLLM's default of 16, which would refuse the adapter
        "--host", "0.0.0.0", "--port", "9000",
        "--max-model-len", "4096",
        "--dtype", "bfloat16",
        "--enable-prefix-caching",
    ]  # fmt: skip
    assert served_names(command) == ["ssa", "ssa-base"]
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 1024, "peft_type": "LORA"}))
    with pytest.raises(ValueError, match="LoRA rank 1024 is above the largest rank vLLM serves"):
        vllm_command(model_folder, adapter=adapter, vllm=vllm_stand_in)


def test_max_model_len_is_sized_for_k_candidates() -> None:
    assert max_model_len_for(8) == 10240  # 512 question + 8 × 1024 candidates + 1024 answer
    assert max_model_len_for(4, candidate_tokens=300, question_tokens=100, answer_tokens=200) == 2048
    with pytest.raises(ValueError, match="positive"):
        max_model_len_for(0)


def test_missing_vllm_is_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("AGGREGATE_GRAPH_VLLM_ENV", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VLLMNotFoundError, match=r"(?s)No vLLM environment found.*make vllm-env.*--vllm"):
        find_vllm()
    done = cli("--engine", "vllm", "--vllm", str(tmp_path / "nowhere" / "vllm"))
    assert done.returncode == 2
    assert "is not a vLLM environment" in done.stderr and "make vllm-env" in done.stderr


def test_a_taken_port_is_named_before_vllm_starts(model_folder: Path, vllm_stand_in: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli(str(model_folder), "--vllm", str(vllm_stand_in), "--port", str(port))
    assert done.returncode == 2
    assert f"error: port {port} on 127.0.0.1 is taken" in done.stderr and "--port" in done.stderr
    assert "vllm-stand-in" not in done.stdout  # nothing was started


def test_cli_starts_vllm_with_the_key_in_its_environment(model_folder: Path, vllm_stand_in: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    flags = ("--vllm", str(vllm_stand_in), "--port", str(port))
    done = cli(str(model_folder), *flags, "--api-key-env", "SERVER_KEY", env={"SERVER_KEY": "secret"})
    # the stand-in exits at once, never ready: the CLI says so and fails
    assert done.returncode == 1 and "exited with status 0 before it was ready" in done.stderr
    assert done.stdout.startswith(f"vllm-stand-in -m vllm.entrypoints.openai.api_server --model {model_folder} ")
    argv_line, env_line = done.stdout.splitlines()
    assert f"--port {port}" in argv_line and "secret" not in argv_line  # never on vLLM's argv (ps shows it)
    assert env_line == "VLLM_API_KEY=secret" and "secret" not in done.stderr  # handed over in its environment
    key_file = model_folder.parent / "key"
    key_file.write_text("secret\n", encoding="utf-8")
    from_file = cli(str(model_folder), *flags, "--api-key-file", str(key_file))
    assert from_file.stdout.splitlines()[1] == "VLLM_API_KEY=secret"  # the file's key, stripped


STAND_IN_SERVER = """#!{python}
import signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Health)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # vLLM shuts down on SIGTERM
server.serve_forever()
"""


def test_cli_says_ready_once_vllm_answers_and_a_sigterm_stops_both(model_folder: Path, tmp_path: Path) -> None:
    stand_in = tmp_path / "env" / "bin" / "python"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text(STAND_IN_SERVER.format(python=sys.executable))
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "aggregate_graph.cli", "serve-aggregator", str(model_folder)]
    process = subprocess.Popen(
        [*command, "--vllm", str(stand_in.parents[1]), "--port", str(port)], stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(2)]
        assert lines[1] == f"ready: http://127.0.0.1:{port}/v1 (models: aggregator)\n", lines
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0  # a requested stop is a clean exit
        check_port_free("127.0.0.1", port)  # and the server it started is gone
    finally:
        process.kill()


def test_a_client_url_for_any_host_and_a_clear_error_for_a_bad_one() -> None:
    assert vllm_engine.base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert vllm_engine.base_url("::", 8000) == vllm_engine.base_url("::1", 8000) == "http://[::1]:8000"
    assert vllm_engine.base_url("localhost", 8000) == "http://localhost:8000"
    with pytest.raises(ValueError, match=r"--host 'no-such-host\.invalid'"):
        check_port_free("no-such-host.invalid", 8000)


def test_cli_refuses_an_exposed_local_server_without_a_key() -> None:
    done = cli("--engine", "local", "--host", "0.0.0.0")
    assert done.returncode == 2 and "without an API key" in done.stderr
    done = cli("--engine", "local", "--max-model-len", "4096")
    assert done.returncode == 2 and "only to --engine vllm" in done.stderr


# --- the local engine: what it refuses before the model is asked ---------------------------------


def test_the_local_engine_refuses_bodies_over_its_limit_and_bad_requests(model_folder: Path) -> None:
    from fastapi.testclient import TestClient

    # The model is never loaded: outside `with`, the lifespan does not run, and every request here is refused first.
    app = create_app(model_folder, api_key=KEY, max_body_bytes=2000)
    http = TestClient(app)
    auth = {"Authorization": f"Bearer {KEY}"}
    big = {"model": "aggregator", "messages": [{"role": "user", "content": "x" * 3000}]}
    too_big = http.post("/v1/chat/completions", json=big, headers=auth)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "too_large"
    assert "at most 2000" in too_big.json()["error"]["message"]
    for body in (b"{not json", b"[1, 2]", b"\xff\xfe"):
        bad = http.post("/v1/chat/completions", content=body, headers=auth)
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    unknown = http.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": PROMPT}, headers=auth)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert http.post("/v1/chat/completions", json=big).status_code == 401  # the key is checked before the body


def test_chat_requests_are_parsed_or_refused_in_openai_shape() -> None:
    from aggregate_graph.serve.http import OpenAIError
    from aggregate_graph.serve.local import MAX_CHOICES_PER_REQUEST, parse_chat_request

    chat = parse_chat_request({"model": "m", "messages": PROMPT, "n": 2, "stop": "."}, "m")
    assert chat.options()["n"] == 2 and chat.stops() == ["."]
    refusals = [
        ({"model": "m", "messages": PROMPT, "tools": [{"type": "function"}]}, "tools"),
        ({"model": "m", "messages": PROMPT, "n": MAX_CHOICES_PER_REQUEST + 1}, "n"),
        ({"model": "m", "messages": PROMPT, "n": 2, "stream": True}, "n"),
        ({"model": "other", "messages": PROMPT}, "model"),
    ]
    for body, param in refusals:
        with pytest.raises(OpenAIError) as refused:
            parse_chat_request(body, "m")
        assert refused.value.param == param


# --- the local engine: a real server --------------------------------------------------------------


@pytest.fixture(scope="module")
def base_url(smollm2_dir: Path) -> Iterator[str]:
    with running(create_app(smollm2_dir, api_key=KEY)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def greedy_text(client: openai.OpenAI) -> str:
    """The base model's greedy answer to PROMPT: what every greedy path must reproduce."""
    reply = client.chat.completions.create(model="aggregator", messages=PROMPT, temperature=0, max_completion_tokens=8)
    assert reply.choices[0].finish_reason == "length"
    text = reply.choices[0].message.content
    assert text
    return text


def test_models_lists_the_served_name(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["aggregator"]


def test_n_choices_with_usage(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="aggregator", messages=PROMPT, n=2, max_tokens=6, seed=3)
    assert [c.index for c in reply.choices] == [0, 1]
    assert all(c.message.role == "assistant" and c.finish_reason in {"stop", "length"} for c in reply.choices)
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens > 5
    assert 2 <= usage.completion_tokens <= 12  # two sequences of at most 6 tokens, prompt billed once
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streaming_with_the_openai_client(client: openai.OpenAI, greedy_text: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model="aggregator",
            messages=PROMPT,
            temperature=0,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 3, "tokens should arrive in several chunks"
    assert "".join(pieces) == greedy_text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens == 8


def test_raw_stream_ends_with_done_while_the_server_stays_responsive(base_url: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "aggregator", "messages": PROMPT, "temperature": 0, "max_tokens": 8, "stream": True}
    events: list[str] = []
    content_after_side_request = 0
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{base_url}/chat/completions", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        side_request_done = False
        for line in response.iter_lines():
            if not line:
                continue
            events.append(line)
            has_content = line != "data: [DONE]" and json.loads(line[6:])["choices"][0]["delta"].get("content")
            if has_content and side_request_done:
                content_after_side_request += 1
            if has_content and not side_request_done:
                # Generation runs in a worker thread: the event loop answers other requests meanwhile.
                assert http.get(f"{base_url}/models", headers=headers).status_code == 200
                side_request_done = True
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert content_after_side_request >= 1, "the side request should be answered before the stream ends"


def test_a_client_hanging_up_stops_the_decoding(base_url: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    long = {"model": "aggregator", "messages": PROMPT, "max_tokens": 300, "stream": True}
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{base_url}/chat/completions", json=long, headers=headers) as response,
    ):
        next(response.iter_lines())
    # 300 tokens would hold the model for ~30 s; hanging up must free it for the next request at once.
    started = time.monotonic()
    short = {"model": "aggregator", "messages": PROMPT, "max_tokens": 1}
    assert httpx.post(f"{base_url}/chat/completions", json=short, headers=headers, timeout=60).status_code == 200
    assert time.monotonic() - started < 10


def test_errors_have_openai_shape_and_status(base_url: str, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=PROMPT, max_tokens=1)
    assert unknown.value.status_code == 404 and unknown.value.code == "model_not_found"

    with pytest.raises(openai.BadRequestError) as bad_n:
        client.chat.completions.create(model="aggregator", messages=PROMPT, n=0, max_tokens=1)
    assert bad_n.value.status_code == 400 and bad_n.value.param == "n"

    with pytest.raises(openai.BadRequestError) as stream_n:
        client.chat.completions.create(model="aggregator", messages=PROMPT, n=2, max_tokens=1, stream=True)
    assert stream_n.value.param == "n"

    wrong_key = openai.OpenAI(base_url=base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as denied:
        wrong_key.models.list()
    assert denied.value.status_code == 401

    no_key = httpx.post(f"{base_url}/chat/completions", json={"model": "aggregator", "messages": PROMPT})
    assert no_key.status_code == 401
    assert set(no_key.json()["error"]) == {"message", "type", "param", "code"}


def test_chat_openai_invoke(base_url: str, greedy_text: str) -> None:
    model = ChatOpenAI(base_url=base_url, api_key=KEY, model="aggregator", temperature=0, max_tokens=8, max_retries=0)
    reply = model.invoke("Count from 1 to 10.")
    assert reply.content == greedy_text
    assert reply.usage_metadata is not None and reply.usage_metadata["output_tokens"] == 8


def test_serves_a_lora_adapter(smollm2_dir: Path, tmp_path: Path, greedy_text: str) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32, local_files_only=True)
    # init_lora_weights=False: random non-zero weights, so the adapter really changes the model's output.
    lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, lora).save_pretrained(tmp_path / "adapter")

    with running(create_app(smollm2_dir, adapter=tmp_path / "adapter", served_model_name="ssa")) as url:
        client = openai.OpenAI(base_url=url, api_key="unused: no key configured", max_retries=0)
        reply = client.chat.completions.create(model="ssa", messages=PROMPT, temperature=0, max_tokens=8)
    assert reply.model == "ssa"
    assert reply.choices[0].message.content != greedy_text


def test_a_stream_and_many_concurrent_requests_all_finish(base_url: str) -> None:
    """A stream and eight plain requests at once all complete (generations are queued one at a time)."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)

    async def streamed() -> str:
        stream = await client.chat.completions.create(model="aggregator", messages=PROMPT, max_tokens=4, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def plain() -> str:
        done = await client.chat.completions.create(model="aggregator", messages=PROMPT, max_tokens=2)
        return done.choices[0].message.content or ""

    async def everything() -> list[str]:
        return await asyncio.wait_for(asyncio.gather(streamed(), *(plain() for _ in range(8))), timeout=120)

    assert len(asyncio.run(everything())) == 9
