"""Against a real vLLM (`make test-vllm`, which builds `.vllm-env/` first): `aggregate-graph serve-aggregator ssa
--engine vllm` is started once, as a user starts it, and serves the shipped SSA adapter and its base model.

- the served SSA decides real candidate sets (validation problems of the shipped build, never reserved ones) as
  the in-process model does: the same prompt (rendered by the same aggregator), the same answer, and the same
  probabilities within bf16 noise;
- candidates drawn through the graph from the served base model come in one request with `n`, and the endpoint
  memo records that `n` is honoured;
- streaming from vLLM, and the proxy in front of it (chat completions, streamed, and the Responses API);
- SIGTERM stops it cleanly: exit status 0, the port free again.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from openai import OpenAI

from aggregate_graph import build_aggregate_graph, load_aggregator, sample_sets_from
from aggregate_graph.drawing.n_support import endpoint, n_mode
from aggregate_graph.openai_compat.proxy import create_proxy_app
from aggregate_graph.openai_compat.proxy_config import ProxyConfig
from aggregate_graph.serve.vllm import check_port_free
from aggregate_graph.testing import running
from benchmarks.ssa_inference import validation_draws

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).parents[1]
SETS = 8  # validation problems; two draws each (one LM's five samples anonymised, and a mixed pool)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """The CLI's process, its output as it comes, and the base URL it announced."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process, self.port, self.lines, self.url = process, port, [], ""
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if found := re.match(r"ready: (\S+) \(models: (.*)\)", line):
                self.url, self.models = found.group(1), found.group(2).split(", ")
                self.ready.set()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    port = free_port()
    command = [sys.executable, "-m", "aggregate_graph.cli", "serve-aggregator", "ssa", "--engine", "vllm"]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=ROOT,  # where `make vllm-env` put .vllm-env/
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    server = Served(process, port)
    try:
        deadline = time.monotonic() + 1200  # past the CLI's own 900 s wait, which starts after SmolLM2's conversion
        while not server.ready.wait(1) and process.poll() is None and time.monotonic() < deadline:
            pass
        assert server.ready.is_set(), "".join(server.lines[-40:])
        yield server
        process.send_signal(signal.SIGTERM)  # what a supervisor sends
        assert process.wait(timeout=120) == 0, "".join(server.lines[-40:])
        check_port_free("127.0.0.1", port)  # vLLM is gone, not left behind holding the port
    finally:
        if process.poll() is None:  # a second SIGTERM makes the CLI kill vLLM's whole process group
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_it_serves_the_adapter_and_its_base_under_the_documented_names(served: Served) -> None:
    assert served.models == ["aggregator", "aggregator-base"]
    listed = {m.id for m in OpenAI(base_url=served.url, api_key="unused").models.list()}
    assert listed == {"aggregator", "aggregator-base"}


def test_the_served_ssa_decides_real_sets_as_the_in_process_model(served: Served) -> None:
    served_ssa = load_aggregator("ssa", base_url=served.url, served_model_name="aggregator")
    in_process = load_aggregator("ssa")
    draws = [s for sets in validation_draws(SETS).values() for s in sets]
    asked = 0
    for sample_set in draws:
        over_http, local = served_ssa.invoke(sample_set), in_process.invoke(sample_set)
        assert over_http.answer == local.answer
        assert over_http.details.get("parse_status") == local.details.get("parse_status")
        if local.details.get("parse_status") != "skipped":
            asked += 1
            served_probs, local_probs = over_http.details["choice_probs"], local.details["choice_probs"]
            assert served_probs.keys() == local_probs.keys()  # the same options: the same rendered prompt
            assert all(abs(served_probs[k] - local_probs[k]) < 0.05 for k in local_probs)
    assert asked >= SETS  # most sets reach the model (the rest have one answer and skip it)


def test_candidates_from_the_served_base_model_come_in_one_request_with_n(served: Served) -> None:
    model = ChatOpenAI(base_url=served.url, api_key="unused", model="aggregator-base", max_tokens=12, max_retries=0)
    graph = build_aggregate_graph(model, n=3)
    out = graph.invoke({"messages": [HumanMessage("What is 6 times 7? Answer with a number.")]})
    sample_set = out["sample_set"]
    assert len(sample_set.succeeded) == 3 and all(c.text for c in sample_set.succeeded)
    assert n_mode(endpoint(model, "aggregator-base")) == "honoured"  # the server gave n choices to one request
    assert sample_set.usage.completion_tokens > 0


def test_streaming_and_the_proxy_in_front_of_vllm(served: Served) -> None:
    model = ChatOpenAI(base_url=served.url, api_key="unused", model="aggregator-base", max_tokens=16, max_retries=0)
    chunks = [chunk.text for chunk in model.stream("Count from 1 to 5.")]
    assert len([c for c in chunks if c]) > 1  # tokens arrive as vLLM makes them
    config = ProxyConfig(upstream=served.url, n=3, settle=False)  # all three counted, settled or not
    with running(create_proxy_app(config)) as proxy_url:
        client = OpenAI(base_url=proxy_url, api_key="unused", max_retries=0)
        question = [{"role": "user", "content": "What is 6 times 7? Answer with a number."}]
        plain = client.chat.completions.create(model="aggregator-base", messages=question, max_tokens=12)
        stream = client.chat.completions.create(model="aggregator-base", messages=question, max_tokens=12, stream=True)
        streamed = list(stream)
        response = client.responses.create(
            model="aggregator-base", input="What is 6 times 7? Answer with a number.", max_output_tokens=12
        )
    assert len(sample_sets_from(plain)[0].succeeded) == 3
    finish = next(c for c in streamed if c.choices and c.choices[0].finish_reason)
    assert len(sample_sets_from(finish)[0].succeeded) == 3
    # the Responses API through the proxy to vLLM's own /v1/responses: three separate upstream calls
    responses_set = sample_sets_from(response)[0]
    assert len(responses_set.succeeded) == 3 and response.status in ("completed", "incomplete")
    health = httpx.get(served.url.removesuffix("/v1") + "/health", timeout=5)
    assert health.status_code == 200
