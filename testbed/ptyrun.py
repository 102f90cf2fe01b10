"""A program run with a real pseudo-terminal of a given size as its terminal (the live panel and the tables are
tested this way: what a tmux pane of that width shows)."""

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time

# CSI sequences, OSC strings and two-byte escapes: what a terminal interprets instead of showing
ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-Z\\-_]")


class PtyTimeout(AssertionError):
    """The program did not finish in time (it was killed); ``output`` holds what it wrote."""

    def __init__(self, message, output):
        super().__init__(message)
        self.output = output


def run_in_pty(argv, env, columns: int, rows: int, timeout: float) -> tuple:
    """Run ``argv`` with a pty of ``columns`` x ``rows`` as its stdin, stdout and stderr; (exit status, what it
    wrote, as text). Raises PtyTimeout after ``timeout`` seconds."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise PtyTimeout(f"{argv} did not finish within {timeout} s", out.decode(errors="replace"))
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:                     # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    return proc.wait(), out.decode(errors="replace")
