"""The engines `aggregate-graph serve-aggregator` serves a model with, behind one interface.

Each `Engine` names itself, declares the flags only it takes, and serves through `Engine.serve(...) -> int` (the
command's exit status). `ENGINES` is the registry the command line dispatches on; an engine that cannot start
raises `EngineError`, its problem and its fix, which the command line tells as `error:` and `hint:` lines. This
module imports neither engine: each is imported when it serves, so the command line lists their flags without
fastapi, uvicorn or torch.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aggregate_graph.serve import DEFAULT_MAX_BODY_BYTES


@dataclass(frozen=True)
class EngineFlag:
    """A command-line flag only one engine takes. It has no default on the command line (an unset flag is None),
    so that another engine can tell it was given and refuse it."""

    name: str
    help: str
    type: Callable[[str], Any] = str

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")


class ServeEntry(Protocol):
    """Serves `model_dir` (or the word `smollm2`) until stopped and returns the command's exit status; `options`
    are the engine's own flags that were given, by `EngineFlag.dest` (the others keep the entry's defaults)."""

    def __call__(
        self,
        model_dir: str,
        *,
        adapter: str | None,
        host: str,
        port: int,
        served_model_name: str,
        api_key: str | None,
        **options: Any,
    ) -> int: ...


@dataclass(frozen=True)
class Engine:
    name: str
    help: str
    flags: tuple[EngineFlag, ...]
    serve: ServeEntry

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """This engine's options among `given` (every engine's flag by dest, None when not given). A flag of
        another engine that was given is a mistake: ignoring it would surprise whoever gave it."""
        for other in ENGINES.values():
            if other is not self:
                for flag in other.flags:
                    if given.get(flag.dest) is not None:
                        raise ValueError(f"{flag.name} applies only to --engine {other.name}")
        return {flag.dest: given[flag.dest] for flag in self.flags if given.get(flag.dest) is not None}


class EngineError(RuntimeError):
    """An engine that cannot start: the problem, and how to fix it (`hint`)."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.hint = hint


def _serve_vllm(model_dir: str, *, api_key: str | None, host: str, port: int, **options: Any) -> int:
    from aggregate_graph.serve.vllm import PortTakenError, VLLMNotFoundError, run_vllm, vllm_command

    try:
        command = vllm_command(model_dir, host=host, port=port, **options)
        key_note = " (API key in VLLM_API_KEY)" if api_key else ""
        print(f"running: {shlex.join(command)}{key_note}", file=sys.stderr, flush=True)
        return run_vllm(command, host=host, port=port, api_key=api_key)  # in vLLM's environment, not argv
    except (VLLMNotFoundError, PortTakenError) as exc:  # their first line is the problem, the rest the fix
        problem, _, fix = str(exc).partition("\n")
        raise EngineError(problem, hint=" ".join(fix.split()) or None) from exc


def _serve_local(model_dir: str, **options: Any) -> int:
    try:
        from aggregate_graph.serve.local import serve_local
    except ImportError as exc:
        raise EngineError(
            f"the local engine needs the local and serve extras: {exc}",
            hint="pip install 'aggregate-graph[local,serve]'",
        ) from exc
    serve_local(model_dir, **options)
    return 0


VLLM = Engine(
    "vllm",
    "a real vLLM from its own environment, `make vllm-env`; the fast path on a GPU",
    (
        EngineFlag("--max-model-len", "vLLM context length (default: sized for 8 candidates)", int),
        EngineFlag(
            "--vllm",
            "vLLM's environment: its folder, python or vllm executable (default: $AGGREGATE_GRAPH_VLLM_ENV, else the "
            ".vllm-env/ that `make vllm-env` builds, here or in a parent folder, else the vllm on PATH)",
        ),
        EngineFlag(
            "--dtype",
            "vLLM's weights precision (default auto: without CUDA, bfloat16 where the CPU computes it natively, "
            "else float32)",
        ),
    ),
    _serve_vllm,
)
LOCAL = Engine(
    "local",
    "CPU, in this process, needs the serve extra: the faster one on a CPU",
    (EngineFlag("--max-body-bytes", f"larger request bodies get 413 (default {DEFAULT_MAX_BODY_BYTES})", int),),
    _serve_local,
)
ENGINES: dict[str, Engine] = {engine.name: engine for engine in (VLLM, LOCAL)}
DEFAULT_ENGINE = VLLM.name

__all__ = ["DEFAULT_ENGINE", "ENGINES", "LOCAL", "VLLM", "Engine", "EngineFlag", "ServeEntry"]
