"""Plain OpenAI-client code, aggregated: `wrap_openai(client, n=5)` and nothing else changes.

    python examples/openai_script.py                                   # a scripted OpenAI-compatible server
    python examples/openai_script.py "What is 17 * 23?" --base-url https://api.openai.com/v1 --model gpt-4o-mini

Every `client.chat.completions.create(...)` draws n candidates (one request with `n` where the server takes it)
and answers with a real `ChatCompletion` whose content is the winning candidate; the sample set, with every
candidate and the votes, comes back in the response (`sample_sets_from`). It prints the answer, the candidates
and the votes.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from openai import OpenAI
from openai.types.chat import ChatCompletion

from aggregate_graph import sample_sets_from, wrap_openai
from aggregate_graph.testing import OpenAITestServer

# Five scripted candidates: three say 42, one slips to 41, one to 48.
SCRIPTED = [
    "6 × 7 = 42. The answer is 42.",
    "Six sevens are 42.",
    "6 × 7 = 6 × 6 + 6 = 41. The answer is 41.",
    "The answer is 42.",
    "7 × 6 = 48, so 48.",
]


@contextmanager
def client_for(base_url: str | None) -> Iterator[OpenAI]:
    """A plain OpenAI client on `base_url` (key from OPENAI_API_KEY), or on a scripted test server."""
    if base_url:
        yield OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"))
        return
    with OpenAITestServer(SCRIPTED) as server:
        yield OpenAI(base_url=server.base_url, api_key="sk-test")


def main(argv: Sequence[str] | None = None) -> ChatCompletion:
    p = argparse.ArgumentParser(description="An OpenAI client wrapped by wrap_openai: n candidates, one answer.")
    p.add_argument("question", nargs="?", default="What is 6 times 7?")
    p.add_argument("--n", type=int, default=5)
    p.add_argument("--base-url", help="an OpenAI-compatible server (default: a scripted one, started here)")
    p.add_argument("--model", default="gpt-4o-mini")
    args = p.parse_args(argv)
    with client_for(args.base_url) as plain:
        client = wrap_openai(plain, n=args.n)  # the same client, patched in place
        response = client.chat.completions.create(
            model=args.model, messages=[{"role": "user", "content": args.question}], temperature=0.8
        )
    [sample_set] = sample_sets_from(response)
    print(f"question: {args.question}")
    for c in sample_set.candidates:
        print(f"  candidate {c.index}: answer={c.answer}  {c.error or c.text!r}")
    agg = sample_set.aggregation
    print(f"votes: {agg.votes}  ({agg.method}, {len(agg.support)} of {len(sample_set.succeeded)} agree)")
    print(f"answer: {response.choices[0].message.content}")
    print(f"usage: {response.usage.total_tokens} tokens over all candidates")
    return response


if __name__ == "__main__":
    main()
