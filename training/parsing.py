"""The steps' argument parser: TRL's `TrlParser`, so a YAML file (`--config FILE`) and flags combine, flags winning.

On top of TRL's parser, a field may list other names in its metadata (`"aliases": ["--model"]`): they work as flags
(with `--no_<alias>` for a boolean that defaults to true) and as keys of the YAML file, so `--model` and
`--no_use_lora` keep meaning TRL's `model_name_or_path` and `use_peft`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import Field, fields
from typing import Any

from trl import TrlParser

from aggregate_graph.cli.common import ShortErrorParser


def _aliases(field: Field) -> list[str]:
    aliases = field.metadata.get("aliases", [])
    return [aliases] if isinstance(aliases, str) else list(aliases)


class StepParser(ShortErrorParser, TrlParser):
    """TRL's parser with the aliases, and mistakes told in a line or two (`ShortErrorParser`)."""

    def __init__(self, dataclass_types: Iterable[type], **kwargs: Any) -> None:
        dataclass_types = list(dataclass_types)
        self.renamed = {
            alias.lstrip("-"): field.name
            for cls in dataclass_types
            for field in fields(cls)
            for alias in _aliases(field)
        }
        super().__init__(dataclass_types, **kwargs)

    @staticmethod
    def _parse_dataclass_field(parser: argparse.ArgumentParser, field: Field) -> None:
        TrlParser._parse_dataclass_field(parser, field)
        if field.default is True:  # the parser adds `--no_<name>`; the same for each alias
            for alias in _aliases(field):
                parser.add_argument(
                    f"--no_{alias.lstrip('-')}", action="store_false", dest=field.name, default=argparse.SUPPRESS
                )

    def set_defaults_with_config(self, **kwargs: Any) -> list[str]:
        unknown = super().set_defaults_with_config(**{self.renamed.get(k, k): v for k, v in kwargs.items()})
        if unknown:  # TRL's own message would advise an argument of its Python API
            keys = ", ".join(flag.removeprefix("--") for flag in unknown[::2])  # [--key, value, …]
            raise ValueError(f"the config file has keys that {self.prog} does not know: {keys} (`{self.prog} --help` "
                             "lists them)")  # fmt: skip
        return unknown
