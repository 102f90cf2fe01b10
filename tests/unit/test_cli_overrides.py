"""flagperf run's command-line overrides (--case, --repeat, --hosts, --log-path, --master-port) through the real
CLI and config.apply_overrides; flagperf init's starter configs; a busy MASTER_PORT moved on a single-host run."""
import json
import socket
import subprocess
import sys

import pytest
import yaml

from flagperf.checks import HostCheck, interpret_probe, moved_port
from flagperf.config import Overrides, apply_overrides
from flagperf.errors import ConfigError
from flagperf.pipeline import Run
from flagperf.plan import build_plan

from tests.unit.fakebackend import FakeBackend, make_config

GEMM = "gemm:pytorch:local:1:1:1"
LLM = "llm:pytorch:local:1:1:2"
EACH = "gemm:pytorch:local:each:1:1"


def dry_run(run_cli, tmp_path, *args):
    cfg = make_config(tmp_path, [GEMM, LLM])       # writes test.yaml and cluster.yaml
    return run_cli("run", "--config", cfg.test.path, "--dry-run", *args, cwd=tmp_path)


# ------------------------------------------------------------------------------------------------ through the CLI
def test_overrides_change_the_plan(run_cli, tmp_path):
    code, out, err = dry_run(run_cli, tmp_path, "--case", "gemm", "--repeat", "3", "--master-port", "30123",
                             "--log-path", "elsewhere")
    assert code == 0, err
    assert "gemm-pytorch-local-1x1" in out and "llm-pytorch" not in out
    assert "3 round(s)" in out and "round 3:" in out
    assert "MASTER_PORT=30123" in out and "MASTER_PORT=29650" not in out
    assert f"run directory: {tmp_path / 'elsewhere'}/run" in out


def test_case_patterns_match_model_or_whole_key_and_repeat(run_cli, tmp_path):
    code, out, err = dry_run(run_cli, tmp_path, "--case", "*:1:2", "--case", "nothing*")
    assert code == 2 and out == ""
    assert err.strip() == ("flagperf: --case nothing*: no case's model or key matches; expected one of: "
                           f"{GEMM}, {LLM}")
    code, out, err = dry_run(run_cli, tmp_path, "--case", "*:1:2")
    assert code == 0, err
    assert "llm-pytorch-local-1x1" in out and "gemm-pytorch" not in out


@pytest.mark.parametrize("args, line", [
    (("--repeat", "0"), "flagperf: --repeat: expected rounds from 1 to 1000, got 0"),
    (("--repeat", "two"), "flagperf: --repeat: expected a number of rounds >= 1, got 'two'"),
    (("--master-port", "70000"), "flagperf: --master-port: expected a TCP port 1-65535, got 70000"),
    (("--master-port", "-1"), "flagperf: --master-port: expected a TCP port 1-65535, got '-1'"),
    (("--hosts", "a,,b"), "flagperf: --hosts: expected comma-separated host names or addresses, got 'a,,b'"),
    (("--hosts", "a b"), "flagperf: --hosts: expected comma-separated host names or addresses (localhost "
                         "allowed), got 'a b'"),
])
def test_bad_values_are_one_line_naming_the_option(run_cli, tmp_path, args, line):
    code, out, err = dry_run(run_cli, tmp_path, *args)
    assert code == 2 and out == ""
    assert err.strip() == line and "Traceback" not in err


def test_hosts_are_rechecked_against_nnodes(run_cli, tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:2:1:1"], hosts=("localhost", "localhost"))
    code, out, err = run_cli("run", "--config", cfg.test.path, "--dry-run", "--hosts", "localhost", cwd=tmp_path)
    assert code == 2, out
    assert "nnodes 2 exceeds the 1 host(s) of --hosts localhost" in err and len(err.strip().splitlines()) == 1


def test_effective_config_records_the_overrides(tmp_path):
    cfg = make_config(tmp_path, [GEMM, LLM])
    new = apply_overrides(cfg, Overrides(cases=("llm",), repeat=4, hosts=("localhost",), log_path=str(tmp_path / "L"),
                                         master_port=30001))
    assert cfg.test.cases[1].repeat == 2 and len(cfg.test.cases) == 2      # the loaded Config is untouched
    (case,) = new.test.cases
    assert case.model == "llm" and case.repeat == 4 and case.key == LLM
    d = new.to_dict()
    assert d["FLAGPERF_LOG_PATH"] == str(tmp_path / "L") and d["cluster"]["MASTER_PORT"] == 30001
    assert list(d["CASES"]) == [LLM]
    assert d["COMMAND_LINE"] == {"--case": ["llm"], "--repeat": 4, "--hosts": "localhost",
                                 "--log-path": str(tmp_path / "L"), "--master-port": 30001}
    assert "COMMAND_LINE" not in cfg.to_dict()
    # a run writes it
    plan = build_plan(new, "run20250101000000")
    Run(plan, say=lambda m: None, backend=FakeBackend()).execute()
    written = yaml.safe_load((plan.run_dir / "effective_config.yaml").read_text())
    assert written["COMMAND_LINE"]["--repeat"] == 4 and written["cluster"]["MASTER_PORT"] == 30001


def test_hosts_override_each_case_and_new_hosts(tmp_path):
    cfg = make_config(tmp_path, [EACH])
    assert cfg.test.cases[0].nnodes == 1
    new = apply_overrides(cfg, Overrides(hosts=("localhost", "node2", "node3")))
    assert [h.address for h in new.cluster.hosts] == ["localhost", "node2", "node3"]
    assert new.test.cases[0].nnodes == 3
    assert all(h.flagperf_path == cfg.test.flagperf_path for h in new.cluster.hosts)
    with pytest.raises(ConfigError, match="past 65535; lower --master-port"):
        apply_overrides(cfg, Overrides(hosts=("localhost", "a", "b"), master_port=65534))


def test_pairs_need_two_hosts_after_hosts_override(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:pairs:1:1"], hosts=("a", "b"))
    with pytest.raises(ConfigError, match=r"nnodes pairs needs at least 2 hosts, --hosts a gives 1"):
        apply_overrides(cfg, Overrides(hosts=("a",)))
    with pytest.raises(ConfigError, match="'localhost' is listed beside SSH hosts"):
        apply_overrides(cfg, Overrides(hosts=("localhost", "b")))


# ------------------------------------------------------------------------------------------------------ init
def test_init_writes_configs_that_pass_the_dry_run(run_cli, tmp_path):
    out_dir = tmp_path / "conf"
    code, out, err = run_cli("init", "--out", out_dir, cwd=tmp_path)
    assert code == 0, err
    test_text = (out_dir / "test_conf.yaml").read_text()
    assert test_text.startswith("#") and "RUNTIME: bare" in test_text and "CLUSTER: cluster.yaml" in test_text
    assert "- localhost" in (out_dir / "cluster.yaml").read_text()
    code, out, err = run_cli("run", "--config", out_dir / "test_conf.yaml", "--dry-run", cwd=tmp_path)
    assert code == 0, err
    assert "hosts: localhost" in out and "case gemm-pytorch-quick-1x" in out
    assert f"run directory: {out_dir / 'result'}/run" in out
    # never overwritten without --force
    (out_dir / "cluster.yaml").write_text("HOSTS: [localhost]\nMASTER_PORT: 29999\n")
    code, out, err = run_cli("init", "--out", out_dir, cwd=tmp_path)
    assert code == 2 and "already exist" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert "29999" in (out_dir / "cluster.yaml").read_text()
    code, out, err = run_cli("init", "--out", out_dir, "--force", cwd=tmp_path)
    assert code == 0, err
    assert "29999" not in (out_dir / "cluster.yaml").read_text()


# ------------------------------------------------------------------------------------------ a busy MASTER_PORT
def probe_answer(port):
    return json.dumps({
        "python": [3, 11, 7], "cpu_count": 2, "torch": "2.4.0", "torch_error": None, "gpus": 0,
        "accelerators": {"source": "none", "count": 0, "error": None},
        "paths": {"/fp": {"exists": True}, "/fp/launcher": {"exists": True},
                  "/r": {"exists": True, "writable": True, "free_bytes": 10 << 30}},
        "master_port": port})


def judge(port, move):
    from types import SimpleNamespace
    cpu = SimpleNamespace(name="cpu", device="cpu", torch_device="cpu", torch_plugin=None, gpu_monitor="none")
    return interpret_probe("localhost", "python3", 0, probe_answer(port), "", fp="/fp", launcher_dir="/fp/launcher",
                           result_root="/r", need=0, vendor=cpu, runtime="bare", move_busy_port=move)


def test_busy_port_is_moved_only_on_a_single_host_run():
    busy = {"port": 29501, "free": False, "error": "OSError: [Errno 98] Address already in use", "free_port": 29502}
    c = judge(busy, move=False)
    assert c.outcome == "port_in_use" and "MASTER_PORT 29501" in c.detail
    c = judge(busy, move=True)
    assert c.ok and moved_port(c) == 29502
    assert "MASTER_PORT 29501 is taken on localhost" in c.detail and "uses the free port 29502" in c.detail
    c = judge({**busy, "free_port": None}, move=True)       # no free port found: the failure as before
    assert c.outcome == "port_in_use"
    assert moved_port(judge({"port": 29501, "free": True, "error": None}, move=True)) is None


def test_the_probe_names_a_free_port_after_a_busy_one(repo_root):
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen(1)
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, str(repo_root / "launcher" / "probe.py"), "--accel", "none", "--port",
                              str(port)], capture_output=True, text=True, timeout=60, check=True).stdout
    info = json.loads(out)["master_port"]
    assert info["port"] == port and info["free"] is False
    assert isinstance(info["free_port"], int) and port < info["free_port"] <= port + 100


class BusyPortBackend(FakeBackend):
    def probe(self, hosts, need):
        out = super().probe(hosts, need)
        info = {**out[0].info, "master_port": {"port": 29650, "free": False, "error": "in use", "free_port": 29777}}
        return [HostCheck(out[0].host, "ok", "fake host; MASTER_PORT moved", "", info)] + out[1:]

    def spawn_launcher(self, node):
        self.ports = getattr(self, "ports", []) + [node.master_port]
        return super().spawn_launcher(node)


def test_a_run_takes_the_moved_port_with_a_note(tmp_path):
    cfg = make_config(tmp_path, [GEMM])
    plan = build_plan(cfg, "run20250101000000")
    backend = BusyPortBackend()
    said = []
    code = Run(plan, say=said.append, backend=backend).execute()
    assert code == 0, said
    assert any("note: MASTER_PORT 29650 is taken on localhost" in m and "29777" in m for m in said)
    written = yaml.safe_load((plan.run_dir / "effective_config.yaml").read_text())
    assert written["cluster"]["MASTER_PORT"] == 29777
    assert backend.ports == [29777]


# ---------------------------------------------------------------------------------------- smaller config checks
def test_nproc_above_the_cores_of_a_cpu_host_is_a_warning(tmp_path):
    import os
    many = (os.cpu_count() or 1) + 1
    cfg = make_config(tmp_path, [f"gemm:pytorch:local:1:{many}:1"])
    assert any(f"nproc {many} is above the {os.cpu_count()} CPU core(s)" in w for w in cfg.warnings), cfg.warnings
    cfg = make_config(tmp_path / "ok", ["gemm:pytorch:local:1:1:1"])
    assert not any("CPU core" in w for w in cfg.warnings)


def test_nproc_warning_is_printed_by_the_cli(run_cli, tmp_path, write):
    import os
    many = (os.cpu_count() or 1) + 1
    path = write(tmp_path, "t.yaml", f'VENDOR: cpu\nRUNTIME: bare\nCASES:\n  "gemm:pytorch:local:1:{many}:1": null\n')
    code, out, err = run_cli("run", "--config", path, "--dry-run", cwd=tmp_path)
    assert code == 0 and "flagperf: warning:" in err and f"nproc {many} is above" in err


def test_flagperf_python_config_named_yaml_is_said_so(run_cli, tmp_path, write):
    for name, text in (("a.yaml", 'VENDOR = "nvidia"\nRUNTIME = "bare"\n'),
                       ("b.yaml", '# FlagPerf test config\nVENDOR = "nvidia"\nCASES = {\n'
                                  '    "m:pytorch_2.0:A100:1:8:1": "/data"\n}\n')):
        code, out, err = run_cli("run", "--config", write(tmp_path, name, text), "--dry-run", cwd=tmp_path)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"{tmp_path / name}: this is Python (assignments such as 'VENDOR = ...'), not YAML" in err
        assert ".py name" in err
    # a cluster config too
    write(tmp_path, "c.yaml", 'HOSTS = ["10.0.0.1"]\nMASTER_PORT = "29501"\n')
    path = write(tmp_path, "t.yaml", 'VENDOR: cpu\nCLUSTER: c.yaml\nCASES:\n  "gemm:pytorch:local:1:1:1": null\n')
    code, out, err = run_cli("run", "--config", path, "--dry-run", cwd=tmp_path)
    assert code == 2 and f"{tmp_path / 'c.yaml'}: this is Python" in err


@pytest.mark.parametrize("text, line, hint", [
    ('VENDOR: cpu\nCASES:\n  "gemm:pytorch:local:1:1:1": null\n   "x": 1\n', 4, "check the indentation"),
    ('VENDOR: cpu\n CASES:\n  a: 1\n', 2, "check the indentation"),
    ('VENDOR: cpu\nCASES:\n\t"a": 1\n', 3, "not tabs"),
])
def test_yaml_indentation_errors_get_a_hint(run_cli, tmp_path, write, text, line, hint):
    path = write(tmp_path, "t.yaml", "")
    path.write_text(text)
    code, out, err = run_cli("run", "--config", path, "--dry-run", cwd=tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path}:{line}: YAML syntax error: " in err and "; hint: " in err and hint in err
