"""A FlagPerf base run as FlagPerf runs it, through the real CLI on localhost (RUNTIME bare, VENDOR cpu): the TF32
case's per-chip requirements.txt installed and env.sh sourced before it (its marker printed by the case), both
cases' detail_result.json against their node's monitor files, and the TF32 figure that is FP32's flagged against a
peak table whose TF32 peak is 8x FP32's. Fixtures in FlagPerf's base layout: tests/e2e/fixtures/base/."""

import json
import math
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from flagperf.caselaunch import BASE_PREPARE_NAME, TRAINING_PREPARE_AND_START

from .conftest import REPO, only_run_dir, run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "base"


def with_cpu_peaks(home):
    """The cpu vendor of a FLAGPERF_HOME with a peak table: chip 'local' with a TF32 peak 8x its FP32 peak."""
    vendor = home / "vendors" / "cpu"
    (vendor / "vendor.yaml").unlink()
    (vendor / "vendor.yaml").write_text((REPO / "vendors" / "cpu" / "vendor.yaml").read_text()
                                        + "peaks: peaks.yaml\n")
    (vendor / "peaks.yaml").write_text("cpu-local:\n  match: [local]\n  fp32_tflops: 1.0\n  tf32_tflops: 8.0\n")


def host_yaml(tmp_path, base, port):
    path = tmp_path / "host.yaml"
    path.write_text(f"FLAGPERF_PATH: {base}\nFLAGPERF_LOG_PATH: {tmp_path / 'result'}\nVENDOR: cpu\nRUNTIME: bare\n"
                    f"BENCHMARKS_OR_TOOLKITS: BENCHMARK\nHOSTS: [localhost]\nNPROC_PER_NODE: 1\n"
                    f'MASTER_PORT: "{port}"\nMONITOR_INTERVAL: 0.2\nCASES:\n'
                    f'  "computation-FP32:local": "pytorch_2.3"\n  "computation-TF32:local": "pytorch_2.3"\n')
    return path


def native_series(node, name, key):
    """(timestamp, value) of one field of a native monitor file, read here independently of flagperf."""
    out = []
    for line in (node / name).read_text().splitlines():
        tokens = line.split()
        fields = dict(t.split("=", 1) for t in tokens[1:])
        if key in fields:
            out.append((datetime.fromisoformat(tokens[0]), float(fields[key]), fields))
    return out


def population_stats(xs, scale, ndigits):
    """FlagPerf's mean, max and population std of a series, scaled and rounded. The mean is the correctly rounded
    one (math.fsum): a plain sum's last-bit error can tip round(..., 3) the other way on a .0005 boundary."""
    mean = math.fsum(xs) / len(xs)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / len(xs))
    got = {"mean": mean * scale, "max": max(xs) * scale, "std": std * scale}
    return {k: pytest.approx(round(v, ndigits), abs=1.01 * 10 ** -ndigits) for k, v in got.items()}


def check_detail(detail, node, metric):
    """One round's detail_result.json against its node directory: FlagPerf's keys, its series from the monitor
    files, the [FlagPerf Result] line of the log, FlagPerf's statistics of them."""
    assert list(detail) == ["localhost"]
    host = detail["localhost"]
    assert set(host) == {"vendor", "cpu", "mem", "pwr", "flagperf", "statistics"}
    # VENDOR cpu has no accelerator monitor: FlagPerf's NPROC_PER_NODE devices, with empty series
    assert host["vendor"] == {"temp": {"0": []}, "power": {"0": []}, "mem": {"0": []}}
    cpu = [v / 100 for _t, v, _f in native_series(node, "cpu_monitor.log", "util_pct")]
    assert len(cpu) >= 2 and host["cpu"] == [round(v, 6) for v in cpu]
    mem = [round(float(f["used_mib"]) / float(f["total_mib"]), 6)
           for _t, _v, f in native_series(node, "mem_monitor.log", "used_mib")]
    assert mem and host["mem"] == mem and all(0 < m < 1 for m in mem)
    pwr = [v for _t, v, _f in native_series(node, "pwr_monitor.log", "power_w")] \
        if (node / "pwr_monitor.log").exists() else []
    assert host["pwr"] == pwr
    (line,) = host["flagperf"]
    assert line.startswith(f"[FlagPerf Result]Rank 0's {metric}=") and line.endswith("TFLOPS")
    stats = host["statistics"]
    assert stats["system_cpu_pct"] == population_stats(host["cpu"], 100, 3)
    assert stats["system_memory_pct"] == population_stats(host["mem"], 100, 3)
    assert stats["system_power_w"] == (population_stats(pwr, 1, 2) if pwr else
                                       {"mean": None, "max": None, "std": None})
    empty = {"mean": None, "max": None, "std": None}
    assert stats["chip_power_w"] == stats["chip_temperature_c"] == stats["chip_memory_pct"] == {"0": empty}


def test_base_run_applies_env_sh_and_requirements_writes_detail_and_flags_tf32(tmp_path, flagperf_home):
    base = tmp_path / "FlagPerf" / "base"
    shutil.copytree(FIXTURES / "benchmarks", base / "benchmarks")
    # the TF32 rule compares two cases' figures: fixed ones here (a TF32 figure 0.5% above FP32's), since two
    # timings taken at different moments of a loaded machine can differ by more than the rule's 10%
    for name, tflops in (("FP32", 0.0200), ("TF32", 0.0201)):
        with open(base / "benchmarks" / f"computation-{name}" / "cpu" / "local" / "case_config.yaml", "a") as f:
            f.write(f"REPORT_TFLOPS: {tflops}\n")
    with_cpu_peaks(flagperf_home)
    code, out, err = run_cli(["run", "--config", host_yaml(tmp_path, base, 30262)], home=flagperf_home, timeout=300)
    assert code == 0, out + err
    req = base / "benchmarks" / "computation-TF32" / "cpu" / "local" / "requirements.txt"
    env_sh = req.parent / "env.sh"
    # the load-time warning: RUNTIME bare installs into the host's Python environment
    assert f"FlagPerf's base preparation pip-installs {req} into the Python environment of each host" in out + err
    run = only_run_dir(tmp_path / "result")
    summary = json.loads((run / "summary.json").read_text())
    fp32, tf32 = summary["cases"]
    assert [c["status"] for c in (fp32, tf32)] == ["passed", "passed"]

    # the TF32 case: pip install -r its requirements.txt, then its env.sh sourced in the node command's shell
    (r,) = tf32["rounds"]
    node = run / r["dir"] / "localhost_noderank0"
    launch = json.loads((node / "launch.json").read_text())
    assert launch["argv"][:9] == ["bash", "-c", TRAINING_PREPARE_AND_START, BASE_PREPARE_NAME, str(env_sh), str(req),
                                  "", "", str(node)]
    assert launch["argv"][11:13] == ["-m", "torch.distributed.run"]
    assert "env.sh marker: env-sh-of-cpu-local" in (node / "node.out.log").read_text()
    assert (node / "source_env.log.txt").read_text() == "cpu/local env.sh sourced\n"
    prepared = (node / "env_prepare.log").read_text()
    assert f"-m pip install -r {req}" in prepared and "env.sh" not in prepared   # FlagPerf base: pip, then env.sh
    # the FP32 case has no per-chip files: its torchrun command alone
    fnode = run / fp32["rounds"][0]["dir"] / "localhost_noderank0"
    assert json.loads((fnode / "launch.json").read_text())["argv"][1:3] == ["-m", "torch.distributed.run"]
    assert not (fnode / "env_prepare.log").exists()

    # detail_result.json: the run's (its last case, as FlagPerf's) and every round's
    assert json.loads((run / "detail_result.json").read_text()) == \
        json.loads((node.parent / "detail_result.json").read_text())
    check_detail(json.loads((node.parent / "detail_result.json").read_text()), node, "computation-TF32")
    check_detail(json.loads((fnode.parent / "detail_result.json").read_text()), fnode, "computation-FP32")

    # the TF32 figure is FP32's (both multiply FP32 matrices on the CPU): flagged, not failed
    ratio = tf32["stats"]["value"]["median"] / fp32["stats"]["value"]["median"]
    assert 0.9 <= ratio <= 1.1, ratio
    (v,) = tf32["verdicts"]
    assert v["result"] == "suspect" and v["ok"] is True and v["metric"] == "computation-TF32"
    assert v["note"].startswith("TF32 measured FP32: ") and "--vendor=cpu/local" in v["note"]
    assert v["reference"].endswith("vendors/cpu/peaks.yaml") and v["expected"] > 7 * v["measured"]
    assert fp32["verdicts"] == []
    assert "TF32 measured FP32" in out                              # the run log and the table
    assert "flagged: computation-TF32: TF32 measured FP32" in (run / "report.md").read_text()
    assert "TF32 measured FP32" in (run / "report.html").read_text()
