"""The sample-set log: every aggregated run written to the graph's LangGraph store, exported as JSONL
for training (the data flywheel)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from langgraph.store.base import BaseStore

from aggregate_graph.jsonl import read_jsonl, write_jsonl
from aggregate_graph.sample_set import SampleSet

DEFAULT_NAMESPACE = ("aggregate_graph", "sample_sets")


def log_sample_set(store: BaseStore, sample_set: SampleSet, namespace: tuple[str, ...] = DEFAULT_NAMESPACE) -> None:
    store.put(namespace, sample_set.id, sample_set.model_dump(mode="json"), index=False)


async def alog_sample_set(
    store: BaseStore, sample_set: SampleSet, namespace: tuple[str, ...] = DEFAULT_NAMESPACE
) -> None:
    """Async `log_sample_set`: async stores (e.g. AsyncPostgresStore) refuse sync calls on the event loop."""
    await store.aput(namespace, sample_set.id, sample_set.model_dump(mode="json"), index=False)


def iter_logged(
    store: BaseStore, namespace: tuple[str, ...] = DEFAULT_NAMESPACE, page: int = 100
) -> Iterator[SampleSet]:
    offset = 0
    while items := store.search(namespace, limit=page, offset=offset):
        for item in items:
            yield SampleSet.model_validate(item.value)
        offset += len(items)


def export_sample_sets(store: BaseStore, path: str | Path, namespace: tuple[str, ...] = DEFAULT_NAMESPACE) -> int:
    """Write every logged sample set to a JSONL file (oldest first, its folder created); returns how many."""
    sets = sorted(iter_logged(store, namespace), key=lambda s: s.created_at)
    return write_jsonl(path, sets, SampleSet.model_dump_json)


def read_sample_sets(path: str | Path) -> Iterator[SampleSet]:
    """Sample sets from a JSONL file; a malformed line raises naming its line number."""
    return read_jsonl(path, SampleSet.model_validate_json, "a sample set")


__all__ = [
    "DEFAULT_NAMESPACE",
    "alog_sample_set",
    "export_sample_sets",
    "iter_logged",
    "log_sample_set",
    "read_sample_sets",
]
