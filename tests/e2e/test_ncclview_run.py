"""End-to-end: the collectives benchmark on CPU (gloo, 2 ranks, a tiny sweep) through `flagperf run`, and its
nccl-tests view: the terminal tables, report.md's and the nccl-tests JSON files in the run directory."""

import json

import pytest

from flagperf.results.interpret import Status
from flagperf.results.ncclview import op_tables
from flagperf.results.summary import CaseSummary, RoundSummary
from tests.e2e.test_benchmarks_cpu import check_run, run_case

from .conftest import only_run_dir, run_cli, write_conf

SIZES = [4096, 16384, 65536]        # listed as 16K, 4K, 64K: neither order is numeric


def test_collectives_nccl_tests_view(tmp_path, flagperf_home):
    override = flagperf_home / "vendors" / "cpu" / "collectives"
    override.mkdir()
    (override / "config_tiny.yaml").write_text(
        'ops: [all_reduce, all_gather]\nsizes: ["16K", "4K", "64K"]\ntime_budget_s: 0.3\nwarmup: 1\n')
    conf = write_conf(tmp_path, {"collectives:pytorch:tiny:1:2:2": "null"})
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=240)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    name = case["name"]
    assert case["status"] == "passed"
    for r in case["rounds"]:
        sweep = r["finished"]["checks"]["details"]["sweep"]
        assert [(e["op"], e["size_bytes"]) for e in sweep] == [("all_reduce", s) for s in SIZES] + \
            [("all_gather", s) for s in SIZES]
        assert all(e["wrong"] == 0 and e["dtype"] == "float" for e in sweep)
        for op in ("all_reduce", "all_gather"):
            busbw = [e["busbw"] for e in sweep if e["op"] == op]
            assert r["metrics"][f"avg_busbw_{op}"]["value"] == pytest.approx(sum(busbw) / len(busbw))
    values = sorted((r["value"], r["round"]) for r in case["rounds"])
    documented = values[0][1]                   # two rounds: the lower middle value's round
    rnd = next(r for r in case["rounds"] if r["round"] == documented)
    sweep = rnd["finished"]["checks"]["details"]["sweep"]

    # the terminal: a table per op, sizes ascending, the average under it
    text = " ".join(out.split())
    for op in ("all_reduce", "all_gather"):
        assert f"{name}: {op}, round {documented}" in text
    lines = [line.split() for line in out.splitlines()]
    rows = [cells for cells in lines if len(cells) == 9 and cells[2] == "float"]
    assert [int(c[0]) for c in rows] == SIZES * 2
    assert [c[3] for c in rows] == ["sum"] * 3 + ["none"] * 3 and {c[4] for c in rows} == {"-1"}
    assert [int(c[1]) for c in rows[3:]] == [s // 4 // 2 for s in SIZES]       # all_gather: elements per rank
    assert "Avg bus bandwidth:" in text

    # report.md
    md = (run / "report.md").read_text()
    assert "| size (B) | count (elements) | type | redop | root | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |" \
        in md
    part = md[md.index("nccl-tests' view: `all_reduce`"):]
    assert part.index("| 4096 |") < part.index("| 16384 |") < part.index("| 65536 |")
    assert "Avg bus bandwidth:" in part

    # the nccl-tests JSON files
    folder = run / "nccl_tests"
    assert sorted(p.name for p in folder.iterdir()) == [f"{name}.all_gather.json", f"{name}.all_reduce.json"]
    doc = json.loads((folder / f"{name}.all_reduce.json").read_text())
    assert list(doc) == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                         "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]
    assert [r["size"] for r in doc["results"]] == SIZES
    ours = [e for e in sweep if e["op"] == "all_reduce"]
    assert [r["in_place"]["bus_bw"] for r in doc["results"]] == [pytest.approx(e["busbw"], abs=1e-6) for e in ours]
    assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(
        sum(e["busbw"] for e in ours) / len(ours), abs=1e-6)
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"} and doc["config"]["step_factor"] == 4
    assert [d["rank"] for d in doc["config"]["devices"]] == [0, 1]
    gather = json.loads((folder / f"{name}.all_gather.json").read_text())
    assert all(r["in_place"] is None and r["out_of_place"]["nwrong"] == 0.0 for r in gather["results"])

    # flagperf report makes the same files again from summary.json
    for p in folder.iterdir():
        p.unlink()
    code, out, err = run_cli(["report", str(run)], home=flagperf_home)
    assert code == 0, out + err
    assert json.loads((folder / f"{name}.all_reduce.json").read_text())["results"] == doc["results"]
    assert f"report nccl_tests: {folder}" in out


def test_p2p_listed_pairs_sweep_and_view(tmp_path):
    """p2p's listed pairs record their sweep as nccl-tests' sendrecv does (busbw = algbw = the bytes one rank sends
    / time); the view has a table per pair and mode; the link matrix has none."""
    overrides = {"pairs": [[1, 0]], "sizes": ["64K", "4K"], "time_budget_s": 0.3, "warmup": 1}
    (fin, _) = check_run(run_case(tmp_path, "p2p", 2, overrides), "p2p", "bw_uni")
    sweep, m = fin["checks"]["details"]["sweep"], fin["metrics"]
    assert [(e["op"], e["size_bytes"]) for e in sweep] == [("uni_1_0", 4096), ("uni_1_0", 65536),
                                                          ("bi_1_0", 4096), ("bi_1_0", 65536)]
    for e in sweep:
        mode, label = e["op"].split("_")[0], {4096: "4K", 65536: "64K"}[e["size_bytes"]]
        bw = m[f"bw_{mode}_1_0_{label}"]["value"]
        assert e["algbw"] == e["busbw"] == pytest.approx(bw / 2 if mode == "bi" else bw)
        assert e["wrong"] == 0 and e["count"] == e["size_bytes"] // 4 and (e["redop"], e["root"]) == ("none", -1)
    for op in ("uni_1_0", "bi_1_0"):
        busbw = [e["busbw"] for e in sweep if e["op"] == op]
        assert m[f"avg_busbw_{op}"]["value"] == pytest.approx(sum(busbw) / 2)
    case = CaseSummary("p2p-pytorch-cpu-1x2", "p2p:pytorch:cpu:1:2:1", "p2p", "pytorch", "cpu", 1, 2, 1,
                       rounds=[RoundSummary(1, "r/round1", Status.PASSED, 1.0, None, fin)])
    tables = op_tables(case)
    assert [t.op for t in tables] == ["uni_1_0", "bi_1_0"]
    assert [r.size_bytes for r in tables[0].rows] == [4096, 65536]
    assert tables[1].avg_busbw_gbs == pytest.approx(m["avg_busbw_bi_1_0"]["value"])
