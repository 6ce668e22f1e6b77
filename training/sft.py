"""`aggregate-train sft`: TRL's SFTTrainer on `build`'s examples, LoRA or full, loss on the assistant turn only."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from training.modeling import (
    TrainStepConfig,
    last_checkpoint,
    load_model,
    load_split,
    load_tokenizer,
    save_step_config,
    tokens_seen,
)

logger = logging.getLogger(__name__)


@dataclass
class SFTStepConfig(TrainStepConfig):
    max_length: int | None = field(default=2048, metadata={"help": "truncate prompt + completion to this"})
    assistant_only_loss: bool = field(
        default=True,
        metadata={"help": "loss on the assistant turn only (completion-only where the template has no markers)"},
    )
    eval_steps: int | None = None


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
        **config.trainer_args(),
        per_device_eval_batch_size=config.per_device_train_batch_size,
        max_length=config.max_length,
        assistant_only_loss=config.assistant_only_loss and markers,
        completion_only_loss=config.assistant_only_loss or None,
        eval_strategy="steps" if config.eval_steps else "no",
        eval_steps=config.eval_steps,
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
        peft_config=config.peft_config(),
    )
    resume = last_checkpoint(config.output_dir) if config.resume else None
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(config.output_dir)
    tokenizer.save_pretrained(config.output_dir)
    save_step_config(config.output_dir, "sft", config, config.model)
    return dict(result.metrics) | {"num_tokens": tokens_seen(trainer)}
