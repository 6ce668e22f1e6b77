"""Every self-contained Python snippet in README.md runs as written."""

import re
from pathlib import Path

import pytest

README = (Path(__file__).parents[1] / "README.md").read_text()
SNIPPETS = [block for block in re.findall(r"```python\n(.*?)```", README, re.S) if "import" in block]


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_snippet_runs(snippet):
    exec(compile(snippet, "README.md", "exec"), {})
