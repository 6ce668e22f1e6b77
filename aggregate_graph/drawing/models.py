"""Turning what the user passes as `model` into the pool of samplers that candidates are drawn from."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableBinding

from aggregate_graph.drawing.settings import Sampler, describe_model

# A chat model, one with bound options (`bind_tools`, `bind`, `with_config`), or a spec string.
ModelSpec = BaseChatModel | RunnableBinding | str
LOCAL_PREFIXES = ("local", "smollm2")


def load_chat_model(spec: ModelSpec, **kwargs: Any) -> BaseChatModel:
    """A chat model from a model object or a spec string.

    `"local"` / `"smollm2"` is the embedded SmolLM2-135M-Instruct, `"local:/path/to/folder"` any transformers
    model folder on this machine; `"openai:gpt-4o-mini"` is `ChatOpenAI` (needs `langchain-openai`), and any
    other `"provider:model"` goes to LangChain's `init_chat_model`.
    """
    if isinstance(spec, BaseChatModel):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise TypeError(
            "model must be a LangChain chat model (BaseChatModel) or a model spec string such as "
            f"'openai:gpt-4o-mini'; got {describe_model(spec) if not isinstance(spec, str) else repr(spec)}"
        )
    head, _, rest = spec.partition(":")
    if head in LOCAL_PREFIXES:
        from aggregate_graph.local import LocalChatModel

        return LocalChatModel(model_path=rest or None, **kwargs)
    if head == "openai" and rest:
        try:
            from langchain_openai import ChatOpenAI
        except ImportError as exc:
            raise ImportError(f"model {spec!r} needs langchain-openai: pip install 'aggregate-graph[openai]'") from exc
        kwargs.setdefault("max_retries", 0)  # the graph's CandidatePolicy retries; the client must not add its own
        return ChatOpenAI(model=rest, **kwargs)
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise ImportError(
            f"model {spec!r} is resolved by LangChain's init_chat_model: pip install langchain and the provider's "
            "package (e.g. langchain-anthropic), or pass a chat model object"
        ) from exc
    return init_chat_model(spec, **kwargs)


def build_pool(
    model: ModelSpec | Sampler | Sequence[ModelSpec | Sampler],
    system_prompts: Sequence[str | None] | None = None,
    temperatures: Sequence[float | None] | None = None,
) -> list[Sampler]:
    """Every combination of models × system prompts × temperatures; candidate i is drawn from pool[i % len]."""
    models = list(model) if isinstance(model, list | tuple) else [model]
    if not models:
        raise ValueError("model: give at least one chat model")
    prompts = list(system_prompts) if system_prompts else [None]
    temps = list(temperatures) if temperatures else [None]
    pool: list[Sampler] = []
    for m in models:
        if isinstance(m, Sampler):
            pool.append(m)
            continue
        chat_model = m if isinstance(m, RunnableBinding) else load_chat_model(m)
        pool.extend(Sampler(chat_model, p, t) for p, t in product(prompts, temps))
    return pool


def served_model(base_url: str, model: str, api_key: str | None, max_tokens: int, **options: Any) -> BaseChatModel:
    """A model at an OpenAI-compatible server (vLLM, `serve-aggregator`, a teacher): greedy and retried twice,
    unless `options` (`ChatOpenAI`'s) say otherwise."""
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise ImportError("a model at base_url needs langchain-openai: pip install 'aggregate-graph[openai]'") from exc
    options = {"temperature": 0, "max_retries": 2, **options}
    return ChatOpenAI(base_url=base_url, api_key=api_key or "EMPTY", model=model, max_tokens=max_tokens, **options)


def local_model(
    model_path: str | None, adapter_path: str | None = None, *, max_tokens: int, dtype: str = "auto"
) -> BaseChatModel:
    """An aggregator's model run in-process: greedy, `max_tokens` new tokens (model_path None: SmolLM2)."""
    from aggregate_graph.local import LocalChatModel

    return LocalChatModel(
        model_path=model_path, adapter_path=adapter_path, temperature=0, max_new_tokens=max_tokens,
        dtype=dtype,  # type: ignore[arg-type]
    )  # fmt: skip
