"""End-to-end: `flagperf compare` on two real runs on localhost (CPU), and on a planted regression."""

import json

from .conftest import only_run_dir, run_cli, write_conf

CASE = "gemm:pytorch:cmp:1:1:4"     # 4 rounds: enough for the Mann-Whitney test to reach p < 0.05


def _run(tmp_path, name):
    work = tmp_path / name
    work.mkdir()
    conf = write_conf(work, {CASE: "null"})
    code, out, err = run_cli(["run", "--config", conf], timeout=300)
    assert code == 0, out + err
    return only_run_dir(work / "result")


def test_compare_two_real_runs_and_a_planted_regression(tmp_path):
    run_a, run_b = _run(tmp_path, "a"), _run(tmp_path, "b")

    # Two real runs: noisy, so no regression is asserted, but the table and the JSON are complete.
    code, out, err = run_cli(["compare", run_a, run_b])
    assert code in (0, 1), out + err
    assert "Traceback" not in out + err
    assert f"vs B {run_b.name}" in out and "gemm-pytorch-cmp-1x1" in out and "(headline)" in out
    assert "MWU exact p=" in out and "case(s) compared" in out
    page = run_b / f"compare-{run_a.name}-{run_b.name}.html"
    assert f"comparison page: {page}" in out and "gemm-pytorch-cmp-1x1" in page.read_text()
    code_json, out, err = run_cli(["compare", run_a, run_b, "--json"])
    assert code_json == code, err
    d = json.loads(out)
    assert d["schema"] == "flagperf.compare/2" and d["a"]["run_id"] == run_a.name
    assert d["counts"]["cases_compared"] == 1 and d["only_in_a"] == d["only_in_b"] == []
    (case,) = d["cases"]
    assert case["key"] == "gemm:pytorch:cmp:1:1:4" and case["rounds_passed_a"] == case["rounds_passed_b"] == 4
    head = case["metrics"][0]
    assert head["headline"] is True and head["metric"].startswith("tflops_") and head["unit"] == "TFLOP/s"
    assert head["higher_is_better"] is True and head["test"] == "mann-whitney-u exact"
    assert head["a"]["n"] == head["b"]["n"] == 4 and 0 <= head["p_value"] <= 1
    assert head["change_pct"] == (head["b"]["median"] - head["a"]["median"]) / head["a"]["median"] * 100
    assert len(case["metrics"]) > 1            # the FINISHED metrics beside the headline
    assert all(m["verdict"] in ("regression", "improvement", "unchanged", "noise", "changed", "incomparable")
               for m in case["metrics"])     # 4 rounds a side: the test decides, never "insufficient evidence"
    assert all(m["basis"] == "p_value" for m in case["metrics"] if m["verdict"] != "unchanged")
    assert d["regressed"] is (code == 1)

    # Planted: run B's summary.json with every round's headline value at 1 %, against run B itself (a factor
    # beyond any round-to-round spread of a busy host, so the 4 rounds separate completely).
    planted = tmp_path / "planted"
    planted.mkdir()
    summary = json.loads((run_b / "summary.json").read_text())
    for rnd in summary["cases"][0]["rounds"]:
        rnd["value"] *= 0.01
        rnd["finished"]["value"] *= 0.01
    (planted / "summary.json").write_text(json.dumps(summary))
    code, out, err = run_cli(["compare", run_b, planted])
    assert code == 1, out + err
    metric = head["metric"]
    assert f"REGRESSION gemm-pytorch-cmp-1x1 {metric}: " in out and "(-99.0%, MWU exact p=0.0286; n 4/4, spread " in out
    code, out, err = run_cli(["compare", run_b, planted, "--json"])
    d = json.loads(out)
    assert code == 1 and d["regressed"] is True
    assert [(r["key"], r["metric"]) for r in d["regressions"]] == [("gemm:pytorch:cmp:1:1:4", metric)]
    assert round(d["regressions"][0]["change_pct"], 6) == -99.0
