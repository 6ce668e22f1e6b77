"""`aggregate-train <step> [CONFIG.yaml] [--field value …]`: one step of the training pipeline.

Each step is a function of config dataclasses, parsed as TRL's own scripts parse theirs (`trl.TrlParser`): the flags
are the dataclasses' fields, `--config CONFIG.yaml` (or the YAML file as the first argument) reads the same fields
from a file, and flags given with a file override it. `sft` and `grpo` take TRL's configs themselves (`SFTConfig`,
`GRPOConfig` with this project's defaults, `ModelConfig` for the model and LoRA), so TRL's trainer flags work too.
Under `accelerate launch -m training.cli sft …` the same code trains on several GPUs or machines.

A mistake (a missing file, a bad value, a broken YAML file) is told in a line or two; `aggregate-train --debug <step>`
(or AGGREGATE_GRAPH_DEBUG=1) shows the traceback, and the libraries' warnings and progress bars, instead.
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aggregate_graph.cli.common import (
    CLIError,
    debug_requested,
    package_version,
    quiet_libraries,
    report,
    run_command,
)

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Step:
    module: str
    configs: tuple[str, ...]  # the dataclasses the step function takes, in order, by name in `module`
    run: str
    help: str

    def load(self) -> tuple[tuple[type, ...], Callable[..., Any]]:
        # Imported only when chosen, so `--help` and the light steps never pay for the heavy ones' imports.
        module = importlib.import_module(self.module)
        return tuple(getattr(module, name) for name in self.configs), getattr(module, self.run)


STEPS = {
    "collect": Step(
        "training.collect", ("CollectConfig",), "collect", "sample sets from a policy, or imported pools / runtime logs"
    ),
    "weights": Step(
        "training.weights", ("WeightsConfig",), "fit_weights", "WeightedVote: per-source reliability from sample sets"
    ),
    "build": Step("training.build", ("BuildConfig",), "build", "SSA / GSR training examples, split by problem"),
    "sft": Step(
        "training.sft",
        ("SFTStepConfig", "ModelArguments"),
        "sft",
        "supervised fine-tuning (TRL SFTTrainer, LoRA or full)",
    ),
    "grpo": Step(
        "training.grpo",
        ("GRPOStepConfig", "ModelArguments"),
        "grpo",
        "RL with the runtime's grader as reward (TRL GRPOTrainer)",
    ),
    "calibrate": Step(
        "training.calibrate",
        ("CalibrateConfig",),
        "calibrate",
        "a choice SSA's temperature and deferral threshold, fit on validation problems",
    ),
    "evaluate": Step(
        "training.evaluate",
        ("EvaluateConfig",),
        "evaluate",
        "maj@k, pass@k, aggregator accuracy, Refinement Gap, CIs",
    ),
    "report": Step(
        "training.report",
        ("ReportConfig",),
        "report",
        "several evaluations side by side, paired intervals against maj@k",
    ),
    "export": Step(
        "training.export", ("ExportConfig",), "export", "the folder serve-aggregator takes, with a model card"
    ),
}


def check_config_file(argv: list[str]) -> None:
    """The `--config` file readable as YAML, checked before TRL's parser opens it (which would raise a bare
    FileNotFoundError, or yaml's error report over several lines)."""
    import yaml

    if "--config" not in argv:
        return
    at = argv.index("--config") + 1
    if at == len(argv) or argv[at].startswith("--"):
        raise CLIError("--config needs a file: --config CONFIG.yaml")
    path = Path(argv[at])
    if not path.is_file():
        raise CLIError(
            f"config file {path}: no such file", hint="the example configs are in the repository's training/configs/"
        )
    try:
        yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CLIError(f"config file {path} is not valid YAML: {problem}{where}") from exc


def parse(name: str, argv: list[str]) -> tuple[Any, ...]:
    """The step's configs from flags and/or a YAML file; each dataclass validates itself (`__post_init__`) here,
    before the step loads anything."""
    from training.parsing import StepParser

    if argv and argv[0].endswith(CONFIG_SUFFIXES):  # `aggregate-train sft config.yaml [--flag value …]`
        argv = ["--config", *argv]
    check_config_file(argv)
    configs, _ = STEPS[name].load()
    return tuple(StepParser(configs, prog=f"aggregate-train {name}").parse_args_and_config(argv))


def usage() -> str:
    lines = [
        "usage: aggregate-train [--version] [--debug] <step> [CONFIG.yaml | --config CONFIG.yaml] [--field value ...]",
        "",
        "steps:",
    ]
    lines += [f"  {name:<9} {step.help}" for name, step in STEPS.items()]
    return "\n".join([*lines, "", "aggregate-train <step> --help lists the step's flags; flags override the file."])


def unknown_step(name: str) -> CLIError:
    close = difflib.get_close_matches(name, STEPS, n=1)
    return CLIError(
        f"unknown step {name!r}; the steps are {', '.join(STEPS)}",
        hint=f"did you mean {close[0]!r}?" if close else "`aggregate-train --help` says what each does",
    )


def run_step(name: str, argv: list[str]) -> int:
    configs = parse(name, argv)
    _, run = STEPS[name].load()
    result = run(*configs)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, the main process speaks for all
        print(json.dumps(result, indent=2, default=str) if isinstance(result, dict) else result)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The command's own options come before the step: after it, every flag is the step's (TRL's `--debug` too).
    flag = False
    while argv[:1] in (["--debug"], ["--version"]):
        if argv.pop(0) == "--version":
            print(f"aggregate-train {package_version()}")
            return 0
        flag = True
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    debug = debug_requested(flag)
    if not debug:
        quiet_libraries(progress=True)  # a training run's progress bars are its news
    if argv[0] not in STEPS:
        return report(unknown_step(argv[0]))
    return run_command(lambda: run_step(argv[0], argv[1:]), debug=debug)


if __name__ == "__main__":
    raise SystemExit(main())
