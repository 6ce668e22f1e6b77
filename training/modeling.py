"""What the SFT and GRPO steps share: loading the model and tokenizer, LoRA, datasets, checkpoints to resume."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aggregate_graph.registry import AGGREGATOR_FILE, WEIGHTS_FILE
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


def keep_render_settings(data_dir: str, output_dir: str) -> None:
    """Carry `build`'s aggregator.json (format and render settings) and weights.json beside the trained model, so
    whoever loads the model renders prompts exactly as it was trained (`registry.load_trained_aggregator`)."""
    for name in (AGGREGATOR_FILE, WEIGHTS_FILE):
        if (Path(data_dir) / name).is_file():
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(data_dir) / name, Path(output_dir) / name)


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


@dataclass
class TrainStepConfig:
    """What `sft` and `grpo` share: the model, the data, LoRA, and the trainer's schedule and bookkeeping."""

    model: str = field(metadata={"help": "base model folder (or `smollm2`, the embedded SmolLM2-135M-Instruct)"})
    data_dir: str = field(metadata={"help": "`build`'s output folder"})
    output_dir: str = field(metadata={"help": "checkpoints and the final model / adapter"})
    use_lora: bool = True
    lora_r: int = 16
    lora_alpha: int = 32
    # 0: on CPU, dropout masks on every LoRA input cost about a fifth of an SFT step (profiled on SmolLM2-135M).
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    learning_rate: float = 1e-4
    num_train_epochs: float = 1.0
    max_steps: int = field(default=-1, metadata={"help": "stop after this many steps (overrides epochs)"})
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    gradient_checkpointing: bool = False
    bf16: bool = False
    use_cpu: bool = False
    logging_steps: int = 10
    save_steps: int = 200
    save_total_limit: int = 2
    resume: bool = field(default=True, metadata={"help": "continue from the newest checkpoint in output_dir"})
    report_to: str = "none"
    seed: int = 0

    def trainer_args(self) -> dict[str, Any]:
        """The TRL trainer config fields these map onto one for one."""
        names = (
            "output_dir", "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
            "gradient_accumulation_steps", "gradient_checkpointing", "bf16", "use_cpu", "logging_steps",
            "save_steps", "save_total_limit", "report_to", "seed",
        )  # fmt: skip
        return {name: getattr(self, name) for name in names}

    def peft_config(self) -> LoraConfig | None:
        if not self.use_lora:
            return None
        return lora_config(self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)
