"""Fan-out overhead, `n` billing and vote cost, measured in one run against the local test server.

    python benchmarks/fanout.py            (or `make bench`)

1. Wall time ÷ `asyncio.gather` of the same raw calls (100 ms server latency), N = 8 and 64, after the first
   call: the graph over `ChatOpenAI` ÷ the same `ChatOpenAI` calls (the graph's own overhead) and ÷ bare
   `openai`-client calls (ChatOpenAI's own cost included); a `wrap_openai` client's call ÷ bare `openai`-client
   calls. Against a server that ignores `n` (with `use_n=False`) and one that refuses it (default policy).
   Each row gives the two sides' median wall times, the median of 50 rounds' paired ratios with their
   interquartile range and a bootstrap 90% interval of that median (whether a target is met is read there),
   then the median ratio of the client process's CPU time.
2. Prompt tokens billed for N = 8 candidates with and without `n` support on the server.
3. The package's own time per call: a `wrap_openai` call ÷ a gather of the same bare calls, both through an
   `openai` client whose transport answers at once (no server, no socket), N = 1, 8 and 64: what the wrapping
   itself costs (the LangGraph run, drawing, reading, the vote, the response), apart from the client's own;
   and at N=64 with three answers in turn (a split vote, never settled early) with `settle` off and on, where
   each landing checks whether the vote is settled.
4. MajorityVote time per sample set of 64 answers with math equivalence (cold cache), on the real
   Qwen2.5-Math MATH pool of ../shared/data (8 samples per problem, each drawn 8 times) and on a synthetic
   mix of equivalent LaTeX forms: the first time the process sees those forms (math-verify parses each one,
   ~10-20 ms a form) and then with this package's caches cleared (math-verify's own parse cache stays warm).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import NamedTuple

import httpx
import httpx2  # what the `openai` client sends with
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI

from aggregate_graph import CandidatePolicy, SampleSet, build_aggregate_graph, wrap_openai
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.reading.answers import _parsed, _value_key, _verify_with_timeout
from aggregate_graph.sample_set import Candidate
from training.pools import load_qwen_math

LATENCY_S = 0.1
REPEATS = 50
SETTLE_S = 0.15
QUESTION = "A farmer has 17 sheep and buys 3 times as many goats as sheep, then sells 12 goats. " * 8


@contextlib.contextmanager
def server_process(*args: str) -> Iterator[str]:
    """The test server in its own process, so its CPU time does not slow the client being measured."""
    # main() imported, not `-m`: the package imports the module first, and runpy warns about running it again
    code = "import sys; from aggregate_graph.testing.openai_server import main; main(sys.argv[1:])"
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) ticks of all CPUs since boot, from Linux's /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])  # guest time is already inside user time


def steal_row(before: tuple[int, int] | None) -> list[tuple[str, str, str]]:
    """The share of CPU time the hypervisor gave other guests while the fan-out rows ran: on a shared VM, a
    run with more than a few percent stolen swings too much for its ratios to mean much."""
    after = cpu_ticks()
    if before is None or after is None or after[1] == before[1]:
        return []
    share = (after[0] - before[0]) / (after[1] - before[1])
    return [("CPU time stolen by other guests during the fan-out rows", f"{share:.1%}", "a few % at most")]


def stats(base_url: str) -> dict[str, int]:
    return httpx.get(base_url.removesuffix("/v1") + "/test/stats").json()


async def _raw(client: AsyncOpenAI, n: int) -> None:
    await asyncio.gather(
        *(client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}]) for _ in range(n))
    )


class Timings(NamedTuple):
    """Each round's seconds of one side: wall time, and this process's CPU time (the client's own work, apart
    from the server's latency)."""

    wall: list[float]
    cpu: list[float]


async def _interleaved(
    runs: dict[str, Callable[[], Awaitable[object]]], rounds: int = REPEATS, rest_s: float = SETTLE_S
) -> dict[str, Timings]:
    """Each side's timings over `rounds` rounds; the sides alternate within a round, so drift in machine load hits
    them alike and each round's ratios compare runs made within a second or two of each other. `rest_s`: the
    pause before each run (none is needed where no server answers)."""
    timings = {name: Timings([], []) for name in runs}
    for run in runs.values():
        await run()  # warm-up: connections, imports, caches
    # Move everything alive after warm-up out of the collector's reach, as long-running services do: otherwise
    # a full collection over the imported libraries (~140 ms here) lands at random inside one side's timing.
    gc.freeze()
    for _ in range(rounds):
        for name, run in runs.items():
            # Start each run with the server idle and the connections rested: reusing a connection within
            # ~50 ms of its last response costs ~35 ms here (the test server's tail), a cost that would fall
            # on whichever side happens to follow another on the same connections.
            await asyncio.sleep(rest_s)
            # Each run collects only its own garbage: otherwise the collections the previous run's allocations
            # bring on (a full one costs tens of ms here) land in whichever run allocates next.
            gc.collect()
            started, started_cpu = time.perf_counter(), time.process_time()
            await run()
            timings[name].wall.append(time.perf_counter() - started)
            timings[name].cpu.append(time.process_time() - started_cpu)
    return timings


def _median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """A bootstrap 90% interval of the median of `values` (seeded: the same rounds give the same interval)."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[resamples // 20], medians[resamples - resamples // 20 - 1]


def _ratio(side: Timings, over: Timings) -> str:
    """The median of the rounds' wall-time ratios with their interquartile range and the median's 90% interval,
    then the CPU-time ratio's median: on a shared 2-core machine single runs swing by ±10 %, paired ratios far
    less, and the median of 50 of them to within about ±0.015."""
    walls = [a / b for a, b in zip(side.wall, over.wall, strict=True)]
    low, median, high = statistics.quantiles(walls, n=4)
    below, above = _median_interval(walls)
    cpu = statistics.median(a / b for a, b in zip(side.cpu, over.cpu, strict=True))
    ms = f"{statistics.median(side.wall) * 1000:.0f}/{statistics.median(over.wall) * 1000:.0f} ms"
    return f"{ms}; paired {median:.3f} ({low:.2f}–{high:.2f}; median in {below:.3f}–{above:.3f}); CPU {cpu:.3f}"


async def fanout_rows(
    base_url: str, policy: CandidatePolicy | None, situation: str, targets: dict[int, str]
) -> list[tuple[str, str, str]]:
    """The graph ÷ gather of the same ChatOpenAI calls (`targets`' aim) and ÷ gather of bare openai calls, and a
    wrapped client ÷ gather of bare openai calls (the same aim), for each N in `targets` (`_ratio`). The warm-up
    run of each side is its first call (a server's handling of `n` is learned there)."""
    rows = []
    client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    model = ChatOpenAI(base_url=base_url, api_key="x", model="m", max_retries=0)
    prompt, messages = [HumanMessage(QUESTION)], [{"role": "user", "content": QUESTION}]
    for n, target in targets.items():
        # settle off: both sides make the same N requests (settling's own gain: benchmarks/settle_latency.py)
        graph = build_aggregate_graph(model, n=n, policy=policy, settle=False)
        wrapped = wrap_openai(
            AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0), n=n, policy=policy, settle=False
        )
        t = await _interleaved(
            {
                "graph": lambda graph=graph: graph.ainvoke({"messages": prompt}),
                "wrapped": lambda wrapped=wrapped: wrapped.chat.completions.create(model="m", messages=messages),
                "model": lambda n=n: asyncio.gather(*(model.agenerate([prompt]) for _ in range(n))),
                "openai": lambda n=n: _raw(client, n),
            }
        )
        label = f"N={n}, {situation}"
        for side, over, what, aim in (
            ("graph", "model", "graph ÷ gather of the same ChatOpenAI calls", target),
            ("graph", "openai", "graph ÷ gather of bare openai calls", "(ChatOpenAI's own cost included)"),
            ("wrapped", "openai", "wrap_openai call ÷ gather of bare openai calls", target),
        ):
            rows.append((f"{what}, {label}", _ratio(t[side], t[over]), aim))
    return rows


COMPLETION = {
    "id": "chatcmpl-0",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "#### 56"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
}


def answering_client(replies: tuple[str, ...] = ("#### 56",)) -> AsyncOpenAI:
    """An `openai` client whose transport answers every request at once with `COMPLETION`, its reply the next of
    `replies` in turn."""
    turns = itertools.cycle(replies)

    def answer(request: httpx2.Request) -> httpx2.Response:
        message = {"role": "assistant", "content": next(turns)}
        return httpx2.Response(200, json={**COMPLETION, "choices": [{**COMPLETION["choices"][0], "message": message}]})

    transport = httpx2.MockTransport(answer)
    return AsyncOpenAI(
        base_url="http://answering-at-once.invalid/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=transport),
    )


async def own_cost_rows() -> list[tuple[str, str, str]]:
    """The median time of a wrapped call and of a gather of the same bare calls, through clients answering at
    once, and their difference: the package's own cost per call (at N=1, mostly the LangGraph run); then at
    N=64 with three answers in turn, a vote never settled early, with `settle` on, as by default (a check as each
    candidate lands), and off."""
    rows, messages = [], [{"role": "user", "content": "What is 7 times 8?"}]
    split = ("#### 56", "#### 57", "#### 58")
    for n, rounds, replies, settle in (
        (1, 300, split[:1], False),
        (8, 200, split[:1], False),
        (64, 60, split[:1], False),
        (64, 60, split, False),
        (64, 60, split, True),
    ):
        bare = answering_client(replies)
        wrapped = wrap_openai(answering_client(replies), n=n, policy=CandidatePolicy(use_n=False), settle=settle)
        t = await _interleaved(
            {
                "wrapped": lambda wrapped=wrapped: wrapped.chat.completions.create(model="m", messages=messages),
                "bare": lambda n=n, bare=bare: asyncio.gather(
                    *(bare.chat.completions.create(model="m", messages=messages) for _ in range(n))
                ),
            },
            rounds,
            rest_s=0.0,
        )
        wrapped_ms, bare_ms = (statistics.median(t[name].wall) * 1000 for name in ("wrapped", "bare"))
        vote = f", a split vote, settle {'on' if settle else 'off'}" if len(replies) > 1 else ""
        rows.append(
            (
                f"the package's own time per call, N={n}{vote}, the client answering at once",
                f"{wrapped_ms - bare_ms:.2f} ms ({wrapped_ms:.2f} wrapped, {bare_ms:.2f} bare)",
                "",
            )
        )
    return rows


def billing_rows() -> list[tuple[str, str, str]]:
    billed = {}
    for n_mode in ("honour", "ignore"):
        with server_process("--reply", "#### 56", "--n-mode", n_mode) as base_url:
            model = ChatOpenAI(base_url=base_url, api_key="x", model="m", max_retries=0)
            build_aggregate_graph(model, n=8).invoke({"messages": [HumanMessage(QUESTION)]})
            counters = stats(base_url)
            billed[n_mode] = (counters["prompt_tokens_billed"], counters["calls"])
    (with_n, calls_n), (without, calls) = billed["honour"], billed["ignore"]
    return [
        ("prompt tokens billed, N=8, server honours n", f"{with_n} ({calls_n} request)", ""),
        ("prompt tokens billed, N=8, server ignores n", f"{without} ({calls} requests)", ""),
        ("  ratio with n ÷ without", f"{with_n / without:.3f}", ""),
    ]


def _vote_ms(sets: list[SampleSet]) -> list[float]:
    vote, times = MajorityVote(), []
    vote.invoke(
        SampleSet(
            question="warm-up",
            candidates=[  # math-verify loads its grammars on first use
                Candidate(index=0, answer="x+1"),
                Candidate(index=1, answer=r"\frac{1}{x}"),
            ],
        )
    )
    for s in sets:
        for cache in (_verify_with_timeout, _parsed, _value_key):
            cache.cache_clear()
        started = time.perf_counter()
        vote.invoke(s)
        times.append((time.perf_counter() - started) * 1000)
    return times


def vote_rows() -> list[tuple[str, str, str]]:
    rows = []
    # the real pool: each problem's 8 samples, each drawn 8 times
    sets = [
        s.model_copy(
            update={
                "candidates": [c.model_copy(update={"index": 8 * r + c.index}) for r in range(8) for c in s.candidates]
            }
        )
        for s in load_qwen_math()
    ]
    times = _vote_ms(sets)
    mean, worst = statistics.mean(times), max(times)
    rows.append(
        (
            f"MajorityVote, 64 samples, real MATH pool ({len(sets)} sets, cold cache)",
            f"mean {mean:.2f} ms, max {worst:.1f} ms",
            "≤ 20 ms per set",
        )
    )
    forms = [
        r"\frac{1}{2}",
        "0.5",
        r"\dfrac12",
        "1/2",
        r"\frac{\sqrt{2}}{2}",
        r"\frac{1}{\sqrt{2}}",
        r"\sqrt{2}/2",
        "x+1",
        "1+x",
        r"2\pi",
        r"\pi \cdot 2",
        "(1,2)",
        r"\left(1, 2\right)",
        "7",
        "7.0",
        r"\text{7}",
    ]
    synthetic = [
        SampleSet(
            question="q",
            candidates=[
                Candidate(index=i, text=forms[(i + shift) % len(forms)], answer=forms[(i + shift) % len(forms)])
                for i in range(64)
            ],
        )
        for shift in range(5)
    ]
    first, *again = _vote_ms(synthetic)
    rows.append(
        (
            "MajorityVote, 64 samples, 16 LaTeX forms in 7 classes",
            f"first sight {first:.0f} ms; then mean {statistics.mean(again):.1f} ms",
            "≤ 20 ms per set",
        )
    )
    return rows


def main() -> int:
    ticks = cpu_ticks()
    with server_process("--reply", "#### 56", "--latency", str(LATENCY_S), "--n-mode", "ignore") as base_url:
        single = CandidatePolicy(use_n=False)
        rows = asyncio.run(fanout_rows(base_url, single, "use_n=False", {8: "≤ 1.05", 64: "≤ 1.05"}))
    with server_process("--reply", "#### 56", "--latency", str(LATENCY_S), "--n-mode", "reject") as base_url:
        refusing = "server refusing n, default policy, after the first call"
        rows += asyncio.run(fanout_rows(base_url, None, refusing, {8: "≤ 1.05", 64: "≤ 1.05"}))
        n_requests = stats(base_url)["n_requests"]
    probes = "2: one per endpoint (ChatOpenAI's and the wrapped client's)"
    rows.append(("requests with n > 1 sent to that server (probes)", str(n_requests), probes))
    rows += steal_row(ticks)
    rows += asyncio.run(own_cost_rows())
    rows += billing_rows() + vote_rows()
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':<50}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<50}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
