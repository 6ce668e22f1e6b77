"""Loopback load test of the proxy: C concurrent clients × R requests each, through the real proxy to a real
upstream test server that fails a share of its requests. Every request asks its own sum, so a response
that answers another request's question is caught; every request must end in an answer or an OpenAI-style
error. Prints p50/p99 latency, the error mix, and how many graphs the proxy compiled (one per shape of request,
reused by every request of that shape, from its /health).

    python benchmarks/proxy_load.py [--clients 50] [--requests 20] [--failure-rate 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from aggregate_graph import sample_sets_from
from aggregate_graph.openai_compat.proxy import create_proxy_app
from aggregate_graph.openai_compat.proxy_config import ProxyConfig
from aggregate_graph.testing import OpenAITestServer
from aggregate_graph.testing.threaded import running

_SUM = re.compile(r"what is (\d+) plus (\d+)\?")


def sum_reply(body: dict[str, Any], sample_no: int) -> str:
    a, b = map(int, _SUM.search(body["messages"][-1]["content"]).groups())
    return f"{a} + {b} = {a + b}. The answer is {a + b}."


@dataclass
class LoadResult:
    sent: int = 0
    answered: int = 0
    wrong_answer: int = 0  # an answer that is not its own request's
    lost: int = 0  # no answer and no OpenAI-style error (dropped connection, hang)
    outcomes: Counter[str] = field(default_factory=Counter)
    latencies_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    upstream: dict[str, int] = field(default_factory=dict)
    graphs_compiled: int = 0  # by the proxy over the whole run (its /health)

    def percentile(self, q: float) -> float:
        return statistics.quantiles(self.latencies_s, n=100, method="inclusive")[round(q) - 1]


async def _client(url: str, key: str, client_no: int, requests: int, result: LoadResult) -> None:
    client = openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)
    for request_no in range(requests):
        a, b = client_no * 1000 + request_no, request_no * 7 + 3
        question = f"Client {client_no}, request {request_no}: what is {a} plus {b}?"
        result.sent += 1
        started = time.perf_counter()
        try:
            response = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])
        except openai.APIStatusError as exc:
            is_openai_error = isinstance(exc.body, dict) and "message" in exc.body
            result.outcomes[f"{exc.status_code} {exc.body.get('code') if is_openai_error else '?'}"] += 1
            result.lost += not is_openai_error
        except openai.APIError as exc:
            result.outcomes[type(exc).__name__] += 1
            result.lost += 1
        else:
            [sample_set] = sample_sets_from(response)
            ok = sample_set.question == question and sample_set.aggregation.answer == str(a + b)
            result.wrong_answer += not (ok and f"The answer is {a + b}." in response.choices[0].message.content)
            result.answered += 1
            result.outcomes["200"] += 1
        result.latencies_s.append(time.perf_counter() - started)
    await client.close()


def run_load(
    clients: int = 50,
    requests: int = 20,
    failure_rate: float = 0.2,
    n: int = 3,
    upstream_latency_s: float = 0.02,
    upstream_retries: int = 2,
) -> LoadResult:
    result = LoadResult()
    with OpenAITestServer(sum_reply, latency_s=upstream_latency_s, failure_rate=failure_rate, seed=1) as upstream:
        config = ProxyConfig(
            upstream=upstream.base_url,
            api_key="load-test-key",
            n=n,
            upstream_retries=upstream_retries,
            max_concurrency=clients,
        )
        with running(create_proxy_app(config)) as url:

            async def everyone() -> None:
                await asyncio.gather(*(_client(url, "load-test-key", c, requests, result) for c in range(clients)))

            started = time.perf_counter()
            asyncio.run(everyone())
            result.wall_s = time.perf_counter() - started
            result.graphs_compiled = httpx.get(f"{url.removesuffix('/v1')}/health").json()["graphs_compiled"]
        result.upstream = upstream.stats()
    return result


def report(result: LoadResult, clients: int, requests: int, failure_rate: float) -> str:
    mix = ", ".join(f"{k}: {v}" for k, v in result.outcomes.most_common())
    rows = [
        ("clients × requests", f"{clients} × {requests} = {result.sent}"),
        (
            "upstream failure rate",
            f"{failure_rate:.0%} ({result.upstream['errors_sent']} of "
            f"{result.upstream['calls']} upstream calls failed)",
        ),
        ("answered", f"{result.answered} ({result.answered / result.sent:.1%})"),
        ("wrong answer / lost", f"{result.wrong_answer} / {result.lost}"),
        ("outcomes", mix),
        ("latency p50 / p99", f"{result.percentile(50) * 1000:.0f} ms / {result.percentile(99) * 1000:.0f} ms"),
        ("throughput", f"{result.sent / result.wall_s:.1f} requests/s over {result.wall_s:.1f} s"),
        ("graphs compiled", f"{result.graphs_compiled} for {result.sent} requests"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--failure-rate", type=float, default=0.2)
    p.add_argument("--n", type=int, default=3, help="candidates per request")
    args = p.parse_args()
    result = run_load(args.clients, args.requests, args.failure_rate, args.n)
    print(report(result, args.clients, args.requests, args.failure_rate))


if __name__ == "__main__":
    main()
