"""End-to-end, through the real CLI: FlagPerf's monitor files (MONITOR_FORMAT: flagperf) where FlagPerf has
them, flagperf's own in the node directory's flagperf/ folder, sys_info.log and the report of such a run on a
localhost run, and FLAGPERF_PATH ownership (deploy creates, adopts or refuses the directory) on localhost and
on real OpenSSH hosts (testbed/sshbed.py)."""

import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from flagperf.results.monitors import read_monitor_file, read_status
from tests.unit.flagperf_format_readers import read_host_file

from .conftest import only_run_dir, run_cli, write_conf

PORT = 30320            # MASTER_PORT of these tests (30300-30399)


def _sleeper(home, hw, seconds):
    (home / "vendors" / "cpu" / "sleeper").mkdir(exist_ok=True)
    (home / "vendors" / "cpu" / "sleeper" / f"config_{hw}.yaml").write_text(f"sleep_s: {seconds}\n")


def _facts(path):
    return dict(line.split(": ", 1) for line in Path(path).read_text().splitlines())


def _snapshot(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            body = os.readlink(p) if os.path.islink(p) else (Path(p).read_bytes() if os.path.isfile(p) else None)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, body)
    out["."] = os.lstat(root).st_mtime_ns
    return out


def _flagperf_checkout(root):
    """What a FlagPerf checkout looks like at its top (a directory flagperf did not create)."""
    (root / "training" / "run_benchmarks" / "config").mkdir(parents=True)
    (root / "training" / "run_benchmarks" / "config" / "test_conf.py").write_text('VENDOR = "nvidia"\n')
    (root / "base" / "configs").mkdir(parents=True)
    (root / "base" / "configs" / "host.yaml").write_text("FLAGPERF_PATH: /home/FlagPerf/base\n")
    (root / "README.md").write_text("# FlagPerf\n")
    return root


def _results(out):
    """The text of the last column of the table ``flagperf deploy`` prints, its wrapped lines joined again."""
    return " ".join(line.split("│")[-2].strip() for line in out.splitlines() if line.count("│") >= 3)


@pytest.fixture
def short_dir():
    """A folder with a short path, so that deploy's table does not cut the paths in its messages."""
    path = Path(tempfile.mkdtemp(prefix="fpown-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------------------------ monitor files, sys_info

def test_flagperf_monitor_files_and_sys_info_on_a_local_run(tmp_path, flagperf_home):
    _sleeper(flagperf_home, "fmt", 3)
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {PORT}\n")
    conf = write_conf(tmp_path, {"sleeper:pytorch:fmt:1:1:1": "null"}, CLUSTER="cluster.yaml",
                      MONITOR_FORMAT="flagperf")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    assert yaml.safe_load((run / "effective_config.yaml").read_text())["MONITOR_FORMAT"] == "flagperf"
    node = run / "sleeper-pytorch-fmt-1x1" / "round1" / "localhost_noderank0"
    fp, own = node, node / "flagperf"           # FlagPerf's paths (<host>_noderank<i>/), flagperf's own aside
    names = sorted(p.name for p in fp.glob("*_monitor.log"))
    assert names == ["cpu_monitor.log", "mem_monitor.log", "pwr_monitor.log"], names    # pwr always, for FlagPerf
    native_names = sorted(p.name for p in own.iterdir())
    assert native_names in (["cpu_monitor.log", "mem_monitor.log"],
                            ["cpu_monitor.log", "mem_monitor.log", "pwr_monitor.log"]), native_names
    # FlagPerf's reading of its files: same samples as flagperf's own, fractions, FlagPerf's timestamps.
    for sensor in ("cpu", "mem"):
        native = read_monitor_file(own / f"{sensor}_monitor.log", strict=True)
        theirs = read_host_file(fp / f"{sensor}_monitor.log")
        assert len(theirs) == len(native) >= 4, sensor
        assert all(0.0 <= v <= 1.0 for _, v in theirs), theirs
        assert [t for t, _ in theirs] == [ts.astimezone().replace(tzinfo=None, microsecond=0) for ts, _ in native]
    assert any(v > 0 for _, v in read_host_file(fp / "mem_monitor.log"))
    status, problem = read_status(node)
    assert problem is None and status.sensors["mem"].extra["flagperf_file"] == "mem_monitor.log"
    assert status.sensors["mem"].file == "flagperf/mem_monitor.log"
    pwr, watts = status.sensors["pwr"].extra, read_host_file(fp / "pwr_monitor.log")
    assert pwr["flagperf_file"] == "pwr_monitor.log" and watts, watts
    if "flagperf_source" in pwr:
        assert pwr["flagperf_source"].startswith("ipmitool") and all(v > 0 for _, v in watts)
    else:                                               # no ipmitool or no BMC here: said, and no number made up
        assert pwr["flagperf_reason"] and len(watts) == 1 and math.isnan(watts[0][1]), (pwr, watts)

    # flagperf's own summary and report read the native files from flagperf/.
    summary = json.loads((run / "summary.json").read_text())
    monitors = summary["cases"][0]["rounds"][0]["nodes"][0]["monitors"]
    assert monitors["cpu"]["samples"] == len(read_monitor_file(own / "cpu_monitor.log")) >= 4, monitors
    assert monitors["mem"]["used_mib_max"] > 0
    (run / "series.json").unlink()                      # flagperf report makes it again from the node directory
    summary["series"] = None
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "report.html").unlink(missing_ok=True)
    code, out, err = run_cli(["report", str(run), "--html"])
    assert code == 0, out + err
    series = json.loads((run / "series.json").read_text())
    (ns,) = series["nodes"]
    traces = {(t["sensor"], t["key"]): len(t["y"]) for t in ns["traces"]}
    assert traces[("cpu", "util_pct")] >= 4 and traces[("mem", "used_mib")] >= 4, traces
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "CPU util (%)" in page and "No monitor data in its node directory" not in page

    facts = _facts(node / "sys_info.log")
    assert facts["kernel"] == platform.release() and facts["hostname"] == platform.node()
    assert facts["cpu_count"] == str(os.cpu_count()) and facts["accelerator_plugin"] == "none"
    assert facts["python"] == f"{platform.python_version()} ({sys.executable})"      # localhost: this interpreter
    import torch
    assert facts["torch"] == torch.__version__ and facts["torch_cuda"] == (torch.version.cuda or "none")
    release = Path("/etc/os-release").read_text() if Path("/etc/os-release").is_file() else ""
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', release, re.M)
    if pretty:
        assert facts["os"] == pretty.group(1)


# ------------------------------------------------------------------------------------ FLAGPERF_PATH ownership

def test_localhost_flagperf_path_foreign_refused_empty_adopted_then_reused(tmp_path, flagperf_home, short_dir):
    _sleeper(flagperf_home, "own", 0.2)
    foreign = _flagperf_checkout(short_dir / "FlagPerf")
    before = _snapshot(foreign)
    (tmp_path / "cluster.yaml").write_text(f"HOSTS: [localhost]\nMASTER_PORT: {PORT + 1}\n")
    case = {"sleeper:pytorch:own:1:1:1": "null"}
    message = (f"FLAGPERF_PATH {foreign} on host localhost exists and was not created by flagperf (no "
               ".flagperf-tree); point FLAGPERF_PATH at an empty or new directory")

    conf = write_conf(tmp_path, case, CLUSTER="cluster.yaml", FLAGPERF_PATH=foreign)
    code, out, err = run_cli(["deploy", "--config", conf], home=flagperf_home)
    assert code == 3 and message in _results(out), out + err
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 3 and "host localhost: deploy_failed" in out and "Traceback" not in out + err, out + err
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    (check,) = summary["host_checks"]
    assert check["outcome"] == "deploy_failed" and message in check["detail"]
    assert [c["status"] for c in summary["cases"]] == ["not_run"]
    assert _snapshot(foreign) == before                       # nothing written, nothing touched

    link = short_dir / "link"
    (tmp_path / "target").mkdir()
    link.symlink_to(tmp_path / "target")
    conf = write_conf(tmp_path, case, CLUSTER="cluster.yaml", FLAGPERF_PATH=link)
    code, out, err = run_cli(["deploy", "--config", conf], home=flagperf_home)
    assert code == 3 and f"FLAGPERF_PATH {link} on host localhost is a symbolic link" in _results(out), out + err
    assert os.listdir(tmp_path / "target") == []

    empty = tmp_path / "empty"
    empty.mkdir()
    conf = write_conf(tmp_path, case, CLUSTER="cluster.yaml", FLAGPERF_PATH=empty,
                      FLAGPERF_LOG_PATH=tmp_path / "result2")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 0, out + err
    marker = json.loads((empty / ".flagperf-tree").read_text())
    assert marker["created_by"] == "flagperf" and marker["how"] == "adopted-empty"
    assert (empty / "launcher" / "node_launcher.py").is_file()
    run1 = only_run_dir(tmp_path / "result2")
    assert "(an empty directory: adopted, marked .flagperf-tree)" in (run1 / "flagperf_run.log").read_text()
    launch = json.loads((run1 / "sleeper-pytorch-own-1x1" / "round1" / "localhost_noderank0" / "launch.json")
                        .read_text())
    assert launch["cwd"].startswith(str(empty))               # the ranks ran from the adopted tree

    marker_bytes = (empty / ".flagperf-tree").read_bytes()
    code, out, err = run_cli(["deploy", "--config", conf], home=flagperf_home)
    assert code == 0 and re.search(r"│ 0 of \d+ file\(s\) sent, 0 bytes +│", out), out + err
    assert "adopted" not in out and (empty / ".flagperf-tree").read_bytes() == marker_bytes


def test_ssh_hosts_foreign_refused_empty_adopted_new_created(tmp_path, ssh_bed, flagperf_home, short_dir):
    _sleeper(flagperf_home, "own", 0.2)
    a, b = ssh_bed.addresses
    foreign = _flagperf_checkout(short_dir / "h0" / "FlagPerf")
    before = _snapshot(foreign)
    empty = short_dir / "h1" / "empty"
    empty.mkdir(parents=True)
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml", master_port=PORT + 2,
                               per_host={0: {"FLAGPERF_PATH": str(foreign)}, 1: {"FLAGPERF_PATH": str(empty)}})
    conf = write_conf(tmp_path, {"sleeper:pytorch:own:2:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["deploy", "--config", conf], home=flagperf_home)
    assert code == 3, out + err
    assert (f"FLAGPERF_PATH {foreign} on host {a} exists and was not created by flagperf (no .flagperf-tree); "
            "point FLAGPERF_PATH at an empty or new directory") in _results(out), out
    assert re.search(rf"│ {re.escape(b)} +│ .*file\(s\) sent, \d+ bytes \(an empty directory: adopted", out), out
    assert json.loads((empty / ".flagperf-tree").read_text())["how"] == "adopted-empty"

    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home)
    assert code == 3 and f"host {a}: deploy_failed" in out and "Traceback" not in out + err, out + err
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    assert [(h["host"], h["outcome"]) for h in summary["host_checks"]] == [(a, "deploy_failed")]
    assert _snapshot(foreign) == before

    new = short_dir / "h0" / "new" / "flagperf"
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml", master_port=PORT + 2,
                               per_host={0: {"FLAGPERF_PATH": str(new)}, 1: {"FLAGPERF_PATH": str(empty)}})
    conf = write_conf(tmp_path, {"sleeper:pytorch:own:2:1:1": "null"}, CLUSTER="cluster.yaml",
                      FLAGPERF_LOG_PATH=tmp_path / "result2")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=240)
    assert code == 0, out + err
    assert json.loads((new / ".flagperf-tree").read_text())["how"] == "created"
    run = only_run_dir(tmp_path / "result2")
    runlog = (run / "flagperf_run.log").read_text()
    assert f"deploy: host {a}: " in runlog and "(created, marked .flagperf-tree)" in runlog
    reused = rf"deploy: host {re.escape(b)}: 0 of \d+ file\(s\) differed, 0 bytes sent to {re.escape(str(empty))}\n"
    assert re.search(reused, runlog), runlog            # the adopted directory is reused as it is
    for i, host in enumerate((a, b)):                   # every host wrote its sys_info.log; it came back
        facts = _facts(run / "sleeper-pytorch-own-2x1" / "round1" / f"{host}_noderank{i}" / "sys_info.log")
        assert facts["kernel"] == platform.release() and facts["accelerator_plugin"] == "none"
