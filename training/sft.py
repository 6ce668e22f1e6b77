"""`aggregate-train sft`: TRL's SFTTrainer on `build`'s examples, LoRA or full, loss on the assistant turn only."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from trl import SFTConfig

from training.modeling import (
    ModelArguments,
    TrainStepConfig,
    finish_step,
    last_checkpoint,
    load_model,
    load_split,
    load_tokenizer,
    redeclare,
)

logger = logging.getLogger(__name__)


@dataclass
class SFTStepConfig(TrainStepConfig, SFTConfig):
    """TRL's `SFTConfig` (every SFTTrainer flag) with `build`'s data, resuming, and this project's defaults."""

    max_length: int | None = redeclare(SFTConfig, "max_length", 2048, help="truncate prompt + completion to this")
    assistant_only_loss: bool = redeclare(
        SFTConfig,
        "assistant_only_loss",
        True,
        help="loss on the assistant turn only (completion-only where the template has no markers)",
    )
    per_device_eval_batch_size: int | None = redeclare(
        SFTConfig, "per_device_eval_batch_size", None, help="default: per_device_train_batch_size"
    )
    token_metrics: bool = field(
        default=True,
        metadata={
            "help": "TRL's per-token entropy / accuracy metrics; off, the LM head runs only on the trained tokens "
            "(a short answer after a long prompt trains several times faster on CPU)"
        },
    )

    def __post_init__(self) -> None:
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be positive (or unset), got {self.max_length}")
        if self.per_device_eval_batch_size is None:
            self.per_device_eval_batch_size = self.per_device_train_batch_size
        if self.eval_steps and self.eval_strategy == "no":  # --eval_steps N alone evaluates every N steps
            self.eval_strategy = "steps"
        if self.assistant_only_loss and self.completion_only_loss is None:
            self.completion_only_loss = True
        super().__post_init__()


def _answer_tokens_trainer() -> type:
    """SFTTrainer whose loss applies the LM head to the labelled positions only.

    TRL's loss computes log-probabilities, entropy and top-1 accuracy at every position (the metrics need them).
    An aggregator's target is a few tokens after a prompt of hundreds, and on a 135M model the 49k-word LM head
    is a large share of each step: projecting only the positions that carry a label gives the same loss and
    gradients for a fraction of the work.
    """
    import torch
    from accelerate.utils import is_peft_model
    from trl import SFTTrainer

    class AnswerTokensSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[no-untyped-def]
            unwrapped = self.accelerator.unwrap_model(model)
            causal_lm = unwrapped.get_base_model() if is_peft_model(unwrapped) else unwrapped
            hidden = causal_lm.get_decoder()(
                input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"), use_cache=False
            ).last_hidden_state
            labels = inputs["labels"][:, 1:]
            trained = labels != -100
            logits = causal_lm.get_output_embeddings()(hidden[:, :-1][trained]).float()
            count = trained.sum() if num_items_in_batch is None else num_items_in_batch
            loss = torch.nn.functional.cross_entropy(logits, labels[trained], reduction="sum")
            loss = loss / torch.as_tensor(count).clamp(min=1)
            if model.training:  # TRL's token count, which `tokens_seen` and the logs report
                self._total_train_tokens += int(inputs["attention_mask"].sum())
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return (loss, {"loss": loss}) if return_outputs else loss

    return AnswerTokensSFTTrainer


def sft(config: SFTStepConfig, model: ModelArguments) -> dict[str, Any]:
    """Train, save the model (or adapter) and tokenizer to `output_dir`, and return the trainer's metrics."""
    from trl import SFTTrainer, get_peft_config
    from trl.chat_template_utils import has_generation_markers

    tokenizer = load_tokenizer(model.model_name_or_path)
    # TRL masks with `{% generation %}` markers when the template has them. Without them (e.g. SmolLM2's), the
    # prompt/completion split (`completion_only_loss`) masks exactly the same tokens for these single-turn examples:
    # the completion is the assistant turn. Either way only the aggregator's answer is learned, never the candidates.
    markers = bool(tokenizer.chat_template) and has_generation_markers(tokenizer.chat_template)
    args = config  # what the trainer gets; `config`, as asked, is what training_step.json records
    if config.assistant_only_loss and not markers:
        logger.info("chat template has no generation markers: masking by the prompt/completion split instead")
        args = copy.copy(config)
        args.assistant_only_loss = False
    train = load_split(config.data_dir, "train", ["prompt", "completion"])
    if train is None:
        raise ValueError(f"{config.data_dir}/train.jsonl has no examples")
    evaluating = config.eval_strategy != "no"
    trainer_class = SFTTrainer if config.token_metrics else _answer_tokens_trainer()
    trainer = trainer_class(
        model=load_model(model, bf16=config.bf16),
        args=args,
        train_dataset=train,
        eval_dataset=load_split(config.data_dir, "validation", ["prompt", "completion"]) if evaluating else None,
        processing_class=tokenizer,
        peft_config=get_peft_config(model),
    )
    resume = last_checkpoint(config.output_dir) if config.resume else None
    result = trainer.train(resume_from_checkpoint=resume)
    return finish_step("sft", trainer, result, config, model)
