"""Hostile text in a run directory reaches a real terminal and a real browser as text: `flagperf report RUN_DIR`
in a pty (the pty module: rich sees a terminal and colours its output), and report.html in headless Chromium
(testbed/browser.py) under its Content-Security-Policy. The payloads are those of tests/unit/test_untrusted.py,
in every string field of the summary."""

import errno
import os
import re
import select
import sys
import time
from pathlib import Path

import pytest

from testbed import browser
from tests.unit.test_untrusted import PAYLOADS, SGR, TERMINAL_FORBIDDEN, hostile_summary

REPO = Path(__file__).resolve().parents[2]
# every payload but the megabyte one, one after another, and a long tail: one string with all of them
ALL = "".join(p for name, p in sorted(PAYLOADS.items()) if name != "megabyte") + "T" * 100_000
EXTERNAL = re.compile(r"<(script|link|img|iframe|embed|object|source|audio|video|track)\b[^>]*\b(src|href)\s*=", re.I)


def run_in_pty(argv, env, timeout=180.0) -> tuple:
    """Run ``argv`` with a pty as its terminal; (exit status, everything it wrote, bytes)."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:                                    # the child: its stdin, stdout and stderr are the pty
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError as exc:                  # EIO: the child closed the terminal
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            out += chunk
        else:
            os.kill(pid, 9)
            pytest.fail(f"{argv} did not finish within {timeout} s")
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), bytes(out)


def test_report_in_a_real_terminal_shows_payloads_as_text(tmp_path):
    run = tmp_path / "run20260101000000"
    run.mkdir()
    s = hostile_summary(ALL, run_dir=str(run))
    s.save(run / "summary.json")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "xterm-256color",
           "COLUMNS": "300", "LINES": "50", "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
    code, out = run_in_pty([sys.executable, "-m", "flagperf", "report", str(run)], env)
    text = out.decode("utf-8", errors="replace").replace("\r\n", "\n")
    assert code == 0, text[-3000:]
    assert SGR.search(text), "rich saw no terminal: no colour at all"
    plain = SGR.sub("", text)
    assert "\x1b" not in plain and "\x07" not in plain and "\x00" not in plain     # no payload's escape byte
    assert not TERMINAL_FORBIDDEN.search(plain), repr(TERMINAL_FORBIDDEN.search(plain))
    for shown in ("\\x1b]52;c;cm0gLXJmIH4=\\x07", "\\x1b[2J", "\\x1b]0;pwned-title", "[bold red]x", "[/]",
                  "\\u202e"):
        assert shown in plain, shown                # shown, escaped, as text
    assert "more characters)" in plain              # the long tail capped, visibly
    assert "Traceback" not in plain and "MarkupError" not in plain
    assert (run / "report.md").is_file() and (run / "report.html").is_file()


def test_report_html_runs_no_injected_script_in_chromium(tmp_path, chromium):
    from flagperf.reporters.html import HtmlReporter
    s = hostile_summary(ALL, run_dir=str(tmp_path))
    s.run_id = "run20260101000000"                 # the title is then known: a script that set it would show
    rep = HtmlReporter()
    path = rep.write(s, tmp_path)
    rendered = browser.render(path, chromium=chromium)
    # no console line: no script error, and no CSP refusal (an injected script or load would be refused, and say so)
    assert rendered.console == [], "\n".join(rendered.console)
    title = re.search(r"<title>(.*?)</title>", rendered.dom, re.S).group(1)
    assert title == "flagperf run20260101000000: failed"
    assert "pwned" not in title
    assert rendered.dom.count("<svg ") == len(rep.figures) > 0          # the charts, inline SVG, no script
    assert "<script" not in rendered.dom and not EXTERNAL.search(rendered.dom)
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in rendered.dom       # shown, as text
