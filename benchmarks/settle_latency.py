"""Settling early against a heavy-tailed upstream: the aggregated call's latency and tokens ÷ one call's.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/settle_latency.py [--questions 40]

The upstream is the test server on 127.0.0.1 serving one model's real GSM8K replies (Faithful-CoT,
gpt-3.5-turbo, its five prompts; unreserved problems), each request's latency 200 ms × lognormal(σ = 0.6), no `n`
support, so every candidate is its own request. The k-th request for a question gets that question's reply k mod 5
and a latency drawn from a seed of (question, k): every configuration sees the same replies with the same
latencies, so their answers can be compared. Replies are read by the pool's own answers (the programs' results:
`answer_type` is a function of the text).

Each configuration asks the questions one after another through `wrap_openai(AsyncOpenAI(...), n=…)` (and one
blocking `OpenAI` row), settle on and off; the single call is the bare `AsyncOpenAI` client. Printed: the median
and p90 latency ÷ the single call's, the completion tokens the upstream generated ÷ (n × a single call's) over
all questions and over those with a clear majority (at least 4 of the 5 replies agree), requests aborted, and
whether each question's answer is the one waiting for all gives.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import threading
import time
from collections import Counter
from typing import Any

from openai import AsyncOpenAI, OpenAI

from aggregate_graph import wrap_openai
from aggregate_graph.reading.answers import group_equivalent
from aggregate_graph.testing.openai_server import OpenAITestServer, count_tokens
from training.data import one_model
from training.pools import is_reserved, load_faithful_cot

MEDIAN_S, SIGMA = 0.2, 0.6


class Upstream:
    """Each question's replies and latencies, assigned per (run, question) in the order requests arrive."""

    def __init__(self, sets: list[Any]) -> None:
        self.by_question = {s.question: s for s in sets}
        self.counts: Counter[tuple[str, str]] = Counter()
        self.run = ""
        self.lock = threading.Lock()

    def latency(self, body: dict[str, Any], number: int) -> float:
        question = body["messages"][-1]["content"]
        with self.lock:
            k = self.counts[(self.run, question)]
            self.counts[(self.run, question)] += 1
        candidates = self.by_question[question].candidates
        body["_reply"] = candidates[k % len(candidates)].text  # read by `reply`: the same request's body
        return MEDIAN_S * math.exp(SIGMA * random.Random(f"{question}:{k}").gauss(0, 1))

    @staticmethod
    def reply(body: dict[str, Any], sample_no: int) -> str:
        return body["_reply"]


def tied(candidates: list[Any], n: int) -> bool:
    """Whether the vote over the question's n replies (reply k mod 5) ties: then the arrival order decides."""
    answers = [candidates[k % len(candidates)].answer for k in range(n)]
    sizes = sorted((len(c) for c in group_equivalent([a for a in answers if a is not None])), reverse=True)
    return len(sizes) > 1 and sizes[0] == sizes[1]


def equivalent(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and len(group_equivalent([a, b])) == 1


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


async def timed_async(create: Any, question: str) -> tuple[float, str]:
    started = time.perf_counter()
    completion = await create(model="gpt-3.5-turbo", messages=[{"role": "user", "content": question}])
    return time.perf_counter() - started, completion.choices[0].message.content or ""


def timed_sync(create: Any, question: str) -> tuple[float, str]:
    started = time.perf_counter()
    completion = create(model="gpt-3.5-turbo", messages=[{"role": "user", "content": question}])
    return time.perf_counter() - started, completion.choices[0].message.content or ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=200)
    args = parser.parse_args()
    pool = [one_model(s, "gpt-3.5-turbo") for s in load_faithful_cot() if not is_reserved(s)]
    sets = [s for s in pool if len(s.candidates) == 5][: args.questions]
    questions = [s.question for s in sets]
    executed = {c.text: c.answer for s in sets for c in s.candidates}  # a program's text → its result
    clear = {s.question for s in sets if Counter(c.answer for c in s.candidates).most_common(1)[0][1] >= 4}
    upstream = Upstream(sets)
    rows: dict[str, dict[str, Any]] = {}
    with OpenAITestServer(upstream.reply, latency_s=upstream.latency, n_mode="reject") as server:

        def measure(label: str, n: int, calls: list[tuple[float, str]], served: dict[str, int]) -> None:
            rows[label] = {"n": n, "latency": [t for t, _ in calls], "answers": [a for _, a in calls], **served}

        def run(label: str, n: int, go: Any) -> None:
            upstream.run = label
            before = dict(server.stats())
            per_question = go()
            after = server.stats()
            tokens = {q: t for q, t in per_question["tokens"].items()}
            measure(label, n, per_question["calls"], {
                "tokens": after["completion_tokens_served"] - before["completion_tokens_served"],
                "tokens_by_question": tokens,
                "aborted": after["aborted"] - before["aborted"],
            })  # fmt: skip

        def asynchronous(n: int, settle: bool) -> Any:
            async def go() -> dict[str, Any]:
                client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
                create = (
                    client.chat.completions.create
                    if n == 1
                    else wrap_openai(client, n=n, settle=settle, answer_type=executed.get).chat.completions.create
                )
                calls, tokens = [], {}
                for question in questions:
                    before = server.stats()["completion_tokens_served"]
                    calls.append(await timed_async(create, question))
                    await asyncio.sleep(0.05)  # the aborted requests' handlers finish before the next count
                    tokens[question] = server.stats()["completion_tokens_served"] - before
                await client.close()
                return {"calls": calls, "tokens": tokens}

            return lambda: asyncio.run(go())

        def blocking(n: int, settle: bool) -> Any:
            def go() -> dict[str, Any]:
                client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
                create = wrap_openai(client, n=n, settle=settle, answer_type=executed.get).chat.completions.create
                calls, tokens = [], {}
                for question in questions:
                    before = server.stats()["completion_tokens_served"]
                    calls.append(timed_sync(create, question))
                    tokens[question] = server.stats()["completion_tokens_served"] - before
                return {"calls": calls, "tokens": tokens}

            return go

        run("warm-up", 5, asynchronous(5, True))
        run("single call", 1, asynchronous(1, False))
        for n in (5, 9):
            run(f"n={n} wait for all", n, asynchronous(n, False))
            run(f"n={n} settle", n, asynchronous(n, True))
        run("n=5 settle, blocking client", 5, blocking(5, True))
    single = rows.pop("single call")
    rows.pop("warm-up")
    base_median, base_p90 = statistics.median(single["latency"]), quantile(single["latency"], 0.9)
    print(
        f"{len(questions)} questions ({len(clear)} with a clear majority); single call median "
        f"{base_median * 1000:.0f} ms, p90 {base_p90 * 1000:.0f} ms"
    )
    header = ("configuration", "median ÷", "p90 ÷", "tokens ÷ n·1", "÷ wait", "clear-majority ÷ wait", "aborted")
    print(f"{header[0]:<30} {header[1]:>8} {header[2]:>6} {header[3]:>12} {header[4]:>7} {header[5]:>21} {header[6]:>7}"
          "  same answer (untied)")  # fmt: skip
    for label, row in rows.items():
        n = row["n"]
        waited = rows[f"n={n} wait for all"]["answers"]
        untied = [i for i, q in enumerate(questions) if not tied(upstream.by_question[q].candidates, n)]
        same = sum(equivalent(executed.get(row["answers"][i]), executed.get(waited[i])) for i in untied)
        wait = rows[f"n={n} wait for all"]
        clear_ratio = sum(row["tokens_by_question"][q] for q in clear) / sum(
            wait["tokens_by_question"][q] for q in clear
        )
        # a single call's expected tokens: the mean of the question's five replies
        one_call = sum(
            statistics.mean(count_tokens(c.text) for c in upstream.by_question[q].candidates) for q in questions
        )
        print(
            f"{label:<30} {statistics.median(row['latency']) / base_median:>8.2f} "
            f"{quantile(row['latency'], 0.9) / base_p90:>6.2f} {row['tokens'] / (n * one_call):>12.2f} "
            f"{row['tokens'] / wait['tokens']:>7.2f} {clear_ratio:>21.2f} {row['aborted']:>7}  {same}/{len(untied)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
