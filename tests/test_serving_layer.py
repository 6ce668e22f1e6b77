"""The one serving layer: the engines `serve-aggregator` dispatches on, each with the flags only it takes, and the
proxy's old import paths, which still work for a release with a warning naming the new."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from aggregate_graph.cli.main import main, parser
from aggregate_graph.serve import DEFAULT_SERVED_NAME
from aggregate_graph.serve.engines import ENGINES


def test_the_registry_lists_both_engines_and_the_command_takes_every_flag_they_declare() -> None:
    assert list(ENGINES) == ["vllm", "local"]
    flags = [flag for engine in ENGINES.values() for flag in engine.flags]
    assert {flag.name for flag in flags} == {"--max-model-len", "--vllm", "--dtype", "--max-body-bytes"}
    args = parser().parse_args(["serve-aggregator", *(part for flag in flags for part in (flag.name, "1"))])
    assert all(getattr(args, flag.dest) is not None for flag in flags)


@pytest.mark.usefixtures("restored_environment")
@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_flag_of_another_engine_is_refused_naming_its_engine(engine: str, capsys) -> None:
    for other in ENGINES.values():
        if other.name != engine:
            for flag in other.flags:
                assert main(["serve-aggregator", "--engine", engine, flag.name, "1"]) == 2
                assert capsys.readouterr().err == f"error: {flag.name} applies only to --engine {other.name}\n"


@pytest.mark.usefixtures("restored_environment")
def test_the_command_runs_the_named_engine_with_its_own_flags_only(monkeypatch) -> None:
    served: list[tuple[str, dict[str, Any]]] = []

    def stand_in(model_dir: str, **kwargs: Any) -> int:
        served.append((model_dir, kwargs))
        return 7

    monkeypatch.setitem(ENGINES, "local", dataclasses.replace(ENGINES["local"], serve=stand_in))
    assert main(["serve-aggregator", "folder", "--engine", "local", "--max-body-bytes", "5", "--port", "9"]) == 7
    common = {"adapter": None, "host": "127.0.0.1", "port": 9, "served_model_name": DEFAULT_SERVED_NAME}
    assert served == [("folder", {**common, "api_key": None, "max_body_bytes": 5})]
    served.clear()
    assert main(["serve-aggregator", "folder", "--engine", "local"]) == 7  # unset: the engine's own default
    assert served == [("folder", {**common, "port": 8000, "api_key": None})]
