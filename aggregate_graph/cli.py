"""`aggregate-graph ask "QUESTION" --n 5 [--model SPEC]`: run the prebuilt graph and show the work."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from langchain_core.messages import HumanMessage

from aggregate_graph.aggregators import AggregationError
from aggregate_graph.graph import MAX_N, AdaptiveSampling, build_aggregate_graph
from aggregate_graph.models import LOCAL_PREFIXES, load_chat_model
from aggregate_graph.sample_set import SampleSet
from aggregate_graph.sampling import CandidatePolicy


def _model(args: argparse.Namespace) -> Any:
    spec: str = args.model
    if spec.split(":", 1)[0] in LOCAL_PREFIXES:
        kwargs: dict[str, Any] = {"max_new_tokens": args.max_tokens}
        if args.seed is not None:
            kwargs["seed"] = args.seed
        return load_chat_model(spec, **kwargs)
    kwargs = {"max_tokens": args.max_tokens}
    if args.base_url:  # any OpenAI-compatible server, e.g. vLLM: the spec is the served model name
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=spec, base_url=args.base_url, api_key=args.api_key or "EMPTY", **kwargs)
    return load_chat_model(spec, **kwargs)


def _show(sample_set: SampleSet, out: Any) -> None:
    print(f"\nQuestion: {sample_set.question}", file=out)
    print(f"{'#':>3}  {'model':<28} {'answer':<16} {'latency':>8}  note", file=out)
    for c in sample_set.candidates:
        note = c.error or (c.finish_reason or "")
        latency = f"{c.latency_s:.2f}s" if c.latency_s is not None else "-"
        answer = "-" if c.answer is None else c.answer[:16]
        print(f"{c.index:>3}  {c.model[:28]:<28} {answer:<16} {latency:>8}  {note[:60]}", file=out)
    if (agg := sample_set.aggregation) is not None:
        votes = ", ".join(f"{answer}: {count:g}" for answer, count in sorted(agg.votes.items(), key=lambda kv: -kv[1]))
        print(f"\nVotes ({agg.method}): {votes}", file=out)
        if agg.tie:
            print(f"Tie between {agg.tie}: broken by candidate order", file=out)
        saved = sample_set.metadata.get("samples_saved")
        if saved:
            print(f"Adaptive sampling stopped early: {saved} samples saved", file=out)
        print(f"Final answer: {agg.answer}", file=out)


def ask(args: argparse.Namespace) -> int:
    policy = CandidatePolicy(timeout_s=args.timeout, max_attempts=args.attempts)
    adaptive = AdaptiveSampling(first_wave=min(3, args.n)) if args.adaptive else None
    try:
        graph = build_aggregate_graph(
            _model(args),
            n=args.n,
            temperatures=args.temperatures,
            system_prompts=args.system_prompts,
            policy=policy,
            adaptive=adaptive,
            max_n=args.max_n,
        )
    except (ValueError, TypeError, ImportError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state: dict[str, Any] = {}
    arrived = 0
    try:
        for mode, chunk in graph.stream({"messages": [HumanMessage(args.question)]}, stream_mode=["custom", "values"]):
            if mode == "custom":
                arrived += 1
                status = f"error: {chunk['error'][:60]}" if chunk["error"] else f"answer {chunk['answer']}"
                print(
                    f"[{arrived}/{chunk['of']}] candidate {chunk['candidate']} ({chunk['latency_s'] or 0:.1f}s): "
                    f"{status}",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                state = chunk
    except AggregationError as exc:
        if exc.sample_set is not None:
            _show(exc.sample_set, sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sample_set: SampleSet = state["sample_set"]
    if args.json:
        print(json.dumps(sample_set.model_dump(mode="json"), ensure_ascii=False))
    else:
        _show(sample_set, sys.stdout)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aggregate-graph", description=__doc__)
    commands = p.add_subparsers(dest="command", required=True)
    a = commands.add_parser("ask", help="answer a question with n candidates and majority vote")
    a.add_argument("question")
    a.add_argument("--n", type=int, default=5, help="candidates to draw (default 5)")
    a.add_argument(
        "--model",
        default="local",
        help='"local" (embedded SmolLM2-135M-Instruct, the default), "local:/model/folder", '
        '"openai:gpt-4o-mini", any "provider:model", or a served model name with --base-url',
    )
    a.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, …); --model is its served model name")
    a.add_argument("--api-key", help="key for --base-url (default: EMPTY)")
    a.add_argument("--temperatures", type=float, nargs="+", help="a pool over these temperatures")
    a.add_argument("--system-prompts", nargs="+", help="a pool over these system prompts")
    a.add_argument("--max-tokens", type=int, default=256)
    a.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate attempt")
    a.add_argument("--attempts", type=int, default=3, help="attempts per candidate on transient errors")
    a.add_argument("--adaptive", action="store_true", help="sample in waves, stop when candidates agree")
    a.add_argument("--max-n", type=int, default=MAX_N, help=f"cap on --n (default {MAX_N})")
    a.add_argument("--seed", type=int, help="sampling seed for the local model")
    a.add_argument("--json", action="store_true", help="print the sample set as JSON")
    a.set_defaults(run=ask)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
