"""`aggregate-graph serve-aggregator MODEL_DIR|ssa --engine vllm|local`: serve an aggregator model over the OpenAI
chat-completions API with one of the engines of `aggregate_graph.serve.engines`, whose own flags it lists."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aggregate_graph.cli_common import CLIError, env_secret, refuse_secret_flag
from aggregate_graph.serve import DEFAULT_SERVED_NAME, SMOLLM2
from aggregate_graph.serve.engines import DEFAULT_ENGINE, ENGINES
from aggregate_graph.trained_folder import SHIPPED_SSA

SHIPPED_SSA_NAME = "ssa"


def _server_key(args: argparse.Namespace) -> str | None:
    """The key serve-aggregator's clients must send: from --api-key-file (stripped) or --api-key-env; none without
    either."""
    if args.api_key_file is None:
        return env_secret(args.api_key_env, None, "--api-key-env")
    path = Path(args.api_key_file)
    if not path.is_file():
        raise CLIError(f"--api-key-file {path}: no such file", hint="write the key alone in it, readable by you only")
    key = path.read_text(encoding="utf-8").strip()
    if not key:
        raise CLIError(f"--api-key-file {path} is empty", hint="write the key alone in it, readable by you only")
    return key


def serve_aggregator(args: argparse.Namespace) -> int:
    if args.model_dir == SHIPPED_SSA_NAME:
        if args.adapter is not None:
            raise CLIError("`ssa` is the shipped SSA adapter on smollm2: it takes no --adapter")
        if not (SHIPPED_SSA / "adapter_config.json").is_file():
            raise CLIError(f"this install has no shipped SSA adapter ({SHIPPED_SSA} is missing)")
        # the same path as `smollm2 --adapter DIR`: vLLM's --lora-modules, or the adapter merged on load
        args.model_dir, args.adapter = SMOLLM2, str(SHIPPED_SSA)
    engine = ENGINES[args.engine]
    options = engine.options(vars(args))  # a flag of another engine is refused before the key is read
    return engine.serve(
        args.model_dir,
        adapter=args.adapter,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        api_key=_server_key(args),
        **options,
    )


def add_serve_aggregator(commands: Any, common: argparse.ArgumentParser) -> None:
    serve_cmd = commands.add_parser(
        "serve-aggregator",
        help="serve an aggregator model over the OpenAI chat-completions API (vLLM or CPU)",
        parents=[common],
    )
    serve_cmd.add_argument(
        "model_dir",
        nargs="?",
        default=SMOLLM2,
        help='a transformers model folder, "smollm2" for the embedded SmolLM2-135M-Instruct (the default), or '
        '"ssa" for the shipped trained SSA (its LoRA adapter on smollm2)',
    )
    serve_cmd.add_argument("--adapter", help="a PEFT LoRA adapter folder trained on MODEL_DIR")
    serve_cmd.add_argument(
        "--engine",
        choices=list(ENGINES),
        default=DEFAULT_ENGINE,
        help=f"what serves the model (default {DEFAULT_ENGINE}); each engine, and the flags only it takes, below",
    )
    serve_cmd.add_argument(
        "--host", default="127.0.0.1", help="default 127.0.0.1; another host needs a key (--engine local)"
    )
    serve_cmd.add_argument("--port", type=int, default=8000)
    serve_cmd.add_argument("--served-model-name", default=DEFAULT_SERVED_NAME, help="the model name clients ask for")
    for engine in ENGINES.values():
        group = serve_cmd.add_argument_group(f"--engine {engine.name}", engine.help)
        for flag in engine.flags:
            group.add_argument(flag.name, type=flag.type, help=flag.help)
    key_source = serve_cmd.add_mutually_exclusive_group()
    key_source.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="require the key in this environment variable as 'Authorization: Bearer KEY'",
    )
    key_source.add_argument("--api-key-file", metavar="PATH", help="the same, with the key in this file")
    refuse_secret_flag(
        serve_cmd, "--api-key", "put it in an environment variable and name that with --api-key-env NAME, or in a "
        "file: --api-key-file PATH",
    )  # fmt: skip
    serve_cmd.set_defaults(run=serve_aggregator)
