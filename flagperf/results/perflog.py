"""Read ``[PerfLog] {json}`` records and log tails from the files a round left on the driver.

The line format and the FINISHED schema live in the contract module (``flagperf_contract``), shared with the
benchmark harness that writes them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from flagperf_contract import PERFLOG_PREFIX, read_perflog_line

TAIL_BYTES = 64 * 1024
RECORDS_MAX_BYTES = 64 * 1024 ** 2      # records are read from at most the last 64 MiB of a rank log
LINE_MAX_BYTES = 4 * 1024 ** 2          # a longer line is skipped (a PerfLog one is reported: read_records)
PERFLOG_MARK = PERFLOG_PREFIX.strip().encode()
# The record that stands for a PerfLog line refused for its size or nesting depth: {"event": UNREADABLE,
# "reason": why}; it is never a result, and says why a rank's FINISHED line may be missing.
UNREADABLE = "UNREADABLE"
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """A path that is there but is no regular file (a symlink, FIFO, device, socket, directory)."""


def open_regular(path) -> tuple:
    """(binary file object, size) of a regular file, opened without following a symlink and without blocking
    on a FIFO (lstat, then O_NOFOLLOW|O_NONBLOCK and fstat). FileNotFoundError when it is missing,
    NotRegularFile (its message names the file and what it is) when it is something else."""
    path = os.fspath(path)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(f"{path}: not a regular file ({_kind(st.st_mode)}); not read")
    fd = os.open(path, _FLAGS)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(f"{path}: not a regular file ({_kind(st.st_mode)}); not read")
    return os.fdopen(fd, "rb"), st.st_size


def _kind(mode) -> str:
    for test, kind in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return kind
    return "a special file"


def read_lines(path, max_bytes: int, problems: list | None = None, long_lines=None):
    """Yield the text lines of the last max_bytes of a regular file (a first line cut by the window is
    dropped; lines longer than LINE_MAX_BYTES are skipped, each reported to ``long_lines``: lines_of). A
    missing file yields nothing; anything else that is not a readable regular file yields nothing and its
    reason goes to ``problems``."""
    try:
        f, size = open_regular(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        if problems is not None:
            problems.append(str(exc) if isinstance(exc, NotRegularFile) else f"{path}: unreadable: {exc}")
        return
    with f:
        yield from lines_of(f, size, max_bytes, long_lines)


@dataclass(frozen=True)
class LongLine:
    """A line that lines_of skipped for its length: where it starts in the file, its length in bytes (without
    its newline; what the window held of a line still being written), and whether its first LINE_MAX_BYTES
    hold a PerfLog prefix."""

    offset: int
    size: int
    perflog: bool


def lines_of(f, size: int, max_bytes: int, long_lines=None):
    """The text lines of the last max_bytes of the first ``size`` bytes of the open binary file f. A line longer
    than LINE_MAX_BYTES is skipped, never held whole; ``long_lines`` (a callable) is given its
    :class:`LongLine` once its end is reached, before the next line is yielded."""
    start = max(0, size - max_bytes)
    f.seek(start)
    pos = start
    left = size - start                 # never more than the window: the file may still grow
    skip = start > 0                    # the window's first line is cut
    long = None                         # LongLine so far of a line being skipped
    while left > 0:
        line = f.readline(min(LINE_MAX_BYTES, left))
        if not line:
            break
        left -= len(line)
        pos += len(line)
        whole = line.endswith(b"\n")
        if long is not None:
            long = LongLine(long.offset, long.size + len(line), long.perflog)
        elif not skip:
            if whole or left <= 0 or len(line) < LINE_MAX_BYTES:
                yield line.decode("utf-8", errors="replace")
            else:
                skip = True             # a line longer than LINE_MAX_BYTES: skipped to its end
                long = LongLine(pos - len(line), len(line), PERFLOG_MARK in line)
                continue
        if (whole or left <= 0) and long is not None:
            if long_lines is not None:
                long_lines(LongLine(long.offset, long.size - whole, long.perflog))
            long = None
        if whole:
            skip = False
    if long is not None and long_lines is not None:     # the file ended short of its size (it shrank)
        long_lines(long)


def parse_lines(lines):
    """Yield the PerfLog records (dicts) found in an iterable of text lines; other lines are skipped. A PerfLog
    line refused for its size or nesting depth yields ``{"event": UNREADABLE, "reason": why}``."""
    for line in lines:
        record, problem = read_perflog_line(line)
        if record is not None:
            yield record
        elif problem is not None:
            yield {"event": UNREADABLE, "reason": problem}


def read_records(path, problems: list | None = None) -> list:
    """The PerfLog records of a rank log (from at most its last RECORDS_MAX_BYTES). A log that is not a
    regular file (a FIFO, a symlink to /dev/zero, ...) has none; why is appended to ``problems``. A PerfLog
    line longer than LINE_MAX_BYTES is not read: ``{"event": UNREADABLE, "reason": ...}`` stands in its place,
    naming the file, the line's offset and its size."""
    refused: list = []

    def too_long(long: LongLine) -> None:
        if long.perflog:
            refused.append({"event": UNREADABLE, "reason": long_line_reason(path, long)})

    out: list = []
    for record in parse_lines(read_lines(path, RECORDS_MAX_BYTES, problems, too_long)):
        out += refused
        refused.clear()
        out.append(record)
    return out + refused


def long_line_reason(path, long: LongLine) -> str:
    return (f"a PerfLog line of {long.size} bytes (at byte {long.offset} of {os.fspath(path)}), longer than the "
            f"{LINE_MAX_BYTES}-byte line limit: not read")


def tail(path, n=10) -> list:
    """The last n lines of a text file (empty if missing or unreadable; one line saying why when it is there but
    is no regular file)."""
    try:
        f, size = open_regular(path)
    except NotRegularFile as exc:
        return [f"[flagperf] {exc}"]
    except OSError:
        return []
    try:
        with f:
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read(TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    return data.splitlines()[-n:]
