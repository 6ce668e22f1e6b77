"""Aggregators by name: the one open registry that every surface resolves a name through — `load_aggregator`,
the graph, the node, the chat model, the middleware, `wrap_openai`, the proxy, the CLI, `aggregate-train evaluate`.
No surface special-cases a name.

Each aggregator class declares its `name` and `from_options` (how it is built from keyword options, which it
validates with its own messages) and registers itself with `@register`; `register("mine", factory)` adds your own,
and installed packages add theirs through the entry-point group `aggregate_graph.aggregators`. The options the
surfaces pass are named alike everywhere:

    model       the chat model an aggregator asks
    weights     a `WeightedVote`, or the file `WeightedVote.save` / `aggregate-train weights` wrote
    base_url, served_model_name, api_key, max_tokens
                a model served elsewhere (vLLM, `aggregate-graph serve-aggregator`) instead of `model`

Which options an aggregator takes, and which it cannot do without, is read from its factory's signature (and, for a
class's `from_options` that passes the rest on, from the class's constructor): that is how the proxy knows it can
offer `weighted` only when it has weights, and the CLI which flags apply. A class's `votes_on_json` says it is a
plain vote, which a request for structured output may name.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import entry_points
from typing import Any, TypeVar, overload

from langchain_core.runnables import Runnable

from aggregate_graph.errors import AggregatorOptionError
from aggregate_graph.sample_set import Aggregation, SampleSet

Factory = Callable[..., Runnable[SampleSet, Aggregation]]
"""Builds an aggregator from keyword options (an aggregator class's `from_options`, or any function)."""
AggregatorSpec = Runnable[SampleSet, Aggregation] | str
"""An aggregator object, or a registered name (`resolve_aggregator`)."""
ENTRY_POINT_GROUP = "aggregate_graph.aggregators"
OPTIONS = {
    "model": "the chat model it asks",
    "weights": "a WeightedVote, or the file WeightedVote.save / `aggregate-train weights` wrote",
    "base_url": "the server of the model it asks (an OpenAI-compatible one)",
}
"""What the options every surface passes alike mean (in error messages)."""
SURFACE_OPTIONS = frozenset({*OPTIONS, "served_model_name", "api_key", "max_tokens"})
"""The options surfaces pass alike; one given as None counts as not given (other options are passed as they are:
`k=None` means all candidates)."""
A = TypeVar("A", bound=type)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def constructor_options(cls: type) -> frozenset[str]:
    """The keyword options `cls(...)` takes, following `**kwargs` up the classes' `__init__`s (to `object`'s,
    which takes none)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            break
        if (init := klass.__dict__.get("__init__")) is None:
            continue
        parameters = list(inspect.signature(init).parameters.values())[1:]  # past self
        names |= {p.name for p in parameters if p.kind in _NAMED}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return frozenset(names)


def _not_taken(name: str, option: str, accepted: Iterable[str]) -> AggregatorOptionError:
    takes = ", ".join(sorted(accepted)) or "none"
    return AggregatorOptionError(f"aggregator {name!r} takes no {option}= (its options: {takes})", name, option)


def check_options(name: str, cls: type, options: Mapping[str, Any], *, also: Iterable[str] = ()) -> None:
    """What a class's `from_options` calls on the options it passes on to `cls(...)`: one it does not take is an
    AggregatorOptionError naming it (not a TypeError from deep in a constructor)."""
    accepted = constructor_options(cls) | set(also)
    for option in sorted(set(options) - accepted):
        raise _not_taken(name, option, accepted - {"model"})  # the model is the constructor's first argument


@dataclass(frozen=True)
class Registration:
    """A registered name and its factory; what options it takes and needs, from the factory's signature."""

    name: str
    factory: Factory

    @cached_property
    def _parameters(self) -> list[inspect.Parameter]:
        return list(inspect.signature(self.factory).parameters.values())

    @property
    def _named(self) -> frozenset[str]:
        return frozenset(p.name for p in self._parameters if p.kind in _NAMED)

    @property
    def _passes_on(self) -> bool:
        """Whether its factory also takes `**options`, passed on to the class (which checks them) or elsewhere."""
        return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in self._parameters)

    @property
    def options(self) -> frozenset[str]:
        """The options it takes: those its factory names, and those a class's `from_options` passes on to the
        class's constructor (`takes`)."""
        passed = constructor_options(self.cls) if self._passes_on and self.cls is not None else frozenset()
        return self._named | passed

    @property
    def required(self) -> frozenset[str]:
        """The options it cannot be built without (no default in its signature)."""
        return frozenset(p.name for p in self._parameters if p.name in self._named and p.default is p.empty)

    def takes(self, option: str) -> bool:
        return option in self.options

    @property
    def cls(self) -> type | None:
        """The aggregator class it builds: a registered class, or the class of a `from_options`; None for a function."""
        owner = getattr(self.factory, "__self__", self.factory)
        return owner if isinstance(owner, type) else None

    @property
    def votes_on_json(self) -> bool:
        """Whether its class says it is a plain vote, the one that structured output (JSON) is decided by."""
        return bool(getattr(self.cls, "votes_on_json", False))

    def build(self, options: Mapping[str, Any]) -> Runnable[SampleSet, Aggregation]:
        """The aggregator from `options` (a surface option given as None counts as not given)."""
        given = {key: value for key, value in options.items() if value is not None or key not in SURFACE_OPTIONS}
        for option in sorted(given):
            if not self._passes_on and option not in self._named:  # a factory with **options checks its own
                raise _not_taken(self.name, option, self.options)
        for option in sorted(self.required - set(given)):
            meaning = f": {OPTIONS[option]}" if option in OPTIONS else ""
            raise AggregatorOptionError(f"aggregator {self.name!r} needs {option}={meaning}", self.name, option,
                                        missing=True)  # fmt: skip
        return self.factory(**given)


_registry: dict[str, Registration] = {}
_discovery = threading.RLock()
_discovered = _discovering = False


@overload
def register(aggregator: A, factory: None = None, *, replace: bool = False) -> A: ...
@overload
def register(aggregator: str, factory: Factory, *, replace: bool = False) -> Factory: ...
def register(aggregator: Any, factory: Any = None, *, replace: bool = False) -> Any:
    """Register an aggregator: `@register` on a class (its `name`, built by its `from_options`, else by the class
    itself), or `register("mine", factory)` with any function of keyword options. Every surface then takes the
    name. A name taken already is an error unless `replace=True`.

    Args:
        aggregator: an Aggregator class with a `name`, or the name for `factory`.
        factory: a function of keyword options returning an aggregator (with a name only).
        replace: whether to replace a registration of that name.

    Returns:
        What was given (`@register` leaves the class as it is).

    Example:
        ```python
        from aggregate_graph import Aggregation, Candidate, SampleSet, load_aggregator, register
        from aggregate_graph.aggregators import MajorityVote

        register("majority_of_three", lambda: MajorityVote(), replace=True)
        votes = SampleSet(question="q", candidates=[Candidate(index=i, text=a, answer=a) for i, a in enumerate("778")])
        assert load_aggregator("majority_of_three").invoke(votes).answer == "7"
        ```
    """
    if isinstance(aggregator, type):
        name, factory = getattr(aggregator, "name", None), getattr(aggregator, "from_options", aggregator)
        if not isinstance(name, str) or not name:
            cls_name = aggregator.__name__
            raise ValueError(f"{cls_name} has no `name`: set the class attribute, or register(NAME, {cls_name})")
    elif isinstance(aggregator, str) and callable(factory):
        name = aggregator
    else:
        raise TypeError("register(AggregatorClass) or register(name, factory): a name and a callable")
    if name in _registry and _registry[name].factory != factory and not replace:
        raise ValueError(f"aggregator {name!r} is registered already; register(..., replace=True) replaces it")
    _registry[name] = Registration(name, factory)
    return aggregator


def _discover() -> None:
    """Load the installed packages' entry points, once; the shipped aggregators are registered already, since this
    module is imported through its package, which imports each of them. Names are resolved after this."""
    global _discovered, _discovering
    if _discovered:
        return
    with _discovery:
        if _discovered or _discovering:  # a plugin being imported here that resolves a name sees those so far
            return
        _discovering = True
        try:
            _load_entry_points()
        finally:
            _discovering = False
        _discovered = True


def _load_entry_points() -> None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
        except Exception as exc:  # one broken plugin must not take every aggregator down with it
            warnings.warn(f"aggregator entry point {point.name!r} ({point.value}) failed to load: {exc}", stacklevel=3)
            continue
        if point.name not in _registry:  # a plugin module may have registered itself on import
            register(point.name, getattr(loaded, "from_options", loaded))


def aggregator_names() -> tuple[str, ...]:
    """Every registered name, sorted."""
    _discover()
    return tuple(sorted(_registry))


def registration(name: str) -> Registration:
    """The registration of `name`; an unknown name is the ValueError every surface raises, listing the names."""
    _discover()
    if name not in _registry:
        raise ValueError(f"unknown aggregator {name!r}; known: {', '.join(sorted(_registry))}")
    return _registry[name]


def known_aggregator(name: str) -> str:
    """`name` if it is registered (for validators); else `registration`'s ValueError."""
    return registration(name).name


def missing_options(name: str, provided: Iterable[str]) -> list[str]:
    """The options `name` needs beyond those a surface `provided` (a surface checks this before its first call)."""
    return sorted(registration(name).required - set(provided))


def load_aggregator(name: str, **options: Any) -> Runnable[SampleSet, Aggregation]:
    """A ready aggregator by name, built by its registered factory from `options` (None values count as not given).

    - `majority`: plurality vote.
    - `weighted`: `WeightedVote` from `weights` (a file written by `WeightedVote.save` / `aggregate-train weights`).
    - `ssa`: with neither `model` nor `base_url`, the shipped trained SSA on the embedded SmolLM2 (CPU, offline);
      with `base_url`, the same shipped adapter served there (e.g. vLLM `--lora-modules`), rendered with its
      settings; with `model`, SSA's prompt over that chat model. `weights` replaces the shipped vote weights in
      the tally the shipped SSA reads (fit them on your own sources).
    - `gsr`, `usc`: the prompted aggregators over `model`, or the model served at `base_url`.
    - `medoid`, `structured_vote`, `best_of_n` (`scorer=` or `score_key=`), `recursive` (over `base=`, default
      `gsr`, and its `model`), and every name you `register`.

    Other keyword options go to the aggregator (`k`, `max_candidate_tokens`, `fallback`, …); `aggregator_names()`
    lists the names.

    Args:
        name: a registered name.
        **options: the aggregator's options; one it does not take is a `ValueError` listing those it does.

    Returns:
        The aggregator, a Runnable from `SampleSet` to `Aggregation`.

    Example:
        ```python
        from aggregate_graph import Candidate, SampleSet, load_aggregator

        votes = SampleSet(question="q", candidates=[Candidate(index=i, text=a, answer=a) for i, a in enumerate("778")])
        assert load_aggregator("majority").invoke(votes).answer == "7"
        ```
    """
    return registration(name).build(options)


def resolve_aggregator(
    aggregator: AggregatorSpec | None, role: str = "aggregator"
) -> Runnable[SampleSet, Aggregation] | None:
    """What every entry point that takes an aggregator (`build_aggregate_graph`, `AggregateNode`,
    `AggregatingChatModel`, `AggregationMiddleware`) does with it: a name is `load_aggregator(name)`, loaded once
    here; an object is taken as it is; None stays None (the caller's default)."""
    if isinstance(aggregator, str):
        return load_aggregator(aggregator)
    if aggregator is not None and not isinstance(aggregator, Runnable):
        raise TypeError(
            f"{role} must be an Aggregator (a Runnable over a SampleSet) or one of the names "
            f"{', '.join(aggregator_names())}; got {type(aggregator).__name__}"
        )
    return aggregator
