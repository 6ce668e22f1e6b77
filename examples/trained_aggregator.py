"""A trained aggregator in the prebuilt graph: the SSA shipped in the package reads five candidates and picks.

    python examples/trained_aggregator.py                        # shipped SSA on the CPU, offline
    python examples/trained_aggregator.py --base-url http://127.0.0.1:8000/v1   # the SSA served by
                                                                 # `aggregate-graph serve-aggregator ssa`

`load_aggregator("ssa")` is the shipped SSA (a LoRA adapter on the embedded SmolLM2-135M) run in-process;
with `--base-url` it is an `SSAAggregator` over the same adapter served elsewhere (vLLM or the local engine),
rendering with the shipped settings. Candidates come from a scripted OpenAI-compatible server: two solve the
problem, three make the same visible slip (48 + 24 = 82). The shipped vote weights count work with an arithmetic
slip least, so the options the model is shown put 72 first (weighted 91%). It prints each candidate, what the
aggregator read and wrote, its pick next to majority vote's, and whether each pick is right. Whatever the SSA
picks is reported as it is; a served model without log-probabilities gives no confidence, and the vote decides.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from aggregate_graph import SampleSet, build_aggregate_graph
from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.aggregators.registry import load_aggregator
from aggregate_graph.reading.answers import equivalent
from aggregate_graph.testing import OpenAITestServer

QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)
GOLD = "72"
CANDIDATES = [
    "In May she sold 48 / 2 = 24 clips.\nAltogether she sold 48 + 24 = 82 clips.\n#### 82",
    "Half of 48 is 24, so in May she sold 24 clips.\nIn total: 48 + 24 = 72.\n#### 72",
    "April: 48 clips. May: 48 / 2 = 24 clips.\nAltogether 48 + 24 = 82 clips.\n#### 82",
    "May is half of April: 48 / 2 = 24.\nBoth months: 48 + 24 = 72 clips.\n#### 72",
    "She sold 48 / 2 = 24 clips in May, so 48 + 24 = 82 clips in all.\n#### 82",
]


def mark(answer: str | None) -> str:
    return "right" if answer is not None and equivalent(answer, GOLD) else "wrong"


def main(argv: Sequence[str] | None = None) -> SampleSet:
    p = argparse.ArgumentParser(description="The shipped trained SSA as the prebuilt graph's aggregator.")
    p.add_argument("--base-url", help="a server of the SSA model (default: the shipped SSA, run here on the CPU)")
    p.add_argument("--aggregator-model", default="aggregator", help="its served model name")
    args = p.parse_args(argv)
    if args.base_url:
        key = os.environ.get("AGGREGATOR_API_KEY")
        aggregator = load_aggregator(
            "ssa", base_url=args.base_url, served_model_name=args.aggregator_model, api_key=key
        )
        print(f"aggregator: SSA served at {args.base_url} ({args.aggregator_model})")
    else:
        aggregator = load_aggregator("ssa")  # loads SmolLM2 and the adapter on first use
        print("aggregator: the shipped SSA (SmolLM2-135M + LoRA), in-process on the CPU")
    with OpenAITestServer(CANDIDATES) as server:
        model = ChatOpenAI(base_url=server.base_url, api_key="sk-test", model="solver", max_retries=0)
        graph = build_aggregate_graph(model, n=len(CANDIDATES), aggregator=aggregator)
        out = graph.invoke({"messages": [HumanMessage(QUESTION)]})
    sample_set: SampleSet = out["sample_set"]
    print(f"question: {QUESTION}")
    for c in sample_set.candidates:
        last_step = [line for line in c.text.splitlines() if not line.startswith("####")][-1:]
        print(f"  candidate {c.index} ({mark(c.answer)}): {' '.join(last_step)!r} -> {c.answer}")
    agg = sample_set.aggregation
    majority = MajorityVote().invoke(sample_set)
    loading = "" if args.base_url else ", the first call includes loading the model"
    probs = ", ".join(f"{a}: {p:.0%}" for a, p in (agg.details.get("choice_probs") or {}).items())
    print(f"SSA wrote:     {agg.details.get('raw_output')!r} ({agg.details.get('parse_status')}, "
          f"{agg.latency_s or 0:.1f} s{loading}; its probabilities {probs or '—'})")  # fmt: skip
    print(f"SSA picks:     {agg.answer} ({mark(agg.answer)}), backed by candidates {agg.support}")
    print(f"majority vote: {majority.answer} ({mark(majority.answer)}), votes {majority.votes}")
    print(f"gold answer:   {GOLD}")
    return sample_set


if __name__ == "__main__":
    main()
