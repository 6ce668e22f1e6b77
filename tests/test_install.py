"""A non-editable install works outside this checkout: `pip install .` into a fresh venv, then the CLI and a pool load
from another folder, the package imported from that venv's site-packages (not the checkout), the data found through
`AGGREGATE_GRAPH_DATA`, and a clear error without it.

The venv reuses this environment's installed dependencies (a .pth line appends its site-packages, whose own .pth
files, such as the checkout's editable finder, are not run), so nothing is downloaded; the package itself comes from
a copy of the repository built by pip with `--no-deps --no-build-isolation`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

from training.pools import ENV_VAR, data_dir

ROOT = Path(__file__).resolve().parents[1]

LOAD = """
import aggregate_graph
from training.pools import load_faithful_cot
from pathlib import Path
package = Path(aggregate_graph.__file__).parent
print(package)
print((package / "py.typed").is_file(), (package / "data" / "faithful_cot_demo.jsonl").is_file())
sets = load_faithful_cot(["code002_COT"])
print(len(sets), sets[0].gold)
"""

DATA_DIR = """
from training.pools import data_dir
try:
    print(data_dir())
except FileNotFoundError as exc:
    print(exc)
"""


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_non_editable_install_runs_outside_the_checkout(tmp_path):
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("aggregate_graph", "training"):
        shutil.copytree(ROOT / package, source / package, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "_parent_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # after the venv's own packages

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in (ENV_VAR, "PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # --ignore-installed: the checkout's editable install is visible through the .pth line; never touch it
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed"]
    _run([*pip, "--no-index", str(source)], cwd=elsewhere, env=env)

    assert "serve-aggregator" in _run([env_dir / "bin" / "aggregate-graph", "--help"], cwd=elsewhere, env=env)

    output = _run([python, "-c", LOAD], cwd=elsewhere, env={**env, ENV_VAR: str(data_dir())})
    package, shipped, loaded = output.splitlines()
    assert Path(package) == site / "aggregate_graph"  # the installed copy, not the checkout
    assert shipped == "True True"  # py.typed and the package data are in the wheel
    assert loaded == "1319 18"

    # Without the variable: `<repo>/../shared/data` from a checkout's folder, else an error saying where it looked.
    layout = tmp_path / "layout"
    (layout / "repo" / "sub").mkdir(parents=True)
    (layout / "shared").mkdir()
    shared = layout / "shared" / "data"
    shared.symlink_to(data_dir(), target_is_directory=True)
    assert _run([python, "-c", DATA_DIR], cwd=layout / "repo" / "sub", env=env).strip() == str(shared)
    if not any((folder / "shared" / "data").is_dir() for folder in tmp_path.parents):
        message = _run([python, "-c", DATA_DIR], cwd=elsewhere, env=env)
        assert ENV_VAR in message and str(elsewhere) in message and "shared/data" in message, message
