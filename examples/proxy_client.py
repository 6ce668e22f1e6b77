"""The aggregating proxy, started in-process, called by an unmodified `openai.OpenAI` client.

    python examples/proxy_client.py                                         # a scripted upstream server
    OPENAI_API_KEY=sk-... python examples/proxy_client.py --upstream https://api.openai.com/v1 --model gpt-4o-mini

`aggregate-graph proxy` serves the same app from the command line; here `create_proxy_app` is served on 127.0.0.1
from a background thread, in front of a scripted OpenAI-compatible upstream (or `--upstream`). The client only
changes `base_url` (and sends the proxy's key as its API key). It lists the proxy's models, asks once plainly and
once streamed, and prints the answers with the votes that chose them.
"""

from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from openai import OpenAI

from aggregate_graph import sample_sets_from
from aggregate_graph.openai_compat.proxy import create_proxy_app
from aggregate_graph.openai_compat.proxy_config import ProxyConfig
from aggregate_graph.testing import OpenAITestServer, running

# The upstream's candidates: three of five say 12, two slip.
SCRIPTED = [
    "15% of 80 is 0.15 × 80 = 12.\nThe answer is 12.",
    "10% of 80 is 8, 5% is 4, so 12.",
    "15% of 80 is 0.15 × 80 = 10.5.\nThe answer is 10.5.",
    "The answer is 12.",
    "80 / 15 = 5.33, so about 5.33.",
]


@contextmanager
def upstream_url(upstream: str | None) -> Iterator[str]:
    if upstream:
        yield upstream
        return
    with OpenAITestServer(SCRIPTED) as server:
        yield server.base_url


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="An unmodified OpenAI client against the aggregating proxy.")
    p.add_argument("question", nargs="?", default="What is 15% of 80?")
    p.add_argument("--upstream", help="the upstream OpenAI-compatible API, its key in OPENAI_API_KEY "
                   "(default: a scripted server started here)")  # fmt: skip
    p.add_argument("--model", default="test-model")
    p.add_argument("--n", type=int, default=5)
    args = p.parse_args(argv)
    proxy_key = secrets.token_urlsafe(16)  # what clients must send; the upstream's key stays with the proxy
    with upstream_url(args.upstream) as upstream:
        config = ProxyConfig(
            upstream=upstream, upstream_api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"), n=args.n, api_key=proxy_key
        )
        with running(create_proxy_app(config)) as proxy_url:
            print(f"proxy on {proxy_url} -> upstream {upstream} (n={args.n}, majority vote)")
            client = OpenAI(base_url=proxy_url, api_key=proxy_key)  # nothing else changes in client code
            models = [m.id for m in client.models.list()]
            print(f"models: {', '.join(models)}")
            messages = [{"role": "user", "content": args.question}]
            response = client.chat.completions.create(model=args.model, messages=messages)
            [sample_set] = sample_sets_from(response)
            agg = sample_set.aggregation
            print(f"question: {args.question}")
            print(f"answer:   {response.choices[0].message.content!r}")
            print(f"votes:    {agg.votes} ({len(agg.support)} of {len(sample_set.succeeded)} candidates agree)")
            streamed = []
            for chunk in client.chat.completions.create(model=args.model, messages=messages, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    streamed.append(chunk.choices[0].delta.content)
            print(f"streamed: {''.join(streamed)!r}")
    return {"models": models, "response": response, "sample_set": sample_set, "streamed": "".join(streamed)}


if __name__ == "__main__":
    main()
