"""End-to-end: REFERENCES through the real CLI on localhost CPU ranks. An impossible expectation fails the run
(exit 1, status below_reference, named in stdout, summary.json and report.md); a loose one passes "within
reference". `flagperf report` shows what summary.json says without reading the reference file again."""

import json

from .conftest import only_run_dir, run_cli, write_conf

CASE = "gemm:pytorch:local:1:1:1"
NAME = "gemm-pytorch-local-1x1"


def refs(tmp_path, spec):
    path = tmp_path / "refs.yaml"
    path.write_text("description: \"test references for this CPU (no match: any device)\"\n"
                    "benchmarks:\n"
                    "  gemm:\n"
                    "    - world_size: 1\n"
                    "      metrics:\n"
                    f"        tflops_fp32: {spec}\n", encoding="utf-8")
    return path


def test_impossible_reference_fails_the_run(tmp_path):
    ref = refs(tmp_path, "{expected: 1000000, tolerance: 0.05, unit: TFLOP/s, source: docs/results/README.md}")
    conf = write_conf(tmp_path, {CASE: "null"}, REFERENCES=ref)
    code, out, err = run_cli(["run", "--config", conf])
    assert code == 1, out + err
    assert "Traceback" not in out + err
    assert f"{NAME}: tflops_fp32 = " in out and "below reference: expected 1e+06 TFLOP/s, tolerance -5%" in out
    assert f"case {NAME}: BELOW_REFERENCE" in out
    assert "below_reference" in out                   # the table's status column
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed"
    (case,) = summary["cases"]
    assert case["status"] == "below_reference" and case["rounds"][0]["status"] == "passed"
    (v,) = case["verdicts"]
    assert v["metric"] == "tflops_fp32" and v["expected"] == 1e6 and v["tolerance"] == 0.05
    assert v["result"] == "below" and v["ok"] is False and 0 < v["measured"] < 1e6
    assert v["measured"] == case["stats"]["value"]["median"] and v["unit"] == "TFLOP/s"
    assert v["source"] == "docs/results/README.md" and v["reference"] == str(ref)
    report = (run / "report.md").read_text()
    assert "below_reference" in report and "| tflops_fp32 |" in report and "1e+06" in report
    runlog = (run / "flagperf_run.log").read_text()
    assert "ERROR" in runlog and "tflops_fp32" in runlog and "below reference" in runlog

    ref.unlink()                                      # `report` recomputes nothing: the file is not needed
    code, out, err = run_cli(["report", run])
    assert code == 0, out + err
    assert "below_reference" in out and "tflops_fp32" in out and "expected 1e+06 TFLOP/s" in out


def test_loose_reference_passes_within_reference(tmp_path):
    ref = refs(tmp_path, "{expected: 0.05, tolerance: 0.99, better_tolerance: 1000, unit: TFLOP/s, "
                         "source: docs/results/README.md}")
    conf = write_conf(tmp_path, {CASE: "null"}, REFERENCES=ref)
    code, out, err = run_cli(["run", "--config", conf])
    assert code == 0, out + err
    assert "tflops_fp32 = " in out and "within reference" in out and "passed (within reference)" in out
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    (case,) = summary["cases"]
    assert summary["status"] == "passed" and case["status"] == "passed"
    (v,) = case["verdicts"]
    assert v["metric"] == "tflops_fp32" and v["result"] == "within" and v["ok"] is True
    assert "passed (within reference)" in (run / "report.md").read_text()
