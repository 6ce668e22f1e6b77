"""Names that moved: a module lists what it used to export and where each lives now, and its `__getattr__` hands
them out for one more release with a DeprecationWarning, importing the new home only when one is asked for."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from typing import Any


def moved_attribute(module: str, name: str, homes: Mapping[str, str]) -> Any:
    """`module.name`, for a module-level `__getattr__`: the object from `homes[name]`, with the warning that says
    where to import it from; AttributeError for a name that never lived in `module` (so that `from pkg import sub`
    still falls through to importing the submodule)."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} is deprecated: import it from {home} (removed in the next release)",
        DeprecationWarning,
        stacklevel=3,  # the code that imported the name, past this function and the module's __getattr__
    )
    return getattr(importlib.import_module(home), name)
