"""What `aggregate-graph` and `aggregate-train` share: `--version`, `--debug`, quiet libraries, and mistakes told in
one or two lines (`error: …`, then maybe `hint: …`) instead of a traceback.

Without `--debug` (or AGGREGATE_GRAPH_DEBUG=1), `run_command` turns the known error families into those lines and
an exit status: 2 for a mistake in the command or its configuration, 1 for a failure while running, 130 for Ctrl-C.
Anything else still raises: an unexpected exception is a bug, and its traceback is what a report needs.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import httpx
import openai
from pydantic import ValidationError

from aggregate_graph.errors import AggregateGraphError
from aggregate_graph.serve.engines import EngineError

DEBUG_ENV = "AGGREGATE_GRAPH_DEBUG"
OPENAI_KEY_ENV = "OPENAI_API_KEY"  # `ask`'s key for --base-url and openai: models, and the proxy's upstream key
AGGREGATOR_KEY_ENV = "AGGREGATOR_API_KEY"  # where `ask` and the proxy read the aggregator server's key
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
USAGE, RUNTIME, INTERRUPTED = 2, 1, 130
# Which extra brings a module a command may miss, for the `pip install` hint.
EXTRA_OF = {
    "torch": "local",
    "transformers": "local",
    "gguf": "local",
    "accelerate": "local",
    "langchain_openai": "openai",
    "fastapi": "serve",
    "starlette": "serve",
    "uvicorn": "serve",
    "peft": "serve",
    "trl": "train",
    "datasets": "train",
    "matplotlib": "train",
    "numpy": "train",
    "tqdm": "train",
    "yaml": "train",
}
# Libraries whose deprecation notices are addressed to this package's authors, not to the person running it.
NOISY_MODULES = r"(transformers|peft|torch|accelerate|trl|datasets)(\.|$)"


SETTLE_HELP = (  # `ask` and `proxy` take --settle / --no-settle alike
    "decide as soon as the candidates still out cannot change the vote, and cancel them (default); --no-settle "
    "waits for every candidate"
)


class CLIError(Exception):
    """A mistake in the command, told as `error: <problem>` lines and an optional `hint: <fix>` line."""

    def __init__(self, *problems: str, hint: str | None = None, status: int = USAGE) -> None:
        super().__init__("; ".join(problems))
        self.problems, self.hint, self.status = problems, hint, status


def package_version() -> str:
    try:
        return importlib.metadata.version("aggregate-graph")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def debug_requested(flag: bool = False) -> bool:
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes")


class ShortErrorParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is the error and where the flags are listed, not the whole usage text."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}\nhint: `{self.prog} --help` lists the flags", file=sys.stderr)
        raise SystemExit(USAGE)


def refuse_secret_flag(parser: argparse.ArgumentParser, flag: str, instead: str) -> None:
    """A hidden `flag` that stops the command: a secret given on the command line is visible to every user of the
    machine (`ps`). Defined explicitly so that argparse does not take it as an abbreviation of a longer flag."""

    class Refuse(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
            parser.exit(USAGE, f"error: {flag} would show the key to anyone running `ps`: {instead}\n")

    parser.add_argument(flag, nargs="?", action=Refuse, help=argparse.SUPPRESS)


def env_secret(named: str | None, default: str | None, flag: str) -> str | None:
    """The key in the environment variable `named` by `flag`, else in `default` when that one is set. A variable
    the user named must hold a key: its absence is a mistake, not a reason to run without one."""
    if named and not _ENV_NAME.fullmatch(named):  # most likely the key itself: never shown back
        raise CLIError(f"{flag} takes the NAME of an environment variable holding the key, not the key",
                       hint=f"export MY_KEY=… and pass {flag} MY_KEY")  # fmt: skip
    name = named or default
    value = os.environ.get(name, "").strip() if name else ""
    if named and not value:
        raise CLIError(f"{flag} {named}: that environment variable is not set or empty", hint=f"export {named}=…")
    return value or None


def quiet_libraries(*, progress: bool = False) -> None:
    """Keep library chatter (transformers' "Loading weights" bars and notices, deprecation warnings) out of the
    command's output; with `progress` (training: a long job), transformers keeps its log and progress bars — its
    verbosity also decides whether the trainer shows its own. transformers reads these variables when it is
    imported, which the commands do only when a model loads: importing it here to call its setters would add a
    second to every command, `--help` included."""
    if not progress:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' own bars follow huggingface_hub's
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=NOISY_MODULES)


def one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)  # 0.0 as the user typed it: 0


def validation_problems(exc: ValidationError, flags: Mapping[str, str] | None = None) -> list[str]:
    """One line per problem of a pydantic ValidationError: the field (as its command-line flag with `flags`: the
    mapped name, else `--field-name`), then what is wrong and what it must be instead."""
    bounds = {"greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than"),
              "less_than_equal": ("le", "at most"), "less_than": ("lt", "less than")}  # fmt: skip
    lines = []
    for error in exc.errors(include_url=False):
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] in bounds:
            key, bound = bounds[error["type"]]
            message = f"{_shown(error['input'])} given; it must be {bound} {_shown(error['ctx'][key])}"
        field = ".".join(str(part) for part in error["loc"])
        if field and flags is not None:
            field = flags.get(field, "--" + field.replace("_", "-"))
        lines.append(f"{field}: {message}" if field else message)  # a whole-model check names its flags itself
    return lines


def _install_hint(exc: ImportError) -> str | None:
    extra = EXTRA_OF.get((exc.name or "").partition(".")[0])
    return f"pip install 'aggregate-graph[{extra}]'" if extra else None


def describe_failure(exc: BaseException) -> CLIError | None:
    """The error lines and exit status for an exception of a known family; None for anything else."""
    if isinstance(exc, CLIError):
        return exc
    if isinstance(exc, EngineError):
        return CLIError(str(exc), hint=exc.hint)
    if isinstance(exc, ValidationError):
        return CLIError(*(f"{exc.title}: {line}" for line in validation_problems(exc)))
    if isinstance(exc, AggregateGraphError):  # before openai's: a QuorumAPIError is both
        return CLIError(one_line(str(exc)), status=RUNTIME)
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return CLIError(
            f"the server refused the API key ({exc.status_code}): {one_line(exc.message)}",
            hint="check the key in the environment variable the command reads (its --api-key-env flag names it)",
        )
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError | ConnectionError):
        return CLIError(f"cannot connect: {one_line(str(exc)) or type(exc).__name__}", hint="is the server running "
                        "at that URL?", status=RUNTIME)  # fmt: skip
    if isinstance(exc, openai.OpenAIError) and not isinstance(exc, openai.APIError):  # the client could not be made
        return CLIError(one_line(str(exc)), hint="set the key's environment variable (--api-key-env names another)")
    if isinstance(exc, ImportError):
        return CLIError(one_line(str(exc)), hint=_install_hint(exc))
    if isinstance(exc, OSError) and exc.filename is not None:  # FileNotFoundError, IsADirectoryError, …
        return CLIError(f"{exc.filename}: {(exc.strerror or str(exc)).lower()}")
    if isinstance(exc, ValueError | FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return CLIError(one_line(str(exc)) or type(exc).__name__)  # how options and paths are refused
    if isinstance(exc, OSError):  # the machine's (a taken address, a full disk), not the command's
        return CLIError(one_line(str(exc)) or type(exc).__name__, hint="--debug shows the traceback", status=RUNTIME)
    return None  # a TypeError, KeyError, …: a bug, whose traceback is what a report needs


def report(failure: CLIError) -> int:
    for problem in failure.problems:
        print(f"error: {problem}", file=sys.stderr)
    if failure.hint:
        print(f"hint: {failure.hint}", file=sys.stderr)
    return failure.status


def run_command(command: Callable[[], int], *, debug: bool) -> int:
    """`command()`'s exit status; without `debug`, a known failure is reported in a line or two instead of raised."""
    if debug:
        return command()
    try:
        return command()
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:
        failure = describe_failure(exc)
        if failure is None:
            raise
        return report(failure)


def version_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")


def debug_flag() -> argparse.ArgumentParser:
    """`--debug`, as a parent parser for the command and each subcommand: it may come before or after the
    subcommand (SUPPRESS: the subcommand's unset default does not hide the command's)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help=f"show tracebacks, library warnings and progress bars ({DEBUG_ENV}=1 does the same)",
    )
    return parent
