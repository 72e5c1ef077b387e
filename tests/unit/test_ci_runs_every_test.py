"""In CI, a test skipped for what the machine lacks fails, naming it; elsewhere it skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLANTED = """
import pytest
from tests.helpers.missing import missing
from tests.helpers.missing import pytest_runtest_makereport  # noqa: F401

def test_lacks():
    pytest.skip(missing("a thing (apt-get install thing)"))

@pytest.mark.skipif(True, reason="a variant for another kind of machine")
def test_variant():
    pass
"""


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(PLANTED.split("def test_lacks")[0])
    (tmp_path / "test_planted.py").write_text(PLANTED)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    plugins = ["-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", *plugins, str(tmp_path / "test_planted.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_in_ci_a_missing_need_fails_naming_it(tmp_path: Path) -> None:
    done = run(tmp_path, "true")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 skipped" in done.stdout, done.stdout
    assert "CI runs every test, and this one cannot run here: a thing" in done.stdout


def test_elsewhere_it_skips(tmp_path: Path) -> None:
    done = run(tmp_path, None)
    assert done.returncode == 0, done.stdout
    assert "2 skipped" in done.stdout, done.stdout


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    script = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    command = script[-1]
    assert command.startswith("python3 -m venv .venv && ") and command.endswith("pytest -n 3")
    # the README's (quiet in CI: -q for pip)
    assert command.replace("pip install -q ", "pip install ") in readme
