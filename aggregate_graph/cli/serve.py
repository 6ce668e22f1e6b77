"""The server commands of `aggregate-graph`, over the serving layer (`aggregate_graph.serve`):

`serve-aggregator MODEL_DIR|ssa --engine vllm|local` serves an aggregator model over the OpenAI chat-completions
API with one of the engines of `aggregate_graph.serve.engines`, whose own flags it lists; `proxy --upstream URL`
is an OpenAI-compatible server answering with aggregations (`aggregate_graph.openai_compat.proxy`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aggregate_graph.aggregators.registry import aggregator_names, missing_options
from aggregate_graph.aggregators.trained import SHIPPED_SSA
from aggregate_graph.cli.common import (
    AGGREGATOR_KEY_ENV,
    OPENAI_KEY_ENV,
    SETTLE_HELP,
    CLIError,
    env_secret,
    refuse_secret_flag,
    validation_problems,
)
from aggregate_graph.reading.answer_types import ANSWER_TYPES
from aggregate_graph.serve import DEFAULT_SERVED_NAME, SMOLLM2
from aggregate_graph.serve.engines import DEFAULT_ENGINE, ENGINES

SHIPPED_SSA_NAME = "ssa"
PROXY_KEY_ENV = "AGGREGATE_GRAPH_PROXY_KEY"
# ProxyConfig's fields whose flag is not the field's own name
PROXY_FLAGS = {
    "api_key": "--api-key-env",
    "upstream_api_key": "--upstream-api-key-env",
    "aggregator_api_key": "--aggregator-api-key-env",
    "upstream_timeout_s": "--upstream-timeout",
    "max_request_s": "--max-request-seconds",
}


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


def proxy(args: argparse.Namespace) -> int:
    try:
        from aggregate_graph.openai_compat.proxy import serve_proxy
        from aggregate_graph.openai_compat.proxy_config import ProxyConfig
    except ImportError as exc:
        raise CLIError(f"the proxy needs the serve extra: {exc}", hint="pip install 'aggregate-graph[serve]'") from exc
    # Keys come from the environment, never the command line, where any user of the machine can read them.
    keys = {}
    for field, named, default in (
        ("api_key", args.api_key_env, PROXY_KEY_ENV),
        ("upstream_api_key", args.upstream_api_key_env, OPENAI_KEY_ENV),
        ("aggregator_api_key", args.aggregator_api_key_env, AGGREGATOR_KEY_ENV),
    ):
        if (key := env_secret(named, default, PROXY_FLAGS[field])) is not None:
            keys[field] = key
    try:
        config = ProxyConfig(
            upstream=args.upstream,
            aggregator=args.aggregator,
            aggregator_base_url=args.aggregator_base_url,
            aggregator_model=args.aggregator_model,
            aggregator_weights=args.aggregator_weights,
            n=args.n,
            min_candidates=args.min_candidates,
            answer_type=args.answer_type,
            settle=args.settle,
            stream_candidates=args.stream_candidates,
            upstream_timeout_s=args.upstream_timeout,
            upstream_retries=args.upstream_retries,
            max_n=args.max_n,
            max_body_bytes=args.max_body_bytes,
            max_prompt_chars=args.max_prompt_chars,
            max_concurrency=args.max_concurrency,
            max_request_s=args.max_request_seconds,
            **keys,
        )
    except ValidationError as exc:  # a line per flag at fault, not pydantic's report on ProxyConfig's fields
        raise CLIError(*validation_problems(exc, PROXY_FLAGS)) from exc
    serve_proxy(config, host=args.host, port=args.port)  # it prints its banner once its checks pass
    return 0


def add_proxy(commands: Any, common: argparse.ArgumentParser) -> None:
    proxy_cmd = commands.add_parser(
        "proxy",
        help="an OpenAI-compatible server: chat completions and Responses API calls answered with aggregations",
        parents=[common],
    )
    proxy_cmd.add_argument("--upstream", required=True, help="the OpenAI-compatible API candidates come from (…/v1)")
    proxy_cmd.add_argument(
        "--aggregator",
        choices=[name for name in aggregator_names() if not missing_options(name, {"model", "weights"})],
        default="majority",
        help="default method (a request may name another): a registered aggregator the proxy can configure",
    )
    proxy_cmd.add_argument(
        "--aggregator-weights",
        metavar="FILE",
        help="WeightedVote weights for the weighted method (default: the shipped ones)",
    )
    proxy_cmd.add_argument("--aggregator-base-url", help="the server of a trained aggregator (default: the upstream)")
    proxy_cmd.add_argument("--aggregator-model", help="the aggregator's model name (default: the request's model)")
    proxy_cmd.add_argument("--n", type=int, default=5, help="candidates per answer (default 5)")
    proxy_cmd.add_argument("--min-candidates", type=int, default=1, help="fewer successful candidates is an error")
    proxy_cmd.add_argument(
        "--answer-type", choices=ANSWER_TYPES, default="auto",
        help="how each candidate's answer is read (default auto: chosen per question)",
    )  # fmt: skip
    proxy_cmd.add_argument("--settle", action=argparse.BooleanOptionalAction, default=True, help=SETTLE_HELP)
    proxy_cmd.add_argument(
        "--stream-candidates", action="store_true",
        help="with --settle, stream an upstream request with n and close it once the vote is settled (its usage is "
        "then not reported)",
    )  # fmt: skip
    proxy_cmd.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1; another host needs a client key")
    proxy_cmd.add_argument("--port", type=int, default=8080)
    # No defaults here: a variable named on the command line must be set, a default one may be absent.
    proxy_cmd.add_argument(
        "--api-key-env",
        metavar="NAME",
        help=f"environment variable holding the key clients must send (default {PROXY_KEY_ENV}, when set)",
    )
    proxy_cmd.add_argument(
        "--upstream-api-key-env",
        metavar="NAME",
        help=f"environment variable with the upstream's key (default {OPENAI_KEY_ENV}, when set)",
    )
    proxy_cmd.add_argument(
        "--aggregator-api-key-env",
        metavar="NAME",
        help=f"environment variable with the aggregator server's key (default {AGGREGATOR_KEY_ENV}, when set; the "
        "upstream key is never sent there)",
    )
    for flag in ("--api-key", "--upstream-api-key", "--aggregator-api-key"):
        refuse_secret_flag(proxy_cmd, flag, f"put the key in an environment variable and name it with {flag}-env NAME")
    proxy_cmd.add_argument("--upstream-timeout", type=float, default=120.0, help="seconds per upstream request")
    proxy_cmd.add_argument("--upstream-retries", type=int, default=2, help="retries of 429/5xx/timeouts per request")
    proxy_cmd.add_argument("--max-n", type=int, default=64, help="samples per request: n × choices (default 64)")
    proxy_cmd.add_argument("--max-body-bytes", type=int, default=1_000_000)
    proxy_cmd.add_argument("--max-prompt-chars", type=int, default=200_000)
    proxy_cmd.add_argument("--max-concurrency", type=int, default=64, help="requests in flight; more are answered 429")
    proxy_cmd.add_argument("--max-request-seconds", type=float, default=300.0, help="wall time per request")
    proxy_cmd.set_defaults(run=proxy)
