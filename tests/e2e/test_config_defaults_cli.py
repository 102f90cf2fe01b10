"""End-to-end through the CLI: a flagperf YAML without RUNTIME runs bare (FlagPerf's own files keep docker), `flagperf
check` warns when a CPU host has fewer cores than the ranks it gets, and YAML indentation slips get one line that
names the file and line with a hint."""

import json
import os

import yaml

from .conftest import REPO, only_run_dir, run_cli


def test_a_flagperf_yaml_without_runtime_runs_bare(tmp_path):
    conf = tmp_path / "test_conf.yaml"
    conf.write_text(f"VENDOR: cpu\nFLAGPERF_LOG_PATH: {tmp_path / 'result'}\n"
                    f"CLUSTER: {REPO / 'configs' / 'cluster.yaml'}\nCASES:\n  \"gemm:pytorch:noruntime:1:1:1\": null\n")
    code, out, err = run_cli(["run", "--config", conf, "--dry-run"])
    assert code == 0 and "runtime: bare" in out and "docker run" not in out, out + err
    code, out, err = run_cli(["run", "--config", conf], timeout=180)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    assert yaml.safe_load((run / "effective_config.yaml").read_text())["RUNTIME"] == "bare"
    summary = json.loads((run / "summary.json").read_text())
    assert [c["status"] for c in summary["cases"]] == ["passed"]


def test_flagperf_host_yaml_without_runtime_keeps_docker(tmp_path):
    host = tmp_path / "host.yaml"
    host.write_text(f"HOSTS: [localhost]\nVENDOR: cpu\nFLAGPERF_LOG_PATH: {tmp_path / 'result'}\n"
                    f"CASES:\n  \"gemm:pytorch:noruntime:1:1:1\": null\n")
    code, out, err = run_cli(["run", "--config", host, "--dry-run"])
    assert code == 0 and "runtime: docker" in out and "docker run" in out, out + err


def test_check_warns_for_a_cpu_host_with_fewer_cores_than_ranks(tmp_path, ssh_bed):
    many = (os.cpu_count() or 1) + 1          # the bed's hosts are this machine
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    conf = tmp_path / "test_conf.yaml"
    conf.write_text(f"VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: {tmp_path / 'result'}\nCLUSTER: cluster.yaml\n"
                    f"CASES:\n  \"gemm:pytorch:ssh:1:{many}:1\": null\n")
    code, out, err = run_cli(["deploy", "--config", conf])
    assert code == 0, out + err
    code, out, err = run_cli(["check", "--config", conf])
    assert code == 0, out + err                # a warning, never a failed check
    host = ssh_bed.addresses[0]
    lines = [line for line in err.splitlines() if "CPU core(s)" in line]
    assert lines == [f"flagperf: warning: host {host}: nproc {many} is above its {os.cpu_count()} CPU core(s): the "
                     f"ranks share cores, so each rank's figure drops and the case's figures are not what the host "
                     f"delivers; use nproc auto or at most {os.cpu_count()}"], err


def _one_line_error(tmp_path, config, expected_file, line, *needles):
    code, out, err = run_cli(["run", "--config", config, "--dry-run"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, out + err
    where = f"{expected_file}:{line}: " if line else f"{expected_file}: "
    assert err.startswith(f"flagperf: config error: {where}"), err
    for needle in needles:
        assert needle in err, err


def test_indentation_slips_name_file_line_and_hint(tmp_path):
    case = '"gemm:pytorch:local:1:1:1": null'
    # a case key at the top level instead of under CASES (the YAML itself parses)
    t1 = tmp_path / "top.yaml"
    t1.write_text(f"VENDOR: cpu\nRUNTIME: bare\nCASES:\n{case}\n")
    _one_line_error(tmp_path, t1, t1, 4, "shape of a case key", "hint: indent it under CASES, with spaces")
    # a missing ':' after a case key
    t2 = tmp_path / "colon.yaml"
    t2.write_text(f"VENDOR: cpu\nRUNTIME: bare\nCASES:\n  {case}\n  \"devmem:pytorch:local:1:1:1\" null\n")
    _one_line_error(tmp_path, t2, t2, 5, "YAML syntax error", "hint: a key needs ': ' after it")
    # the cluster config's indentation
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("HOSTS:\n  - localhost\n MASTER_PORT: 29501\n")
    t3 = tmp_path / "ok.yaml"
    t3.write_text(f"VENDOR: cpu\nRUNTIME: bare\nCLUSTER: cluster.yaml\nCASES:\n  {case}\n")
    _one_line_error(tmp_path, t3, cluster, 3, "YAML syntax error", "hint: check the indentation of that line")
    # FlagPerf's Python config renamed .yaml
    t4 = tmp_path / "renamed.yaml"
    t4.write_text('VENDOR = "cpu"\nCASES = {"gemm:pytorch:local:1:1:1": None}\n')
    _one_line_error(tmp_path, t4, t4.resolve(), None, "this is Python", ".py name")
