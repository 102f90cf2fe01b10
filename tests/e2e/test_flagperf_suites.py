"""FlagPerf's inference and operation suites end to end: their trees in FlagPerf's layout (tests/e2e/fixtures/inference
and operation, written for these tests) run by ``flagperf run --config <their host.yaml>`` on localhost, RUNTIME
bare: FlagPerf's scripts with FlagPerf's arguments, their preparation, and their results read as metrics."""
import json
import shutil
from pathlib import Path

from .conftest import only_run_dir, run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def host_yaml(tmp_path, suite, cases, port, extra=""):
    """A FlagPerf host.yaml of ``suite`` as FlagPerf ships it (string ports, its own keys), for this machine."""
    tree = tmp_path / "FlagPerf" / suite
    shutil.copytree(FIXTURES / suite, tree)
    path = tmp_path / "host.yaml"
    lines = [f'FLAGPERF_PATH: "{tree}"', f'FLAGPERF_LOG_PATH: "{tmp_path / "result"}"', 'VENDOR: "cpu"',
             'FLAGPERF_LOG_LEVEL: "INFO"', 'HOSTS: ["localhost"]', 'SSH_PORT: "22"', 'HOSTS_PORTS: ["2222"]',
             f'MASTER_PORT: "{port}"', 'SHM_SIZE: "32G"', 'ACCE_CONTAINER_OPT: ""', 'PIP_SOURCE: ""',
             "CLEAR_CACHES: False", 'ACCE_VISIBLE_DEVICE_ENV_NAME: "CUDA_VISIBLE_DEVICES"', "RUNTIME: bare",
             "MONITOR_INTERVAL: 0.5", extra, "CASES:"]
    lines += [f'    "{key}": "{value}"' for key, value in cases.items()]
    path.write_text("\n".join(lines) + "\n")
    return path, tree


def cases_of(run):
    return {c["name"]: c for c in json.loads((run / "summary.json").read_text())["cases"]}


def test_inference_case_runs_run_inference_and_its_finish_info_is_the_result(tmp_path):
    data = tmp_path / "val"
    data.mkdir()
    (data / "samples.txt").write_text("0.1 0.2 0\n0.9 0.8 1\n0.2 0.1 0\n1.0 0.9 1\n0.8 1.0 0\n")
    conf, tree = host_yaml(tmp_path, "inference", {"tinyclassifier:pytorch_2.1": data}, 30262,
                           extra="LOG_CALL_INFORMATION: True")
    code, out, err = run_cli(["run", "--config", conf], timeout=240)
    assert code == 0, out + err
    assert "LOG_CALL_INFORMATION: accepted and ignored" in err
    run = only_run_dir(tmp_path / "result")
    case = cases_of(run)["tinyclassifier-pytorch_2.1-cpu-1x1"]
    assert case["status"] == "passed", case
    (r,) = case["rounds"]
    assert (case["metric"], case["unit"]) == ("p_validation_core", "qps") and r["value"] > 0
    m = r["metrics"]
    assert m["batchsize"]["value"] == 8          # the vendor config of configs/<case>/vendor_config/ counted
    assert m["flops"]["unit"] == "FLOPS" and m["flops"]["value"] == 8 * r["value"]
    assert m["e2e_time"]["unit"] == "s" and m["val_average_acc"]["value"] == 0.8
    assert m["p_validation_whole"]["unit"] == "qps"
    node = run / r["dir"] / "localhost_noderank0"
    launch = json.loads((node / "launch.json").read_text())
    assert launch["cwd"] == str(tree)
    i = launch["argv"].index(f"{tree}/run_inference.py")
    assert launch["argv"][i:] == [f"{tree}/run_inference.py", "--perf_dir", str(tree), "--loglevel", "INFO",
                                  "--vendor", "cpu", "--case", "tinyclassifier", "--data_dir", str(data),
                                  "--framework", "pytorch_2.1", "--log_dir", str(node)]
    # FlagPerf's own log file lands in the node directory; the preparation installed the case's requirements
    assert "| Finish Info |" in (node / "container.out.log").read_text()
    prepare = (node / "env_prepare.log").read_text()
    assert "-m pip install -r " in prepare and "tinyclassifier/pytorch/requirements.txt" in prepare


def test_operation_cases_run_main_py_and_every_result_line_is_a_metric(tmp_path):
    conf, tree = host_yaml(tmp_path, "operation", {"tinyadd:FP32:0.0001:nativetorch:local": "ngctorch2403",
                                                   "tinyadd:FP32:0.0001:broken:local": "ngctorch2403"}, 30264,
                           extra="NPROC_PER_NODE: 1\nDEVICE: 0")
    code, out, err = run_cli(["run", "--config", conf], timeout=240)
    assert code == 1, out + err                 # the broken implementation fails its case
    assert "DEVICE: accepted and ignored" in err and "NPROC_PER_NODE: accepted and ignored" in err
    run = only_run_dir(tmp_path / "result")
    cases = cases_of(run)
    ok = cases["tinyadd-FP32-0.0001-nativetorch-local-1x1"]
    assert ok["status"] == "passed", ok
    (r,) = ok["rounds"]
    assert (ok["metric"], ok["unit"]) == ("FLOPS utilization cputime", "%") and r["value"] > 0
    units = {name: m["unit"] for name, m in r["metrics"].items()}
    assert units == {"FLOPS utilization cputime": "%", "FLOPS utilization kerneltime": "%", "cputime": "us",
                     "cputime throughput": "op/s", "cputime TFLOPS": "TFLOPS", "kerneltime": "us",
                     "kerneltime throughput": "op/s", "kerneltime TFLOPS": "TFLOPS", "correctness": "bool",
                     "First time latency no warmup": "us", "First time latency warmup": "us"}
    assert r["metrics"]["correctness"]["value"] == 1
    node = run / r["dir"] / "localhost_noderank0"
    launch = json.loads((node / "launch.json").read_text())
    assert launch["cwd"] == str(tree / "benchmarks" / "tinyadd")
    assert launch["argv"][-7:] == ["main.py", "--vendor=cpu", "--case_name=tinyadd", "--spectflops=0.0001",
                                   "--dataformat=FP32", "--oplib=nativetorch", "--chip=local"]
    # FlagPerf's preparation: pip install of the chip's requirements.txt, then its env.sh in the script's shell
    assert "tinyadd/cpu/local/requirements.txt" in (node / "env_prepare.log").read_text()
    assert (node / "source_env.log.txt").read_text() == "tinyadd environment set\n"
    bad = cases["tinyadd-FP32-0.0001-broken-local-1x1"]
    assert bad["status"] == "failed"
    assert "correctness against the reference: False" in json.dumps(bad)


def test_operation_case_on_two_ssh_hosts_gets_the_tree_deployed(tmp_path, ssh_bed):
    """The converted form (FLAGPERF_SUITE, CASE_PATHS) with a cluster of two real SSH hosts: FlagPerf's operation
    tree goes whole to each host's <FLAGPERF_PATH>/cases/, and main.py runs there on every host."""
    tree = tmp_path / "FlagPerf" / "operation"
    shutil.copytree(FIXTURES / "operation", tree)
    ssh_bed.write_cluster_yaml(tmp_path / "cluster.yaml", master_port=30266)
    conf = tmp_path / "test_conf.yaml"
    conf.write_text(f"VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: {tmp_path / 'result'}\nMONITOR_INTERVAL: 0.5\n"
                    f"FLAGPERF_SUITE: operation\nCASE_PATHS: [{tree / 'benchmarks'}]\nCLUSTER: cluster.yaml\n"
                    f'CASES:\n  "tinyadd:FP16:0.0001:nativetorch:local": ngctorch2403\n')
    code, out, err = run_cli(["run", "--config", conf], timeout=300)
    assert code == 0, out + err
    run = only_run_dir(tmp_path / "result")
    case = cases_of(run)["tinyadd-FP16-0.0001-nativetorch-local-2x1"]
    assert case["status"] == "passed", case
    (r,) = case["rounds"]
    assert {"FLOPS utilization cputime", "FLOPS utilization cputime@node1", "correctness@node1"} <= set(r["metrics"])
    for rank, host in enumerate(ssh_bed.hosts):
        fp = Path(host["flagperf_path"])
        (deployed,) = [p for p in (fp / "cases").iterdir() if p.name.startswith("operation-")]
        assert (deployed / "benchmarks" / "tinyadd" / "main.py").read_bytes() == \
            (tree / "benchmarks" / "tinyadd" / "main.py").read_bytes()
        assert (deployed / "benchmarks" / "drivers" / "calculate.py").is_file()
        node = run / r["dir"] / f"{ssh_bed.addresses[rank]}_noderank{rank}"
        launch = json.loads((node / "launch.json").read_text())
        assert launch["cwd"] == str(deployed / "benchmarks" / "tinyadd")
        assert (node / "source_env.log.txt").read_text() == "tinyadd environment set\n"
