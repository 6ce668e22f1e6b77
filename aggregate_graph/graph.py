"""The prebuilt graph: prepare → fan out candidate draws with `Send` (in waves when sampling adaptively)
→ aggregate → an AIMessage carrying the sample set.

    START → prepare ─┬─> generate ×k ─> wave_done ─┬─> generate ×k (next wave) …     (adaptive sampling)
                     └───────────────> aggregate <─┘
    START → prepare ───> generate ×k ─> aggregate                                   (one wave of n)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import run_in_executor
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_store, get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Overwrite, RetryPolicy, Send

from aggregate_graph.aggregators.base import stays_first
from aggregate_graph.aggregators.tool_calls import ANSWER_NOW, answering, tool_choices, vote_tool_calls
from aggregate_graph.drawing.course import Draw
from aggregate_graph.drawing.gates import REQUEST_LIMIT_KEY, UNWATCHED_KEY, AggregateGraph, Gates
from aggregate_graph.drawing.models import ModelSpec, build_pool
from aggregate_graph.drawing.sampling import (
    Drawer,
    OnDrawn,
    adraw_candidates,
    adraw_singles,
    draw_candidates,
    draw_singles,
)
from aggregate_graph.drawing.settings import Sampler
from aggregate_graph.drawing.settling import IsSettled, Settling, Settlings, settled_or_drawn
from aggregate_graph.errors import AggregationError, QuorumError, is_transient
from aggregate_graph.log import DEFAULT_NAMESPACE, alog_sample_set, log_sample_set
from aggregate_graph.options import AggregationOptions
from aggregate_graph.reading.answer_types import ANSWER_TYPES, read_answers, settled_answer_type
from aggregate_graph.sample_set import Aggregation, Candidate, SampleSet
from aggregate_graph.state import MSGPACK_TYPES, AggregateState, last_turn
from aggregate_graph.streaming import ANSWER_TAG, AnswerSpeaker, streams_tokens

try:  # kept in langgraph.constants "for backwards compatibility"; tests fail if the key itself changes
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER
except ImportError:  # pragma: no cover
    CONFIG_KEY_CHECKPOINTER = "__pregel_checkpointer"

# Says the decided answer as a chat model's reply, so that a parent streaming `stream_mode="messages"` gets it as
# chunks (LangGraph streams the tokens of chat-model runs, not a node's output).
_SPEAKER = AnswerSpeaker(name="aggregate_answer", tags=[ANSWER_TAG])


def _streams(config: RunnableConfig) -> bool:
    """Whether the answer is said as a chat model's reply: where a handler streams chat models' tokens (LangGraph's
    `stream_mode="messages"`, `astream_events`), except where the caller tags the graph "nostream"
    (`AggregatingChatModel` streams the answer as its own)."""
    callbacks = config.get("callbacks")
    handlers = callbacks.handlers if isinstance(callbacks, BaseCallbackManager) else callbacks or []
    return any(streams_tokens(h) for h in handlers) and TAG_NOSTREAM not in (config.get("tags") or [])


def _checkpointed(config: RunnableConfig) -> bool:
    """Whether a checkpointer saves this run's task writes: LangGraph puts the graph's own, or else a parent's,
    in each task's config (a parent's also when the graph was compiled with `checkpointer=False`)."""
    return (config.get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER) is not None


def _ignored(candidates: list[Candidate]) -> None:
    """A reporter with nothing to tell."""


class _SyncAsyncNode(Runnable[Any, Any]):
    """A node (or an edge's routing function) with a sync and an async body; without `afunc`, the sync body is
    quick, non-blocking work that runs on the event loop. LangGraph traces each node task itself; RunnableLambda
    would also inspect both functions' signatures on every call (~0.5 ms per candidate), and LangGraph runs a
    sync-only function in a worker thread (~0.3 ms per hop)."""

    def __init__(self, name: str, func: Any, afunc: Any = None) -> None:
        self.name, self.func, self.afunc = name, func, afunc

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self.func(input, ensure_config(config))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if self.afunc is None:
            return self.func(input, ensure_config(config))
        return await self.afunc(input, ensure_config(config))


class _Nodes:
    """The graph's node functions, closed over the options."""

    def __init__(
        self, pool: list[Sampler], options: AggregationOptions, log_namespace: tuple[str, ...], may_checkpoint: bool
    ) -> None:
        self.pool, self.n, self.aggregator, self.fallback = pool, options.n, options.aggregator, options.fallback
        self.answer_type, self.policy, self.adaptive = options.answer_type, options.policy, options.adaptive
        self.min_candidates, self.max_concurrency = options.min_candidates, options.max_concurrency
        self.log_namespace, self.may_checkpoint, self.settle = log_namespace, may_checkpoint, options.settle
        self.stream_candidates = options.stream_candidates
        self._settlings = Settlings(self.n, self._settle_check)  # each wave's, until its run aggregates
        self._gates = Gates()  # places of runs whose request tasks could outnumber their limit, until they aggregate

    def prepare(self, state: AggregateState, config: RunnableConfig) -> dict[str, Any]:
        question, _ = last_turn(state.get("messages") or [])
        return {
            "question": question,
            "candidates": Overwrite([]),
            "cancelled": Overwrite([]),
            "run_key": uuid.uuid4().hex,
            "sample_set": None,
        }

    def route(self, state: AggregateState, config: RunnableConfig) -> list[Send] | str:
        """Sends for the next wave of draws, or "aggregate" when there is nothing more to draw.

        A sampler that takes `n` gets one request for its share of the wave. Otherwise each candidate is its own
        request: with a checkpointer, each in its own task, so that LangGraph saves each as it finishes; without
        one, a sampler's share of the wave is one task (a LangGraph task costs ~0.6 ms of CPU, and there is
        nothing to save), and the tasks split the run's limit on requests in flight (`_request_limit`) between them
        (with more samplers than the limit, each task also waits for its run's gate: `Gates`); with one, each
        request waits for its run's gate."""
        candidates = state.get("candidates") or []
        drawn = len(candidates)
        if drawn >= self.n or state.get("cancelled"):  # every candidate drawn, or the vote settled early
            return "aggregate"
        if drawn and self.adaptive is not None and self.adaptive.satisfied(candidates):
            return "aggregate"
        size = self.n if self.adaptive is None else (self.adaptive.wave_size if drawn else self.adaptive.first_wave)
        wave = max((c.wave for c in candidates), default=-1) + 1
        key = f"{state.get('run_key')}:{wave}" if self.settle else None
        question, conversation = last_turn(state["messages"])
        if key is not None and candidates:  # a later wave settles on the earlier waves' candidates too
            self._settlings.of(key, question, candidates)
        by_sampler: dict[int, list[int]] = {}
        for index in range(drawn, min(self.n, drawn + size)):
            by_sampler.setdefault(index % len(self.pool), []).append(index)
        messages, draws, limit = tuple(conversation), [], self._request_limit(config)
        if self.may_checkpoint and _checkpointed(config):
            gate = (str(state.get("run_key")), limit)
            for s, indices in by_sampler.items():
                groups = [indices] if self.pool[s].supports_n(self.policy) else [[i] for i in indices]
                draws += [Draw(s, tuple(g), messages, wave, limit, settle_key=key, gate=gate) for g in groups]
        else:  # one task per sampler, sharing the run's limit on requests in flight
            # more samplers than places: each task's share is one, and the tasks wait for a place as well
            gate = (str(state.get("run_key")), limit) if len(by_sampler) > limit else None
            for k, (s, indices) in enumerate(by_sampler.items()):
                share = max(1, limit // len(by_sampler) + (k < limit % len(by_sampler)))
                draws.append(Draw(s, tuple(indices), messages, wave, share, settle_key=key, gate=gate))
        return [Send("generate", draw) for draw in draws]

    def _request_limit(self, config: RunnableConfig) -> int:
        """The run's limit on candidate requests in flight: `max_concurrency`, or the run config's own
        (`AggregateGraph`)."""
        return (config.get("configurable") or {}).get(REQUEST_LIMIT_KEY) or self.max_concurrency

    async def aroute(self, state: AggregateState, config: RunnableConfig) -> list[Send] | str:
        """Async `route`: whether adaptive sampling is satisfied is decided off the event loop, since grouping
        equivalent answers may parse LaTeX with math-verify (up to seconds on first sight of a form)."""
        if self.adaptive is not None and state.get("candidates"):
            return await run_in_executor(config, self.route, state, config)
        return self.route(state, config)

    def _read(self, question: str, candidates: Sequence[Candidate], answer_type: Any = None) -> str:
        """Reads the answers of `candidates` (in place) under the graph's answer type (or `answer_type`, the one
        it settled on), as one set; the type used.

        A candidate cut off by the token limit has stated no answer: its last number is not one. An abstention
        ("The answer is unknown.") is no answer either: it is recorded in `abstention` and does not vote."""
        readable = [c for c in candidates if c.ok]
        reading = read_answers(
            question,
            [c.text for c in readable],
            self.answer_type if answer_type is None else answer_type,
            cut_off=[c.finish_reason == "length" for c in readable],
            abstentions=self.policy.abstentions,
        )
        for c, answer, abstention in zip(readable, reading.answers, reading.abstentions, strict=True):
            c.answer, c.abstention = answer, abstention
        return reading.type

    def _settle_check(self, question: str) -> IsSettled:
        """A wave's settle check (`_is_settled`), with the copies it has read."""
        return partial(self._is_settled, question, {})

    def _is_settled(self, question: str, read: dict[int, Candidate], landed: list[Candidate], outstanding: int) -> bool:
        """Whether `outstanding` more candidates can no longer change the decision on those `landed` (the check's
        own copies, kept from check to check; `read`: those already read, by index): the tool-plan vote stays
        as it is, and a tool plan leads or the aggregator's decision is settled (`Aggregator.settled`; a Runnable
        without `settled` waits for every candidate)."""
        succeeded = sum(c.ok for c in landed)
        # a tool-plan vote (answering now is one) stays first only if its lead is more than the outstanding votes
        if succeeded < self.min_candidates or succeeded <= outstanding or not hasattr(self.aggregator, "settled"):
            return False
        sample_set = SampleSet(question=question, candidates=landed)  # the same candidate objects, read below
        votes = {key: float(len(members)) for key, members in tool_choices(sample_set).items()}
        if not stays_first(votes, outstanding):  # a tool plan out there could still win
            return False
        if max(votes, key=votes.__getitem__) != ANSWER_NOW:  # a tool plan wins, whatever the texts say
            return True
        # the answers must read the same once all are in: the set's type settled, and a type that reads each text
        # alone (a span is read against the set's other short answers, so a later one can re-read a sentence)
        texts = [c.text for c in landed if c.ok]
        answer_type = settled_answer_type(question, texts, self.answer_type, outstanding)
        if answer_type in (None, "span"):
            return False
        # a settled type stays settled and reads each text alone: a copy read under it keeps its answer
        unread = [c for c in landed if read.get(c.index) is not c]
        self._read(question, unread, answer_type if answer_type in ANSWER_TYPES else None)
        read.update((c.index, c) for c in unread)
        return bool(self.aggregator.settled(answering(sample_set), outstanding))

    def _settling(self, draw: Draw) -> Settling | None:
        """The `Settling` the draws of `draw`'s wave share, or None: no settling."""
        if draw.settle_key is None:
            return None
        if draw.wave:  # made by `route` with the earlier waves' candidates; without them (a run resumed in
            return self._settlings.get(draw.settle_key)  # another process), the wave waits for all of its draws
        question, _ = last_turn(draw.messages)
        return self._settlings.of(draw.settle_key, question)

    def _reporter(self, draw: Draw, config: RunnableConfig, settling: Settling | None = None) -> OnDrawn:
        """Tells `settling` that each candidate landed and, unless nobody watches the run as it goes (`unwatched`)
        and no adaptive wave reads the answers, reads it (alone: the whole set is read again before the vote) and
        tells of it in a `custom` event."""
        if (config.get("configurable") or {}).get(UNWATCHED_KEY) and self.adaptive is None:
            return settling.land if settling is not None else _ignored
        write, n = get_stream_writer(), self.n
        question, _ = last_turn(draw.messages)

        def report(candidates: list[Candidate]) -> None:
            if settling is not None:
                settling.land(candidates)
            for c in candidates:
                self._read(question, [c])
                write(
                    {
                        "candidate": c.index,
                        "of": n,
                        "answer": c.answer,
                        "model": c.model,
                        "error": c.error,
                        "latency_s": c.latency_s,
                    }
                )

        return report

    def _singles(self, draw: Draw) -> bool:
        """Whether `draw` is a wave's single requests drawn in one task (`route`, for a sampler that takes no `n`)."""
        return len(draw.indices) > 1 and not self.pool[draw.sampler_index].supports_n(self.policy)

    @staticmethod
    def _drawn(draw: Draw, candidates: list[Candidate], settling: Settling | None = None) -> dict[str, Any]:
        """The draw's update: its candidates (every one that landed: none is lost to a cancellation), and the
        indices settling early cancelled."""
        if settling is not None:
            candidates = list({c.index: c for c in [*settling.landed(draw.indices), *candidates]}.values())
            settling.stamp(candidates)  # a streamed request's choices, rebuilt once it ended, landed as reported
        landed = {c.index for c in candidates}
        return {"candidates": candidates, "cancelled": [i for i in draw.indices if i not in landed]}

    def _drawer(self, draw: Draw, config: RunnableConfig, settling: Settling | None) -> Drawer:
        return Drawer(self.pool[draw.sampler_index], config, settling, stream_candidates=self.stream_candidates)

    def generate(self, draw: Draw, config: RunnableConfig) -> dict[str, Any]:
        if draw.gate is None:
            return self._generate(draw, config)
        run_key, limit = draw.gate
        with self._gates.held(run_key, limit):
            return self._generate(draw, config)

    async def agenerate(self, draw: Draw, config: RunnableConfig) -> dict[str, Any]:
        if draw.gate is None:
            return await self._agenerate(draw, config)
        run_key, limit = draw.gate
        async with self._gates.aheld(run_key, limit):
            return await self._agenerate(draw, config)

    def _generate(self, draw: Draw, config: RunnableConfig) -> dict[str, Any]:
        settling = self._settling(draw)
        drawer, report = self._drawer(draw, config, settling), self._reporter(draw, config, settling)
        if self._singles(draw):
            return self._drawn(draw, draw_singles(draw, self.policy, drawer, report), settling)
        if drawer.not_needed():
            return self._drawn(draw, [])
        return self._drawn(draw, draw_candidates(draw, self.policy, drawer, report), settling)

    async def _agenerate(self, draw: Draw, config: RunnableConfig) -> dict[str, Any]:
        settling = self._settling(draw)
        drawer, report = self._drawer(draw, config, settling), self._reporter(draw, config, settling)
        if self._singles(draw):
            return self._drawn(draw, await adraw_singles(draw, self.policy, drawer, report), settling)
        if drawer.not_needed():
            return self._drawn(draw, [])
        drawing = adraw_candidates(draw, self.policy, drawer, report)
        if settling is None:
            return self._drawn(draw, await drawing)
        return self._drawn(draw, await settled_or_drawn(settling, asyncio.ensure_future(drawing)), settling)

    def _sample_set(self, state: AggregateState) -> SampleSet:
        """The set to aggregate, its answers read as one set (a sentence backs one of the set's short answers)."""
        self._settlings.forget(str(state.get("run_key")))
        self._gates.forget(str(state.get("run_key")))
        candidates = [c.model_copy() for c in state.get("candidates") or []]
        answer_type = self._read(state["question"], candidates)
        sample_set = SampleSet(
            question=state["question"],
            candidates=candidates,
            requested_n=self.n,
            metadata={
                "waves": max((c.wave for c in candidates), default=0) + 1,
                "samples_saved": self.n - len(candidates),
                "cancelled": sorted(state.get("cancelled") or []),
                # succeeded candidates whose request reported no usage (a streamed `n` request closed once
                # settled, an upstream that sends none): `SampleSet.usage` leaves their tokens out
                "usage_unreported": [c.index for c in candidates if c.ok and c.usage is None],
                "answer_type": answer_type,
                "answers_read": sum(c.answer is not None for c in candidates),
            },
        )
        if len(sample_set.succeeded) < self.min_candidates:
            reasons = sorted({c.error or "" for c in sample_set.failed})
            raise QuorumError(
                f"only {len(sample_set.succeeded)} of {len(candidates)} candidates succeeded, below "
                f"min_candidates={self.min_candidates}; errors: {'; '.join(reasons)[:1000]}",
                sample_set,
            )
        return sample_set

    @staticmethod
    def _failure_record(exc: AggregationError | QuorumError) -> SampleSet | None:
        """What the log keeps of a run that could not be aggregated: every candidate, and why."""
        if exc.sample_set is None:
            return None
        return exc.sample_set.model_copy(update={"metadata": {**exc.sample_set.metadata, "error": str(exc)}})

    @staticmethod
    def _output(sample_set: SampleSet) -> dict[str, Any]:
        usage = sample_set.usage
        message = AIMessage(
            id=str(uuid.uuid4()),  # the streamed chunks' id too: LangGraph then does not send the message twice
            content=sample_set.aggregation.text if sample_set.aggregation else "",
            tool_calls=sample_set.aggregation.tool_calls if sample_set.aggregation else [],
            response_metadata={"sample_set": sample_set.model_dump(mode="json")},
            usage_metadata=usage.usage_metadata(),
        )
        # the state's candidates as the set reads them: a run nobody watches does not read them as they land
        return {"sample_set": sample_set, "messages": [message], "candidates": Overwrite(sample_set.candidates)}

    def _decided(self, sample_set: SampleSet, aggregation: Aggregation, choices: dict[str, float]) -> SampleSet:
        """The set with its aggregation, whose details say how the answers were read (and, when tools were
        proposed and answering won, the choices)."""
        read = {key: sample_set.metadata[key] for key in ("answer_type", "answers_read")}
        details = {**aggregation.details, **read, **({"choices": choices} if choices else {})}
        return sample_set.model_copy(update={"aggregation": aggregation.model_copy(update={"details": details})})

    def _decide(self, sample_set: SampleSet, config: RunnableConfig) -> SampleSet:
        """A voted tool plan, or the aggregator's answer; the fallback's pick when the aggregator finds nothing
        to decide on (small talk, prose), with the reason in `details["fallback_reason"]`."""
        plan, choices = vote_tool_calls(sample_set)
        if plan is not None:
            return sample_set.model_copy(update={"aggregation": plan})
        voters = answering(sample_set)
        try:
            aggregation = self.aggregator.invoke(voters, config)
        except AggregationError as exc:
            if self.fallback is None:
                raise
            aggregation = self._fell_back(self.fallback.invoke(voters, config), exc)
        return self._decided(sample_set, aggregation, choices)

    async def _adecide(self, sample_set: SampleSet, config: RunnableConfig) -> SampleSet:
        plan, choices = vote_tool_calls(sample_set)
        if plan is not None:
            return sample_set.model_copy(update={"aggregation": plan})
        voters = answering(sample_set)
        try:
            aggregation = await self.aggregator.ainvoke(voters, config)
        except AggregationError as exc:
            if self.fallback is None:
                raise
            aggregation = self._fell_back(await self.fallback.ainvoke(voters, config), exc)
        return self._decided(sample_set, aggregation, choices)

    @staticmethod
    def _fell_back(aggregation: Aggregation, exc: AggregationError) -> Aggregation:
        return aggregation.model_copy(update={"details": {**aggregation.details, "fallback_reason": str(exc)}})

    def aggregate(self, state: AggregateState, config: RunnableConfig) -> dict[str, Any]:
        store = get_store()
        try:
            sample_set = self._decide(self._sample_set(state), config)
        except (AggregationError, QuorumError) as exc:
            if store is not None and (record := self._failure_record(exc)) is not None:
                log_sample_set(store, record, self.log_namespace)
            raise
        if store is not None:
            log_sample_set(store, sample_set, self.log_namespace)
        output = self._output(sample_set)
        if _streams(config):
            _SPEAKER.invoke(output["messages"], config)
        return output

    async def aaggregate(self, state: AggregateState, config: RunnableConfig) -> dict[str, Any]:
        store = get_store()
        try:
            sample_set = await self._adecide(self._sample_set(state), config)
        except (AggregationError, QuorumError) as exc:
            if store is not None and (record := self._failure_record(exc)) is not None:
                await alog_sample_set(store, record, self.log_namespace)
            raise
        if store is not None:
            await alog_sample_set(store, sample_set, self.log_namespace)
        output = self._output(sample_set)
        if _streams(config):
            await _SPEAKER.ainvoke(output["messages"], config)
        return output


def build_aggregate_graph(
    model: ModelSpec | Sampler | Sequence[ModelSpec | Sampler],
    n: int | None = None,
    *,
    options: AggregationOptions | None = None,
    checkpointer: BaseCheckpointSaver | bool | None = None,
    store: BaseStore | None = None,
    log_namespace: tuple[str, ...] = DEFAULT_NAMESPACE,
    name: str = "aggregate_graph",
    **fields: Any,
) -> CompiledStateGraph:
    """A compiled graph that answers the last human message with `n` candidates and an aggregation.

    `model` is a chat model, a spec string ("openai:gpt-4o-mini", "local") or a list of them; with
    `system_prompts` / `temperatures` the pool is every combination, and candidate i comes from pool[i % len].
    How candidates are drawn and aggregated is an `AggregationOptions` (`options=`), or its fields as keyword
    arguments (`n`, `aggregator`, `answer_type` …; given beside `options=`, they replace its fields).
    `aggregator` is an Aggregator or a name from the registry (`"majority"`, the default; `"ssa"`: the shipped
    trained SSA, in-process; see `load_aggregator`). When candidates call tools, the graph votes on the plans
    first (`vote_tool_calls`); when the aggregator finds no answer to decide on, `fallback` (the medoid
    candidate; None: raise) picks one, and its details say how the answers were read. `answer_type` says what kind
    of answer to read from each candidate: "auto" (chosen per question: `answer_types.infer_answer_type`), "math",
    "choice", "boolean", "span", a compiled regular expression or a function of the text (`answer_types`).
    The output state has `messages` (ending in the aggregated AIMessage) and `sample_set`.

    Args:
        model: the candidates' chat model, a spec string, a `Sampler`, or a list of them (the pool).
        n: candidates per question (`options.n`).
        options: an `AggregationOptions`; its fields may also be given as keywords (`fields`), which replace it.
        checkpointer: as in `StateGraph.compile`; False: never checkpoint, even inside a parent that does.
        store: where each sample set is logged (`log_namespace`), e.g. for training an aggregator later.
        log_namespace: the store namespace of the sample-set log.
        name: the compiled graph's name.
        **fields: `AggregationOptions` fields (`aggregator`, `answer_type`, `settle`, …).

    Returns:
        The compiled graph (a Runnable) over `AggregateState`.

    Example:
        ```python
        from langchain_openai import ChatOpenAI
        from aggregate_graph import build_aggregate_graph
        from aggregate_graph.testing import OpenAITestServer

        with OpenAITestServer(["The answer is 42.", "42", "It is 41."]) as server:
            model = ChatOpenAI(base_url=server.base_url, api_key="sk-test", model="any", max_retries=0)
            out = build_aggregate_graph(model, n=3).invoke({"messages": [("user", "What is 6 times 7?")]})
        assert out["messages"][-1].content == "The answer is 42."
        assert out["sample_set"].aggregation.votes == {"42": 2.0, "41": 1.0}
        ```
    """
    options = AggregationOptions.of(options, **({"n": n} if n is not None else {}), **fields)
    adaptive = options.adaptive
    nodes = _Nodes(
        build_pool(model, options.system_prompts, options.temperatures),
        options,
        log_namespace,
        checkpointer is not False,  # False: never, even inside a parent that has one
    )
    route = _SyncAsyncNode("route", nodes.route, nodes.aroute)
    builder = StateGraph(AggregateState)
    builder.add_node("prepare", _SyncAsyncNode("prepare", nodes.prepare))
    builder.add_node("generate", _SyncAsyncNode("generate", nodes.generate, nodes.agenerate))
    builder.add_node(
        "aggregate",
        _SyncAsyncNode("aggregate", nodes.aggregate, nodes.aaggregate),
        retry_policy=RetryPolicy(max_attempts=3, retry_on=is_transient),
    )
    builder.add_edge(START, "prepare")
    builder.add_conditional_edges("prepare", route, ["generate", "aggregate"])
    if adaptive is None:  # one wave draws all n (every index gets a record, failed or not): then aggregate
        builder.add_edge("generate", "aggregate")
    else:  # a join, so that the next route sees the whole wave
        builder.add_node("wave_done", _SyncAsyncNode("wave_done", lambda state, config: {}))
        builder.add_edge("generate", "wave_done")
        builder.add_conditional_edges("wave_done", route, ["generate", "aggregate"])
    builder.add_edge("aggregate", END)
    graph = builder.compile(checkpointer=checkpointer, store=store, name=name)
    attrs = {key: value for key, value in graph.__dict__.items() if key != "__orig_class__"}  # as Pregel.copy
    configured = AggregateGraph(**attrs).with_config(max_concurrency=options.max_concurrency)
    # In strict mode LangGraph derives a msgpack allowlist from the state schema at compile time and applies it
    # to the checkpointer the graph runs with, also one passed in config (the parent's, or LangGraph Server's
    # own). A copy drops it (langgraph 1.2; `AggregateGraph.copy` keeps it), so carry it over, with the Send
    # payload type.
    if getattr(graph, "_serde_allowlist", None) is not None:
        configured._serde_allowlist = graph._serde_allowlist | set(MSGPACK_TYPES)
    return configured
