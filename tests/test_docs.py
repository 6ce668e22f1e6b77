"""Every Python block of README.md and docs/**/*.md runs as written and prints what the page shows.

Each ```python block runs on its own, in a fresh namespace with the repository root as the working directory (so
`../shared/data` is found as the pages say). The ```text title="Output" block right after it is what it must print,
compared as doctest does with ELLIPSIS and NORMALIZE_WHITESPACE: `...` stands for text that changes from run to run
(a latency, an id). A block that cannot run on its own says so on the line before its fence,
`<!-- no-run: the reason -->`; at most three may. Other languages (bash, yaml, text) are not run.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from aggregate_graph.aggregators import registry

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(`{3,})([\w+-]*)(.*)$")
NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<reason>\S.*?)\s*-->$")
MAX_NO_RUN = 3


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    info: str
    code: str
    before: str  # the last non-blank line above the fence
    blank_gap: bool = False  # only blank lines between the previous block's closing fence and this one

    @property
    def is_output(self) -> bool:
        return self.lang == "text" and 'title="Output"' in self.info

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order (fences at the start of a line, as all of these pages write them)."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i, last_close = 0, None
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        ticks, lang, info = match.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks), None)
        assert end is not None, f"{path.name}:{i + 1}: unclosed code fence"
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        gap = last_close is not None and all(not line.strip() for line in lines[last_close + 1 : i])
        page = str(path.relative_to(ROOT))
        blocks.append(Block(page, i + 1, lang, info.strip(), "\n".join(lines[i + 1 : end]) + "\n", before, gap))
        last_close, i = end, end + 1
    return blocks


def collect() -> tuple[list[tuple[Block, Block]], list[tuple[Block, str]], list[str]]:
    """(python block, its output block) pairs to run, identical pairs once; the blocks marked no-run; and what is
    wrong with the others."""
    runs: dict[tuple[str, str], tuple[Block, Block]] = {}
    skipped: list[tuple[Block, str]] = []
    problems: list[str] = []
    for path in PAGES:
        blocks = read_blocks(path)
        for k, block in enumerate(blocks):
            if block.lang in {"py", "python3", "pycon", "pyi"}:
                problems.append(f"{block.where}: write ```python so that the block is run")
            following = blocks[k + 1] if k + 1 < len(blocks) else None
            if block.is_output:
                previous = blocks[k - 1] if k else None
                if previous is None or previous.lang != "python" or not block.blank_gap:
                    problems.append(f"{block.where}: an Output block follows the Python block it shows")
                continue
            if block.lang != "python":
                continue
            no_run = NO_RUN.match(block.before)
            if no_run:
                skipped.append((block, no_run["reason"]))
                continue
            if following is None or not following.is_output or not following.blank_gap:
                problems.append(f'{block.where}: a Python block is followed by a ```text title="Output" block')
                continue
            runs.setdefault((block.code, following.code), (block, following))
    return list(runs.values()), skipped, problems


RUNS, SKIPPED, PROBLEMS = collect()


def test_every_python_block_shows_its_output():
    assert PROBLEMS == []


def test_pages_have_runnable_blocks():
    assert {block.page for block, _ in RUNS} >= {"README.md", "docs/graph.md", "docs/agents.md", "docs/openai.md"}
    assert len(RUNS) >= 20


def test_few_blocks_are_not_run():
    assert len(SKIPPED) <= MAX_NO_RUN, [f"{block.where}: {reason}" for block, reason in SKIPPED]


def test_site_home_is_the_readme():
    """docs/index.md is README.md with its links made relative to docs/: `sed 's#](docs/#](#g' README.md`."""
    readme = (ROOT / "README.md").read_text()
    assert (ROOT / "docs" / "index.md").read_text() == readme.replace("](docs/", "](")


def test_readme_links_resolve():
    """README.md is the front page on GitHub and PyPI: its relative links point at files that exist."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", readme)
    local = [t for t in targets if not re.match(r"[a-z]+://|mailto:", t)]
    assert local, "the README links into docs/"
    assert [t for t in local if not (ROOT / t).exists()] == []


@pytest.mark.parametrize(("block", "output"), RUNS, ids=[block.where for block, _ in RUNS])
def test_block_prints_what_the_page_shows(block: Block, output: Block, monkeypatch):
    monkeypatch.chdir(ROOT)
    registry.aggregator_names()  # a page's `@register` example registers for its own run only
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.code, block.where, "exec", dont_inherit=True), {"__name__": "__docs__"})
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    assert printed.getvalue().strip(), f"{block.where} prints nothing"
    assert checker.check_output(output.code, printed.getvalue(), flags), (
        f"{block.where} printed:\n{printed.getvalue()}\nthe page shows ({output.where}):\n{output.code}"
    )
