"""nccl-tests' view of the collectives and p2p cases (flagperf.results.ncclview): the documented round, rows in
numeric size order, the average bus bandwidth, the fallback for runs recorded before details.sweep, the terminal
and report.md tables, and the nccl-tests JSON files (flagperf.reporters.nccltests)."""

import json
import math

import pytest
from rich.console import Console

from flagperf.reporters import write_reports
from flagperf.reporters.markdown import MarkdownReporter
from flagperf.reporters.nccltests import NcclTestsReporter, documents, file_name, nccl_version_code
from flagperf.reporters.terminal import nccl_tables
from flagperf.results import ncclview
from flagperf.results.interpret import Status
from flagperf.results.ncclview import OpTable, SweepRow, float_text, op_tables
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary

K, M = 1 << 10, 1 << 20


def entry(op, size, busbw, *, algbw=None, time_us=10.0, count=None, dtype="float", redop="sum", root=-1, wrong=0,
          iters=7, warmup=2):
    return {"op": op, "size_bytes": size, "count": size // 4 if count is None else count, "dtype": dtype,
            "redop": redop, "root": root, "placement": "in_place", "time_us": time_us,
            "algbw": busbw / 2 if algbw is None else algbw, "busbw": busbw, "wrong": wrong, "warmup": warmup,
            "iters": iters, "repeats": 3}


def finished(value, sweep=None, metrics=None, benchmark="collectives", details=None, passed=True):
    d = dict(details or {})
    if sweep is not None:
        d["sweep"] = sweep
    return {"schema": "flagperf.perflog/1", "event": "FINISHED", "benchmark": benchmark, "metric": "busbw_all_reduce",
            "value": value, "unit": "GB/s", "higher_is_better": True, "metrics": metrics or {},
            "checks": {"passed": passed, "details": d}, "env": {"nccl": "2.21.5"}}


def case_of(*rounds, name="collectives-pytorch-H100-1x8", env=None):
    rs = []
    for i, (status, fin) in enumerate(rounds, 1):
        nodes = [NodeSummary("n0", "host-a", 0, ranks=[{"rank": 1, "local_rank": 1, "pid": 11},
                                                        {"rank": 0, "local_rank": 0, "pid": 10}])]
        rs.append(RoundSummary(i, f"{name}/round{i}", status, 1.0, None, fin, nodes))
    return CaseSummary(name, "collectives:pytorch:H100:1:8:1", "collectives", "pytorch", "H100", 1, 8, len(rs),
                       rounds=rs, env=env or {})


def summary_of(*cases):
    return Summary("run20260101000000-abcdef", "/tmp/x", "1.0", "2026-01-01T10:00:00+00:00",
                   finished="2026-01-01T10:05:00+00:00", cases=list(cases))


SIZES = [4 * M, 64 * K, 1 * M, 256 * K]     # as text: 1M, 256K, 4M, 64K: neither order is numeric


def sweep_of(op="all_reduce", scale=1.0):
    return [entry(op, s, busbw=scale * s / K) for s in SIZES]


# --------------------------------------------------------------------------- the view

def test_rows_in_numeric_size_order_and_the_average():
    (t,) = op_tables(case_of((Status.PASSED, finished(5.0, sweep_of()))))
    assert isinstance(t, OpTable) and all(isinstance(r, SweepRow) for r in t.rows)
    assert [r.size_bytes for r in t.rows] == [64 * K, 256 * K, 1 * M, 4 * M]
    busbw = [r.busbw_gbs for r in t.rows]
    assert t.avg_busbw_gbs == pytest.approx(sum(busbw) / 4)          # nccl-tests: bw[0] /= bw_count[0]
    assert t.largest_busbw_gbs == busbw[-1] == 4 * K
    assert (t.case, t.round, t.op) == ("collectives-pytorch-H100-1x8", 1, "all_reduce")


def test_one_table_per_op_in_record_order():
    sweep = sweep_of("all_reduce") + [entry("broadcast", s, 1.0, redop="none", root=0) for s in SIZES]
    tables = op_tables(case_of((Status.PASSED, finished(5.0, sweep))))
    assert [t.op for t in tables] == ["all_reduce", "broadcast"]
    assert {(r.redop, r.root) for r in tables[1].rows} == {("none", 0)}


def test_failed_round_skipped_and_the_median_round_documented():
    failed = finished(99.0, sweep_of(scale=9.0), passed=False)
    rounds = [(Status.FAILED, failed), (Status.PASSED, finished(3.0, sweep_of(scale=3.0))),
              (Status.PASSED, finished(1.0, sweep_of(scale=1.0))), (Status.PASSED, finished(2.0, sweep_of(scale=2.0)))]
    (t,) = op_tables(case_of(*rounds))
    assert t.round == 4 and t.largest_busbw_gbs == 2 * 4 * K      # values 3, 1, 2: the median 2 is round 4
    two = case_of((Status.FAILED, failed), (Status.PASSED, finished(3.0, sweep_of(scale=3.0))),
                  (Status.PASSED, finished(1.0, sweep_of(scale=1.0))))
    assert op_tables(two)[0].round == 3                           # even: the lower middle one
    assert op_tables(case_of((Status.FAILED, failed))) == []


def test_old_run_fallback_from_metric_names():
    metrics = {}
    for op, factor in (("all_reduce", 1.0), ("all_gather", 0.5)):
        for label in ("1M", "256K", "4M", "64K"):
            metrics[f"busbw_{op}_{label}"] = {"value": factor * len(label), "unit": "GB/s"}
            metrics[f"algbw_{op}_{label}"] = {"value": 2.0, "unit": "GB/s"}
            metrics[f"time_us_{op}_{label}"] = {"value": 3.0, "unit": "us"}
    metrics["busbw_all_gather"] = {"value": 1.0, "unit": "GB/s"}        # no size: not a row
    details = {"dtype": "bf16", "world_size": 3, "bytes_rounded": {"all_gather_64K": 65532}}
    tables = {t.op: t for t in op_tables(case_of((Status.PASSED, finished(1.0, metrics=metrics, details=details))))}
    ar, ag = tables["all_reduce"], tables["all_gather"]
    assert [r.size_bytes for r in ar.rows] == [64 * K, 256 * K, 1 * M, 4 * M]
    assert [r.size_bytes for r in ag.rows] == [65532, 256 * K, 1 * M, 4 * M]
    assert ar.rows[0] == SweepRow(64 * K, 32 * K, "bfloat16", "sum", -1, 3.0, 2.0, 3.0, 0)
    assert ag.rows[0].count == 65532 // (2 * 3) and ag.rows[0].redop == "none"
    assert ar.avg_busbw_gbs == pytest.approx((3 + 4 + 2 + 2) / 4)


def test_p2p_sweep_and_its_fallback():
    sweep = [entry("uni_0_1", s, 5.0, algbw=5.0, redop="none") for s in (4 * K, 1 * M)]
    (t,) = op_tables(case_of((Status.PASSED, finished(5.0, sweep, benchmark="p2p", details={"plan": "pairs"}))))
    assert t.op == "uni_0_1" and [r.size_bytes for r in t.rows] == [4 * K, 1 * M]
    metrics = {"bw_bi_0_1_4K": {"value": 8.0}, "time_us_bi_0_1_4K": {"value": 1.0}, "bw_bi_0_1": {"value": 8.0},
               "bw_uni_0_1_4K": {"value": 6.0}, "time_us_uni_0_1_4K": {"value": 1.0}}
    tables = {t.op: t for t in op_tables(case_of((Status.PASSED, finished(8.0, metrics=metrics, benchmark="p2p"))))}
    assert tables["bi_0_1"].rows[0].busbw_gbs == 4.0          # bi counts both directions; sendrecv one rank's
    assert tables["uni_0_1"].rows[0].algbw_gbs == 6.0 == tables["uni_0_1"].rows[0].busbw_gbs
    matrix = finished(8.0, metrics=metrics, benchmark="p2p", details={"plan": "matrix"})
    assert op_tables(case_of((Status.PASSED, matrix))) == []


def test_other_benchmarks_and_bad_entries():
    assert op_tables(case_of((Status.PASSED, finished(1.0, None, metrics={"busbw_all_reduce_4K": {
        "value": 1.0, "unit": "GB/s"}}, benchmark="gemm")))) == []
    # any other record with a details.sweep (FlagCX's perf-test lines) gets its tables
    (other,) = op_tables(case_of((Status.PASSED, finished(1.0, sweep_of(), benchmark="flagcx_perf"))))
    assert other.op == "all_reduce" and [r.size_bytes for r in other.rows] == sorted(r.size_bytes for r in other.rows)
    bad = [entry("all_reduce", 4 * K, float("nan")), entry("all_reduce", -1, 1.0), entry(7, 4 * K, 1.0),
           entry("all_reduce", 4 * K, 1.0, wrong=-2), entry("all_reduce", True, 1.0), "x", None,
           entry("all_reduce", 8 * K, 2.0)]
    (t,) = op_tables(case_of((Status.PASSED, finished(1.0, bad))))
    assert [r.size_bytes for r in t.rows] == [8 * K]


def test_float_text_is_nccl_tests_getfloatstr():
    assert float_text(1.23456, 6) == "  1.23" and float_text(1234.567, 6) == "1234.6"
    assert float_text(123456.7, 6) == "123457" and float_text(12345678.0, 7) == "1.2e+07"
    assert float_text(1234567.0, 6) == " 1e+06"


# --------------------------------------------------------------------------- terminal and report.md

def big_case():
    sweep = [entry("all_reduce", s, busbw=2345.678, algbw=1234.567, time_us=123456.789, count=s // 2,
                   dtype="bfloat16", wrong=0) for s in (17179869184, 64 * K, 1 * M)]
    sweep += [entry("broadcast", s, 1.5, redop="none", root=0, wrong=None) for s in (64 * K, 1 * M)]
    return case_of((Status.PASSED, finished(1.0, sweep)))


def test_terminal_tables_fit_80_columns_without_cutting_a_figure():
    console = Console(width=80, record=True, force_terminal=False, color_system=None)
    for table in nccl_tables(summary_of(big_case())):
        console.print(table)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in text
    for head in ("size", "(B)", "count", "(elements)", "type", "redop", "root", "time", "(us)", "algbw", "busbw",
                 "(GB/s)", "#wrong"):
        assert head in text, head
    rows = [line.split() for line in lines if line.split() and line.split()[-1] in ("0", "N/A")]
    assert rows[0] == ["65536", "32768", "bfloat16", "sum", "-1", "123457", "1234.6", "2345.7", "0"]
    assert rows[2][:2] == ["17179869184", "8589934592"]                        # ascending, whole
    assert rows[3][3:5] == ["none", "0"] and rows[3][-1] == "N/A"             # broadcast: root 0; not recorded
    assert "collectives-pytorch-H100-1x8: all_reduce, round 1" in text
    assert "Avg bus bandwidth: 2346 GB/s" in " ".join(text.split())


def test_report_md_tables():
    md = MarkdownReporter().render(summary_of(big_case()))
    assert "| size (B) | count (elements) | type | redop | root | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |" \
        in md
    table = md[md.index("`all_reduce`"):]
    assert table.index("| 65536 |") < table.index("| 1048576 |") < table.index("| 17179869184 |")
    assert "Avg bus bandwidth: 2346 GB/s (mean busbw over 3 size(s)); at the largest size (17179869184 B): " \
           "2346 GB/s" in md
    assert "nccl-tests' view" not in MarkdownReporter().render(summary_of(case_of((Status.PASSED, finished(
        1.0, None, benchmark="gemm")))))


# --------------------------------------------------------------------------- the JSON export
# Keys and their order as nccl-tests' writer emits them (src/util.cu, JSON_FILE_VERSION 3): jsonOutputInit,
# writeDeviceReport (config, its devices), writeResultHeader/writeBenchmarkLine*, writeResultFooter, writeErrors,
# jsonOutputFinalize.
TOP_KEYS = ["version", "start_time", "args", "env", "nccl_version", "config", "results", "out_of_bounds",
            "average_bus_bandwidth", "errors", "end_time"]
CONFIG_KEYS = ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor", "warmup_iters", "iterations",
               "aggregated_iterations", "validation", "graph", "blocking_collectives", "per_iter_timing",
               "per_iter_skip", "parallel_init", "devices"]
DEVICE_KEYS = ["rank", "group", "pid", "hostname", "device", "device_hex", "device_info"]
RESULT_KEYS = ["size", "count", "type", "redop", "root", "out_of_place", "in_place", "actual_iterations",
               "experiment_name"]
BODY_KEYS = ["time", "alg_bw", "bus_bw", "nwrong"]


def test_json_fields_are_nccl_tests():
    s = summary_of(case_of((Status.PASSED, finished(5.0, sweep_of() + [
        entry("all_gather", s, 2.0, redop="none", wrong=3 if s == M else 0) for s in SIZES])),
        env={"NCCL_ALGO": "Ring"}))
    docs = documents(s)
    assert sorted(docs) == ["collectives-pytorch-H100-1x8.all_gather.json",
                            "collectives-pytorch-H100-1x8.all_reduce.json"]
    doc = docs["collectives-pytorch-H100-1x8.all_reduce.json"]
    assert list(doc) == TOP_KEYS
    assert list(doc["config"]) == CONFIG_KEYS and list(doc["config"]["devices"][0]) == DEVICE_KEYS
    assert [d["rank"] for d in doc["config"]["devices"]] == [0, 1] and doc["config"]["devices"][1]["pid"] == 11
    assert doc["version"] == 3 and doc["nccl_version"] == 22105 and doc["env"] == ["NCCL_ALGO=Ring"]
    assert doc["config"]["step_factor"] == 4 and doc["config"]["minimum_bytes"] == 64 * K
    assert doc["config"]["maximum_bytes"] == 4 * M and doc["config"]["iterations"] == 7
    assert doc["config"]["warmup_iters"] == 2 and doc["config"]["blocking_collectives"] == "false"
    assert doc["start_time"] and len(doc["start_time"]) == len("2026-01-01 10:00:00")
    rows = doc["results"]
    assert [list(r) for r in rows] == [RESULT_KEYS] * 4
    assert [r["size"] for r in rows] == [64 * K, 256 * K, 1 * M, 4 * M]
    assert rows[0]["root"] == "    -1" and rows[0]["type"] == "float" and rows[0]["redop"] == "sum"
    assert rows[0]["out_of_place"] is None and list(rows[0]["in_place"]) == BODY_KEYS      # all_reduce: in place
    assert rows[0]["in_place"]["nwrong"] == 0.0 and rows[0]["actual_iterations"] == 7
    assert doc["average_bus_bandwidth"] == {"bandwidth": pytest.approx(sum(SIZES) / K / 4), "okay": "unchecked"}
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    gather = docs["collectives-pytorch-H100-1x8.all_gather.json"]
    assert gather["results"][0]["in_place"] is None and list(gather["results"][0]["out_of_place"]) == BODY_KEYS
    assert gather["out_of_bounds"] == {"count": 1, "okay": "false"}


def test_json_step_bytes_and_version_codes():
    sweep = [entry("all_reduce", s, 1.0) for s in (1 * K, 2 * K, 3 * K)]
    doc = next(iter(documents(summary_of(case_of((Status.PASSED, finished(1.0, sweep))))).values()))
    assert "step_factor" not in doc["config"] and doc["config"]["step_bytes"] == K
    assert nccl_version_code("2.21.5") == 22105 and nccl_version_code("2.8.4") == 2804
    assert nccl_version_code(None) == 0 and nccl_version_code("gloo") == 0
    assert file_name("../a b", "x/y") == "_._a_b.x_y.json"


def test_json_files_written_into_the_run_directory(tmp_path):
    s = summary_of(big_case())
    out = {o.name: o for o in write_reports(s, tmp_path)}
    assert out["nccl_tests"].path == tmp_path / "nccl_tests" and out["nccl_tests"].error is None
    names = sorted(p.name for p in (tmp_path / "nccl_tests").iterdir())
    assert names == ["collectives-pytorch-H100-1x8.all_reduce.json", "collectives-pytorch-H100-1x8.broadcast.json"]
    doc = json.loads((tmp_path / "nccl_tests" / names[0]).read_text())
    assert list(doc) == TOP_KEYS and math.isclose(doc["average_bus_bandwidth"]["bandwidth"], 2345.678)


def test_nothing_written_without_a_sweep(tmp_path):
    s = summary_of(case_of((Status.PASSED, finished(1.0, None, benchmark="gemm"))))
    assert NcclTestsReporter().write(s, tmp_path) is None
    assert "nccl_tests" not in [o.name for o in write_reports(s, tmp_path)]
    assert not (tmp_path / "nccl_tests").exists()


def test_a_linked_folder_is_not_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "nccl_tests").symlink_to(elsewhere)
    out = {o.name: o for o in write_reports(summary_of(big_case()), run)}
    assert out["nccl_tests"].path is None and out["nccl_tests"].error.startswith("cannot write nccl_tests: ")
    assert list(elsewhere.iterdir()) == []


def test_placement():
    assert ncclview.placement("all_reduce") == ncclview.placement("broadcast") == "in_place"
    assert ncclview.placement("all_gather") == ncclview.placement("uni_0_1") == "out_of_place"


def test_names_from_the_record_are_text():
    evil = "x\x1b[31m[bold]|*"
    sweep = [entry(evil, 4 * K, 1.0, dtype="f\x07[red]", redop="s|um")]
    s = summary_of(case_of((Status.PASSED, finished(1.0, sweep))))
    console = Console(width=80, record=True, force_terminal=True, color_system="truecolor")
    for table in nccl_tables(s):
        console.print(table)
    text = console.export_text(styles=False)
    assert "\x1b" not in text and "\x07" not in text and "[bold]" in text and "[red]" in text
    md = MarkdownReporter().render(s)
    assert "\x1b" not in md and "\x07" not in md and "| s|um |" not in md
    (name,) = documents(s)
    assert name == "collectives-pytorch-H100-1x8.x__31m_bold___.json"
