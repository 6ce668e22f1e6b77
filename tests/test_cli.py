"""The CLI as a user runs it: a real subprocess against a real OpenAI-compatible server; its mistakes, in-process."""

import importlib.metadata
import io
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from aggregate_graph.aggregators import MajorityVote
from aggregate_graph.cli.common import DEBUG_ENV, CLIError, quiet_libraries, run_command
from aggregate_graph.cli.main import _model, _show, main, parser
from aggregate_graph.cli.serve import _server_key
from aggregate_graph.sample_set import Candidate, SampleSet

pytestmark = pytest.mark.usefixtures("restored_environment")  # main() runs in-process below


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aggregate_graph.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_ask_shows_candidates_votes_and_final_answer(serve):
    server = serve(["Six sevens make 42.\n#### 42", "#### 41", "The answer is 42."])
    done = run("ask", "What is 6 times 7?", "--n", "3", "--model", "test-model", "--base-url", server.base_url)
    assert done.returncode == 0, done.stderr
    assert "[3/3] candidate" in done.stderr  # progress while candidates arrive
    assert "Votes (majority): 42: 2, 41: 1" in done.stdout
    assert done.stdout.rstrip().endswith("Final answer: 42")


def test_ask_without_any_stated_answer_shows_the_picked_text(serve):
    server = serve(["Hello there, friend!", "Hello there!", "Good morning to you, friend."])
    done = run("ask", "Say hello", "--n", "3", "--model", "test-model", "--base-url", server.base_url)
    assert done.returncode == 0, done.stderr
    assert "No vote: no candidate stated a readable answer (read as math); medoid picked candidate " in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("Final text: Hello there")


def test_ask_json_output_is_the_sample_set(serve):
    server = serve(["#### 9"])
    done = run("ask", "3+6?", "--n", "2", "--model", "m", "--base-url", server.base_url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["aggregation"]["answer"] == "9"


def test_ask_reports_failures_with_the_candidates(serve):
    server = serve(failure_rate=1.0, failure_status=500)
    done = run("ask", "3+6?", "--n", "2", "--model", "m", "--base-url", server.base_url, "--attempts", "1")
    assert done.returncode == 1
    assert "only 0 of 2 candidates succeeded" in done.stderr and "injected failure" in done.stderr


def test_ask_rejects_bad_n_and_empty_questions(serve):
    server = serve()
    too_many = run("ask", "q", "--n", "100000", "--model", "m", "--base-url", server.base_url)
    assert too_many.returncode == 2 and "over the cap" in too_many.stderr
    empty = run("ask", "  ", "--n", "2", "--model", "m", "--base-url", server.base_url)
    assert empty.returncode == 2 and "empty" in empty.stderr
    assert server.calls == 0


# --- mistakes: told in a line or two, without a traceback unless --debug ---------------------------------------


def test_an_openai_model_without_its_key_is_one_line_not_a_traceback(monkeypatch, capsys) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["ask", "q", "--model", "openai:gpt-4o-mini"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: --model openai:gpt-4o-mini needs an OpenAI API key, and OPENAI_API_KEY is not set\n"
        "hint: export OPENAI_API_KEY=sk-… (or name another variable with --api-key-env NAME)\n"
    )
    with pytest.raises(CLIError, match="needs an OpenAI API key"):  # --debug: raised, with its traceback
        main(["--debug", "ask", "q", "--model", "openai:gpt-4o-mini"])
    monkeypatch.setenv(DEBUG_ENV, "1")
    with pytest.raises(CLIError):
        main(["ask", "q", "--model", "openai:gpt-4o-mini"])


def test_a_traceback_only_with_debug() -> None:
    env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", DEBUG_ENV)}
    argv = ["ask", "q", "--model", "openai:gpt-4o-mini"]
    quiet = subprocess.run(
        [sys.executable, "-m", "aggregate_graph.cli", *argv], capture_output=True, text=True, env=env
    )
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr and len(quiet.stderr.splitlines()) == 2
    loud = subprocess.run(
        [sys.executable, "-m", "aggregate_graph.cli", *argv, "--debug"], capture_output=True, text=True, env=env
    )  # after the subcommand works too
    assert loud.returncode == 1 and "Traceback" in loud.stderr and "needs an OpenAI API key" in loud.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--n", "0"], "error: --n: 0 given; it must be at least 1\n"),
        (["--n", "2", "--min-candidates", "3"], "error: min_candidates must be between 1 and n=2, got 3\n"),
        (
            ["--aggregator-weights", "/nope.json", "--upstream-timeout", "0", "--max-request-seconds", "-1"],
            "error: --aggregator-weights: aggregator weights '/nope.json': no such file (write one with "
            "WeightedVote.save)\n"
            "error: --upstream-timeout: 0 given; it must be more than 0\n"
            "error: --max-request-seconds: -1 given; it must be more than 0\n",
        ),
    ],
)
def test_proxy_config_mistakes_are_a_line_per_flag(capsys, flags: list[str], message: str) -> None:
    assert main(["proxy", "--upstream", "http://127.0.0.1:9/v1", *flags]) == 2
    assert capsys.readouterr().err == message


def test_usage_mistakes_name_the_flag_and_where_the_flags_are_listed(capsys) -> None:
    for argv, problem in [
        (["ask"], "the following arguments are required: question"),
        (["ask", "q", "--threads", "0"], "argument --threads: must be 1 or more, got 0"),
        (["ask", "q", "--aggregator", "median"], "argument --aggregator: invalid choice: 'median'"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(f"error: {problem}")
        assert (
            err.splitlines()[1] == "hint: `aggregate-graph ask --help` lists the flags" and len(err.splitlines()) == 2
        )


def test_version_of_both_commands() -> None:
    expected = importlib.metadata.version("aggregate-graph")
    for module, name in (("aggregate_graph.cli", "aggregate-graph"), ("training.cli", "aggregate-train")):
        done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout == f"{name} {expected}\n"


@pytest.mark.parametrize(
    ("argv", "flag", "instead"),
    [
        (["ask", "q", "--api-key", "sk-secret"], "--api-key", "--api-key-env NAME (default OPENAI_API_KEY)"),
        (["ask", "q", "--api-key=sk-secret"], "--api-key", "--api-key-env NAME (default OPENAI_API_KEY)"),
        (["serve-aggregator", "--api-key", "sk-secret"], "--api-key", "--api-key-env NAME, or in a file: "),
        (["proxy", "--upstream", "u", "--api-key", "sk-secret"], "--api-key", "--api-key-env NAME"),
        (
            ["proxy", "--upstream", "u", "--upstream-api-key", "sk-secret"],
            "--upstream-api-key",
            "--upstream-api-key-env",
        ),
    ],
)
def test_a_key_on_the_command_line_is_refused_in_one_line(capsys, argv: list[str], flag: str, instead: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and "sk-secret" not in err
    assert err.startswith(f"error: {flag} would show the key to anyone running `ps`: put ")
    assert "in an environment variable" in err and instead in err


def test_a_key_given_where_its_variable_name_goes_is_never_shown(capsys) -> None:
    argv = ["ask", "q", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "sk-pasted/key-1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sk-pasted" not in err
    assert err.startswith("error: --api-key-env takes the NAME of an environment variable holding the key, not the key")


def test_ask_says_how_a_tie_was_broken(serve, capsys) -> None:
    # a drawn set ties by landing time first (then by index), as every vote in the package does
    server = serve(["#### 1", "#### 2"])
    assert main(["ask", "1 or 2?", "--n", "2", "--model", "m", "--base-url", server.base_url, "--no-settle"]) == 0
    out = capsys.readouterr().out
    assert "Tie between ['1', '2']: broken by the answer that landed first, then candidate order" in out


def test_ask_sends_the_key_from_the_environment_variable_it_names(serve, monkeypatch, capsys) -> None:
    server = serve(["#### 9"])
    base = ["ask", "3+6?", "--n", "1", "--model", "m", "--base-url", server.base_url]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default")
    monkeypatch.setenv("MY_SERVER_KEY", "sk-named")
    assert main(base) == 0 and main([*base, "--api-key-env", "MY_SERVER_KEY"]) == 0
    assert server.authorizations == ["Bearer sk-default", "Bearer sk-named"]
    monkeypatch.delenv("OPENAI_API_KEY")
    assert main(base) == 0 and server.authorizations[-1] == "Bearer EMPTY"  # a local server needs none
    capsys.readouterr()
    assert main([*base, "--api-key-env", "UNSET_KEY_VARIABLE"]) == 2
    assert capsys.readouterr().err == (
        "error: --api-key-env UNSET_KEY_VARIABLE: that environment variable is not set or empty\n"
        "hint: export UNSET_KEY_VARIABLE=…\n"
    )


def test_serve_aggregator_reads_its_key_from_a_file_or_the_environment(tmp_path: Path, monkeypatch, capsys) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(" sk-from-file\n", encoding="utf-8")
    monkeypatch.setenv("SERVER_KEY", "sk-from-env")
    assert _server_key(parser().parse_args(["serve-aggregator", "--api-key-file", str(key_file)])) == "sk-from-file"
    assert _server_key(parser().parse_args(["serve-aggregator", "--api-key-env", "SERVER_KEY"])) == "sk-from-env"
    assert _server_key(parser().parse_args(["serve-aggregator"])) is None
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    for flags, message in [
        (["--api-key-file", str(tmp_path / "none")], f"error: --api-key-file {tmp_path / 'none'}: no such file"),
        (["--api-key-file", str(tmp_path / "empty")], f"error: --api-key-file {tmp_path / 'empty'} is empty"),
        (["--api-key-env", "UNSET_KEY_VARIABLE"], "error: --api-key-env UNSET_KEY_VARIABLE: that environment"),
    ]:
        assert main(["serve-aggregator", "--engine", "local", *flags]) == 2
        assert capsys.readouterr().err.startswith(message)


def test_known_failures_have_their_exit_status_and_anything_else_raises(capsys) -> None:
    def failing(exc: BaseException) -> Callable[[], int]:
        def command() -> int:
            raise exc

        return command

    assert run_command(failing(KeyboardInterrupt()), debug=False) == 130
    assert capsys.readouterr().err == ""
    assert run_command(failing(FileNotFoundError(2, "No such file or directory", "/nope.yaml")), debug=False) == 2
    assert run_command(failing(ModuleNotFoundError("No module named 'fastapi'", name="fastapi")), debug=False) == 2
    assert run_command(failing(ConnectionRefusedError("refused")), debug=False) == 1
    assert capsys.readouterr().err == (
        "error: /nope.yaml: no such file or directory\n"
        "error: No module named 'fastapi'\n"
        "hint: pip install 'aggregate-graph[serve]'\n"
        "error: cannot connect: refused\n"
        "hint: is the server running at that URL?\n"
    )
    with pytest.raises(ZeroDivisionError):  # not a known family: a bug, whose traceback is what a report needs
        run_command(failing(ZeroDivisionError()), debug=False)


def test_quiet_libraries_keeps_their_notices_and_bars_away(capsys) -> None:
    for name in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS"):
        os.environ.pop(name, None)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_libraries()
        for module in ("transformers.modeling_utils", "peft.tuners", "torch.nn", "aggregate_graph.graph"):
            warnings.warn_explicit("old API", FutureWarning, "f.py", 1, module=module)
    assert [w.filename for w in shown] == ["f.py"]  # only this package's own warning is shown
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "error" and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"


def test_ask_runs_the_embedded_model_on_one_thread_by_default() -> None:
    model = _model(parser().parse_args(["ask", "q"]))
    assert (model.torch_threads, model.dtype) == (1, "auto")
    assert _model(parser().parse_args(["ask", "q", "--model", "local", "--threads", "2"])).torch_threads == 2


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        ({"samples_saved": 3, "cancelled": [2, 3, 4]}, "3 samples saved: 3 cancelled once the vote was settled"),
        ({"samples_saved": 4, "cancelled": []}, "4 samples saved: 4 not drawn: adaptive sampling stopped early"),
        (
            {"samples_saved": 4, "cancelled": [4]},
            "4 samples saved: 1 cancelled once the vote was settled; 3 not drawn: adaptive sampling stopped early",
        ),
    ],
    ids=["settled", "adaptive", "both"],
)
def test_ask_says_why_samples_were_saved(metadata: dict, said: str) -> None:
    # settling early cancels the requests still out; adaptive sampling leaves later waves undrawn
    candidates = [Candidate(index=i, text="#### 42", answer="42") for i in range(2)]
    sample_set = SampleSet(question="6*7?", candidates=candidates, requested_n=5, metadata=metadata)
    sample_set = sample_set.model_copy(update={"aggregation": MajorityVote().invoke(sample_set)})
    out = io.StringIO()
    _show(sample_set, out)
    assert said in out.getvalue() and "Adaptive sampling stopped early" not in out.getvalue()


def test_ctrl_c_stops_asking_at_once(serve):
    # Ctrl-C lands in LangGraph's wait for the candidates, which waits for the nodes under way: the run's draws are
    # stopped first, so a retry's pause ends and no request follows (it exited 18 s later, 15 requests on, before)
    server = serve(["The answer is 42."], failure_rate=1.0, n_mode="reject")
    options = ["--n", "3", "--attempts", "6", "--model", "test-model", "--base-url", server.base_url]
    ask = subprocess.Popen(
        [sys.executable, "-m", "aggregate_graph.cli", "ask", "What is 6 times 7?", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while server.calls < 4 and time.monotonic() < deadline:  # the n request refused, three singles failed: a pause
        time.sleep(0.01)
    time.sleep(0.1)
    calls, interrupted = server.calls, time.monotonic()
    ask.send_signal(signal.SIGINT)
    ask.communicate(timeout=60)
    assert time.monotonic() - interrupted < 3.0 and ask.returncode != 0
    time.sleep(0.3)
    assert calls == 4 and server.calls == calls
