"""`aggregate-train sft`: TRL's SFTTrainer on `build`'s examples, LoRA or full, loss on the assistant turn only."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from training.modeling import (
    last_checkpoint,
    load_model,
    load_split,
    load_tokenizer,
    lora_config,
    save_step_config,
    tokens_seen,
)

logger = logging.getLogger(__name__)


@dataclass
class SFTStepConfig:
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
    max_length: int | None = field(default=2048, metadata={"help": "truncate prompt + completion to this"})
    assistant_only_loss: bool = field(
        default=True,
        metadata={"help": "loss on the assistant turn only (completion-only where the template has no markers)"},
    )
    gradient_checkpointing: bool = False
    bf16: bool = False
    use_cpu: bool = False
    logging_steps: int = 10
    save_steps: int = 200
    save_total_limit: int = 2
    eval_steps: int | None = None
    resume: bool = field(default=True, metadata={"help": "continue from the newest checkpoint in output_dir"})
    report_to: str = "none"
    seed: int = 0


def sft(config: SFTStepConfig) -> dict[str, Any]:
    """Train, save the model (or adapter) and tokenizer to `output_dir`, and return the trainer's metrics."""
    from trl import SFTConfig, SFTTrainer
    from trl.chat_template_utils import has_generation_markers

    tokenizer = load_tokenizer(config.model)
    # TRL masks with `{% generation %}` markers when the template has them. Without them (e.g. SmolLM2's), the
    # prompt/completion split masks exactly the same tokens for these single-turn examples: the completion is
    # the assistant turn. Either way only the aggregator's answer is learned, never the candidates.
    markers = bool(tokenizer.chat_template) and has_generation_markers(tokenizer.chat_template)
    if config.assistant_only_loss and not markers:
        logger.info("chat template has no generation markers: masking by the prompt/completion split instead")
    args = SFTConfig(
        output_dir=config.output_dir,
        learning_rate=config.learning_rate,
        num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.per_device_train_batch_size,
        per_device_eval_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        max_length=config.max_length,
        assistant_only_loss=config.assistant_only_loss and markers,
        completion_only_loss=config.assistant_only_loss or None,
        gradient_checkpointing=config.gradient_checkpointing,
        bf16=config.bf16,
        use_cpu=config.use_cpu,
        logging_steps=config.logging_steps,
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        eval_strategy="steps" if config.eval_steps else "no",
        eval_steps=config.eval_steps,
        report_to=config.report_to,
        seed=config.seed,
    )
    train = load_split(config.data_dir, "train", ["prompt", "completion"])
    if train is None:
        raise ValueError(f"{config.data_dir}/train.jsonl has no examples")
    trainer = SFTTrainer(
        model=load_model(config.model, bf16=config.bf16),
        args=args,
        train_dataset=train,
        eval_dataset=load_split(config.data_dir, "validation", ["prompt", "completion"]) if config.eval_steps else None,
        processing_class=tokenizer,
        peft_config=lora_config(config.lora_r, config.lora_alpha, config.lora_dropout, config.lora_target_modules)
        if config.use_lora
        else None,
    )
    resume = last_checkpoint(config.output_dir) if config.resume else None
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(config.output_dir)
    tokenizer.save_pretrained(config.output_dir)
    save_step_config(config.output_dir, "sft", config, config.model)
    return dict(result.metrics) | {"num_tokens": tokens_seen(trainer)}
