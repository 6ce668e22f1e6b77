"""A LangChain chat model that runs a small transformers model in-process on CPU.

torch and transformers are imported lazily so that importing this module (and the
package around it) stays cheap for code paths that never touch the local model.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    UsageMetadata,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import BaseModel, Field, PrivateAttr, field_validator

from aggregate_graph.local.batching import RowBatcher, RowRequest, decode_rows
from aggregate_graph.local.smollm2 import MODEL_NAME, smollm2_path

if TYPE_CHECKING:
    import torch
    from transformers import BatchEncoding, PreTrainedModel, PreTrainedTokenizerBase

# Shared by the model's fields and by per-call overrides, so both are checked alike.
PositiveInt = Annotated[int, Field(ge=1)]
Temperature = Annotated[float, Field(ge=0.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]

_ROLES = {"system": "system", "human": "user", "ai": "assistant"}


class _SamplingParams(BaseModel, frozen=True):
    n: PositiveInt
    temperature: Temperature
    top_p: TopP
    max_new_tokens: PositiveInt
    seed: int | None
    """This call's own seed; the model's `seed` field seeds its stream of calls instead."""
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=64)] = 0


@dataclass(frozen=True)
class _Completion:
    text: str
    output_tokens: int
    finish_reason: str
    logprobs: dict[str, Any] | None = None


class LocalChatModel(BaseChatModel):
    """Chat model backed by a local transformers folder (default: SmolLM2-135M-Instruct).

    Weights load on first use and are shared by all calls on this instance. Concurrent
    unseeded one-sample calls are decoded as one batch, each answered when its own row
    ends (`batches_calls`); other calls are serialised.
    """

    model_path: str | None = None
    """Local transformers model folder; `None` uses the converted SmolLM2 weights."""
    adapter_path: str | None = None
    """A PEFT (LoRA) adapter folder trained on `model_path`, merged into its weights on load.
    Needs the `serve` extra (peft)."""
    max_new_tokens: PositiveInt = 256
    temperature: Temperature = 0.7
    top_p: TopP = 0.95
    n: PositiveInt = 1
    seed: int | None = None
    """Seeds this instance's sampling once: successive calls differ, yet the whole sequence
    of calls is reproducible. A per-call `seed` option makes one call reproducible by itself."""
    torch_threads: PositiveInt | None = None
    """Passed to `torch.set_num_threads` on load; note that it is process-wide. Decoding a model this small gains
    little from a second thread, and a thread spinning against a busy neighbour process stalls every step
    (benchmarks/first_run.py): the `ask` CLI sets 1."""
    dtype: Literal["auto", "float32", "bfloat16", "int8"] = "auto"
    """Weights' precision. `auto` (the default) takes bfloat16 where the CPU computes it natively (avx512_bf16 or
    AMX: about twice the prefill speed of float32 here, 2.5× the decoding speed) and float32 elsewhere; `int8` is
    torch's dynamic quantization of the linear layers (benchmarks/ssa_inference.py compares them)."""

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _tokenizer: PreTrainedTokenizerBase | None = PrivateAttr(default=None)
    _model: PreTrainedModel | None = PrivateAttr(default=None)
    _rng_state: torch.Tensor | None = PrivateAttr(default=None)
    _batcher: RowBatcher | None = PrivateAttr(default=None)

    @field_validator("model_path")
    @classmethod
    def _check_model_path(cls, value: str | None) -> str | None:
        # Fail at construction rather than at the first call, and never fall
        # through to transformers treating an unknown string as a Hub model id.
        if value is not None and not (Path(value) / "config.json").is_file():
            raise ValueError(
                f"model_path {value!r} is not a local transformers model folder "
                "(no config.json found there); leave it unset to use SmolLM2-135M-Instruct"
            )
        return value

    @field_validator("adapter_path")
    @classmethod
    def _check_adapter_path(cls, value: str | None) -> str | None:
        # Same reason as above: PEFT would otherwise try the string as a Hub repository.
        if value is not None and not (Path(value) / "adapter_config.json").is_file():
            raise ValueError(f"adapter_path {value!r} is not a PEFT adapter folder (no adapter_config.json there)")
        if value is not None and importlib.util.find_spec("peft") is None:
            raise ValueError("adapter_path needs peft, which is not installed: pip install peft (the serve extra)")
        return value

    @property
    def model_name(self) -> str:
        return MODEL_NAME if self.model_path is None else Path(self.model_path).name

    @property
    def _llm_type(self) -> str:
        return "aggregate-graph-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "adapter_path": self.adapter_path,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "n": self.n,
            "seed": self.seed,
        }

    def _combine_llm_outputs(self, llm_outputs: list[dict[str, Any] | None], /) -> dict[str, Any]:
        # generate() reports only this combination, and the base class returns {}:
        # sum the per-prompt usage like ChatOpenAI does. Streamed and cached results
        # carry no llm_output; their usage stays on each message's usage_metadata.
        totals: dict[str, int] = {}
        for output in llm_outputs:
            for key, value in (output or {}).get("token_usage", {}).items():
                totals[key] = totals.get(key, 0) + value
        return {"token_usage": totals, "model_name": self.model_name}

    def _streaming_disabled(self, **kwargs: Any) -> bool:
        # LangChain routes invoke() through _stream whenever a streaming callback is
        # attached (e.g. LangGraph's "messages" stream mode). _stream yields a
        # single completion, so n > 1 must stay on _generate to keep all n.
        # Log-probabilities come from the scores `generate` returns, so such calls stay there too.
        params = self._sampling_params(kwargs)
        return params.n > 1 or params.logprobs or super()._streaming_disabled(**kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        params = self._sampling_params(kwargs)
        if params.n == 1 and self.batches_calls(kwargs):
            return self._generate_in_batch(messages, params, stop)
        sample = params.temperature > 0
        with self._lock:
            tokenizer, model = self._load()
            inputs = self._encode(tokenizer, messages)
            prompt_tokens = inputs["input_ids"].shape[1]
            # Greedy decoding yields n identical answers and transformers refuses
            # num_return_sequences > 1 without sampling, so decode once and repeat.
            with self._randomness(params.seed):
                output = model.generate(
                    **inputs,
                    **self._generation_kwargs(params, stop, tokenizer),
                    num_return_sequences=params.n if sample else 1,
                    output_logits=params.logprobs,  # the model's own logits, before sampling's processors
                    return_dict_in_generate=True,
                )
        eos_ids = _end_token_ids(model)
        completions = [
            _complete(tokenizer, row[prompt_tokens:].tolist(), eos_ids, stop,
                      _logprobs(tokenizer, output.logits, i, row[prompt_tokens:], params.top_logprobs)
                      if params.logprobs else None)
            for i, row in enumerate(output.sequences)
        ]  # fmt: skip
        if not sample:
            completions *= params.n

        return self._result(completions, prompt_tokens)

    def _result(self, completions: list[_Completion], prompt_tokens: int) -> ChatResult:
        """The completions of one prompt, which is billed once however many there are."""
        completion_tokens = sum(c.output_tokens for c in completions)
        return ChatResult(
            generations=[ChatGeneration(message=self._message(c, prompt_tokens)) for c in completions],
            llm_output={
                "token_usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
                "model_name": self.model_name,
            },
        )

    def batches_calls(self, options: Mapping[str, Any] | None = None) -> bool:
        """Whether a one-sample call with these call `options` is decoded together with the calls that arrive
        beside it (`batching.RowBatcher`): unseeded, sampled (temperature > 0) calls without log-probabilities.
        The graph asks such a model for one candidate per call, so each candidate lands as soon as its own row
        ends. Seeded and greedy calls are not batched: which calls share a batch depends on timing, and their
        output must not (a greedy `n` request decodes once and repeats it)."""
        try:
            params = self._sampling_params({**(options or {}), "n": 1})
        except (TypeError, ValueError):  # options this model refuses: the call itself will say so
            return False
        return self.seed is None and params.seed is None and params.temperature > 0 and not params.logprobs

    def _generate_in_batch(
        self, messages: list[BaseMessage], params: _SamplingParams, stop: list[str] | None
    ) -> ChatResult:
        stops = [s for s in stop or [] if s]
        with self._lock:  # the tokenizer and weights, loaded once; the batcher takes the lock to decode
            tokenizer, _ = self._load()
            if self._batcher is None:  # it holds the model weakly: a model no longer used can be freed
                self._batcher = RowBatcher(weakref.WeakMethod(self._decode_batch))
        prompt_ids = self._encode(tokenizer, messages)["input_ids"][0].tolist()
        request = RowRequest(
            prompt_ids=prompt_ids,
            key=(params.temperature, params.top_p, params.max_new_tokens, tuple(stops)),
            generation_kwargs=self._generation_kwargs(params, None, tokenizer),
            stops=stops,
        )
        generated = self._batcher.submit(request)
        completion = _complete(tokenizer, generated, _end_token_ids(self._model), stops)
        return self._result([completion], len(prompt_ids))

    def _decode_batch(self, requests: list[RowRequest]) -> None:
        with self._lock:
            tokenizer, model = self._load()
            end_ids = _end_token_ids(model)
            pad_id = model.generation_config.pad_token_id
            if pad_id is None:
                pad_id = min(end_ids)
            decode_rows(model, tokenizer, requests, end_ids, pad_id)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        params = self._sampling_params(kwargs)
        if params.n != 1:
            raise ValueError("streaming produces a single completion; use invoke() for n > 1")
        stops = [s for s in stop or [] if s]

        with self._lock:
            tokenizer, model = self._load()
            inputs = self._encode(tokenizer, messages)
            prompt_tokens = inputs["input_ids"].shape[1]
            generation = _BackgroundGeneration(
                model, tokenizer, inputs, self._generation_kwargs(params, stops, tokenizer)
            )
            with self._randomness(params.seed):
                generation.start()
                try:
                    for text in _until_stop(generation.streamer, stops):
                        yield _text_chunk(text)
                finally:
                    # Also reached when the consumer abandons the stream: stop the worker
                    # instead of letting it decode up to max_new_tokens under the lock.
                    generation.stop()
        if generation.error is not None:
            raise generation.error

        generated = generation.sequences[0, prompt_tokens:].tolist()
        completion = _complete(tokenizer, generated, _end_token_ids(model), stops)
        final = self._message(completion, prompt_tokens)
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=final.usage_metadata,
                response_metadata=final.response_metadata,
                chunk_position="last",
            )
        )

    def _sampling_params(self, overrides: Mapping[str, Any]) -> _SamplingParams:
        # `stream` is LangChain's own switch between invoke and _stream; it has
        # already done its job by the time a call reaches this model.
        known = {
            "n",
            "temperature",
            "top_p",
            "max_new_tokens",
            "max_tokens",
            "seed",
            "stream",
            "logprobs",
            "top_logprobs",
        }
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"LocalChatModel got unsupported call options: {sorted(unknown)}")
        return _SamplingParams(
            n=overrides.get("n", self.n),
            temperature=overrides.get("temperature", self.temperature),
            top_p=overrides.get("top_p", self.top_p),
            max_new_tokens=overrides.get("max_new_tokens", overrides.get("max_tokens", self.max_new_tokens)),
            seed=overrides.get("seed"),
            logprobs=bool(overrides.get("logprobs", False)),
            top_logprobs=overrides.get("top_logprobs") or 0,
        )

    @contextmanager
    def _randomness(self, call_seed: int | None) -> Iterator[None]:
        """Sampling randomness for one call; use with `self._lock` held.

        The CPU generator is process-wide: a seeded call runs on its own saved
        state and puts the caller's state back afterwards.
        """
        import torch

        if call_seed is None and self.seed is None:
            yield
            return
        with torch.random.fork_rng(devices=[]):
            if call_seed is not None:
                torch.manual_seed(call_seed)
                yield
                return
            if self._rng_state is None:
                torch.manual_seed(self.seed)
            else:
                torch.set_rng_state(self._rng_state)
            yield
            self._rng_state = torch.get_rng_state()

    def load(self) -> None:
        """Load the tokenizer and weights now instead of on the first call (a server does this at startup)."""
        with self._lock:
            self._load()

    def _load(self) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
        """Load tokenizer and weights once per instance; call with `self._lock` held."""
        if self._tokenizer is None or self._model is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            if self.torch_threads is not None:
                torch.set_num_threads(self.torch_threads)
            path = Path(self.model_path) if self.model_path is not None else smollm2_path()
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            bf16 = self.dtype == "bfloat16" or (self.dtype == "auto" and cpu_has_bf16())
            # Without an adapter, the weights are cast as they load (a second pass over them costs ~2 s here).
            load_dtype = torch.bfloat16 if bf16 and self.adapter_path is None else torch.float32
            model = AutoModelForCausalLM.from_pretrained(path, dtype=load_dtype, local_files_only=True)
            if self.adapter_path is not None:
                from peft import PeftModel

                # Merging once makes every later forward pass cost what the base model's does,
                # instead of adding the low-rank products at each layer and token.
                model = PeftModel.from_pretrained(model, self.adapter_path).merge_and_unload()
            if bf16:
                model = model.to(torch.bfloat16)  # after merging, so the adapter is added in full precision
            elif self.dtype == "int8":
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            self._tokenizer, self._model = tokenizer, model
        return self._tokenizer, self._model

    @staticmethod
    def _encode(tokenizer: PreTrainedTokenizerBase, messages: Sequence[BaseMessage]) -> BatchEncoding:
        conversation = [{"role": _role(m), "content": str(m.text)} for m in messages]
        return tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )

    @staticmethod
    def _generation_kwargs(
        params: _SamplingParams, stop: Sequence[str] | None, tokenizer: PreTrainedTokenizerBase
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_new_tokens}
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs["do_sample"] = False
        if stop:
            # Ends decoding as soon as a stop string appears instead of running to
            # max_new_tokens; the text is cut at the stop string afterwards.
            kwargs.update(stop_strings=list(stop), tokenizer=tokenizer)
        return kwargs

    def _message(self, completion: _Completion, prompt_tokens: int) -> AIMessage:
        return AIMessage(
            content=completion.text,
            usage_metadata=UsageMetadata(
                input_tokens=prompt_tokens,
                output_tokens=completion.output_tokens,
                total_tokens=prompt_tokens + completion.output_tokens,
            ),
            response_metadata={
                "finish_reason": completion.finish_reason,
                "model_name": self.model_name,
                **({"logprobs": completion.logprobs} if completion.logprobs is not None else {}),
            },
        )


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (x86 avx512_bf16 or AMX); elsewhere bf16 is emulated, slowly.
    A process that holds torch to AVX2 or less (`ATEN_CPU_CAPABILITY`) does not, whatever the CPU has."""
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() in ("default", "avx2", "zvector", "sve256"):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(flag in flags for flag in (" avx512_bf16", " amx_bf16"))


def _role(message: BaseMessage) -> str:
    if isinstance(message, ChatMessage):
        return message.role
    if message.type not in _ROLES:
        raise ValueError(f"LocalChatModel supports system, human and ai messages, not {message.type!r}")
    return _ROLES[message.type]


def _end_token_ids(model: PreTrainedModel) -> set[int]:
    """Token ids that end a sequence: EOS, and the padding after it in a batch."""
    config = model.generation_config
    eos = config.eos_token_id
    ids = set(eos) if isinstance(eos, list) else {eos}
    ids.add(config.pad_token_id)
    return {i for i in ids if i is not None}


def _logprobs(
    tokenizer: PreTrainedTokenizerBase, logits: Sequence[torch.Tensor], row: int, generated: torch.Tensor, top: int
) -> dict[str, Any]:
    """One sequence's generated tokens with their log-probabilities under the model (its raw logits, not the
    temperature- or top-p-processed scores: as OpenAI and vLLM report them) and the `top` likeliest alternatives at
    each step, in the OpenAI API's `logprobs` schema (what ChatOpenAI puts in `response_metadata["logprobs"]`)."""
    import torch

    content = []

    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        token = tokenizer.decode([token_id])
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    for step, token in zip(logits, generated.tolist(), strict=False):
        logprobs = torch.log_softmax(step[row].float(), dim=-1)
        values, ids = logprobs.topk(top) if top else (logprobs[:0], logprobs[:0].long())
        top_entries = [entry(i, v) for v, i in zip(values.tolist(), ids.tolist(), strict=True)]
        content.append(entry(token, float(logprobs[token])) | {"top_logprobs": top_entries})
    return {"content": content}


def _complete(
    tokenizer: PreTrainedTokenizerBase,
    generated: list[int],
    end_ids: set[int],
    stop: Sequence[str] | None,
    logprobs: dict[str, Any] | None = None,
) -> _Completion:
    body_len = next((i for i, token in enumerate(generated) if token in end_ids), len(generated))
    ended = body_len < len(generated)
    if logprobs is not None:  # the text's own tokens: not the end token, nor the batch padding after it
        logprobs = {"content": logprobs["content"][:body_len]}
    text = tokenizer.decode(generated[:body_len], skip_special_tokens=True)
    cut = _first_stop(text, stop)
    if cut is not None:
        # Decoding stopped right after the stop string; what follows in the row is
        # batch padding, not a generated EOS, so it is not counted.
        return _Completion(text=text[:cut], output_tokens=body_len, finish_reason="stop", logprobs=logprobs)
    return _Completion(
        text=text,
        output_tokens=body_len + int(ended),
        finish_reason="stop" if ended else "length",
        logprobs=logprobs,
    )


def _first_stop(text: str, stop: Sequence[str] | None) -> int | None:
    """Index of the earliest stop string in `text`, if any."""
    hits = [i for s in stop or [] if s and (i := text.find(s)) >= 0]
    return min(hits, default=None)


def _stop_prefix_overlap(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is the start of some stop string."""
    return max(
        (k for s in stops for k in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:k])),
        default=0,
    )


def _text_chunk(text: str) -> ChatGenerationChunk:
    return ChatGenerationChunk(message=AIMessageChunk(content=text))


class _BackgroundGeneration:
    """`model.generate` in a worker thread, its text arriving through `streamer` as it is decoded; `stop()` ends
    it at the next token (a stopping criterion reads the flag) and waits for the thread."""

    def __init__(self, model: Any, tokenizer: Any, inputs: Any, generation_kwargs: dict[str, Any]) -> None:
        import torch
        from transformers import TextIteratorStreamer

        self.streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.sequences: Any = None
        self.error: BaseException | None = None
        cancelled = threading.Event()

        def cancel_requested(input_ids: torch.Tensor, scores: Any, **_: Any) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), cancelled.is_set(), dtype=torch.bool, device=input_ids.device)

        def run() -> None:
            try:
                self.sequences = model.generate(
                    **inputs, **generation_kwargs, streamer=self.streamer, stopping_criteria=[cancel_requested]
                )
            except BaseException as error:  # re-raised in the consuming thread
                self.error = error
                self.streamer.end()  # unblocks the consumer's iteration

        self._cancelled = cancelled
        self._worker = threading.Thread(target=run, name="local-chat-model-stream", daemon=True)

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        self._cancelled.set()
        self._worker.join()


def _until_stop(pieces: Iterable[str], stops: list[str]) -> Iterator[str]:
    """The streamed text up to the first stop string, holding back a tail that could still grow into one."""
    pending = ""
    for piece in pieces:
        pending += piece
        cut = _first_stop(pending, stops)
        if cut is not None:
            if pending[:cut]:
                yield pending[:cut]
            return
        ready = len(pending) - _stop_prefix_overlap(pending, stops)
        if ready:
            yield pending[:ready]
            pending = pending[ready:]
    if pending:
        yield pending
