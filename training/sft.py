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
    load_model,
    load_split,
    load_tokenizer,
    redeclare,
    train_step,
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
    # TRL's own default (None) turns it on for prompt/completion rows, which `build` always writes: True says so in
    # the step's record
    completion_only_loss: bool | None = redeclare(SFTConfig, "completion_only_loss", True)
    per_device_eval_batch_size: int | None = redeclare(
        SFTConfig, "per_device_eval_batch_size", None, help="default: per_device_train_batch_size"
    )
    token_metrics: bool = field(
        default=True,
        metadata={
            "help": "TRL's per-token entropy / accuracy metrics; off, the LM head runs only where the batch has "
            "trained tokens (a short answer after a long prompt trains several times faster on CPU)"
        },
    )

    def __post_init__(self) -> None:
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be positive (or unset), got {self.max_length}")
        if self.per_device_eval_batch_size is None:
            self.per_device_eval_batch_size = self.per_device_train_batch_size
        if self.eval_steps and self.eval_strategy == "no":  # --eval_steps N alone evaluates every N steps
            self.eval_strategy = "steps"
        super().__post_init__()


def _answer_tokens_trainer() -> type:
    """SFTTrainer whose loss applies the LM head to the labelled positions only.

    TRL's loss computes log-probabilities, entropy and top-1 accuracy at every position (the metrics need them; its
    fused LM head skips the unlabelled positions only on CUDA/XPU with Triton, and no option turns the metrics off).
    An aggregator's target is a few tokens after a prompt of hundreds, and on a 135M model the 49k-word LM head
    is a large share of each step: projecting only the positions that carry a label gives the same loss and
    gradients for a fraction of the work. TRL's `num_tokens` log is counted by its loss, so this trainer logs
    transformers' own count of the same tokens (`include_num_input_tokens_seen="non_padding"`, set by `sft`).
    """
    import torch
    from trl import SFTTrainer

    class AnswerTokensSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[no-untyped-def]
            labels = inputs["labels"][:, 1:]
            trained = labels != -100
            # The positions any row learns at, projected by the model's own forward (`logits_to_keep`): through
            # `model` as the trainer wrapped it, so that DDP syncs the gradients
            keep = trained.any(dim=0).nonzero().squeeze(-1)
            forward = {name: value for name, value in inputs.items() if name != "labels"}
            logits = model(**forward, use_cache=False, logits_to_keep=keep).logits
            trained, labels = trained[:, keep], labels[:, keep]
            count = trained.sum() if num_items_in_batch is None else num_items_in_batch
            loss = torch.nn.functional.cross_entropy(logits[trained].float(), labels[trained], reduction="sum")
            loss = loss / torch.as_tensor(count).clamp(min=1)
            # As Trainer's and TRL's losses: `num_items_in_batch` counts every process's tokens and DDP averages
            # the gradients over the processes, so the sum over this process's tokens is scaled back up
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * (self.accelerator.num_processes // self.get_tp_size())
            return (loss, {"loss": loss}) if return_outputs else loss

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if self.model.training:  # where TRL logs `num_tokens`, which `tokens_seen` reads
                logs["num_tokens"] = self.state.num_input_tokens_seen
            super().log(logs, start_time)

    return AnswerTokensSFTTrainer


def sft(config: SFTStepConfig, model: ModelArguments) -> dict[str, Any]:
    """Train, save the model (or adapter) and tokenizer to `output_dir`, and return the trainer's metrics."""
    from trl import SFTTrainer, get_peft_config
    from trl.chat_template_utils import has_generation_markers

    tokenizer = load_tokenizer(model.model_name_or_path)
    # TRL masks with `{% generation %}` markers when the template has them; without them it would swap in a
    # template of its own for the families it knows and raise for the rest (e.g. SmolLM2's). Instead, any template
    # without markers is masked by the prompt/completion split (TRL's `completion_only_loss`, on by default for
    # `build`'s prompt/completion rows), which masks the same tokens for these single-turn examples: the completion
    # is the assistant turn. Either way only the aggregator's answer is learned, never the candidates.
    markers = bool(tokenizer.chat_template) and has_generation_markers(tokenizer.chat_template)
    args = copy.copy(config)  # what the trainer gets; `config`, as asked, is what training_step.json records
    if config.assistant_only_loss and not markers:
        logger.info("chat template has no generation markers: masking by the prompt/completion split instead")
        args.assistant_only_loss = False
    if not config.token_metrics and args.include_num_input_tokens_seen == "no":
        args.include_num_input_tokens_seen = "non_padding"  # TRL's `num_tokens` counts the same: see the trainer
    train = load_split(config.data_dir, "train", ["prompt", "completion"])
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
    return train_step("sft", trainer, config, model)
