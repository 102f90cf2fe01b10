"""Shared fixtures for every test: the repository root, a file writer, and the real CLI in a subprocess.

The helpers are exposed as fixtures (``repo_root``, ``write``, ``run_cli``) rather than imported with
``from conftest import ...``: tests/e2e has its own conftest.py, and both would be the module ``conftest``.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, name, text):
    """Write ``text`` (dedented) to ``tmp_path / name``, creating folders; return the path."""
    path = Path(tmp_path) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def run_cli(*args, cwd=None, timeout=60, env=None):
    """Run ``python -m flagperf *args`` for real; return (returncode, stdout, stderr).

    ``env`` entries are added to (a copy of) the current environment; a value of None removes the name.
    """
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = str(value)
    try:
        proc = subprocess.run([sys.executable, "-m", "flagperf", *map(str, args)], cwd=cwd, env=full_env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"flagperf {' '.join(map(str, args))} did not finish in {timeout} s\n"
                             f"stdout: {exc.stdout}\nstderr: {exc.stderr}") from None
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="session")
def repo_root():
    return REPO_ROOT


@pytest.fixture(name="write")
def write_fixture():
    return write


@pytest.fixture(name="run_cli")
def run_cli_fixture():
    return run_cli
