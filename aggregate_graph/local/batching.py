"""Concurrent one-sample calls on one `LocalChatModel`, decoded as one batch, each answered as soon as its own
row ends.

A graph drawing n candidates from the embedded model asks n concurrent calls. Decoding them one after another
costs n times the memory traffic of one: a 135M model on a CPU is bound by reading its weights, so a batch of
rows costs little more than one row. Decoding them as one `n` request keeps that gain but answers all rows at
the end, so a caller shows no progress. Here the calls that arrive within a short window share one `generate`,
and a stopping criterion hands each row its tokens the step it ends: the first candidate lands when it is done,
not when the longest one is.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

# Calls that start together (a graph's fan-out, a server's concurrent requests) arrive within a few milliseconds;
# the window closes once none arrived for this long, so a lone call waits no longer than that.
ARRIVAL_GAP_S = 0.025
MAX_WAIT_S = 0.1
IDLE_S = 30.0


@dataclass
class RowRequest:
    """One call's prompt tokens, the settings its batch must share (`key`), and where its tokens go."""

    prompt_ids: list[int]
    key: Hashable
    generation_kwargs: dict[str, Any]
    stops: Sequence[str]
    tokens: Future[list[int]] = field(default_factory=Future)


class RowBatcher:
    """Runs submitted `RowRequest`s in batches on a worker thread. `run_batch` (a weak reference to
    `LocalChatModel._decode_batch`, which holds the model's lock while it decodes) decodes one batch of requests
    with equal keys. The worker ends after `IDLE_S` without requests and starts again with the next one, so an
    idle model keeps no thread, and no thread keeps a model alive."""

    def __init__(self, run_batch: weakref.WeakMethod, max_batch: int = 16) -> None:
        self._run_batch, self._max_batch = run_batch, max_batch
        self._queue: queue.Queue[RowRequest] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._worker_lock = threading.Lock()  # the worker's start and end, against a request queued between them

    def submit(self, request: RowRequest) -> list[int]:
        """Queue `request` and wait for its generated tokens (the end token included when it ended)."""
        with self._worker_lock:
            if self._worker is None or not self._worker.is_alive():  # none yet, ended idle, or lost in a fork
                self._worker = threading.Thread(target=self._serve, name="local-chat-model-batcher", daemon=True)
                self._worker.start()
            self._queue.put(request)
        return request.tokens.result()

    def _serve(self) -> None:
        while (arrived := self._next_batch()) is not None:
            groups: dict[Hashable, list[RowRequest]] = {}
            for request in arrived:
                groups.setdefault(request.key, []).append(request)
            for group in groups.values():
                try:
                    if (run_batch := self._run_batch()) is None:
                        raise RuntimeError("the model of these calls was freed")
                    run_batch(group)
                except BaseException as error:  # every caller still waiting hears it; the worker lives on
                    for request in group:
                        if not request.tokens.done():
                            request.tokens.set_exception(error)

    def _next_batch(self) -> list[RowRequest] | None:
        """The requests that arrive together, or None once none came for `IDLE_S` (the worker then ends)."""
        while True:
            try:
                arrived = [self._queue.get(timeout=IDLE_S)]
                break
            except queue.Empty:
                with self._worker_lock:
                    if self._queue.empty():
                        self._worker = None
                        return None
        deadline = time.monotonic() + MAX_WAIT_S
        while len(arrived) < self._max_batch and (left := deadline - time.monotonic()) > 0:
            try:
                arrived.append(self._queue.get(timeout=min(ARRIVAL_GAP_S, left)))
            except queue.Empty:
                break
        return arrived


def decode_rows(model: Any, tokenizer: Any, requests: list[RowRequest], end_ids: set[int], pad_id: int) -> None:
    """One `generate` over `requests` (left-padded to one length); each request's future gets its row's tokens
    the step the row emits an end token or a stop string, and the rest get theirs when decoding ends."""
    import torch

    width = max(len(r.prompt_ids) for r in requests)
    input_ids = torch.tensor([[pad_id] * (width - len(r.prompt_ids)) + r.prompt_ids for r in requests])
    attention_mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in requests])
    stops = requests[0].stops

    def answer_finished_rows(ids: torch.Tensor, scores: Any, **_: Any) -> torch.Tensor:
        finished = torch.zeros(ids.shape[0], dtype=torch.bool)
        for row, request in enumerate(requests):
            if request.tokens.done():
                finished[row] = True
                continue
            generated = ids[row, width:].tolist()
            if generated[-1] in end_ids or (stops and _has_stop(tokenizer, generated, stops)):
                request.tokens.set_result(generated)
                finished[row] = True
        return finished

    sequences = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        pad_token_id=pad_id,
        stopping_criteria=[answer_finished_rows],
        **requests[0].generation_kwargs,
    )
    for row, request in enumerate(requests):  # the rows that ran to max_new_tokens
        if not request.tokens.done():
            request.tokens.set_result(sequences[row, width:].tolist())


def _has_stop(tokenizer: Any, generated: list[int], stops: Sequence[str]) -> bool:
    text = tokenizer.decode(generated, skip_special_tokens=True)
    return any(stop in text for stop in stops)
