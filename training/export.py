"""`aggregate-train export`: the folder `serve-aggregator` takes, with a model card.

`merge=True` folds the LoRA adapter into the base weights and saves a full transformers model plus tokenizer:
`aggregate-graph serve-aggregator OUT --engine local|vllm`. `merge=False` keeps the adapter alone (small, and vLLM
can serve several on one base): `aggregate-graph serve-aggregator BASE --adapter OUT`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aggregate_graph.aggregators.trained import AGGREGATOR_FILE, WEIGHTS_FILE
from aggregate_graph.serve import DEFAULT_SERVED_NAME

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
RENDER_FILES = (AGGREGATOR_FILE, WEIGHTS_FILE)  # how the model's prompts are rendered, as trained
CALIBRATION_FILES = ("calibration.json", "calibration.md")  # `calibrate`'s validation table, for the card


@dataclass
class ExportConfig:
    checkpoint: str = field(metadata={"help": "sft or grpo output folder (adapter or full model)"})
    output_dir: str = field(metadata={"help": "the folder to serve"})
    merge: bool = field(default=True, metadata={"help": "merge the adapter into the base model; else keep it"})
    base_model: str | None = field(default=None, metadata={"help": "default: the base the checkpoint was trained on"})
    evaluation: str | None = field(default=None, metadata={"help": "an `evaluate` output folder for the card"})
    served_model_name: str = DEFAULT_SERVED_NAME


def _step_record(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / "training_step.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def base_model_of(checkpoint: Path, configured: str | None) -> str | None:
    """The base model: as configured, else as the training step recorded it, else as peft recorded it."""
    if configured is not None:
        return configured
    if base := _step_record(checkpoint).get("base_model"):
        return str(base)
    adapter_config = checkpoint / "adapter_config.json"
    if adapter_config.is_file():
        return json.loads(adapter_config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    return None


def model_card(config: ExportConfig, base: str | None, adapter: bool, record: dict[str, Any]) -> str:
    serve = (
        f"aggregate-graph serve-aggregator {base} --adapter {config.output_dir} --engine local"
        if adapter
        else f"aggregate-graph serve-aggregator {config.output_dir} --engine local"
    )
    table = "No evaluation was given to `export` (`--evaluation EVAL_DIR`)."
    if config.evaluation is not None:
        table = (Path(config.evaluation) / "metrics.md").read_text(encoding="utf-8")
    header = ["---", "library_name: " + ("peft" if adapter else "transformers"), "tags: [aggregate-graph]"]
    if base:
        header.append(f"base_model: {base}")
    steps = json.dumps(record.get("config", {}), indent=2) if record else "(not recorded)"
    return "\n".join(
        [
            *header,
            "---",
            "",
            f"# Aggregator ({record.get('step', 'trained')}, {'LoRA adapter' if adapter else 'merged weights'})",
            "",
            "A sample-set aggregator for aggregate-graph: it reads a question and k candidate solutions and answers "
            "in the format of the runtime's prompt (`aggregate_graph.aggregators`).",
            "",
            "## Serving",
            "",
            "```bash",
            f"{serve} --served-model-name {config.served_model_name}",
            "```",
            "",
            "## Evaluation",
            "",
            table,
            "",
            "## Training step configuration",
            "",
            "```json",
            steps,
            "```",
            "",
        ]
    )


def _copy(source: Path, target: Path, names: tuple[str, ...]) -> None:
    for name in names:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)


def export(config: ExportConfig) -> Path:
    """Write the servable folder and its README.md; returns the folder."""
    checkpoint, out = Path(config.checkpoint), Path(config.output_dir)
    is_adapter = (checkpoint / "adapter_config.json").is_file()
    base = base_model_of(checkpoint, config.base_model) if is_adapter else None
    out.mkdir(parents=True, exist_ok=True)
    if is_adapter and config.merge:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if base is None:
            raise ValueError(f"{checkpoint}: no base model recorded; pass --base_model")
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, local_files_only=True)
        merged = PeftModel.from_pretrained(model, checkpoint).merge_and_unload()
        merged.save_pretrained(out)
        AutoTokenizer.from_pretrained(checkpoint, local_files_only=True).save_pretrained(out)
        _copy(checkpoint, out, (*RENDER_FILES, *CALIBRATION_FILES))
    elif is_adapter:
        _copy(checkpoint, out, (*ADAPTER_FILES, *RENDER_FILES, *CALIBRATION_FILES))
    else:  # a full fine-tune is servable as it is
        for item in checkpoint.iterdir():
            if item.is_file():
                shutil.copy2(item, out / item.name)
    (out / "README.md").write_text(
        model_card(config, base, is_adapter and not config.merge, _step_record(checkpoint)), encoding="utf-8"
    )
    return out
