"""The `vllm serve` command line for an aggregator model, and the `vllm` executable to run it with.

vLLM pins its own torch and transformers, so it is never imported here: it lives in a separate
environment and this module only builds its command line and hands the process over to it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import NoReturn

from aggregate_graph.serve import DEFAULT_SERVED_NAME, resolve_model_dir

BASE_SUFFIX = "-base"
DEFAULT_K = 8
"""Candidates per aggregation prompt that the default context length is sized for."""

# The ranks vLLM accepts for --max-lora-rank (vllm/config/lora.py, MaxLoRARanks); its default is 16,
# and an adapter of a higher rank is refused at startup unless the flag is raised.
_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_VLLM_DEFAULT_LORA_RANK = 16


class VLLMNotFoundError(RuntimeError):
    """No usable `vllm` executable."""


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


def find_vllm(vllm: str | Path | None = None) -> str:
    """The `vllm` executable: `vllm` if given, else the one on PATH."""
    if vllm is not None:
        path = Path(vllm)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise VLLMNotFoundError(f"--vllm {str(vllm)!r} is not an executable file.\n{_INSTALL_HINT}")
    found = shutil.which("vllm")
    if found is None:
        raise VLLMNotFoundError(f"No `vllm` executable on PATH.\n{_INSTALL_HINT}")
    return found


_INSTALL_HINT = (
    "vLLM pins its own torch and transformers, so install it in a separate environment:\n"
    "    python -m venv vllm-env && vllm-env/bin/pip install vllm\n"
    "then pass --vllm vllm-env/bin/vllm (or use --engine local on a machine without a GPU)."
)


def vllm_command(
    model_dir: str | Path,
    *,
    adapter: str | Path | None = None,
    served_model_name: str = DEFAULT_SERVED_NAME,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int | None = None,
    vllm: str | Path | None = None,
) -> list[str]:
    """`vllm serve` for the aggregator in `model_dir` (or the word `smollm2`), as an argv list.

    With an `adapter` (a PEFT LoRA folder) the adapter is served as `served_model_name` and the bare
    base model as `served_model_name + "-base"`, so clients keep asking for the same name whether or
    not the aggregator is an adapter. `max_model_len` defaults to `max_model_len_for(DEFAULT_K)`,
    capped at the model's own context length. Prefix caching is always on: every aggregation prompt
    starts with the same instructions, and re-aggregating a candidate set repeats its whole prompt.
    """
    executable = find_vllm(vllm)  # first: a missing vLLM should not wait for SmolLM2's conversion
    model = resolve_model_dir(model_dir)
    config = _read_json(model / "config.json", "a transformers model folder")
    if max_model_len is None:
        max_model_len = max_model_len_for(DEFAULT_K)
        if isinstance(limit := config.get("max_position_embeddings"), int):
            max_model_len = min(max_model_len, limit)
    command = [executable, "serve", str(model)]
    if adapter is None:
        command += ["--served-model-name", served_model_name]
    else:
        command += ["--served-model-name", served_model_name + BASE_SUFFIX]
        command += ["--enable-lora", "--lora-modules", f"{served_model_name}={adapter}"]
        rank = _read_json(Path(adapter) / "adapter_config.json", "a PEFT adapter folder").get("r")
        if isinstance(rank, int) and rank > _VLLM_DEFAULT_LORA_RANK:
            command += ["--max-lora-rank", str(_lora_rank_slot(rank))]
    command += ["--host", host, "--port", str(port), "--max-model-len", str(max_model_len), "--enable-prefix-caching"]
    return command


def exec_vllm(command: list[str], api_key: str | None = None) -> NoReturn:
    """Replace this process with vLLM, so signals (Ctrl-C, a supervisor's SIGTERM) reach it directly.

    The API key goes in vLLM's `VLLM_API_KEY` environment variable, not its argv, which any local user can
    read with `ps`."""
    env = dict(os.environ) if api_key is None else {**os.environ, "VLLM_API_KEY": api_key}
    os.execve(command[0], command, env)


def _lora_rank_slot(rank: int) -> int:
    for slot in _VLLM_LORA_RANKS:
        if rank <= slot:
            return slot
    raise ValueError(f"LoRA rank {rank} is above the largest rank vLLM serves ({_VLLM_LORA_RANKS[-1]})")


def _read_json(path: Path, what: str) -> dict[str, object]:
    if not path.is_file():
        raise FileNotFoundError(f"{path.parent} is not {what} (no {path.name} there)")
    return json.loads(path.read_text())
