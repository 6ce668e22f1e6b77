"""The one serving layer: the proxy's old import paths still work for a release, with a warning naming the new."""

from __future__ import annotations

import importlib
import sys

import pytest

from aggregate_graph.serve import proxy, proxy_wire


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("aggregate_graph.openai_compat.proxy", proxy, ["ProxyConfig", "create_proxy_app", "serve_proxy", "Scrubber"]),
        ("aggregate_graph.openai_compat.proxy_wire", proxy_wire, ["stream_response", "create_arguments"]),
    ],
)
def test_the_old_proxy_paths_warn_and_reexport(monkeypatch, old: str, new, names: list[str]) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)  # a cached module would import without warning
    with pytest.warns(DeprecationWarning, match=rf"{new.__name__}.*removed in the next release"):
        shim = importlib.import_module(old)
    for name in names:
        assert getattr(shim, name) is getattr(new, name)
