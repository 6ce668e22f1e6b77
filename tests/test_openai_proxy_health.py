"""The proxy's /health (no key needed, nothing secret), its banner (printed only once the checks pass), its
start-up check of the upstream (a warning, not a refusal), and its compiled graphs (one per shape of request,
reused by every request of that shape)."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from openai import OpenAI

from aggregate_graph.openai_compat import proxy
from aggregate_graph.openai_compat.proxy import create_proxy_app, serve_proxy, upstream_problem
from aggregate_graph.openai_compat.proxy_config import ProxyConfig
from aggregate_graph.testing import running
from benchmarks.proxy_load import run_load
from tests.test_proxy import CLIENT_KEY, UPSTREAM_KEY, proxy_for
from tests.test_wrap_openai import QUESTION, math_replies


def _health(url: str) -> httpx.Response:
    return httpx.get(f"{url.removesuffix('/v1')}/health")  # no Authorization header


def test_health_needs_no_key_tells_no_secret_and_counts_the_graphs(serve) -> None:
    upstream = serve(math_replies)
    with proxy_for(upstream, n=3) as url:
        response = _health(url)
        assert response.status_code == 200
        assert response.json() == {
            "status": "ok",
            "aggregator": "majority",
            "methods": ["gsr", "majority", "medoid", "recursive", "ssa", "structured_vote", "usc", "weighted"],
            "n": 3,
            "in_flight": 0,
            "max_concurrency": 64,
            "graphs_compiled": 0,
        }
        assert UPSTREAM_KEY not in response.text and CLIENT_KEY not in response.text
        assert upstream.base_url not in response.text
        assert httpx.get(f"{url}/models").status_code == 401  # the API itself still needs the key

        client = OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
        for temperature in (0.1, 0.5, 0.9):  # same shape, other options: the same graph
            client.chat.completions.create(model="m", messages=QUESTION, temperature=temperature)
        assert _health(url).json()["graphs_compiled"] == 1
        client.chat.completions.create(model="ssa/m", messages=QUESTION)  # another method: another graph
        assert _health(url).json()["graphs_compiled"] == 2
    assert upstream.calls == 3 + 2


def test_health_is_503_until_the_proxy_has_started() -> None:
    app = create_proxy_app(ProxyConfig(upstream="http://127.0.0.1:9/v1", api_key=CLIENT_KEY))
    response = TestClient(app).get("/health")  # outside `with`: the lifespan has not run
    assert response.status_code == 503 and response.json()["status"] == "starting"


def test_the_banner_comes_only_after_the_checks(monkeypatch, capsys) -> None:
    served: list[dict[str, Any]] = []
    monkeypatch.setattr(proxy.uvicorn, "run", lambda app, **kwargs: served.append(kwargs))
    with pytest.raises(ValueError, match="without an API key"):
        serve_proxy(ProxyConfig(upstream="http://127.0.0.1:9/v1"), host="0.0.0.0", port=8080)
    assert capsys.readouterr().err == "" and served == []  # refused: nothing announced

    serve_proxy(ProxyConfig(upstream="http://127.0.0.1:9/v1"), port=8081)
    banner = capsys.readouterr().err
    assert "proxy on http://127.0.0.1:8081/v1" in banner and "client key not required" in banner
    assert "health: http://127.0.0.1:8081/health" in banner
    serve_proxy(ProxyConfig(upstream="http://127.0.0.1:9/v1", api_key=CLIENT_KEY), host="0.0.0.0", port=8082)
    banner = capsys.readouterr().err
    assert "client key required" in banner and CLIENT_KEY not in banner
    assert [kwargs["port"] for kwargs in served] == [8081, 8082]


def _dead_port() -> int:
    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _refusing_upstream(keys_sent: list[str | None]) -> FastAPI:
    """An upstream that refuses every key, as one does the proxy's when it is wrong or expired."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        keys_sent.append(request.headers.get("authorization"))
        return JSONResponse({"error": {"message": "Incorrect API key provided"}}, status_code=401)

    return app


def test_the_upstream_is_checked_at_start_up_and_a_dead_one_is_a_warning(serve, monkeypatch, capsys) -> None:
    served: list[dict[str, Any]] = []
    monkeypatch.setattr(proxy.uvicorn, "run", lambda app, **kwargs: served.append(kwargs))
    live = serve(math_replies)
    config = ProxyConfig(upstream=live.base_url, upstream_api_key=UPSTREAM_KEY)
    assert upstream_problem(config) is None
    serve_proxy(config, port=8083)
    assert capsys.readouterr().err.startswith("proxy on http://127.0.0.1:8083/v1")  # no warning

    dead = f"http://127.0.0.1:{_dead_port()}/v1"
    serve_proxy(ProxyConfig(upstream=dead, upstream_api_key=UPSTREAM_KEY), port=8084)
    warning, banner = capsys.readouterr().err.splitlines()
    assert warning == (
        f"warning: upstream {dead} is unreachable (GET {dead}/models: ConnectError: [Errno 111] Connection refused); "
        "serving anyway, requests fail until it answers"
    )
    assert banner.startswith("proxy on http://127.0.0.1:8084/v1") and len(served) == 2  # served all the same

    keys_sent: list[str | None] = []
    with running(_refusing_upstream(keys_sent)) as refusing:
        problem = upstream_problem(ProxyConfig(upstream=refusing, upstream_api_key=UPSTREAM_KEY))
    assert keys_sent == [f"Bearer {UPSTREAM_KEY}"]  # asked with the key the proxy's requests will carry
    assert problem == (
        f"upstream {refusing} refused the upstream key (GET {refusing}/models: 401 Unauthorized): check the key "
        "(--upstream-api-key-env)"
    )
    assert UPSTREAM_KEY not in problem


def test_concurrent_requests_share_one_graph_and_each_gets_its_own_answer() -> None:
    result = run_load(clients=8, requests=5, failure_rate=0.0)
    assert result.answered == result.sent == 40 and result.wrong_answer == 0 and result.lost == 0
    assert result.graphs_compiled == 1
