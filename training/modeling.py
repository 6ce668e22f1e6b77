"""What the SFT and GRPO steps share: their configs on top of TRL's (`ModelConfig` for the model and LoRA, this
project's defaults for `SFTConfig` / `GRPOConfig`), loading the model and tokenizer, datasets, checkpoints to resume."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainingArguments
from trl import ModelConfig, get_quantization_config

from aggregate_graph.aggregators.trained import AGGREGATOR_FILE, WEIGHTS_FILE
from aggregate_graph.jsonl import read_jsonl
from aggregate_graph.serve import resolve_model_dir

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def model_folder(model: str) -> Path:
    """The local folder `model` names (`smollm2`: the embedded one). Checked here: transformers would read a missing
    folder as a Hub id and fail on the id's spelling or on being offline."""
    folder = resolve_model_dir(model)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"model {model}: not a transformers model folder (no config.json there); smollm2 is the embedded "
            "SmolLM2-135M-Instruct"
        )
    return folder


def load_tokenizer(model: str) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_folder(model), local_files_only=True)
    if tokenizer.pad_token is None:  # batching needs one; EOS is the usual stand-in
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model: ModelConfig, adapter: str | None = None, bf16: bool = False) -> PreTrainedModel:
    """The base model, with `adapter` (e.g. the SFT step's LoRA) loaded trainable so training continues it.
    Loaded in `model.dtype`, or without one in bfloat16 when training in bf16 and float32 otherwise."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = model.dtype or ("bfloat16" if bf16 else "float32")
    loaded = AutoModelForCausalLM.from_pretrained(
        model_folder(model.model_name_or_path),
        dtype=dtype if dtype == "auto" else getattr(torch, dtype),
        attn_implementation=model.attn_implementation,
        quantization_config=get_quantization_config(model),
        local_files_only=True,
    )
    if adapter is not None:
        from peft import PeftModel

        loaded = PeftModel.from_pretrained(loaded, adapter, is_trainable=True)
    return loaded


def load_split(data_dir: str, split: str, columns: list[str]) -> Dataset | None:
    """One split of `build`'s output with only the columns the trainer reads (None when the file is empty; an
    error for an empty train split, which there is nothing to learn from)."""
    from datasets import Dataset

    path = Path(data_dir) / f"{split}.jsonl"
    rows = list(read_jsonl(path))
    if not rows and split == "train":
        raise ValueError(f"{path} has no examples")
    if not rows:
        return None
    return Dataset.from_list([{c: row[c] for c in columns} for row in rows])


def build_format(data_dir: str) -> str:
    """The aggregator format (ssa / gsr) that `build` wrote, so the reward parses what the prompts ask for."""
    return json.loads((Path(data_dir) / "build.json").read_text(encoding="utf-8"))["config"]["format"]


def keep_render_settings(data_dir: str, output_dir: str) -> None:
    """Carry `build`'s aggregator.json (format and render settings) and weights.json beside the trained model, so
    whoever loads the model renders prompts exactly as it was trained (`load_trained_aggregator`)."""
    for name in (AGGREGATOR_FILE, WEIGHTS_FILE):
        if (Path(data_dir) / name).is_file():
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(data_dir) / name, Path(output_dir) / name)


def last_checkpoint(output_dir: str) -> str | None:
    """The newest `checkpoint-N` in `output_dir`: a rerun resumes from it (optimizer, scheduler, RNG included)."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


def save_step_config(step: str, args: TrainingArguments, model: ModelConfig) -> None:
    """Record how the model in `args.output_dir` was made (the trainer's and the model's configs, the processes it
    ran on and the global batch they made together); `export` reads the base model and writes the record to the
    card."""
    base = str(resolve_model_dir(model.model_name_or_path))
    world_size = args.world_size
    record = {
        "step": step,
        "base_model": base,
        "world_size": world_size,
        "global_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * world_size,
        "config": args.to_dict() | asdict(model),
    }
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=2, default=str) + "\n"
    (Path(args.output_dir) / "training_step.json").write_text(text, encoding="utf-8")


def train_step(step: str, trainer: Any, config: Any, model: ModelConfig) -> dict[str, Any]:
    """Train (from the newest checkpoint in `config.output_dir` when `config.resume`), save what the step made
    there — the model (or adapter), its tokenizer, `build`'s render settings and the step's record — and return
    its metrics. Every process takes part in saving the model (the trainer writes it from the main one); the rest
    is written by the main process alone, so a run of several processes (`torchrun --nproc_per_node N`) writes
    each file once."""
    resume = last_checkpoint(config.output_dir) if config.resume else None
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(config.output_dir)
    if trainer.is_world_process_zero():
        trainer.processing_class.save_pretrained(config.output_dir)
        keep_render_settings(config.data_dir, config.output_dir)
        save_step_config(step, config, model)
    # Every process waits for the main one's writes, then leaves the process group together: a process that exits
    # while another still holds gloo connections to it can abort at interpreter exit (seen once in CI as SIGABRT)
    trainer.accelerator.wait_for_everyone()
    if config.world_size > 1:
        # The DDP wrapper goes first, while the process group is still registered: freed after `end_training`, its
        # reducer holds the group's last reference and destroys it holding the GIL, joining gloo's worker threads,
        # one of which can be waiting for the GIL to free a tensor (a deadlock seen once in the 2-process test).
        trainer.model_wrapped = trainer.model
        trainer.accelerator.free_memory()
    trainer.accelerator.end_training()
    return dict(result.metrics) | {"num_tokens": tokens_seen(trainer), "world_size": config.world_size}


def tokens_seen(trainer: Any) -> float:
    """Tokens trained on (prompt + completion, as TRL counts them in its `num_tokens` log), for throughput."""
    return max((entry.get("num_tokens", 0) for entry in trainer.state.log_history), default=0)


def redeclare(config: type, name: str, default: Any = MISSING, help: str | None = None, **kwargs: Any) -> Any:
    """A TRL config's field as a subclass redeclares it: another default, the same help unless given (so the flag
    reads as before), and `aliases` (other flag names, see `training.parsing`) or `kw_only` when given."""
    metadata = {**config.__dataclass_fields__[name].metadata, **({"help": help} if help else {})}
    if aliases := kwargs.pop("aliases", None):
        metadata["aliases"] = aliases
    return field(default=default, metadata=metadata, **kwargs)


@dataclass
class ModelArguments(ModelConfig):
    """TRL's `ModelConfig` (the model and its LoRA; `trl.get_peft_config` turns it into peft's config) with this
    project's names and defaults: `--model` and `--use_lora` / `--no_use_lora` as well as TRL's names, LoRA on."""

    model_name_or_path: str | None = redeclare(
        ModelConfig,
        "model_name_or_path",
        None,
        help="base model folder (or `smollm2`, the embedded SmolLM2-135M-Instruct)",
        aliases=["--model"],
    )
    dtype: str | None = redeclare(
        ModelConfig, "dtype", None, help="load dtype (default: bfloat16 with --bf16, else float32)"
    )
    use_peft: bool = redeclare(
        ModelConfig, "use_peft", True, help="train a LoRA adapter; --no_use_lora: all weights", aliases=["--use_lora"]
    )
    # 0: on CPU, dropout masks on every LoRA input cost about a fifth of an SFT step (profiled on SmolLM2-135M).
    lora_dropout: float = redeclare(ModelConfig, "lora_dropout", 0.0)
    lora_target_modules: list[str] | None = field(
        default_factory=lambda: ["all-linear"],
        metadata={"help": "LoRA target modules (all-linear: every linear layer)"},
    )

    def __post_init__(self) -> None:
        if not self.model_name_or_path:
            raise ValueError("a base model is required: --model (--model_name_or_path) FOLDER")
        if self.lora_r < 1 or self.lora_alpha <= 0:
            raise ValueError(f"lora_r must be at least 1 and lora_alpha positive, got {self.lora_r}, {self.lora_alpha}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        super().__post_init__()
        # TRL turns a one-name list into the name; peft reads a string as a regex over full module paths, so only
        # `all-linear` (peft's keyword) stays a string: `--lora_target_modules q_proj` still means the q_proj layers.
        if isinstance(self.lora_target_modules, str) and self.lora_target_modules != "all-linear":
            self.lora_target_modules = [self.lora_target_modules]


@dataclass
class TrainStepConfig:
    """What `sft` and `grpo` add to TRL's trainer configs (mixed in before `SFTConfig` / `GRPOConfig`): `build`'s
    data, resuming, and this project's defaults for the schedule and bookkeeping. The model is `ModelArguments`."""

    output_dir: str = redeclare(
        TrainingArguments, "output_dir", help="checkpoints and the final model / adapter", kw_only=True
    )
    data_dir: str = field(kw_only=True, metadata={"help": "`build`'s output folder"})
    resume: bool = field(default=True, metadata={"help": "continue from the newest checkpoint in output_dir"})
    learning_rate: float = redeclare(TrainingArguments, "learning_rate", 1e-4)
    num_train_epochs: float = redeclare(TrainingArguments, "num_train_epochs", 1.0)
    per_device_train_batch_size: int = redeclare(TrainingArguments, "per_device_train_batch_size", 4)
    # Off unless asked for (TRL turns it on): None is transformers' own default, which resolves to False without
    # its deprecation warning; --activation_checkpointing (the new name) or --gradient_checkpointing turn it on.
    gradient_checkpointing: bool | None = redeclare(TrainingArguments, "gradient_checkpointing", None)
    bf16: bool = redeclare(TrainingArguments, "bf16", False)
    save_steps: float = redeclare(TrainingArguments, "save_steps", 200)
    save_total_limit: int | None = redeclare(TrainingArguments, "save_total_limit", 2)
    seed: int = redeclare(TrainingArguments, "seed", 0)

    def __post_init__(self) -> None:
        # Launched as several processes (torchrun) on a machine without an accelerator: transformers sets up DDP
        # over gloo only when told the device is the CPU; otherwise each process trains alone on its own share.
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not _has_accelerator():
            self.use_cpu = True
        super().__post_init__()  # type: ignore[misc]


def _has_accelerator() -> bool:
    import torch

    return torch.accelerator.is_available()
