"""`aggregate-train <step> [--field value …]`: one step of the training pipeline.

Each step is a config dataclass and a function; the flags are the dataclass's fields, one for one (HfArgumentParser,
as TRL's scripts do). `aggregate-train <step> config.yaml` reads the same fields from a YAML file instead.
Under `accelerate launch -m training.cli sft …` the same code trains on several GPUs or machines.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    config: type
    run: Callable[[Any], Any]
    help: str


def steps() -> dict[str, Step]:
    # Imported here so `--help` and the light steps never pay for the heavy ones' imports.
    from training.build import BuildConfig, build
    from training.collect import CollectConfig, collect
    from training.evaluate import EvaluateConfig, evaluate
    from training.export import ExportConfig, export
    from training.grpo import GRPOStepConfig, grpo
    from training.report import ReportConfig, report
    from training.sft import SFTStepConfig, sft
    from training.weights import WeightsConfig, fit_weights

    return {
        "collect": Step(CollectConfig, collect, "sample sets from a policy, or imported pools / runtime logs"),
        "weights": Step(WeightsConfig, fit_weights, "WeightedVote: per-source reliability from sample sets"),
        "build": Step(BuildConfig, build, "SSA / GSR training examples, split by problem"),
        "sft": Step(SFTStepConfig, sft, "supervised fine-tuning (TRL SFTTrainer, LoRA or full)"),
        "grpo": Step(GRPOStepConfig, grpo, "RL with the runtime's grader as reward (TRL GRPOTrainer)"),
        "evaluate": Step(EvaluateConfig, evaluate, "maj@k, pass@k, aggregator accuracy, Refinement Gap, CIs"),
        "report": Step(ReportConfig, report, "several evaluations side by side, paired intervals against maj@k"),
        "export": Step(ExportConfig, export, "the folder serve-aggregator takes, with a model card"),
    }


def parse(step: Step, argv: list[str]) -> Any:
    from transformers import HfArgumentParser

    parser = HfArgumentParser(step.config)
    if len(argv) == 1 and argv[0].endswith((".yaml", ".yml", ".json")):
        (config,) = (
            parser.parse_yaml_file(argv[0]) if argv[0].endswith(("yaml", "yml")) else parser.parse_json_file(argv[0])
        )
        return config
    (config,) = parser.parse_args_into_dataclasses(argv)
    return config


def usage(known: dict[str, Step]) -> str:
    lines = ["usage: aggregate-train <step> [--field value ...] | <step> CONFIG.yaml", "", "steps:"]
    lines += [f"  {name:<9} {step.help}" for name, step in known.items()]
    return "\n".join([*lines, "", "aggregate-train <step> --help lists the step's flags."])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    known = steps()
    if not argv or argv[0] not in known:
        asked = argv[:1] in (["-h"], ["--help"])
        print(usage(known), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    step = known[argv[0]]
    result = step.run(parse(step, argv[1:]))
    print(json.dumps(result, indent=2, default=str) if isinstance(result, dict) else result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
