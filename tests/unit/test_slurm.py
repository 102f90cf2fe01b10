"""SCHEDULER slurm, the parts that need no cluster: its cluster keys (through the real CLI for the errors), the
sbatch line and the batch script (checked by bash itself), the reading of sbatch/squeue/sinfo/scontrol output,
the placeholders the driver and launcher/slurm_node.py fill in alike, and slurm_node.py as a real process.
(Against a real Slurm cluster: tests/e2e/test_slurm.py.)"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flagperf.backends.slurm import _replace_strings
from flagperf.options.slurm import (PLACEHOLDER_PORT, PORT_BASE, PORT_SPAN, SlurmOptions, derived_port,
                                            parse_time)
from flagperf.backends.slurm_script import (COMMENT_DONE, COMMENT_LAUNCHERS, JobInfo, batch_script, gres_gpus,
                                            parse_partitions, parse_sbatch, parse_sinfo_nodes, parse_squeue,
                                            parse_steps, sbatch_argv, scheduler_end, specs_document, substitute,
                                            time_limit_seconds, usable_state)
from flagperf.config import load_config
from flagperf.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
PREFIX = "flagperf: config error: "


def _wrapper():
    spec = importlib.util.spec_from_file_location("slurm_node", REPO / "launcher" / "slurm_node.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _configs(tmp_path, cluster: str, cases=('"gemm:pytorch:x:3:2:1": null',), runtime="bare"):
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "test_conf.yaml").write_text(
        f"VENDOR: cpu\nRUNTIME: {runtime}\nFLAGPERF_LOG_PATH: result\nCLUSTER: cluster.yaml\nCASES:\n"
        + "".join(f"  {c}\n" for c in cases))
    return tmp_path / "test_conf.yaml"


# -- configuration -----------------------------------------------------------------------------------------------

def test_a_slurm_cluster_needs_no_hosts_and_plans_placeholder_nodes(tmp_path):
    (tmp_path / "slurm.conf").write_text("# a cluster's\n")
    conf = _configs(tmp_path, "SCHEDULER: slurm\nSLURM_PARTITION: gpu\nSLURM_ACCOUNT: proj1\nSLURM_QOS: high\n"
                              "SLURM_TIME: '00:30:00'\nSLURM_GPUS_PER_NODE: 8\nSLURM_EXCLUSIVE: false\n"
                              "SLURM_ARGS: [--constraint=h100, --reservation=bench]\nSLURM_CONF: slurm.conf\n"
                              "SLURM_PENDING_TIMEOUT: 90\nSLURM_SHARED_FS: false\nPYTHON: /opt/py/bin/python3\n",
                    cases=('"gemm:pytorch:x:3:2:1": null', '"gemm:pytorch:y:each:2:1": null'))
    cfg = load_config(conf)
    c = cfg.cluster
    o = c.options
    assert c.scheduler == "slurm" and isinstance(o, SlurmOptions)
    assert (o.partition, o.account, o.qos, o.time, o.gpus_per_node, o.exclusive, o.args, o.conf,
            o.pending_timeout, o.shared_fs, o.python) == \
        ("gpu", "proj1", "high", "00:30:00", 8, False, ("--constraint=h100", "--reservation=bench"),
         str(tmp_path / "slurm.conf"), 90.0, False, "/opt/py/bin/python3")
    assert [h.address for h in c.hosts] == ["{slurm-node0}", "{slurm-node1}", "{slurm-node2}"]
    assert all(h.python == "/opt/py/bin/python3" and not h.is_local for h in c.hosts)
    assert o.derived_port and c.master_port == PLACEHOLDER_PORT     # MASTER_PORT unset: from the job id
    eff = cfg.to_dict()["cluster"]
    assert eff["SCHEDULER"] == "slurm" and eff["SLURM_PARTITION"] == "gpu" and eff["SLURM_SHARED_FS"] is False
    plan = build_plan(cfg, "run1")
    node = plan.cases[0].rounds[0].nodes[1]
    assert node.label == "{slurm-node1}_noderank1" and node.master_addr == "{slurm-node0}"
    # node-local results: the nodes write under FLAGPERF_PATH/result, like SSH hosts
    assert node.node_dir.startswith(f"{cfg.test.flagperf_path}/result/run1/")


def test_shared_results_put_the_node_directories_in_the_run_directory(tmp_path):
    conf = _configs(tmp_path, "SCHEDULER: slurm\nMASTER_PORT: 30499\n")
    cfg = load_config(conf)
    assert not cfg.cluster.options.derived_port and cfg.cluster.master_port == 30499
    assert cfg.cluster.options.sbatch_time(cfg.test.case_timeout) == "125"     # CASE_TIMEOUT 2 h + 5 min
    node = build_plan(cfg, "run1").cases[0].rounds[0].nodes[0]
    assert node.node_dir == str(node.local_dir)


@pytest.mark.parametrize("value, seconds", [(30, 1800), ("30", 1800), ("5:30", 330), ("01:00:00", 3600),
                                            ("2-00:00:00", 172800), ("1-12", 129600), ("0:0:0", None),
                                            ("1:60", None), ("ten", None), (True, None), (-1, None)])
def test_sbatch_time_values(value, seconds):
    assert parse_time(value) == seconds


def test_bad_slurm_keys_are_one_line_each_naming_file_line_key(tmp_path, run_cli):
    conf = _configs(tmp_path, "SCHEDULER: slurm\nSLURM_TIME: soon\nSLURM_ARGS: ['--nodes=4', '-p', 7]\n"
                              "SLURM_GPUS_PER_NODE: 0\nSLURM_EXCLUSIVE: yes please\nSLURM_CONF: missing.conf\n"
                              "SLURM_PENDING_TIMEOUT: 0\nSLURM_PARTITON: gpu\nHOSTS: [a, b]\n"
                              "SLURM_PARTITION: 'a b'\n", runtime="docker")
    rc, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert rc == 2 and out == "" and "Traceback" not in err, err
    lines = err.splitlines()
    cluster = tmp_path / "cluster.yaml"
    expected = [
        (2, "SLURM_TIME: expected a time limit per round as sbatch --time takes it"),
        (3, "SLURM_ARGS[0]: '--nodes=4': flagperf sets --nodes itself (from the case's nnodes); remove it"),
        (3, "SLURM_ARGS[1]: '-p': flagperf sets -p itself (from SLURM_PARTITION); remove it"),
        (3, "SLURM_ARGS[2]: expected a non-empty string (one sbatch argument), got 7"),
        (4, "SLURM_GPUS_PER_NODE: expected a number of GPUs per node from 1 to 1024, got 0"),
        (5, "SLURM_EXCLUSIVE: expected true or false, got str 'yes please'"),
        (6, f"SLURM_CONF: expected a slurm.conf file, {tmp_path / 'missing.conf'} does not exist"),
        (7, "SLURM_PENDING_TIMEOUT: expected a number of seconds > 0"),
        (8, "SLURM_PARTITON: unknown key; did you mean SLURM_PARTITION?"),
        (9, "HOSTS: not used with SCHEDULER slurm (Slurm picks the nodes of every job)"),
        (10, "SLURM_PARTITION: expected a Slurm name (letters, digits, _ . + -), got 'a b'"),
    ]
    for line, text in expected:
        assert any(x.startswith(f"{PREFIX}{cluster}:{line}: {text}") for x in lines), (line, text, err)
    assert any(x.startswith(f"{PREFIX}{tmp_path / 'test_conf.yaml'}:2: RUNTIME: expected one of bare, charliecloud, "
                            f"pyxis (the runtimes of SCHEDULER 'slurm'), got 'docker': Docker's containers are "
                            f"started by dockerd")
               for x in lines), err
    assert len(lines) == len(expected) + 1, err


def test_container_keys(tmp_path):
    from flagperf.errors import ConfigError
    conf = _configs(tmp_path, "SCHEDULER: slurm\n", runtime="charliecloud")
    with pytest.raises(ConfigError) as exc:
        load_config(conf)
    assert exc.value.problems == [f"{conf}:2: RUNTIME: charliecloud runs the node launcher in a container image: "
                                  f"set SLURM_CONTAINER_IMAGE in the cluster config (an image directory, e.g. from "
                                  f"ch-convert)"]
    conf = _configs(tmp_path, "SCHEDULER: slurm\nSLURM_CONTAINER_IMAGE: ./img\n"
                              "SLURM_CONTAINER_MOUNTS: ['rel:/x', '/a:/b,c', '/ok']\nSLURM_CONTAINER_PYTHON: 'py 3'\n",
                    runtime="charliecloud")
    with pytest.raises(ConfigError) as exc:
        load_config(conf)
    cluster = tmp_path / "cluster.yaml"
    assert exc.value.problems == [
        f"{cluster}:2: SLURM_CONTAINER_IMAGE: expected an image directory or file, {tmp_path / 'img'} does not exist",
        f"{cluster}:3: SLURM_CONTAINER_MOUNTS[0]: expected 'SOURCE[:TARGET]' with absolute paths and no ',', got "
        f"'rel:/x'",
        f"{cluster}:3: SLURM_CONTAINER_MOUNTS[1]: expected 'SOURCE[:TARGET]' with absolute paths and no ',', got "
        f"'/a:/b,c'",
        f"{cluster}:4: SLURM_CONTAINER_PYTHON: expected the interpreter inside the image (a name or a path), got "
        f"'py 3'"]
    (tmp_path / "img").mkdir()
    conf = _configs(tmp_path, "SCHEDULER: slurm\nSLURM_CONTAINER_IMAGE: ./img\n"
                              "SLURM_CONTAINER_MOUNTS: ['/datasets:/data', /scratch]\n", runtime="charliecloud")
    o = load_config(conf).cluster.options
    assert (o.container_image, o.container_mounts, o.container_python) == \
        (str(tmp_path / "img"), (("/datasets", "/data"), ("/scratch", "/scratch")), "python3")
    conf = _configs(tmp_path, "SCHEDULER: slurm\nSLURM_CONTAINER_IMAGE: 'docker://nvcr.io#nvidia/pytorch:24.05-py3'\n",
                    runtime="pyxis")
    assert load_config(conf).cluster.options.container_image == "docker://nvcr.io#nvidia/pytorch:24.05-py3"


def test_slurm_keys_are_unknown_to_the_ssh_scheduler(tmp_path, run_cli):
    conf = _configs(tmp_path, "HOSTS: [localhost]\nSLURM_PARTITION: gpu\n", cases=('"gemm:pytorch:x:1:1:1": null',))
    rc, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert rc == 2 and err.strip() == f"{PREFIX}{tmp_path / 'cluster.yaml'}:2: SLURM_PARTITION: unknown key; " \
                                      f"known keys: SCHEDULER, HOSTS, SSH_PORT, SSH_USER, SSH_KEY, KNOWN_HOSTS, " \
                                      f"MASTER_PORT, PYTHON, HOSTS_PORTS", err


# -- sbatch, the batch script -------------------------------------------------------------------------------------

def test_sbatch_line_has_every_option_and_the_extra_arguments_last():
    opts = SlurmOptions(partition="gpu", account="proj", qos="high", gpus_per_node=8, exclusive=True,
                        args=("--constraint=h100",))
    argv = sbatch_argv(opts, nnodes=2, job_name="flagperf-r-c-r1", time="30", output="/r/slurm/job-%j.out",
                       chdir="/fp", script="/r/slurm/job.sh", nodelist="n7")
    assert argv == ["sbatch", "--parsable", "--job-name=flagperf-r-c-r1", "--nodes=2", "--ntasks-per-node=1",
                    "--time=30", "--output=/r/slurm/job-%j.out", "--chdir=/fp", "--partition=gpu", "--account=proj",
                    "--qos=high", "--gpus-per-node=8", "--exclusive", "--nodelist=n7", "--constraint=h100",
                    "/r/slurm/job.sh"]
    bare = sbatch_argv(SlurmOptions(exclusive=False), nnodes=1, job_name="j", time="5", output="o", chdir="/",
                       script="s")
    assert bare == ["sbatch", "--parsable", "--job-name=j", "--nodes=1", "--ntasks-per-node=1", "--time=5",
                    "--output=o", "--chdir=/", "s"]


@pytest.mark.parametrize("inline", [False, True])
def test_batch_script_is_valid_bash_and_quotes_odd_paths_once(tmp_path, inline):
    odd = "/data/odd dir 'q' $(touch PWNED) `x`"
    specs = specs_document([{"node_dir": odd}], {"{slurm-node0}": 0}, port_placeholder=None, exit_file="e",
                           out_file="o", monitor_out_file="m")
    text = batch_script(title="flagperf run1 case round 1", python=f"{odd}/python3", wrapper=f"{odd}/slurm_node.py",
                        specs=f"{odd}/slurm/nodes.json", inline_specs=json.dumps(specs) if inline else None,
                        hold_s=60 if inline else 0)
    script = tmp_path / "job.sh"
    script.write_text(text)
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert text.startswith("#!/bin/bash\n# flagperf run1 case round 1\n")
    quoted = "'/data/odd dir '\"'\"'q'\"'\"' $(touch PWNED) `x`/"
    assert f"--job-name=flagperf-launcher --kill-on-bad-exit=0 {quoted}python3' {quoted}slurm_node.py' launch " \
           f"{quoted}slurm/nodes.json'\n" in text
    assert f"{quoted}slurm_node.py' monitor {quoted}slurm/nodes.json' &\n" in text
    assert text.count('"--nodes=${SLURM_JOB_NUM_NODES}"') == (3 if inline else 2)
    assert f'Comment="{COMMENT_LAUNCHERS}$status"' in text and f'{COMMENT_DONE}$status"' in text
    assert ("sleep 60" in text) == inline and ("sbcast --force" in text) == inline
    if inline:      # the specs travel inside, on one line, under a quoted delimiter (no expansion)
        assert "<<'FLAGPERF_SPECS_END'\n" + json.dumps(specs) + "\nFLAGPERF_SPECS_END\n" in text
    with pytest.raises(ValueError):
        batch_script(title="t", python="p", wrapper="w", specs="/s", inline_specs="{\n}")


# -- what the commands print --------------------------------------------------------------------------------------

def test_sbatch_squeue_and_steps_output():
    assert parse_sbatch("1234\n") == 1234 and parse_sbatch("77;cluster2\n") == 77
    with pytest.raises(ValueError):
        parse_sbatch("sbatch: error: something\n")
    jobs = parse_squeue("12|PENDING|Resources|(null)|(null)\n"
                        "13|RUNNING|None|fp[1-2]|flagperf:launchers=0\n"
                        "14|COMPLETING|TimeLimit|fp1|flagperf:launchers=1,flagperf:done=1\n"
                        "15_3|RUNNING|None|x|\n"
                        "16|PENDING|(ReqNodeNotAvail, UnavailableNodes:fp1)|(null)|a|b\n")
    assert set(jobs) == {12, 13, 14, 16}
    assert jobs[12] == JobInfo(12, "PENDING", "Resources", "", "") and jobs[12].waiting and not jobs[12].ended
    assert jobs[13].nodelist == "fp[1-2]" and jobs[13].phase(COMMENT_LAUNCHERS) == 0
    assert jobs[13].phase(COMMENT_DONE) is None
    assert jobs[14].phase(COMMENT_LAUNCHERS) == 1 and jobs[14].phase(COMMENT_DONE) == 1 and not jobs[14].ended
    assert jobs[16].reason == "(ReqNodeNotAvail, UnavailableNodes:fp1)" and jobs[16].comment == "a|b"
    assert parse_squeue("9|TIMEOUT|TimeLimit|fp1|(null)")[9].ended
    assert parse_steps("5.0|flagperf-monitor\n5.1|flagperf-launcher\n5.batch|batch\n5.extern|extern\n") == \
        {"flagperf-monitor": "5.0", "flagperf-launcher": "5.1"}


def test_partitions_nodes_and_gres():
    line = ("PartitionName=fpq AllowGroups=ALL AllowAccounts=ALL Default=YES MaxNodes=UNLIMITED MaxTime=1-00:00:00 "
            "Nodes=fp[1-2] State=UP TotalCPUs=4 TotalNodes=2 TRES=cpu=4,mem=2M,node=2,billing=4")
    (p,) = parse_partitions(line + "\n")
    assert (p["PartitionName"], p["Default"], p["State"], p["Nodes"], p["TotalNodes"], p["TRES"]) == \
        ("fpq", "YES", "UP", "fp[1-2]", "2", "cpu=4,mem=2M,node=2,billing=4")
    assert time_limit_seconds(p["MaxTime"]) == 86400 and time_limit_seconds("UNLIMITED") is None
    nodes = parse_sinfo_nodes("fp1|idle|gpu:2\nfp1|idle|gpu:2\nfp2|down*|gpu:h100:8(S:0-1)\nfp3|MIXED|(null)\n")
    assert nodes == [("fp1", "idle", "gpu:2"), ("fp2", "down*", "gpu:h100:8(S:0-1)"), ("fp3", "mixed", "(null)")]
    assert [usable_state(s) for s in ("idle", "mixed", "allocated", "completing", "idle~", "down*", "drained",
                                      "draining", "drng", "fail", "maint", "future", "unknown")] == \
        [True, True, True, True, True, False, False, False, True, False, False, False, False]
    assert [gres_gpus(g) for g in ("gpu:2", "gpu:h100:8(S:0-1)", "gpu:a100:4,nic:1", "gpu:a:2,gpu:b:2", "(null)",
                                   "nic:1", "")] == [2, 8, 4, 4, None, None, None]


def test_scheduler_end_names_time_limit_lost_nodes_and_preemption():
    def end(state, reason=""):
        return scheduler_end(JobInfo(7, state, reason, "fp1", ""))
    assert end("TIMEOUT", "TimeLimit") == ("timeout", "Slurm job 7 reached its time limit (JobState TIMEOUT, "
                                                      "reason TimeLimit)")
    assert end("COMPLETING", "TimeLimit")[0] == "timeout"
    assert end("NODE_FAIL", "NodeDown")[0] == "host_lost"
    assert end("PREEMPTED")[0] == "error" and end("OUT_OF_MEMORY")[0] == "error"
    assert end("COMPLETED") is None and end("FAILED", "NonZeroExitCode") is None and scheduler_end(None) is None


# -- placeholders: the driver and the node fill them in alike -----------------------------------------------------

def test_driver_and_node_fill_in_the_same_names_paths_and_port(tmp_path):
    conf = _configs(tmp_path, "SCHEDULER: slurm\n", cases=('"gemm:pytorch:x:2:2:1": null',))
    cfg = load_config(conf)
    nodes = build_plan(cfg, "run20990101000000-abcdef").cases[0].rounds[0].nodes
    tokens = {n.host.address: i for i, n in enumerate(nodes)}
    from flagperf.backends.slurm import _node_spec
    doc = specs_document([_node_spec(n) for n in nodes], tokens, port_placeholder=PLACEHOLDER_PORT,
                         exit_file="slurm_exit.json", out_file="launcher.out.log", monitor_out_file="monitor.out.log")
    wrapper = _wrapper()
    assert PORT_BASE + 12345 % PORT_SPAN == wrapper.slurm_derived_port(12345) == 22345
    hosts = ["gpu-a17", "gpu-b02"]
    port = (str(PLACEHOLDER_PORT), str(derived_port(4242)))
    for i, node in enumerate(nodes):
        on_node = wrapper.node_spec(json.loads(json.dumps(doc)), i, hosts, 4242)
        here = _replace_strings(node, {n.host.address: hosts[k] for k, n in enumerate(nodes)}, port)
        assert on_node["node_dir"] == here.node_dir == str(here.local_dir)
        assert here.label == f"{hosts[i]}_noderank{i}" and here.host.address == hosts[i]
        assert on_node["files"]["launch.json"] == here.launch.to_dict()
        assert here.launch.env["MASTER_ADDR"] == "gpu-a17" and here.launch.env["MASTER_PORT"] == "24242"
        assert on_node["launcher_argv"] == list(here.launcher_argv)
        assert on_node["monitor_argv"] == list(here.monitor_argv)
        assert "{slurm-node" not in json.dumps(on_node)
    assert substitute(["a59301", "59301", "x:59301/", "1593012"], {}, port) == ["a24242", "24242", "x:24242/",
                                                                                "1593012"]


def test_the_node_and_the_driver_share_the_port_scheme_and_substitute():
    """launcher/slurm_node.py runs on the nodes without the flagperf package: it fills placeholders in with the
    contract's functions, as the driver does."""
    wrapper = _wrapper()
    assert wrapper.slurm_derived_port is derived_port and wrapper.substitute_placeholders is substitute
    for job_id in (0, 1, 9999, 10000, 12345, 4294967295):
        assert wrapper.slurm_derived_port(job_id) == derived_port(job_id)
    table = {"{slurm-node0}": "gpu-a17", "{slurm-node1}": "gpu-b02"}
    port = (str(PLACEHOLDER_PORT), str(derived_port(77)))
    values = ["", "{slurm-node0}", "x{slurm-node1}y", "59301", "a59301", "1593012", "59301:59301",
              ["{slurm-node0}_noderank0", {"MASTER_PORT": "59301", "{slurm-node1}": ["59301x", 59301]}],
              {"nested": {"deep": ["--master={slurm-node0}:59301"]}}, 7, None, True]
    for value in values:
        for p in (port, None):
            assert wrapper.substitute_placeholders(json.loads(json.dumps(value)), table, p) == \
                substitute(json.loads(json.dumps(value)), table, p), value


def test_the_node_refuses_bad_specs():
    w = _wrapper()
    doc = {"schema": w.SPECS_SCHEMA, "tokens": {"{slurm-node0}": 0}, "nodes": [
        {"node_dir": "/r/{slurm-node0}_noderank0", "launcher_argv": ["x"], "monitor_argv": ["y"]}]}
    assert w.node_spec(doc, 0, ["n1"], 1)["node_dir"] == "/r/n1_noderank0"
    for bad_doc, node_id, hosts, words in (
            ({"schema": "other"}, 0, ["n1"], "not a flagperf Slurm specs file"),
            (doc, 1, ["n1", "n2"], "no spec for SLURM_NODEID 1"),
            (doc, 0, ["n1;rm -rf /"], "is not a host name"),
            (dict(doc, tokens={"{slurm-node0}": 3}), 0, ["n1"], "names host 3 of an allocation of 1"),
            (dict(doc, nodes=[dict(doc["nodes"][0], node_dir="r/../x")]), 0, ["n1"], "absolute path"),
            (dict(doc, nodes=[dict(doc["nodes"][0], launcher_argv=[])]), 0, ["n1"], "launcher_argv")):
        with pytest.raises(w.SpecError, match=words.replace("(", r"\(")):
            w.node_spec(bad_doc, node_id, hosts, 1)


# -- slurm_node.py as a real process (the Slurm environment given by hand) ---------------------------------------

FAKE_LAUNCHER = r"""
import json, os, signal, sys, time
d = sys.argv[1]
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append("TERM"))
with open(os.path.join(d, "launcher.log"), "a") as f:
    f.write("node_rank=0 ready\n")
print("launcher output", flush=True)
deadline = time.time() + float(sys.argv[2])
while time.time() < deadline and not got:
    time.sleep(0.02)
time.sleep(0.5)
json.dump({"terms": len(got)}, open(os.path.join(d, "fake.json"), "w"))
sys.exit(143 if got else 0)
"""


def _start_node(tmp_path, seconds):
    node_dir = tmp_path / "round1" / "{slurm-node1}_noderank1"
    fake = tmp_path / "fake_launcher.py"
    fake.write_text(FAKE_LAUNCHER)
    spec = {"node_rank": 1, "node_dir": str(node_dir),
            "files": {"launch.json": {"MASTER_ADDR": "{slurm-node0}"}},
            "launcher_argv": [sys.executable, str(fake), str(node_dir), str(seconds)], "monitor_argv": ["true"],
            "launcher_log": "launcher.log"}
    doc = specs_document([{"node_dir": "/unused", "launcher_argv": ["x"], "monitor_argv": ["x"]}, spec],
                         {"{slurm-node0}": 0, "{slurm-node1}": 1}, port_placeholder=None,
                         exit_file="slurm_exit.json", out_file="launcher.out.log", monitor_out_file="monitor.out.log")
    (tmp_path / "nodes.json").write_text(json.dumps(doc))
    env = dict(os.environ, SLURM_NODEID="1", SLURM_JOB_ID="99", SLURMD_NODENAME="nb",
               FLAGPERF_SLURM_HOSTS="na,nb")
    proc = subprocess.Popen([sys.executable, str(REPO / "launcher" / "slurm_node.py"), "launch",
                             str(tmp_path / "nodes.json")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, tmp_path / "round1" / "nb_noderank1"


def test_the_node_writes_its_files_runs_the_launcher_and_records_its_status(tmp_path):
    proc, node_dir = _start_node(tmp_path, 0.1)
    assert proc.wait(30) == 0, proc.stderr.read()
    assert json.loads((node_dir / "launch.json").read_text()) == {"MASTER_ADDR": "na"}
    assert "launcher output" in (node_dir / "launcher.out.log").read_text()
    record = json.loads((node_dir / "slurm_exit.json").read_text())
    assert (record["exit_code"], record["node"], record["node_id"], record["job_id"], record["signals"]) == \
        (0, "nb", 1, "99", [])


def test_a_stop_reaches_the_launcher_once_as_sigterm(tmp_path):
    proc, node_dir = _start_node(tmp_path, 30)
    deadline = time.monotonic() + 20
    while not (node_dir / "launcher.log").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGURG)
    proc.send_signal(signal.SIGURG)             # the same stop, from the driver and from another node
    proc.send_signal(signal.SIGTERM)            # what Slurm sends every process: not passed on
    assert proc.wait(30) == 143, proc.stderr.read()
    assert json.loads((node_dir / "fake.json").read_text()) == {"terms": 1}
    record = json.loads((node_dir / "slurm_exit.json").read_text())
    assert record["exit_code"] == 143 and sorted(record["signals"]) == ["SIGTERM", "SIGURG"]


def test_the_node_refuses_a_symlinked_node_directory(tmp_path):
    (tmp_path / "round1").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "round1" / "nb_noderank1").symlink_to(tmp_path / "elsewhere")
    proc, node_dir = _start_node(tmp_path, 0.1)
    assert proc.wait(30) == 2
    assert "not a directory of this user (a symlink?)" in proc.stderr.read().decode()
    assert list((tmp_path / "elsewhere").iterdir()) == []


# -- the batch script quotes once: --dry-run's script run by bash with stub Slurm commands ---------------------

STUB = """#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps([name] + sys.argv[1:]) + "\\n")
if name == "scontrol" and sys.argv[1:3] == ["show", "hostnames"]:
    print("na\\nnb")
"""


def _odd(tmp_path, tag):
    """A path name holding a space, both quotes, a backslash, $, ${SLURM_...}, $(...) and backticks; what it runs
    touches a marker in tmp_path/marks."""
    marks = tmp_path / "marks"
    return (f"{tag} a'b\"c$d\\e ${{SLURM_JOB_ID}} $SLURM_JOB_NODELIST $(touch {marks}/{tag}1) "
            f"`touch {marks}/{tag}2` ;touch {marks}/{tag}3")


def _dry_run_script(tmp_path, run_cli, cluster: str, runtime="bare"):
    """(job.sh as --dry-run prints it, the job's folder)."""
    fp = tmp_path / _odd(tmp_path, "fp")
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "test_conf.yaml").write_text(
        f"VENDOR: cpu\nRUNTIME: {runtime}\nFLAGPERF_LOG_PATH: {json.dumps(_odd(tmp_path, 'log'))}\n"
        f"FLAGPERF_PATH: {json.dumps(str(fp))}\nCLUSTER: cluster.yaml\nCASES:\n  'gemm:pytorch:x:2:1:1': null\n")
    rc, out, err = run_cli("run", "--config", tmp_path / "test_conf.yaml", "--dry-run")
    assert rc == 0, out + err
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip().startswith("batch script ") and x.endswith("job.sh:"))
    job_dir = lines[start].strip()[len("batch script "):-len("/job.sh:")]
    script = []
    for line in lines[start + 1:]:
        if not line.strip().startswith("| "):
            break
        script.append(line.split("| ", 1)[1])
    return "\n".join(script) + "\n", fp, Path(job_dir)


def _run_with_stubs(tmp_path, script: str) -> list:
    """Run the script with bash, srun/scontrol/sbcast/scancel/sleep stubbed; the stubs' argv, one list per call."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("srun", "scontrol", "sbcast", "scancel", "sleep"):
        (stubs / name).write_text(STUB.format(python=sys.executable))
        (stubs / name).chmod(0o755)
    (tmp_path / "marks").mkdir(exist_ok=True)
    path = tmp_path / "job.sh"
    path.write_text(script)
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    log = tmp_path / "stub.log"
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_LOG": str(log), "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NODELIST": "n[a-b]", "SLURM_JOB_NUM_NODES": "2", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(path)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((tmp_path / "marks").iterdir()) == []           # nothing of a config value ran
    return [json.loads(x) for x in log.read_text().splitlines()]


STEP = ["srun", "--overlap", "--nodes=2", "--ntasks-per-node=1"]


@pytest.mark.parametrize("shared", [True, False])
def test_dry_run_script_runs_the_exact_argv_for_hostile_paths(tmp_path, run_cli, shared):
    python = "/opt/py $(touch {m}/py1) `touch {m}/py2` ${{SLURM_JOB_ID}}/python3".format(m=tmp_path / "marks")
    script, fp, job_dir = _dry_run_script(
        tmp_path, run_cli, f"SCHEDULER: slurm\nMASTER_PORT: 30001\nPYTHON: {json.dumps(python)}\n"
                           f"SLURM_SHARED_FS: {'true' if shared else 'false'}\n")
    calls = _run_with_stubs(tmp_path, script)
    wrapper = f"{fp}/launcher/slurm_node.py"
    if shared:
        specs = str(job_dir / "nodes.json")
    else:       # node-local results: under FLAGPERF_PATH/result on the nodes, copied there by sbcast
        specs = next(c for c in calls if c[0] == "sbcast")[-1]
        assert specs.startswith(f"{fp}/result/") and specs.endswith("/slurm/nodes.json")
        assert ["sbcast", "--force", f"{specs}.4242", specs] in calls
        assert STEP + ["mkdir", "-p", "--", specs.rsplit("/", 1)[0]] in calls
    assert STEP + ["--job-name=flagperf-monitor", "--kill-on-bad-exit=0", python, wrapper, "monitor", specs] in calls
    assert STEP + ["--job-name=flagperf-launcher", "--kill-on-bad-exit=0", python, wrapper, "launch", specs] in calls
    assert ["scontrol", "update", "JobId=4242", "Comment=flagperf:launchers=0,flagperf:done=0"] in calls


def test_dry_run_script_passes_pyxis_image_and_mounts_as_they_are(tmp_path, run_cli):
    marks = tmp_path / "marks"
    image = f"docker://nvcr.io#nvidia/pytorch:24.05-py3$(touch {marks}/img1)`touch {marks}/img2`${{SLURM_JOB_ID}}"
    mount = f"/data $(touch {marks}/m1) `touch {marks}/m2` ${{SLURM_JOB_ID}}'\""
    script, fp, job_dir = _dry_run_script(
        tmp_path, run_cli, f"SCHEDULER: slurm\nMASTER_PORT: 30001\nSLURM_CONTAINER_IMAGE: {json.dumps(image)}\n"
                           f"SLURM_CONTAINER_MOUNTS: [{json.dumps(mount + ':/d')}]\n", runtime="pyxis")
    calls = _run_with_stubs(tmp_path, script)
    launch = next(c for c in calls if "--job-name=flagperf-launcher" in c)
    root = str(job_dir.parents[3])
    assert launch[6:] == [f"--container-image={image}", f"--container-mounts={fp}:{fp},{root}:{root},{mount}:/d",
                          f"--container-workdir={fp}", "python3", f"{fp}/launcher/slurm_node.py", "launch",
                          str(job_dir / "nodes.json")]


def test_batch_script_expands_only_its_own_words():
    """A config value that looks like the script's own ${SLURM_...} word is quoted like any other."""
    text = batch_script(title="t\nrm -rf /tmp/x", python="--nodes=${SLURM_JOB_NUM_NODES}",
                        wrapper="${SLURM_JOB_ID}/w", specs="/s")
    assert "\nrm -rf" not in text and text.splitlines()[1] == "# t?rm -rf /tmp/x"
    assert "'--nodes=${SLURM_JOB_NUM_NODES}' '${SLURM_JOB_ID}/w' launch /s" in text
    with pytest.raises(ValueError):
        batch_script(title="t", python="p", wrapper="w", specs="/s", inline_specs="FLAGPERF_SPECS_END")


def test_output_option_escapes_sbatch_patterns():
    from flagperf.backends.slurm_script import output_option
    assert output_option("/r/slurm") == ("/r/slurm/job-%j.out", "job-%j.out")
    assert output_option("/r/100%u/slurm") == ("/r/100%%u/slurm/job-%j.out", "job-%j.out")
    assert output_option("/r/a\\b%j/slurm") == ("/r/a\\\\b%j/slurm/job.out", "job.out")


# sbatch words | the index of the first word at fault | how its problem starts
SBATCH_WORDS = """
--outp=x                             | 0 | flagperf sets --output itself
--chd=/tmp                           | 0 | flagperf sets --chdir itself
--job-n=j                            | 0 | flagperf sets --job-name itself
--part=gpu                           | 0 | flagperf sets --partition itself
--par=gpu                            | 0 | --par is ambiguous: sbatch reads it as one of --parsable, --partition
--tasks=1                            | 0 | flagperf sets --tasks-per-node itself
--ntasks-per-n 2                     | 0 | flagperf sets --ntasks-per-node itself
-Qp gpu                              | 0 | flagperf sets -p itself
-Qpgpu                               | 0 | flagperf sets -p itself
-JN                                  | 0 | flagperf sets -J itself
--test                               | 0 | with --test-only sbatch only tests the job and submits nothing
--vers                               | 0 | with --version sbatch prints its version
evil.sh                              | 0 | not an option: sbatch would take this word as the batch script
--exclusive=user --constraint h100 x | 0 | flagperf sets --exclusive itself
--constraint h100 x                  | 2 | not an option: sbatch would take this word as the batch script
--mem 4G --begin now :               | 4 | not an option
--reservation=r --                   | 1 | ends sbatch's options
--comment                            | 0 | --comment needs a value (--comment=VALUE)
-c                                   | 0 | -c needs a value
--contiguous=yes                     | 0 | --contiguous takes no value
--no-such=1                          | 0 | --no-such is not an sbatch option
-Z                                   | 0 | -Z is not an sbatch option
"""


def _rows(table):
    """(words, index, problem) for each line of a ``words | index | problem`` table."""
    rows = []
    for line in table.strip().splitlines():
        words, index, problem = (part.strip() for part in line.split("|"))
        rows.append((words.split(), int(index), problem))
    return rows


@pytest.mark.parametrize("words, index, problem", _rows(SBATCH_WORDS))
def test_slurm_args_are_read_as_sbatch_reads_them(words, index, problem):
    from flagperf.options.slurm import sbatch_args_problems
    found = sbatch_args_problems(words)
    assert found and found[0][0] == index and found[0][1].startswith(problem), found


def test_slurm_args_values_and_abbreviations_of_other_options_pass():
    from flagperf.options.slurm import sbatch_args_problems
    assert sbatch_args_problems(["--constraint=h100", "--reservation", "bench", "--comment", "--output=x",
                                 "--constr", "a", "-C", "b", "-Cb", "-Q", "--mem=4G", "--exclude=n1", "-kp",
                                 "--time-min=5", "--gres", "gpu:2", "-M", "c1", "--clusters=c2"]) == []


def test_slurm_args_errors_are_one_config_line_each(tmp_path, run_cli):
    conf = _configs(tmp_path, "SCHEDULER: slurm\nSLURM_ARGS: ['--outp=/tmp/x', --constraint, h100, job.sh, "
                              "'--par=gpu', '--chd=/']\nPYTHON: '--export=ALL'\n")
    rc, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert rc == 2 and out == "" and "Traceback" not in err, err
    cluster = tmp_path / "cluster.yaml"
    lines = err.splitlines()
    assert lines == [
        f"{PREFIX}{cluster}:2: SLURM_ARGS[0]: '--outp=/tmp/x': flagperf sets --output itself (from the job's output "
        f"file); remove it",
        f"{PREFIX}{cluster}:2: SLURM_ARGS[3]: 'job.sh': not an option: sbatch would take this word as the batch "
        f"script in place of flagperf's (give an option's value as --OPTION=VALUE, or as the word right after its "
        f"option)",
        f"{PREFIX}{cluster}:2: SLURM_ARGS[4]: '--par=gpu': --par is ambiguous: sbatch reads it as one of --parsable, "
        f"--partition; write the option in full",
        f"{PREFIX}{cluster}:2: SLURM_ARGS[5]: '--chd=/': flagperf sets --chdir itself (from the job's working "
        f"directory); remove it",
        f"{PREFIX}{cluster}:3: PYTHON: expected the interpreter on the nodes (a name or a path), got '--export=ALL' "
        f"(srun would read it as one of its options)"], err


def test_container_paths_that_cannot_be_named_fail_the_job_with_one_line(tmp_path, run_cli):
    from flagperf.backends.slurm_script import ch_run_argv, pyxis_options
    with pytest.raises(ValueError, match="cannot name a path holding ',' or ':': /a,b"):
        pyxis_options("img", [("/a,b", "/a,b")], "/w")
    with pytest.raises(ValueError, match="cannot name a path holding ':': /x:y"):
        ch_run_argv("/img", [("/ok", "/ok"), ("/x:y", "/x:y")], "/w")
    (tmp_path / "cluster.yaml").write_text("SCHEDULER: slurm\nMASTER_PORT: 30001\nSLURM_CONTAINER_IMAGE: docker://i\n")
    (tmp_path / "test_conf.yaml").write_text(
        f"VENDOR: cpu\nRUNTIME: pyxis\nFLAGPERF_LOG_PATH: result\nFLAGPERF_PATH: '{tmp_path}/fp,/etc:/x'\n"
        f"CLUSTER: cluster.yaml\nCASES:\n  'gemm:pytorch:x:2:1:1': null\n")
    rc, out, err = run_cli("run", "--config", tmp_path / "test_conf.yaml", "--dry-run")
    assert rc == 0 and "Traceback" not in err, out + err
    assert f"slurm: the job cannot be written: RUNTIME pyxis: srun --container-mounts cannot name a path holding " \
           f"',' or ':': {tmp_path}/fp,/etc:/x" in out, out
