"""What the SFT and GRPO steps share: loading the model and tokenizer, LoRA, datasets, checkpoints to resume."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aggregate_graph.serve import resolve_model_dir

if TYPE_CHECKING:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def load_tokenizer(model: str) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(model), local_files_only=True)
    if tokenizer.pad_token is None:  # batching needs one; EOS is the usual stand-in
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model: str, adapter: str | None = None, bf16: bool = False) -> PreTrainedModel:
    """The base model, with `adapter` (e.g. the SFT step's LoRA) loaded trainable so training continues it."""
    import torch
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(
        resolve_model_dir(model), dtype=torch.bfloat16 if bf16 else torch.float32, local_files_only=True
    )
    if adapter is not None:
        from peft import PeftModel

        loaded = PeftModel.from_pretrained(loaded, adapter, is_trainable=True)
    return loaded


def lora_config(r: int, alpha: int, dropout: float, target_modules: list[str]) -> LoraConfig:
    from peft import LoraConfig

    targets: str | list[str] = "all-linear" if target_modules == ["all-linear"] else target_modules
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM")


def load_split(data_dir: str, split: str, columns: list[str]) -> Dataset | None:
    """One split of `build`'s output with only the columns the trainer reads (None when the file is empty)."""
    from datasets import Dataset

    path = Path(data_dir) / f"{split}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        return None
    return Dataset.from_list([{c: row[c] for c in columns} for row in rows])


def build_format(data_dir: str) -> str:
    """The aggregator format (ssa / gsr) that `build` wrote, so the reward parses what the prompts ask for."""
    return json.loads((Path(data_dir) / "build.json").read_text(encoding="utf-8"))["config"]["format"]


def last_checkpoint(output_dir: str) -> str | None:
    """The newest `checkpoint-N` in `output_dir`: a rerun resumes from it (optimizer, scheduler, RNG included)."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


def save_step_config(output_dir: str, step: str, config: Any, base_model: str) -> None:
    """Record how the model in `output_dir` was made; `export` reads the base model and writes it to the card."""
    record = {"step": step, "base_model": str(resolve_model_dir(base_model)), "config": asdict(config)}
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / "training_step.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def tokens_seen(trainer: Any) -> float:
    """Tokens trained on (prompt + completion, as TRL counts them in its `num_tokens` log), for throughput."""
    return max((entry.get("num_tokens", 0) for entry in trainer.state.log_history), default=0)
