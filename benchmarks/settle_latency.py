"""Settling early against a heavy-tailed upstream: the aggregated call's latency and tokens ÷ one call's.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/settle_latency.py [--questions 40]

The upstream is the test server on 127.0.0.1, in a process of its own (its CPU is not the client's, as a real
upstream's is not; one process per configuration), serving one model's real GSM8K replies (Faithful-CoT,
gpt-3.5-turbo, its five prompts; unreserved problems), each request's latency 200 ms × lognormal(σ = 0.6), no `n`
support, so every candidate is its own request. The k-th request for a question gets that question's reply k mod 5
and a latency drawn from a seed of (question, k): every configuration sees the same replies with the same
latencies, so their answers can be compared. Replies are read by the pool's own answers (the programs' results:
`answer_type` is a function of the text).

Each configuration asks the questions one after another through `wrap_openai(AsyncOpenAI(...), n=…)` with settle on
and off (and, settling, one blocking `OpenAI` client, by default and with `stream_candidates`, and a blocking
`graph.invoke` over `ChatOpenAI` with `stream_candidates`); the single call is the bare `AsyncOpenAI` client. A
blocking run cannot cancel a request in flight: by default it waits for those, and with `stream_candidates` it
streams each request (the graph through `ChatOpenAI`'s own `stream`) and closes those still out once settled. A
streamed request's first word comes after a fifth of its latency and the rest of its words are paced over the other
four fifths, so that it ends when the same request unstreamed would. Printed: the median and p90 latency ÷ the
single call's, the completion tokens the upstream generated ÷ (n × a single call's) over all questions and over
those with a clear majority (at least 4 of the 5 replies agree), requests aborted, and whether each question's
answer is the one waiting for all gives. The rows "the rule alone" are the floor: when majority's settling rule
settles on the drawn latencies themselves, with no client, server or network cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI, OpenAI

from aggregate_graph import Candidate, SampleSet, build_aggregate_graph, wrap_openai
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.reading.answers import group_equivalent
from aggregate_graph.testing.openai_server import OpenAITestServer, count_tokens
from training.data import one_model
from training.pools import is_reserved, load_faithful_cot

MEDIAN_S, SIGMA = 0.2, 0.6
WORD_S = 0.02  # a reply's pace, 50 words a second: the upstream of the streamed-n table


Stats = Callable[[], dict[str, int]]


@contextlib.contextmanager
def upstream_process(make: Callable[[], OpenAITestServer]) -> Iterator[tuple[str, Stats]]:
    """The server `make` builds, serving from a forked process of its own; yields its base URL and its counters."""
    ours, theirs = multiprocessing.Pipe()

    def serve() -> None:
        with make() as server:
            theirs.send(server.base_url)
            theirs.recv()  # serves until told to stop

    process = multiprocessing.get_context("fork").Process(target=serve, daemon=True)
    process.start()
    base_url = ours.recv()
    with httpx.Client(base_url=base_url.removesuffix("/v1")) as http:
        try:
            yield base_url, lambda: http.get("/test/stats").raise_for_status().json()
        finally:
            ours.send(None)
            process.join(10)


def latency_s(question: str, k: int) -> float:
    """The latency of the question's k-th request."""
    return MEDIAN_S * math.exp(SIGMA * random.Random(f"{question}:{k}").gauss(0, 1))


def floor_s(sample_set: SampleSet, n: int) -> float:
    """When majority's settling rule alone, with no overhead, settles the question's n requests (reply k mod 5
    landing at `latency_s(question, k)`): the floor the measured settle rows approach."""
    latencies = [latency_s(sample_set.question, k) for k in range(n)]
    landed: list[Candidate] = []
    for k in sorted(range(n), key=latencies.__getitem__):
        reply = sample_set.candidates[k % len(sample_set.candidates)]
        landed.append(Candidate(index=k, text=reply.text, answer=reply.answer, landed_at=latencies[k]))
        if MajorityVote().settled(SampleSet(question=sample_set.question, candidates=landed), n - len(landed)):
            return latencies[k]
    return max(latencies)


class Upstream:
    """Each question's replies and latencies, assigned per question in the order requests arrive (the server
    runs in its own process, one per configuration, so each configuration counts from the start)."""

    def __init__(self, sets: list[Any]) -> None:
        self.by_question = {s.question: s for s in sets}
        self.counts: Counter[str] = Counter()

    def latency(self, body: dict[str, Any], number: int) -> float:
        question = body["messages"][-1]["content"]
        k = self.counts[question]  # the server's one event loop calls this: no lock needed
        self.counts[question] += 1
        candidates = self.by_question[question].candidates
        body["_reply"] = candidates[k % len(candidates)].text  # read by `reply`: the same request's body
        if not body.get("stream"):
            return latency_s(question, k)
        # streamed: the first word after a fifth of the latency, the rest paced to end when it would unstreamed
        body["_pace"] = 0.8 * latency_s(question, k) / max(len(body["_reply"].split()), 1)
        return 0.2 * latency_s(question, k)

    @staticmethod
    def pace(body: dict[str, Any]) -> float:
        return body.get("_pace", 0.0)

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
    parser.add_argument("--streamed-questions", type=int, default=40, help="questions of the streamed-n table")
    args = parser.parse_args()
    pool = [one_model(s, "gpt-3.5-turbo") for s in load_faithful_cot() if not is_reserved(s)]
    sets = [s for s in pool if len(s.candidates) == 5][: args.questions]
    questions = [s.question for s in sets]
    executed = {c.text: c.answer for s in sets for c in s.candidates}  # a program's text → its result
    clear = {s.question for s in sets if Counter(c.answer for c in s.candidates).most_common(1)[0][1] >= 4}
    upstream = Upstream(sets)
    rows: dict[str, dict[str, Any]] = {}

    def run(label: str, n: int, go: Callable[[str, Stats], dict[str, Any]]) -> None:
        def make() -> OpenAITestServer:
            return OpenAITestServer(
                upstream.reply, latency_s=upstream.latency, token_latency_s=upstream.pace, n_mode="reject"
            )

        with upstream_process(make) as (base_url, stats):
            per_question = go(base_url, stats)
            served = stats()
        rows[label] = {
            "n": n,
            "latency": [t for t, _ in per_question["calls"]],
            "answers": [a for _, a in per_question["calls"]],
            "tokens": served["completion_tokens_served"],
            "tokens_by_question": per_question["tokens"],
            "aborted": served["aborted"],
        }

    def asynchronous(n: int, settle: bool) -> Callable[[str, Stats], dict[str, Any]]:
        async def go(base_url: str, stats: Stats) -> dict[str, Any]:
            client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
            create = (
                client.chat.completions.create
                if n == 1
                else wrap_openai(client, n=n, settle=settle, answer_type=executed.get).chat.completions.create
            )
            calls, tokens = [], {}
            for question in questions:
                before = stats()["completion_tokens_served"]
                calls.append(await timed_async(create, question))
                await asyncio.sleep(0.05)  # the aborted requests' handlers finish before the next count
                tokens[question] = stats()["completion_tokens_served"] - before
            await client.close()
            return {"calls": calls, "tokens": tokens}

        return lambda base_url, stats: asyncio.run(go(base_url, stats))

    def blocking(ask: Callable[[str], Callable[[str], tuple[float, str]]]) -> Callable[[str, Stats], dict[str, Any]]:
        """The questions asked one after another by the blocking call `ask(base_url)` makes."""

        def go(base_url: str, stats: Stats) -> dict[str, Any]:
            timed = ask(base_url)
            calls, tokens = [], {}
            for question in questions:
                before = stats()["completion_tokens_served"]
                calls.append(timed(question))
                time.sleep(0.05)
                tokens[question] = stats()["completion_tokens_served"] - before
            return {"calls": calls, "tokens": tokens}

        return go

    def wrapped_client(stream: bool) -> Callable[[str], Callable[[str], tuple[float, str]]]:
        def ask(base_url: str) -> Callable[[str], tuple[float, str]]:
            client = OpenAI(base_url=base_url, api_key="x", max_retries=0)
            options = {"n": 5, "stream_candidates": stream, "answer_type": executed.get}
            create = wrap_openai(client, **options).chat.completions.create
            return lambda question: timed_sync(create, question)

        return ask

    def graph_over_chat_openai(base_url: str) -> Callable[[str], tuple[float, str]]:
        model = ChatOpenAI(base_url=base_url, api_key="x", model="gpt-3.5-turbo", max_retries=0)
        graph = build_aggregate_graph(model, n=5, stream_candidates=True, answer_type=executed.get)

        def timed(question: str) -> tuple[float, str]:
            started = time.perf_counter()
            out = graph.invoke({"messages": [("user", question)]})
            return time.perf_counter() - started, out["sample_set"].aggregation.text or ""

        return timed

    run("warm-up", 5, asynchronous(5, True))
    run("single call", 1, asynchronous(1, False))
    for n in (5, 9):
        run(f"n={n} wait for all", n, asynchronous(n, False))
        run(f"n={n} settle", n, asynchronous(n, True))
    run("n=5 settle, blocking client", 5, blocking(wrapped_client(False)))
    run("n=5 settle, blocking, streamed", 5, blocking(wrapped_client(True)))
    run("n=5, blocking graph, streamed", 5, blocking(graph_over_chat_openai))
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
    singles = [latency_s(q, 0) for q in questions]
    for n in (5, 9):
        floors = [floor_s(s, n) for s in sets]
        print(
            f"{f'n={n} settle, the rule alone':<30} {statistics.median(floors) / statistics.median(singles):>8.2f} "
            f"{quantile(floors, 0.9) / quantile(singles, 0.9):>6.2f}  (the drawn latencies, no overhead on either side)"
        )
    streamed_n(sets[: args.streamed_questions], executed)
    return 0


def streamed_n(sets: list[Any], executed: dict[str, str | None]) -> None:
    """The same replies from an upstream that honours `n`: one request for the five, each choice generated at
    `WORD_S` a word. Waiting for all gets one response once its longest choice is generated; settling streams the
    request and closes it once the vote is settled (the rest are never generated). The single call is one reply."""
    texts = {s.question: [c.text for c in s.candidates] for s in sets}
    position = {question: i for i, question in enumerate(texts)}
    turns: Counter[str] = Counter()  # the next of the question's replies to serve (in the server's process)

    def reply(body: dict[str, Any], number: int) -> str:
        question = body["messages"][-1]["content"]
        if not body.get("n"):  # the single call: each of the question's replies in turn across the questions
            return texts[question][position[question] % 5]
        turns[question] += 1
        return texts[question][(turns[question] - 1) % 5]

    def latency(body: dict[str, Any], number: int) -> float:  # a response that is not streamed comes whole
        if body.get("stream"):
            return 0.0
        question, n = body["messages"][-1]["content"], int(body.get("n") or 1)
        first = turns[question] if n > 1 else position[question]
        return WORD_S * max(len(texts[question][(first + i) % 5].split()) for i in range(n))

    results: dict[str, dict[str, list[Any]]] = {}

    async def go(label: str, n: int, settle: bool, base_url: str, stats: Stats) -> None:
        client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
        wrapped = wrap_openai(client, n=n, settle=settle, stream_candidates=True, answer_type=executed.get)
        create = client.chat.completions.create if n == 1 else wrapped.chat.completions.create
        row: dict[str, list[Any]] = {"latency": [], "answers": [], "tokens": []}
        for question in texts:
            before = stats()["completion_tokens_served"]
            elapsed, answer = await timed_async(create, question)
            await asyncio.sleep(0.05)  # a closed stream's handler finishes before the count
            row["latency"].append(elapsed)
            row["answers"].append(answer)
            row["tokens"].append(stats()["completion_tokens_served"] - before)
        await client.close()
        results[label] = row

    for label, n, settle in (("single call", 1, False), ("wait for all", 5, False), ("settle", 5, True)):
        with upstream_process(lambda: OpenAITestServer(reply, latency_s=latency, token_latency_s=WORD_S)) as served:
            asyncio.run(go(label, n, settle, *served))
    single, waited, settled = results["single call"], results["wait for all"], results["settle"]
    base = statistics.median(single["latency"]), quantile(single["latency"], 0.9)
    untied = [i for i, s in enumerate(sets) if not tied(s.candidates, 5)]
    same = sum(equivalent(executed.get(settled["answers"][i]), executed.get(waited["answers"][i])) for i in untied)
    print(f"\nn=5 in one request, streamed when settling ({len(sets)} questions, {WORD_S * 1000:g} ms a word)")
    print(f"{'configuration':<30} {'median ÷':>8} {'p90 ÷':>6} {'tokens ÷ wait':>13}  same answer (untied)")
    for label in ("wait for all", "settle"):
        row = results[label]
        print(
            f"n=5 {label:<26} {statistics.median(row['latency']) / base[0]:>8.2f} "
            f"{quantile(row['latency'], 0.9) / base[1]:>6.2f} {sum(row['tokens']) / sum(waited['tokens']):>13.2f}"
            + (f"  {same}/{len(untied)}" if label == "settle" else "")
        )


if __name__ == "__main__":
    raise SystemExit(main())
