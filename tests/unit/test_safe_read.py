"""Reading a node directory back on the driver: a FIFO, a symlink to /dev/zero or a huge file in place of a
rank log, a monitor file or a JSON record never hangs the driver or grows its memory; it is reported as
unreadable, naming the file."""

import json
import os
import resource
import threading

import pytest

from flagperf.results import perflog
from flagperf.results.monitors import read_monitor_file, read_status, summarize_monitors
from flagperf_contract import JSON_FILE_MAX_BYTES, ContractError, RankReport, read_json_file


def within(seconds, fn, *args, **kw):
    box = {}

    def target():
        try:
            box["value"] = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["exc"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} blocked for {seconds} s", pytrace=False)
    if "exc" in box:
        raise box["exc"]
    return box["value"]


@pytest.fixture
def node(tmp_path):
    d = tmp_path / "node"
    d.mkdir()
    return d


def hostile(node, name, kind):
    p = node / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero":
        os.symlink("/dev/zero", p)
    elif kind == "link":
        secret = node.parent / "secret.txt"
        secret.write_text('[PerfLog] {"event": "FINISHED", "stolen": true}\n')
        os.symlink(secret, p)
    return p


KINDS = ("fifo", "zero", "link")


@pytest.mark.parametrize("kind", KINDS)
def test_perflog_readers_never_open_a_fifo_or_follow_a_link(node, kind):
    p = hostile(node, "rank0.out.log", kind)
    problems = []
    assert within(5, perflog.read_records, p, problems) == []
    assert len(problems) == 1 and str(p) in problems[0] and "not a regular file" in problems[0]
    tail = within(5, perflog.tail, p, 10)
    assert len(tail) == 1 and str(p) in tail[0] and "not read" in tail[0]
    assert perflog.read_records(node / "missing.log") == [] and perflog.tail(node / "missing.log") == []


def test_read_records_reads_only_the_last_window(node, monkeypatch):
    monkeypatch.setattr(perflog, "RECORDS_MAX_BYTES", 4096)
    p = node / "rank0.out.log"
    early = '[PerfLog] {"event": "EARLY"}\n'
    late = '[PerfLog] {"event": "FINISHED", "value": 1}\n'
    p.write_text(early + "x" * 10000 + "\n" + "noise\n" * 10 + late)
    assert [r["event"] for r in perflog.read_records(p)] == ["FINISHED"]


def test_a_long_line_is_skipped_not_held(node, monkeypatch):
    monkeypatch.setattr(perflog, "LINE_MAX_BYTES", 1024)
    p = node / "rank0.out.log"
    p.write_text('[PerfLog] {"event": "A"}\n' + '[PerfLog] {"event": "' + "y" * 5000 + '"}\n' +
                 '[PerfLog] {"event": "B"}\n')
    records = perflog.read_records(p)
    assert [r["event"] for r in records] == ["A", perflog.UNREADABLE, "B"]    # skipped, and named in its place
    assert "a PerfLog line of 5023 bytes (at byte 25 of " in records[1]["reason"]


def test_a_huge_rank_log_does_not_grow_memory(node):
    p = node / "rank0.out.log"
    with open(p, "wb") as f:            # 1 GiB sparse, no newline: a rank that wrote garbage
        f.truncate(1 << 30)
        f.seek((1 << 30) - 100)
        f.write(b'\n[PerfLog] {"event": "FINISHED"}\n')
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    records = within(60, perflog.read_records, p)
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert [r["event"] for r in records] == ["FINISHED"]
    assert grew_kib < 200 * 1024, f"reading grew the driver by {grew_kib} KiB"


@pytest.mark.parametrize("kind", KINDS)
def test_monitor_files_are_reported_not_read(node, kind):
    p = hostile(node, "cpu_monitor.log", kind)
    hostile(node, "nvidia_monitor.log", "fifo")
    (node / "mem_monitor.log").write_text("2026-11-22T10:00:00.000+00:00 used_mib=10 total_mib=100 used_pct=10\n")
    with pytest.raises(OSError, match="not a regular file"):
        within(5, read_monitor_file, p)
    result = within(5, summarize_monitors, node)
    assert result["mem"]["samples"] == 1 and "cpu" not in result and "gpu" not in result
    assert str(p) in result["unreadable"]["cpu_monitor.log"]
    assert "FIFO" in result["unreadable"]["nvidia_monitor.log"]


@pytest.mark.parametrize("kind", KINDS)
def test_json_records_are_unreadable_not_hung(node, kind):
    p = hostile(node, "ranks.json", kind)
    with pytest.raises(ContractError) as exc:
        within(5, read_json_file, p, RankReport)
    assert str(exc.value).startswith(f"{p}: unreadable: not a regular file")
    hostile(node, "monitor_status.json", kind)
    status, problem = within(5, read_status, node)
    assert status is None and "monitor_status.json: unreadable" in problem


def test_json_records_are_capped(node):
    p = node / "ranks.json"
    with open(p, "wb") as f:
        f.write(json.dumps({"node_rank": 0, "ranks": []}).encode())
        f.write(b" " * (JSON_FILE_MAX_BYTES + 10))
    with pytest.raises(ContractError, match=f"{p}: unreadable: larger than"):
        read_json_file(p, RankReport)
