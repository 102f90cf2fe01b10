"""A real headless browser (Debian's ``chromium``) to render a report file and look at the result.

* :func:`ensure_chromium` -- find ``chromium`` (or ``chromium-browser``, ``google-chrome``); when none is
  there, ``apt-get install -y --no-install-recommends chromium fonts-liberation`` (as root; a stale package
  list is refreshed once).  Raises :class:`BrowserError` with the reason when it cannot be had.
* :func:`render` -- load a local file with ``--headless=new --no-sandbox --disable-gpu
  --virtual-time-budget=...`` and return the DOM after its scripts ran (``--dump-dom``) together with the
  console messages chromium logged (``--enable-logging=stderr --v=0``: lines with ``CONSOLE`` or ``Uncaught``).
* :func:`screenshot` -- the same page as a PNG (``--screenshot=... --window-size=W,H``).

Every call gets its own throw-away profile directory (``--user-data-dir``), so two calls never share state and
nothing is left in HOME.  Network access is blocked for the page (``--host-resolver-rules`` maps every name to
nothing and a proxy that does not exist takes every connection), so a page that tries to fetch something fails
visibly in the console instead of depending on this machine's network.  A file lock keeps two processes from
running apt-get at once.  Standard library only; usable from tests (tests/e2e) and by hand::

    python -m testbed.browser report.html out.png
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PACKAGES = ("chromium", "fonts-liberation")
LOCK_PATH = "/tmp/flagperf-browser.lock"
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-dev-shm-usage", "--mute-audio", "--hide-scrollbars",
             # no network for the page: every host name resolves to nothing, every connection goes to a dead proxy
             "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost", "--proxy-server=127.0.0.1:9",
             "--enable-logging=stderr", "--v=0")


class BrowserError(RuntimeError):
    """chromium is missing and could not be installed, or it failed to render; the message says why."""


@dataclass
class Rendered:
    dom: str                                   # the serialized DOM after the page's scripts ran
    console: list = field(default_factory=list)    # console messages and uncaught errors chromium logged
    stderr: str = ""                           # chromium's whole stderr, for failure messages


def log(msg: str) -> None:
    print(f"[browser] {msg}", file=sys.stderr, flush=True)


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name) or shutil.which(name, path=SBIN_PATH)
        if path:
            return path
    return None


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def ensure_chromium() -> str:
    """The path of a chromium binary; installs Debian's ``chromium`` with apt-get when there is none."""
    path = find_chromium()
    if path:
        return path
    if os.geteuid() != 0:
        raise BrowserError(f"chromium is not installed and this is not root: run "
                           f"`sudo apt-get install -y {' '.join(PACKAGES)}`")
    if not shutil.which("apt-get", path=SBIN_PATH):
        raise BrowserError("chromium is not installed and there is no apt-get on this machine")
    with open(LOCK_PATH, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # another process may be installing it right now
        path = find_chromium()
        if path:
            return path
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "--no-install-recommends",
               *PACKAGES]
        log(f"$ {' '.join(cmd)}")
        proc = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:        # stale package lists are the usual cause: refresh once and retry
            log(f"apt-get install failed (rc {proc.returncode}); apt-get update and retry")
            subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"], check=False, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True)
            proc = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True)
        path = find_chromium()
        if proc.returncode != 0 or not path:
            raise BrowserError(f"could not install {' '.join(PACKAGES)} with apt-get (exit {proc.returncode}):\n"
                               f"{_tail(proc.stdout + proc.stderr)}")
        log(f"installed {path}")
        return path


def _run(file, extra: list, budget_ms: int, timeout: float, chromium: str | None) -> tuple[str, str]:
    binary = chromium or ensure_chromium()
    url = Path(file).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="flagperf-chromium-") as profile:
        cmd = [binary, *BASE_ARGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *extra, url]
        try:
            proc = subprocess.run(cmd, check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace", timeout=timeout, cwd=profile)
        except subprocess.TimeoutExpired as exc:
            raise BrowserError(f"chromium did not finish rendering {file} in {timeout} s:\n"
                               f"{_tail(str(exc.stderr or ''))}") from None
    if proc.returncode != 0:
        raise BrowserError(f"chromium exited {proc.returncode} rendering {file}:\n{_tail(proc.stderr)}")
    return proc.stdout, proc.stderr


def console_lines(stderr: str) -> list:
    """The console messages and uncaught errors in chromium's ``--enable-logging=stderr`` output."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
            or "Failed to load resource" in line]


def render(file, budget_ms: int = 5000, timeout: float = 120.0, chromium: str | None = None) -> Rendered:
    """Load ``file`` headless, let its scripts run for ``budget_ms`` of virtual time; the DOM and console."""
    dom, err = _run(file, ["--dump-dom"], budget_ms, timeout, chromium)
    return Rendered(dom, console_lines(err), err)


def screenshot(file, out_png, width: int = 1400, height: int = 3000, budget_ms: int = 5000,
               timeout: float = 120.0, chromium: str | None = None) -> Rendered:
    """Save a PNG of ``file`` as rendered in a ``width`` x ``height`` window; the console (no DOM)."""
    out_png = Path(out_png).resolve()
    if out_png.exists():
        out_png.unlink()
    _, err = _run(file, [f"--screenshot={out_png}", f"--window-size={width},{height}"], budget_ms, timeout,
                  chromium)
    if not out_png.is_file() or out_png.stat().st_size == 0:
        raise BrowserError(f"chromium wrote no screenshot {out_png}:\n{_tail(err)}")
    return Rendered("", console_lines(err), err)


if __name__ == "__main__":       # python -m testbed.browser FILE [OUT.png]
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m testbed.browser FILE.html [OUT.png]")
    if len(sys.argv) == 3:
        shot = screenshot(sys.argv[1], sys.argv[2])
        print("\n".join(shot.console))
        print(sys.argv[2])
    else:
        page = render(sys.argv[1])
        print("\n".join(page.console), file=sys.stderr)
        print(page.dom)
