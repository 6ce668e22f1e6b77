"""`aggregate-train grpo`: TRL's GRPOTrainer on `build`'s prompts. The reward is the runtime's grader
(`answers.equivalent`) on the runtime's parse of the completion, plus a small reward for a well-formed output.

Rollouts run on the training model (CPU or GPU) or, with `use_vllm`, on vLLM: `vllm_mode=colocate` shares the
training GPUs, `vllm_mode=server` talks to `trl vllm-serve` on other GPUs (README, "Training an aggregator").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aggregate_graph import equivalent
from training.modeling import (
    TrainStepConfig,
    build_format,
    keep_render_settings,
    last_checkpoint,
    load_model,
    load_split,
    load_tokenizer,
    save_step_config,
    tokens_seen,
)
from training.targets import FORMATS, Format


@dataclass
class GRPOStepConfig(TrainStepConfig):
    adapter: str | None = field(default=None, metadata={"help": "a LoRA adapter to keep training, e.g. sft's output"})
    # The SSA paper's RL knobs: samples per prompt, learning rate, KL coefficient, completion length, temperature.
    num_generations: int = field(default=8, metadata={"help": "completions sampled per prompt (the group)"})
    learning_rate: float = 1e-5
    beta: float = field(default=0.001, metadata={"help": "KL coefficient against the reference model (0: none)"})
    max_completion_length: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    format_reward: float = field(default=0.1, metadata={"help": "added when the output parses in the format"})
    loss_type: str = "dapo"
    num_iterations: int = 1
    per_device_train_batch_size: int = field(default=8, metadata={"help": "completions per device and step"})
    use_vllm: bool = False
    vllm_mode: str = field(default="colocate", metadata={"help": "colocate (same GPUs) or server (trl vllm-serve)"})
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = 0.3
    log_completions: bool = False


def rewards(fmt: Format, format_reward: float) -> list[Callable[..., list[float]]]:
    """TRL reward functions: correctness (1.0 when the parsed answer is equivalent to `gold`) and format."""

    def text(completion: Any) -> str:  # conversational completions are message lists
        return completion[-1]["content"] if isinstance(completion, list) else str(completion)

    def correctness(completions: list[Any], gold: list[str], **_: Any) -> list[float]:
        return [float(equivalent(fmt.answer(text(c)), g)) for c, g in zip(completions, gold, strict=True)]

    def well_formed(completions: list[Any], **_: Any) -> list[float]:
        return [format_reward * fmt.well_formed(text(c)) for c in completions]

    return [correctness, well_formed]


def grpo(config: GRPOStepConfig) -> dict[str, Any]:
    """Train, save the model (or adapter) and tokenizer to `output_dir`, and return the trainer's metrics."""
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        **config.trainer_args(),
        num_generations=config.num_generations,
        beta=config.beta,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        top_p=config.top_p,
        loss_type=config.loss_type,
        num_iterations=config.num_iterations,
        use_vllm=config.use_vllm,
        vllm_mode=config.vllm_mode,
        vllm_server_base_url=config.vllm_server_base_url,
        vllm_gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        log_completions=config.log_completions,
        remove_unused_columns=False,  # the reward reads the `gold` column
    )
    train = load_split(config.data_dir, "train", ["prompt", "gold"])
    if train is None:
        raise ValueError(f"{config.data_dir}/train.jsonl has no examples")
    # Continuing the SFT adapter keeps one adapter for export; a fresh LoRA is added only without one.
    trainer = GRPOTrainer(
        model=load_model(config.model, config.adapter, bf16=config.bf16),
        reward_funcs=rewards(FORMATS[build_format(config.data_dir)], config.format_reward),
        args=args,
        train_dataset=train,
        processing_class=load_tokenizer(config.model),
        peft_config=config.peft_config() if config.adapter is None else None,
    )
    resume = last_checkpoint(config.output_dir) if config.resume else None
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(config.output_dir)
    trainer.processing_class.save_pretrained(config.output_dir)
    keep_render_settings(config.data_dir, config.output_dir)
    save_step_config(config.output_dir, "grpo", config, config.model)
    return dict(result.metrics) | {"num_tokens": tokens_seen(trainer)}
