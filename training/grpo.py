"""`aggregate-train grpo`: TRL's GRPOTrainer on `build`'s prompts. The reward is the runtime's grader
(`answers.equivalent`, or for the choice SSA the right letter) on the runtime's parse of the completion, plus a
small reward for a well-formed output.

Rollouts run on the training model (CPU or GPU) or, with `use_vllm`, on vLLM: `vllm_mode=colocate` shares the
training GPUs, `vllm_mode=server` talks to `trl vllm-serve` on other GPUs (README, "Training an aggregator").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from training.modeling import (
    ModelArguments,
    TrainStepConfig,
    build_format,
    load_model,
    load_split,
    load_tokenizer,
    redeclare,
    train_step,
)
from training.targets import FORMATS, Format


@dataclass
class GRPOStepConfig(TrainStepConfig, GRPOConfig):
    """TRL's `GRPOConfig` (every GRPOTrainer flag: num_generations, beta, temperature, use_vllm, vllm_mode, …) with
    `build`'s data, resuming, the SFT adapter to continue, and this project's defaults: the SSA paper's RL knobs."""

    adapter: str | None = field(default=None, metadata={"help": "a LoRA adapter to keep training, e.g. sft's output"})
    format_reward: float = field(default=0.1, metadata={"help": "added when the output parses in the format"})
    learning_rate: float = redeclare(GRPOConfig, "learning_rate", 1e-5)
    beta: float = redeclare(GRPOConfig, "beta", 0.001, help="KL coefficient against the reference model (0: none)")
    max_completion_length: int | None = redeclare(GRPOConfig, "max_completion_length", 1024)
    per_device_train_batch_size: int = redeclare(
        GRPOConfig, "per_device_train_batch_size", 8, help="completions per device and step"
    )

    def __post_init__(self) -> None:
        if self.remove_unused_columns:
            raise ValueError("remove_unused_columns must stay false: the reward reads the `answer_key` column")
        super().__post_init__()


def rewards(fmt: Format, format_reward: float) -> list[Callable[..., list[float]]]:
    """TRL reward functions: correctness (1.0 when the parsed answer matches the row's `answer_key`) and format."""

    def text(completion: Any) -> str:  # conversational completions are message lists
        return completion[-1]["content"] if isinstance(completion, list) else str(completion)

    def correctness(completions: list[Any], answer_key: list[str], **_: Any) -> list[float]:
        return [float(fmt.same(fmt.answer(text(c)), key)) for c, key in zip(completions, answer_key, strict=True)]

    def well_formed(completions: list[Any], **_: Any) -> list[float]:
        return [format_reward * fmt.well_formed(text(c)) for c in completions]

    return [correctness, well_formed]


def grpo(config: GRPOStepConfig, model: ModelArguments) -> dict[str, Any]:
    """Train, save the model (or adapter) and tokenizer to `output_dir`, and return the trainer's metrics."""
    from trl import GRPOTrainer, get_peft_config

    train = load_split(config.data_dir, "train", ["prompt", "answer_key"])
    # Continuing the SFT adapter keeps one adapter for export; a fresh LoRA is added only without one.
    trainer = GRPOTrainer(
        model=load_model(model, config.adapter, bf16=config.bf16),
        reward_funcs=rewards(FORMATS[build_format(config.data_dir)], config.format_reward),
        args=config,
        train_dataset=train,
        processing_class=load_tokenizer(model.model_name_or_path),
        peft_config=get_peft_config(model) if config.adapter is None else None,
    )
    return train_step("grpo", trainer, config, model)
