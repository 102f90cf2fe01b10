"""`make run` leaves a `flagperf` command on PATH: scripts/setup.sh --link writes build/bin/flagperf (this
checkout, the interpreter set-up chose) and links it into ~/.local/bin when that folder is on PATH; otherwise the
run ends with the exact `export PATH=...` line. Run in a copy of the checkout, with HOME a temporary folder."""

import os
import subprocess
import sys
from pathlib import Path

from .test_install import OFFLINE_PIP, clean_env, copy_checkout, run


def env_for(home: Path, on_path: bool) -> dict:
    path = os.environ.get("PATH", "/usr/bin:/bin")
    path = ":".join(p for p in path.split(":") if Path(p).name != "flagperf" and ".local/bin" not in p)
    if on_path:
        path = f"{home / '.local' / 'bin'}:{path}"
    return clean_env(**OFFLINE_PIP, HOME=str(home), PATH=path, PYTHON=sys.executable)


def test_make_run_puts_flagperf_on_path(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    home = tmp_path / "home"
    home.mkdir()
    env = env_for(home, on_path=True)
    p = run(["make", "run"], timeout=600, cwd=checkout, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    link = home / ".local" / "bin" / "flagperf"
    assert link.is_symlink() and Path(os.readlink(link)) == checkout / "build" / "bin" / "flagperf"
    assert f"linking {link} to {checkout / 'build' / 'bin' / 'flagperf'}" in p.stderr
    assert "flagperf is on PATH" in p.stderr.strip().splitlines()[-1], p.stderr[-2000:]
    # from any directory, by name, through PATH
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    q = run(["bash", "-c", "command -v flagperf && flagperf list"], timeout=120, cwd=elsewhere, env=env)
    assert q.returncode == 0 and q.stdout.splitlines()[0] == str(link), q.stdout + q.stderr
    assert "gemm" in q.stdout and "collectives" in q.stdout
    assert not (elsewhere / "result").exists()      # the checkout's tree and result folder, not the cwd's


def test_without_a_bin_folder_on_path_set_up_says_the_export_line(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    home = tmp_path / "home"
    home.mkdir()
    env = env_for(home, on_path=False)
    p = run(["bash", checkout / "scripts" / "setup.sh", "--link"], timeout=300, cwd=checkout, env=env)
    assert p.returncode == 0, p.stderr
    assert not (home / ".local").exists() and not (home / "bin").exists()      # nothing written into HOME
    note = run(["bash", checkout / "scripts" / "setup.sh", "--path-note"], timeout=60, cwd=checkout, env=env)
    assert note.returncode == 0 and "flagperf is not on PATH" in note.stderr, note.stderr
    export = note.stderr.strip().splitlines()[-1]
    assert export == f'export PATH={checkout / "build" / "bin"}:"$PATH"', export
    q = run(["bash", "-c", f"{export} && cd / && flagperf --version"], timeout=60, cwd=tmp_path, env=env)
    assert q.returncode == 0 and "flagperf, version" in q.stdout, q.stdout + q.stderr


def test_an_existing_flagperf_in_the_bin_folder_is_left_alone(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    mine = home / ".local" / "bin" / "flagperf"
    mine.write_text("#!/bin/sh\necho mine\n")
    env = env_for(home, on_path=True)
    p = run(["bash", checkout / "scripts" / "setup.sh", "--link"], timeout=300, cwd=checkout, env=env)
    assert p.returncode == 0 and f"note: {mine} exists and is not set-up's link; left as it is" in p.stderr
    assert mine.read_text() == "#!/bin/sh\necho mine\n" and not mine.is_symlink()
    note = run(["bash", checkout / "scripts" / "setup.sh", "--path-note"], timeout=60, cwd=checkout, env=env)
    assert "flagperf is not on PATH" in note.stderr       # PATH's flagperf is another one


def test_path_note_before_set_up(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    p = subprocess.run(["bash", str(checkout / "scripts" / "setup.sh"), "--path-note"], capture_output=True,
                       text=True, timeout=60, env=env_for(tmp_path, on_path=False))
    assert p.returncode == 0 and "no flagperf command yet: run scripts/setup.sh --link" in p.stderr
