"""Read ``[PerfLog] {json}`` records and log tails from the files a round left on the driver.

The line format and the FINISHED schema live in the contract module (``flagperf_contract``), shared with the
benchmark harness that writes them.
"""

from __future__ import annotations

from pathlib import Path

from flagperf_contract import parse_perflog_line, rank_log_name

TAIL_BYTES = 64 * 1024


def parse_lines(lines):
    """Yield the PerfLog records (dicts) found in an iterable of text lines; other lines are skipped."""
    for line in lines:
        record = parse_perflog_line(line)
        if record is not None:
            yield record


def read_records(path) -> list:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return list(parse_lines(f))
    except OSError:
        return []


def tail(path, n=10) -> list:
    """The last n lines of a text file (empty if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return data.splitlines()[-n:]


def rank_log(node_dir, rank) -> Path:
    return Path(node_dir) / rank_log_name(rank)
