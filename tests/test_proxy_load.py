"""The bounded loopback load test: 50 concurrent clients × 20 requests through the proxy, 20% of upstream
requests failing. Every request gets its own answer or an OpenAI-style error; none is lost or crossed."""

from __future__ import annotations

from benchmarks.proxy_load import report, run_load


def test_50_clients_x_20_requests_with_20_percent_upstream_failures() -> None:
    result = run_load(clients=50, requests=20, failure_rate=0.2)
    print("\n" + report(result, 50, 20, 0.2))
    assert result.sent == 1000 and len(result.latencies_s) == 1000
    assert result.wrong_answer == 0 and result.lost == 0
    assert result.upstream["errors_sent"] > 0.1 * result.upstream["calls"]  # the failures really happened
    # The upstream client's retries absorb most failures; what is left is answered as a 502, never dropped.
    assert result.answered >= 950
    assert set(result.outcomes) <= {"200", "502 upstream_error"}
