"""`aggregate-graph ask "QUESTION" --n 5 [--model SPEC] [--aggregator NAME]`: run the prebuilt graph and show the work.
`aggregate-graph serve-aggregator MODEL_DIR|ssa --engine vllm|local`: serve an aggregator over the OpenAI API.
`aggregate-graph proxy --upstream URL`: an OpenAI-compatible server answering with aggregations.

Keys come from environment variables (or a file), never from the command line, where any user of the machine can
read them (`ps`). A mistake is told in a line or two (`--debug` or AGGREGATE_GRAPH_DEBUG=1: the traceback)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from langchain_core.messages import HumanMessage

from aggregate_graph.aggregators import Aggregator
from aggregate_graph.aggregators.registry import aggregator_names, load_aggregator, missing_options
from aggregate_graph.cli.common import (
    AGGREGATOR_KEY_ENV,
    OPENAI_KEY_ENV,
    SETTLE_HELP,
    CLIError,
    ShortErrorParser,
    debug_flag,
    debug_requested,
    env_secret,
    one_line,
    quiet_libraries,
    refuse_secret_flag,
    run_command,
    version_flag,
)
from aggregate_graph.cli.serve import add_proxy, add_serve_aggregator
from aggregate_graph.drawing.models import LOCAL_PREFIXES, load_chat_model
from aggregate_graph.drawing.settings import AdaptiveSampling, CandidatePolicy
from aggregate_graph.drawing.settling import stopping_stream
from aggregate_graph.errors import AggregateGraphError, AggregatorOptionError
from aggregate_graph.graph import build_aggregate_graph
from aggregate_graph.options import MAX_CANDIDATES, AggregationOptions
from aggregate_graph.reading.answer_types import ANSWER_TYPES
from aggregate_graph.sample_set import SampleSet
from aggregate_graph.serve import DEFAULT_SERVED_NAME

THREADS_HELP = (
    "torch threads for the embedded model; 1 by default: a second OpenMP thread spins against any other busy "
    "process on a 2-core machine, which made a 7 s run take 62 s"
)
# The flag that gives each option an aggregator built by name takes (`registry.OPTIONS`)
AGGREGATOR_FLAGS = {
    "weights": "--aggregator-weights FILE",
    "model": "--aggregator-base-url URL",
    "base_url": "--aggregator-base-url URL",
    "served_model_name": "--aggregator-model NAME",
}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _model(args: argparse.Namespace) -> Any:
    spec: str = args.model
    provider = spec.partition(":")[0]
    if provider in LOCAL_PREFIXES:
        # dtype auto: bfloat16 where the CPU computes it natively, as the shipped SSA runs
        kwargs: dict[str, Any] = {"max_new_tokens": args.max_tokens, "dtype": "auto", "torch_threads": args.threads}
        if args.seed is not None:
            kwargs["seed"] = args.seed
        return load_chat_model(spec, **kwargs)
    # The graph retries and times out each candidate itself; the client must not stack its own retries on top.
    kwargs = {"max_tokens": args.max_tokens, "max_retries": 0, "timeout": args.timeout}
    key = env_secret(args.api_key_env, OPENAI_KEY_ENV, "--api-key-env")
    if args.base_url:  # any OpenAI-compatible server, e.g. vLLM: the spec is the served model name
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=spec, base_url=args.base_url, api_key=key or "EMPTY", **kwargs)
    if provider == "openai":
        if key is None:
            raise CLIError(
                f"--model {spec} needs an OpenAI API key, and {OPENAI_KEY_ENV} is not set",
                hint=f"export {OPENAI_KEY_ENV}=sk-… (or name another variable with --api-key-env NAME)",
            )
        kwargs["api_key"] = key
    return load_chat_model(spec, **kwargs)


def _aggregator(args: argparse.Namespace) -> Aggregator:
    """The `--aggregator` named, built by the registry from the flags given; the aggregator says which options it
    takes and needs, and a flag it would ignore is an error rather than a surprise."""
    name, base_url = args.aggregator, args.aggregator_base_url
    if args.aggregator_model is not None and base_url is None:
        raise ValueError("--aggregator-model is a model name at --aggregator-base-url, which is missing")
    options: dict[str, Any] = {"weights": args.aggregator_weights}
    if base_url is not None:
        options.update(
            base_url=base_url,
            served_model_name=args.aggregator_model or DEFAULT_SERVED_NAME,
            api_key=os.environ.get(AGGREGATOR_KEY_ENV),  # never a flag: the command line is visible to every user
        )
    try:
        return load_aggregator(name, **options)
    except AggregatorOptionError as exc:
        flag = AGGREGATOR_FLAGS.get(exc.option, f"the option {exc.option}=, which no flag sets")
        if exc.missing:
            raise ValueError(f"--aggregator {name} needs {flag}: {exc}") from exc
        raise ValueError(f"{flag.split()[0]} does not apply to --aggregator {name}: {exc}") from exc


def _show(sample_set: SampleSet, out: Any) -> None:
    print(f"\nQuestion: {sample_set.question}", file=out)
    print(f"{'#':>3}  {'model':<28} {'answer':<16} {'latency':>8}  note", file=out)
    for c in sample_set.candidates:
        note = c.error or (c.finish_reason or "")
        latency = f"{c.latency_s:.2f}s" if c.latency_s is not None else "-"
        answer = "-" if c.answer is None else c.answer[:16]
        print(f"{c.index:>3}  {c.model[:28]:<28} {answer:<16} {latency:>8}  {note[:60]}", file=out)
    if (agg := sample_set.aggregation) is None:
        return
    cut = sum(c.finish_reason == "length" and c.answer is None for c in sample_set.candidates)
    if agg.votes:
        votes = ", ".join(f"{answer}: {count:g}" for answer, count in sorted(agg.votes.items(), key=lambda kv: -kv[1]))
        print(f"\nVotes ({agg.method}): {votes}", file=out)
    else:  # nothing to vote on: the fallback picked a text
        picked = f"candidate {agg.support[0]}" if agg.support else "a text"
        read_as = agg.details.get("answer_type") or "an answer"
        print(f"\nNo vote: no candidate stated a readable answer (read as {read_as}); {agg.method} picked {picked} "
              "as the most typical", file=out)  # fmt: skip
    if cut:  # a cut-off solution states no answer (its last number is not one), so it does not vote
        print(f"{cut} of {len(sample_set.candidates)} stopped at the token limit before answering: raise "
              "--max-tokens for longer answers", file=out)  # fmt: skip
    if agg.tie:  # `plurality`'s rule: the earliest landing among each answer's backers, then the lowest index
        landed = any(c.landed_at is not None for c in sample_set.candidates)
        rule = "the answer that landed first, then candidate order" if landed else "candidate order"
        print(f"Tie between {agg.tie}: broken by {rule}", file=out)
    if probs := agg.details.get("choice_probs"):  # the choice SSA's calibrated probabilities over the answers
        shown = ", ".join(f"{a}: {p:.0%}" for a, p in sorted(probs.items(), key=lambda kv: -kv[1]))
        verdict = "its pick decided"
        if agg.details.get("deferred"):  # threshold 1: calibrated never to override the vote
            verdict = "the vote decided" if agg.details.get("threshold", 0) >= 1 else "unsure, so the vote decided"
        print(f"Aggregator model: {shown} ({verdict})", file=out)
    elif agg.details.get("skipped") == "unanimous":
        print("Aggregator model not asked: one answer among the candidates", file=out)
    saved, cancelled = sample_set.metadata.get("samples_saved"), len(sample_set.metadata.get("cancelled") or [])
    if saved:  # settling early cancels requests; adaptive sampling leaves later waves undrawn
        ways = [f"{cancelled} cancelled once the vote was settled"] if cancelled else []
        ways += [f"{saved - cancelled} not drawn: adaptive sampling stopped early"] if saved > cancelled else []
        print(f"{saved} samples saved: {'; '.join(ways)}", file=out)
    if agg.answer is not None:
        print(f"Final answer: {agg.answer}", file=out)
    else:
        print(f"Final text: {one_line(agg.text)[:200]}", file=out)


def _options(args: argparse.Namespace) -> AggregationOptions:
    """The aggregation options the flags map onto; the aggregator first, so that a flag that does not fit is
    reported before any model loads."""
    aggregator = _aggregator(args)
    return AggregationOptions.of(
        n=args.n,
        aggregator=aggregator,
        temperatures=args.temperatures,
        system_prompts=args.system_prompts,
        policy=CandidatePolicy(timeout_s=args.timeout, max_attempts=args.attempts),
        adaptive=AdaptiveSampling(first_wave=min(3, args.n)) if args.adaptive else None,
        max_n=args.max_n,
        answer_type=args.answer_type,
        settle=args.settle,
    )


def ask(args: argparse.Namespace) -> int:
    options = _options(args)
    graph = build_aggregate_graph(_model(args), options=options)
    state: dict[str, Any] = {}
    arrived = 0
    try:
        question = {"messages": [HumanMessage(args.question)]}
        for mode, chunk in stopping_stream(graph, question, None, stream_mode=["custom", "values"]):
            if mode == "custom":
                arrived += 1
                answer = "no answer" if chunk["answer"] is None else f"answer {chunk['answer']}"
                status = f"error: {chunk['error'][:60]}" if chunk["error"] else answer
                print(
                    f"[{arrived}/{chunk['of']}] candidate {chunk['candidate']} ({chunk['latency_s'] or 0:.1f}s): "
                    f"{status}",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                state = chunk
    except AggregateGraphError as exc:
        if exc.sample_set is not None:  # what was drawn, failures included, before the error line
            _show(exc.sample_set, sys.stderr)
        raise
    sample_set: SampleSet = state["sample_set"]
    if args.json:
        print(json.dumps(sample_set.model_dump(mode="json"), ensure_ascii=False))
    else:
        _show(sample_set, sys.stdout)
    return 0


def parser() -> argparse.ArgumentParser:
    common = debug_flag()
    root = ShortErrorParser(
        prog="aggregate-graph", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )  # fmt: skip
    version_flag(root)
    commands = root.add_subparsers(dest="command", required=True)
    ask_cmd = commands.add_parser("ask", help="answer a question with n candidates and an aggregator", parents=[common])
    ask_cmd.add_argument("question")
    ask_cmd.add_argument("--n", type=int, default=5, help="candidates to draw (default 5)")
    ask_cmd.add_argument(
        "--answer-type", choices=ANSWER_TYPES, default="auto",
        help="how each candidate's answer is read: numbers and maths, an option letter, yes/no, a short span of "
        "words; auto (default) chooses per question",
    )  # fmt: skip
    ask_cmd.add_argument("--settle", action=argparse.BooleanOptionalAction, default=True, help=SETTLE_HELP)
    ask_cmd.add_argument(
        "--model",
        default="local",
        help='"local" (embedded SmolLM2-135M-Instruct, the default), "local:/model/folder", '
        '"openai:gpt-4o-mini", any "provider:model", or a served model name with --base-url',
    )
    ask_cmd.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, …); --model is its served model name")
    ask_cmd.add_argument(
        "--api-key-env",
        metavar="NAME",
        help=f"environment variable holding the key for --base-url or an openai: model (default {OPENAI_KEY_ENV}; "
        "none set: --base-url gets EMPTY)",
    )
    refuse_secret_flag(
        ask_cmd, "--api-key", f"put it in an environment variable and name that with --api-key-env NAME (default "
        f"{OPENAI_KEY_ENV})",
    )  # fmt: skip
    ask_cmd.add_argument("--temperatures", type=float, nargs="+", help="a pool over these temperatures")
    ask_cmd.add_argument("--system-prompts", nargs="+", help="a pool over these system prompts")
    ask_cmd.add_argument("--max-tokens", type=int, default=256)
    ask_cmd.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate attempt")
    ask_cmd.add_argument("--attempts", type=int, default=3, help="attempts per candidate on transient errors")
    ask_cmd.add_argument("--adaptive", action="store_true", help="sample in waves, stop when candidates agree")
    ask_cmd.add_argument("--max-n", type=int, default=MAX_CANDIDATES, help=f"cap on --n (default {MAX_CANDIDATES})")
    ask_cmd.add_argument(
        "--aggregator",
        choices=[name for name in aggregator_names() if not missing_options(name, AGGREGATOR_FLAGS)],
        default="majority",
        help="a registered aggregator that the flags can configure: majority (default), weighted (the shipped "
        "weights, or --aggregator-weights), ssa (the shipped trained SSA on the CPU, or the one at "
        "--aggregator-base-url), gsr, usc or recursive (the model at --aggregator-base-url), medoid, structured_vote",
    )
    ask_cmd.add_argument(
        "--aggregator-weights", metavar="FILE", help="a WeightedVote weights file (`aggregate-train weights`)"
    )
    ask_cmd.add_argument(
        "--aggregator-base-url",
        metavar="URL",
        help=f"the aggregator model's server, e.g. serve-aggregator's (its key, if any, in {AGGREGATOR_KEY_ENV})",
    )
    ask_cmd.add_argument(
        "--aggregator-model",
        metavar="NAME",
        help=f"the aggregator's served model name at --aggregator-base-url (default {DEFAULT_SERVED_NAME})",
    )
    ask_cmd.add_argument("--seed", type=int, help="sampling seed for the local model")
    ask_cmd.add_argument("--threads", type=_positive_int, default=1, help=THREADS_HELP)
    ask_cmd.add_argument("--json", action="store_true", help="print the sample set as JSON")
    ask_cmd.set_defaults(run=ask)

    add_serve_aggregator(commands, common)
    add_proxy(commands, common)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.debug = debug_requested(getattr(args, "debug", False))
    if not args.debug:  # one place for every command: only those that load a model import the quieted libraries
        quiet_libraries()
    return run_command(lambda: args.run(args), debug=args.debug)
