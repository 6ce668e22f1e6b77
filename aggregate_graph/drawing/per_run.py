"""What the draw tasks of a graph's runs share, by key, until each run aggregates: each wave's `Settling`
(`Settlings`) and each run's places for its requests (`Gates`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerRun(Generic[T]):
    """Objects by a key that starts with its run's key (`"<run key>:…"`), made by the first task that asks.

    Args:
        keep: how many are kept; the oldest give way (runs interrupted or failed never aggregate, so never forget).
    """

    def __init__(self, keep: int = 4096) -> None:
        self._keep = keep
        self._kept: dict[str, T] = {}
        self._lock = threading.Lock()  # blocking runs' tasks ask from worker threads

    def of(self, key: str, make: Callable[[], T]) -> T:
        """The object at `key`, made by `make` if there is none yet."""
        with self._lock:
            if (kept := self._kept.get(key)) is None:
                while len(self._kept) >= self._keep:
                    del self._kept[next(iter(self._kept))]
                kept = self._kept[key] = make()
        return kept

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._kept.get(key)

    def forget(self, run_key: str) -> None:
        """Drop the objects of a run that aggregates."""
        with self._lock:
            for key in [key for key in self._kept if key.startswith(f"{run_key}:")]:
                del self._kept[key]
