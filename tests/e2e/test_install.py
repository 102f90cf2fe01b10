"""flagperf installs anywhere: a real ``pip install .`` into a fresh venv, and scripts/setup.sh for real.

The fresh venv sees this interpreter's site-packages through a .pth file (torch is too big to install again);
everything else (the build, the wheel's tree, the run) is the real thing. setup.sh runs in a copy of the
checkout with pip pointed at an index that cannot be reached, so any download would fail the test.
"""

import json
import os
import shutil
import site
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TOP_LEVEL_SKIP = {".venv", ".git", "result", "build", "dist", ".pytest_cache", ".benchmarks", ".ruff_cache",
                  ".mypy_cache"}
OFFLINE_PIP = {
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_EXTRA_INDEX_URL": "",
    "PIP_NO_INDEX": "1",
    "PIP_FIND_LINKS": "",
    "PIP_CONFIG_FILE": os.devnull,
}


def copy_checkout(dest: Path) -> Path:
    """A copy of the checkout without its venv, git data, results and build outputs."""
    def ignore(folder, names):
        skip = {n for n in names if n == "__pycache__" or n.endswith((".egg-info", ".pyc"))}
        if Path(folder).resolve() == REPO:
            skip |= TOP_LEVEL_SKIP & set(names)
        return skip
    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)
    return dest


def clean_env(**extra) -> dict:
    """The environment for a child that must not see this checkout through PYTHONPATH or FLAGPERF_HOME."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLAGPERF_HOME", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def site_dirs() -> list:
    """This interpreter's site-packages dirs (what setup.sh lists in .venv's .pth file), including those that
    reach it through a .pth file of its own (a venv made by setup.sh on top of another interpreter)."""
    dirs = list(site.getsitepackages()) + [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    dirs += [p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    out = []
    for d in dirs:
        if os.path.isdir(d) and os.path.realpath(d) not in out:
            out.append(os.path.realpath(d))
    return out


def make_venv(path: Path, see_parent: bool) -> Path:
    """A venv without pip; with ``see_parent`` a .pth file makes this interpreter's packages visible."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, env=clean_env())
    python = path / "bin" / "python"
    if see_parent:
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        Path(purelib, "_parent.pth").write_text("\n".join(site_dirs()) + "\n")
    return python


def run(argv, timeout, **kw):
    try:
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, **kw)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{argv} did not finish in {timeout} s\n{exc.stdout}\n{exc.stderr}") from None


def wait_until_port_is_free(port: int, timeout: float = 180.0):
    """The embedded default rendezvouses on a fixed MASTER_PORT; another run on this machine may hold it."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise AssertionError(f"port {port} (MASTER_PORT of configs/cluster.yaml) stayed in use for {timeout} s")
        time.sleep(1)


def tree_files(root: Path) -> set:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """flagperf built and installed (not editable) from a copy of the checkout into a fresh venv."""
    tmp = tmp_path_factory.mktemp("install")
    src = copy_checkout(tmp / "src")
    # Bytecode in the source tree must not reach the package.
    (src / "benchmarks" / "gemm" / "__pycache__").mkdir()
    (src / "benchmarks" / "gemm" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"stale")
    (src / "launcher" / "stray.pyc").write_bytes(b"stale")
    python = make_venv(tmp / "venv", see_parent=True)
    p = run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
             str(src)], timeout=300, cwd=tmp, env=clean_env(**OFFLINE_PIP))
    assert p.returncode == 0, p.stdout + p.stderr
    info = run([python, "-c", "import json, flagperf, flagperf.paths as p; print(json.dumps("
                "[flagperf.__file__, str(p.SOURCE_ROOT), p.INSTALLED]))"], timeout=60, cwd=tmp, env=clean_env())
    assert info.returncode == 0, info.stderr
    init, source_root, is_installed = json.loads(info.stdout)
    package = Path(init).parent
    return {"python": python, "bin": python.parent, "package": package, "tree": Path(source_root),
            "installed": is_installed, "tmp": tmp}


def test_the_package_carries_the_tree(installed):
    package, tree, src = installed["package"], installed["tree"], installed["tmp"] / "src"
    assert installed["installed"] is True
    assert package.is_relative_to(installed["tmp"] / "venv"), package
    assert tree == package / "_tree"
    for name in ("benchmarks", "vendors", "launcher", "monitors", "configs"):
        expected = {p for p in tree_files(src / name) if p.suffix != ".pyc"}
        assert tree_files(tree / name) == expected, name
    assert (tree / "flagperf_contract.py").read_bytes() == (src / "flagperf_contract.py").read_bytes()
    assert (package.parent / "flagperf_contract.py").is_file()          # the driver's own import
    # No bytecode from the source tree (pip compiles its own at install time).
    assert not [p for p in tree.rglob("*.pyc") if p.read_bytes() == b"stale"]
    # Every subpackage of the checkout is in the package.
    subpackages = {p.parent.relative_to(src / "flagperf") for p in (src / "flagperf").rglob("__init__.py")}
    for sub in subpackages:
        assert (package / sub / "__init__.py").is_file(), sub


def test_installed_flagperf_lists_and_runs_from_any_directory(installed, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    flagperf = installed["bin"] / "flagperf"
    p = run([flagperf, "list"], timeout=60, cwd=work, env=clean_env())
    assert p.returncode == 0, p.stdout + p.stderr
    benchmarks = sorted(d.name for d in (REPO / "benchmarks").iterdir() if (d / "main.py").is_file())
    vendors = sorted(d.name for d in (REPO / "vendors").iterdir() if (d / "vendor.yaml").is_file())
    assert benchmarks and vendors
    for name in benchmarks + vendors:
        assert f" {name} " in p.stdout, f"{name} missing from flagperf list:\n{p.stdout}"

    before = tree_files(installed["package"])
    cluster = yaml.safe_load((installed["tree"] / "configs" / "cluster.yaml").read_text())
    wait_until_port_is_free(int(cluster.get("MASTER_PORT", 29501)))
    p = run([flagperf, "run"], timeout=420, cwd=work, env=clean_env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    runs = sorted((work / "result").glob("run*"))
    assert len(runs) == 1, list((work / "result").iterdir()) if (work / "result").exists() else "no result/"
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["status"] == "passed", summary
    assert runs[0].name in p.stdout
    effective = (runs[0] / "effective_config.yaml").read_text()
    assert str(installed["tree"]) in effective          # FLAGPERF_PATH: the packaged tree
    # Nothing was written into the installation.
    assert tree_files(installed["package"]) == before
    assert not list(installed["tmp"].joinpath("venv").rglob("result"))


def test_flagperf_home_overrides_the_packaged_tree(installed, tmp_path):
    home = copy_checkout(tmp_path / "home")
    for entry in home.iterdir():
        if entry.name not in ("benchmarks", "vendors", "launcher", "monitors", "configs", "flagperf_contract.py"):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(home / "benchmarks" / "gemm", home / "benchmarks" / "zz_home_only")
    p = run([installed["bin"] / "flagperf", "list"], timeout=60, cwd=tmp_path, env=clean_env(FLAGPERF_HOME=home))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "zz_home_only" in p.stdout


# ------------------------------------------------------------------------------------------ scripts/setup.sh

def setup_sh(checkout: Path, *args, timeout=300, **env):
    return run(["bash", checkout / "scripts" / "setup.sh", *args], timeout=timeout, cwd=checkout,
               env=clean_env(**OFFLINE_PIP, **env))


def site_listing() -> set:
    return {(d, name) for d in site_dirs() for name in os.listdir(d) if name != "__pycache__"}


@pytest.mark.parametrize("args", [(), ("--test",)])
def test_setup_uses_a_complete_interpreter_as_it_is_offline(tmp_path, args):
    checkout = copy_checkout(tmp_path / "checkout")
    before = site_listing()
    p = setup_sh(checkout, *args, PYTHON=sys.executable)
    assert p.returncode == 0, p.stdout + p.stderr
    assert Path(p.stdout.strip()).resolve() == Path(sys.executable).resolve(), p.stdout
    assert len(p.stdout.splitlines()) == 1
    assert "nothing to install" in p.stderr
    assert "installing" not in p.stderr and "Traceback" not in p.stderr
    assert not (checkout / ".venv").exists()
    assert site_listing() == before
    q = setup_sh(checkout, "--print-python", *args, PYTHON=sys.executable)
    assert q.returncode == 0 and q.stdout == p.stdout, q.stdout + q.stderr
    # The interpreter runs flagperf from the checkout as printed.
    r = run([p.stdout.strip(), "-m", "flagperf", "list"], timeout=60, cwd=checkout, env=clean_env())
    assert r.returncode == 0 and "gemm" in r.stdout, r.stdout + r.stderr


def test_setup_with_a_gpu_and_torch_installs_nothing(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    p = setup_sh(checkout, PYTHON=sys.executable, FLAGPERF_ASSUME_GPU="1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "installing" not in p.stderr and not (checkout / ".venv").exists()


def test_setup_never_installs_a_cpu_torch_where_a_gpu_is(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    bare = make_venv(tmp_path / "bare", see_parent=False)      # no torch, no anything
    p = setup_sh(checkout, PYTHON=bare, FLAGPERF_ASSUME_GPU="1", FLAGPERF_TORCH_SPEC="")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout == ""
    assert "a GPU is present" in p.stderr and "cannot import torch" in p.stderr
    assert f"{bare} -m pip install torch" in p.stderr and "https://download.pytorch.org/whl/cu" in p.stderr
    assert "FLAGPERF_TORCH_SPEC" in p.stderr
    assert "Traceback" not in p.stderr and "installing" not in p.stderr
    assert not (checkout / ".venv").exists()                   # stopped before making anything


def test_setup_print_python_before_setup_says_what_to_run(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    bare = make_venv(tmp_path / "bare", see_parent=False)
    p = setup_sh(checkout, "--print-python", PYTHON=bare)
    assert p.returncode == 1 and p.stdout == ""
    assert "run scripts/setup.sh" in p.stderr and "torch" in p.stderr
    assert not (checkout / ".venv").exists()


@pytest.mark.parametrize("args, message", [
    (("--frobnicate",), "unknown option '--frobnicate'"),
    ((), "PYTHON=/no/such/python: no such interpreter"),
])
def test_setup_bad_input_is_one_clear_line(tmp_path, args, message):
    checkout = copy_checkout(tmp_path / "checkout")
    p = setup_sh(checkout, *args, PYTHON="/no/such/python")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip() == f"setup: {message}" or message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
