"""The async tests in this folder run in one event loop per module, as an application runs in one: ChatOpenAI keeps
one async HTTP client per base URL, whose pooled connections belong to the loop that opened them, and every test
of a module here talks to the module's one server. (A module-wide `pytestmark` would also mark the sync tests,
which pytest-asyncio warns about.)"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (
            isinstance(item, pytest.Function)
            and item.path.is_relative_to(_HERE)
            and inspect.iscoroutinefunction(item.obj)
        ):
            # first, ahead of the plain mark asyncio_mode="auto" gave it: pytest-asyncio reads the closest one
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)
