"""JSONL files, one JSON value a line: the package's one reader and one writer, shared by the sample-set log, the
pool loaders and the training steps."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


def _json_line(row: Any) -> str:
    return json.dumps(row, ensure_ascii=False)


def read_jsonl(path: str | Path, parse: Callable[[str], Any] = json.loads, what: str = "JSON") -> Iterator[Any]:
    """The rows of a JSONL file, each line through `parse` (blank lines skipped). A malformed line raises
    ValueError naming the file and the line number."""
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield parse(line)
                except ValueError as exc:  # json.JSONDecodeError and pydantic's ValidationError are ValueErrors
                    raise ValueError(f"{path}:{number}: not {what}: {exc}") from exc


def write_jsonl(path: str | Path, rows: Iterable[Any], dump: Callable[[Any], str] = _json_line) -> int:
    """Write `rows` to `path`, each as one line from `dump` (by default JSON, non-ASCII kept as is), creating its
    folder; returns how many."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(dump(row) + "\n")
            count += 1
    return count


__all__ = ["read_jsonl", "write_jsonl"]
