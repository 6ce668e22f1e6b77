"""The CLI as a user runs it: a real subprocess against a real OpenAI-compatible server."""

import json
import subprocess
import sys


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
