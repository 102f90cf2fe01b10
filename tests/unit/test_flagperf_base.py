"""FlagPerf base cases as FlagPerf's base run.py runs them: the per-chip env.sh and requirements.txt (paths, order,
the node command that applies them, the load-time warning outside a container), detail_result.json and its
statistics from flagperf's monitor files, and the check that flags a TF32 figure that is FP32's."""

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from flagperf.caselaunch import (BASE_PREPARE_NAME, TRAINING_PREPARE_AND_START, base_notes, node_command,
                                 prepares_itself)
from flagperf.catalog import base_chip_files, find_case
from flagperf.config import HostSpec, load_config
from flagperf.plan import build_plan
from flagperf.records import SUSPECT
from flagperf.references import case_note, describe
from flagperf.reporters.detail import DetailReporter
from flagperf.results.basedetail import detail_result, last_round
from flagperf.results.interpret import Status
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from flagperf.results.tf32check import PEAK_RATIO_MIN, fp32_name, peak_entries, tf32_findings
from flagperf.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[2]
NVIDIA_PEAKS = REPO / "vendors" / "nvidia" / "peaks.yaml"


# ------------------------------------------------------------------------------ per-chip env.sh, requirements.txt
def base_tree(tmp_path, chip_files=("env.sh", "requirements.txt"), vendor_files=()):
    """A FlagPerf base/benchmarks folder: computation-TF32/main.py, files in nvidia/A100/ and in nvidia/."""
    bench = tmp_path / "base" / "benchmarks"
    case = bench / "computation-TF32"
    (case / "nvidia" / "A100").mkdir(parents=True)
    (case / "main.py").write_text("")
    (bench / "drivers").mkdir()
    for name in chip_files:
        (case / "nvidia" / "A100" / name).write_text("# chip\n")
    for name in vendor_files:
        (case / "nvidia" / name).write_text("# vendor\n")
    return bench


def test_chip_files_are_flagperfs_env_dir(tmp_path):
    bench = base_tree(tmp_path, vendor_files=("env.sh",))
    src, problems = find_case(tmp_path / "src", [bench], "computation-TF32", "nvidia", "A100", base_mode="benchmark")
    assert problems == [] and src.kind == "base-benchmark"
    chip = bench / "computation-TF32" / "nvidia" / "A100"
    # '<case>:<chip>': <case>/<vendor>/<chip>/; '<case>' alone (chip A100 by default): <case>/<vendor>/
    assert base_chip_files(src, "nvidia", "computation-TF32:A100", "A100") == \
        (chip / "env.sh", chip / "requirements.txt")
    assert base_chip_files(src, "nvidia", "computation-TF32", "A100") == (chip.parent / "env.sh", None)
    assert base_chip_files(src, "nvidia", "computation-TF32:H100", "H100") == (None, None)
    assert base_chip_files(src, "cpu", "computation-TF32:A100", "A100") == (None, None)
    # not a base case (no BENCHMARKS_OR_TOOLKITS): nothing
    plain, _ = find_case(tmp_path / "src", [bench], "computation-TF32", "nvidia", "A100")
    assert plain.kind == "main.py" and base_chip_files(plain, "nvidia", "computation-TF32:A100", "A100") == (None, None)
    assert prepares_itself(src) and not prepares_itself(plain)


def fake_config(tmp_path, bench, case, pip_source=None):
    return SimpleNamespace(source_root=tmp_path / "src", vendor=SimpleNamespace(name="nvidia"),
                           test=SimpleNamespace(case_paths=(str(bench),), base_mode="benchmark", cases=(case,),
                                                model_sources=(), pip_source=pip_source, runtime="bare"),
                           cluster=SimpleNamespace(hosts_ports=(), options=SimpleNamespace(container_runtimes=())))


def base_case(key="computation-TF32:A100", hw="A100"):
    return SimpleNamespace(key=key, model="computation-TF32", hw=hw, each=False, nnodes=1, nproc=8, data_dir=None,
                           framework="pytorch", framework_full="pytorch")


def test_node_command_installs_then_sources_before_torchrun(tmp_path):
    bench = base_tree(tmp_path)
    case = base_case()
    cfg = fake_config(tmp_path, bench, case, pip_source="https://pypi.example/simple")
    host = HostSpec("10.0.0.2", None, None, None, "python3", "/opt/fp")
    cmd = node_command(cfg, case, host, python="python3", node_rank=0, node_dir="/r/n0", master_addr="10.0.0.2",
                       master_port=29501, base_env={})
    root = "/opt/fp/cases/computation-TF32"
    assert cmd.mode == "node" and cmd.cwd == root
    assert cmd.argv[:12] == ["bash", "-c", TRAINING_PREPARE_AND_START, BASE_PREPARE_NAME,
                             f"{root}/nvidia/A100/env.sh", f"{root}/nvidia/A100/requirements.txt", "",
                             "https://pypi.example/simple", "/r/n0", "python3", "python3", "-m"]
    assert cmd.argv[-2:] == ["--vendor=nvidia/A100", "--node_size=8"]      # FlagPerf's argument, as it passes it
    notes = base_notes(cmd.source, cfg, case)
    assert notes[0].endswith(f"pip install -r {bench}/computation-TF32/nvidia/A100/requirements.txt")
    assert notes[1].endswith(f"{bench}/computation-TF32/nvidia/A100/env.sh")
    # a case without the chip's files: torchrun alone
    bare = node_command(cfg, base_case("computation-TF32:H100", "H100"), host, python="python3", node_rank=0,
                        node_dir="/r/n0", master_addr="10.0.0.2", master_port=29501, base_env={})
    assert bare.argv[:3] == ["python3", "-m", "torch.distributed.run"]
    assert base_notes(bare.source, cfg, base_case("computation-TF32:H100", "H100")) == []


def prepare(tmp_path, name, pip_exit=0, env_text="export CASE_ENV=ok\necho sourcing\n"):
    node = tmp_path / "node"
    node.mkdir(exist_ok=True)
    env = tmp_path / "env.sh"
    env.write_text(env_text)
    req = tmp_path / "requirements.txt"
    req.write_text("# none\n")
    fake_py = tmp_path / "py"
    fake_py.write_text('#!/bin/sh\nif [ "$1" = -m ]; then echo "pip sees CASE_ENV=${CASE_ENV:-unset}"; '
                       f'exit {pip_exit}; fi\nexec {sys.executable} "$@"\n')
    fake_py.chmod(0o755)
    args = ["bash", "-c", TRAINING_PREPARE_AND_START, name, str(env), str(req), "", "", str(node), str(fake_py),
            "sh", "-c", 'echo "case sees CASE_ENV=$CASE_ENV"']
    return node, subprocess.run(args, capture_output=True, text=True)


def test_base_order_is_pip_then_env_sh_in_the_cases_shell(tmp_path):
    node, r = prepare(tmp_path, BASE_PREPARE_NAME)
    assert r.returncode == 0 and r.stdout == "case sees CASE_ENV=ok\n", r
    log = (node / "env_prepare.log").read_text()
    assert "pip sees CASE_ENV=unset" in log and "$ . " not in log       # env.sh not in effect while pip runs
    assert (node / "source_env.log.txt").read_text() == "sourcing\n"
    # a training case keeps FlagPerf training's order: env file, then pip with it in effect
    training = tmp_path / "t"
    training.mkdir()
    node, r = prepare(training, "flagperf-training")
    assert r.returncode == 0 and "pip sees CASE_ENV=ok" in (node / "env_prepare.log").read_text()


def test_base_preparation_failures_stop_the_case_with_exit_90(tmp_path):
    node, r = prepare(tmp_path, BASE_PREPARE_NAME, pip_exit=1)
    assert r.returncode == 90 and "case sees" not in r.stdout
    assert r.stderr.strip() == f"FlagPerf case preparation failed: see {node}/env_prepare.log"
    other = tmp_path / "o"
    other.mkdir()
    node, r = prepare(other, BASE_PREPARE_NAME, env_text="echo broken\nfalse\n")
    assert r.returncode == 90 and "case sees" not in r.stdout
    assert r.stderr.strip() == f"sourcing {other}/env.sh failed: see {node}/source_env.log.txt"


def cpu_base_config(tmp_path, runtime):
    bench = base_tree(tmp_path)
    chip = bench / "computation-TF32" / "cpu" / "local"
    chip.mkdir(parents=True)
    (chip / "requirements.txt").write_text("# none\n")
    (chip / "env.sh").write_text("export X=1\n")
    conf = tmp_path / "host.yaml"
    conf.write_text(f"FLAGPERF_PATH: {bench.parent}\nFLAGPERF_LOG_PATH: {tmp_path / 'result'}\nVENDOR: cpu\n"
                    f"RUNTIME: {runtime}\nBENCHMARKS_OR_TOOLKITS: BENCHMARK\nHOSTS: [localhost]\nNPROC_PER_NODE: 1\n"
                    f'MASTER_PORT: "29501"\nCASES:\n  "computation-TF32:local": "pytorch_2.3"\n')
    return conf, chip


def test_bare_runtime_warns_at_load(tmp_path):
    conf, chip = cpu_base_config(tmp_path, "bare")
    cfg = load_config(conf)
    assert f"{conf}: CASES['computation-TF32:local']: RUNTIME bare: FlagPerf's base preparation pip-installs " \
           f"{chip}/requirements.txt into the Python environment of each host (its PYTHON) and sources " \
           f"{chip}/env.sh on each host before the case, as FlagPerf does in its container" in cfg.warnings


def test_in_a_container_the_node_command_prepares_it_there(tmp_path):
    conf, chip = cpu_base_config(tmp_path, "docker")
    cfg = load_config(conf)
    assert not [w for w in cfg.warnings if "preparation" in w]
    node = build_plan(cfg).cases[0].rounds[0].nodes[0]
    assert node.container.command == node.launcher_argv       # no generic preparation besides the case's own
    assert node.launch.argv[3:6] == [BASE_PREPARE_NAME, f"{chip}/env.sh", f"{chip}/requirements.txt"]


# ------------------------------------------------------------------------------------------- detail_result.json
def write_node(node: Path):
    node.mkdir(parents=True)
    t = ["2026-11-22T10:00:0%d.000+00:00" % i for i in range(3)]
    (node / "cpu_monitor.log").write_text("".join(f"{ts} util_pct={u} load1=1.0\n" for ts, u in zip(t, (10, 50, 90))))
    (node / "mem_monitor.log").write_text("".join(f"{ts} used_mib={u} total_mib=1000.0 used_pct=1\n"
                                                  for ts, u in zip(t, (100.0, 200.0, 300.0))))
    (node / "pwr_monitor.log").write_text("".join(f"{ts} power_w={p}\n" for ts, p in zip(t, (100, 200, 300))))
    (node / "nvidia_monitor.log").write_text("".join(
        f"{ts} gpu={g} temp_c={40 + g + i} power_w={100 * (g + 1) + 10 * i} mem_used_mib={1000 * (i + 1)} "
        f"mem_total_mib=4000.0 util_pct=5\n" for i, ts in enumerate(t[:2]) for g in (0, 1)))
    (node / "node.out.log").write_text("starting\n[default0]:[FlagPerf Result]Rank 0's computation-FP32=12.5TFLOPS\n"
                                       "\x1b[32m[FlagPerf Result]Rank 1's computation-FP32=12.0TFLOPS\x1b[0m\n")


def one_case_summary(tmp_path, name="c", hosts=("10.0.0.1",)):
    nodes = [NodeSummary(f"{h}_noderank{i}", h, i, ranks=[{"rank": i}]) for i, h in enumerate(hosts)]
    for n in nodes:
        write_node(tmp_path / name / "round1" / n.node)
    rnd = RoundSummary(1, f"{name}/round1", Status.PASSED, nodes=nodes)
    case = CaseSummary(name, "computation-FP32:A100", "computation-FP32", "pytorch", "A100", len(hosts), 2, 1,
                       rounds=[rnd])
    return Summary("r1", str(tmp_path), "1", "2026-11-22T10:00:00+00:00", cases=[case]), case, rnd


def test_detail_result_has_flagperfs_shape_and_statistics(tmp_path):
    summary, case, rnd = one_case_summary(tmp_path)
    detail = json.loads(json.dumps(detail_result(tmp_path, case, rnd)))    # as written: device keys are strings
    host = detail["10.0.0.1"]
    assert host["vendor"] == {"temp": {"0": [40, 41], "1": [41, 42]}, "power": {"0": [100, 110], "1": [200, 210]},
                              "mem": {"0": [1000, 2000], "1": [1000, 2000]}, "max_mem": 4000.0}
    assert host["cpu"] == [0.1, 0.5, 0.9] and host["mem"] == [0.1, 0.2, 0.3] and host["pwr"] == [100, 200, 300]
    assert host["flagperf"] == ["[FlagPerf Result]Rank 0's computation-FP32=12.5TFLOPS",
                                "[FlagPerf Result]Rank 1's computation-FP32=12.0TFLOPS"]
    std = round(math.sqrt(20000 / 3), 2)        # numpy's std (the population's) of 100, 200, 300
    s = host["statistics"]
    assert s["system_power_w"] == {"mean": 200.0, "max": 300, "std": std}
    assert s["chip_power_w"] == {"0": {"mean": 105.0, "max": 110, "std": 5.0},
                                 "1": {"mean": 205.0, "max": 210, "std": 5.0}}
    assert s["chip_temperature_c"]["1"] == {"mean": 41.5, "max": 42, "std": 0.5}
    assert s["system_cpu_pct"] == {"mean": 50.0, "max": 90.0, "std": round(math.sqrt(3200 / 3), 3)}
    assert s["system_memory_pct"] == {"mean": 20.0, "max": 30.0, "std": round(math.sqrt(200 / 3), 3)}
    assert s["chip_memory_pct"]["0"] == {"mean": 37.5, "max": 50.0, "std": 12.5}     # of max_mem


def test_detail_result_without_monitor_data_keeps_the_keys(tmp_path):
    summary, case, rnd = one_case_summary(tmp_path)
    rnd.nodes[0].node = "elsewhere_noderank0"           # no such directory: every series empty
    detail = json.loads(json.dumps(detail_result(tmp_path, case, rnd)))["10.0.0.1"]
    assert detail["vendor"] == {"temp": {"0": [], "1": []}, "power": {"0": [], "1": []}, "mem": {"0": [], "1": []}}
    assert (detail["cpu"], detail["mem"], detail["pwr"], detail["flagperf"]) == ([], [], [], [])
    assert detail["statistics"]["system_power_w"] == {"mean": None, "max": None, "std": None}


def test_detail_reporter_writes_the_last_case_and_every_round(tmp_path):
    summary, case, rnd = one_case_summary(tmp_path, hosts=("10.0.0.1", "10.0.0.1"))
    first, _c, _r = one_case_summary(tmp_path, name="a")
    summary.cases.insert(0, first.cases[0])
    assert last_round(summary) == (case, rnd)
    path = DetailReporter().write(summary, tmp_path)
    assert path == tmp_path / "detail_result.json"
    root = json.loads(path.read_text())
    assert list(root) == ["10.0.0.1", "10.0.0.1_noderank1"]        # a host twice: its later node by its folder
    assert root == json.loads((tmp_path / "c" / "round1" / "detail_result.json").read_text())
    assert json.loads((tmp_path / "a" / "round1" / "detail_result.json").read_text())["10.0.0.1"]["cpu"] == \
        [0.1, 0.5, 0.9]
    empty = Summary("r2", str(tmp_path / "e"), "1", "2026-11-22T10:00:00+00:00")
    (tmp_path / "e").mkdir()
    assert json.loads(DetailReporter().write(empty, tmp_path / "e").read_text()) == {}


# ------------------------------------------------------------------------------------------------ the TF32 check
def case_of(model, value, hw="A100", unit="TFLOPS"):
    rnd = RoundSummary(1, f"{model}/round1", Status.PASSED,
                       finished={"metric": model, "value": value, "unit": unit, "higher_is_better": True})
    return CaseSummary(f"{model}-pytorch-{hw}-1x8", f"{model}:{hw}", model, "pytorch", hw, 1, 8, 1, rounds=[rnd])


@pytest.fixture(scope="module")
def nvidia_peaks():
    table, problems = load_yaml_file(NVIDIA_PEAKS)
    assert problems == []
    return table


def test_fp32_name_and_peak_entries(nvidia_peaks):
    assert fp32_name("computation-TF32") == "computation-FP32" and fp32_name("gemm_tf32") == "gemm_fp32"
    assert fp32_name("computation-FP32") is None
    a100 = [n for n, _ in peak_entries(nvidia_peaks, None, "A100")]
    assert a100 == ["A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIE-80GB"]
    assert [n for n, _ in peak_entries(nvidia_peaks, "NVIDIA H100 80GB HBM3", "A100")] == ["H100-SXM5-80GB"]
    assert peak_entries(nvidia_peaks, None, "MLU") == [] and peak_entries(None, None, "A100") == []


@pytest.mark.parametrize("tf32, flagged", [(19.0, True), (20.9, True), (18.0, True), (22.0, False), (120.0, False),
                                           (15.0, False)])
def test_a_tf32_figure_within_10_percent_of_fp32_is_flagged(nvidia_peaks, tf32, flagged):
    cases = [case_of("computation-FP32", 19.5), case_of("computation-TF32", tf32)]
    found = tf32_findings(cases, nvidia_peaks, str(NVIDIA_PEAKS), "nvidia")
    assert bool(found) is flagged
    if not flagged:
        return
    ((case, v),) = found
    assert case is cases[1] and v.result == SUSPECT and v.ok and v.metric == "computation-TF32"
    assert v.measured == tf32 and v.expected == pytest.approx(19.5 * 8) and v.reference == str(NVIDIA_PEAKS)
    assert v.note == (f"TF32 measured FP32: {tf32:.4g} is {tf32 / 19.5:.2f}x computation-FP32:A100's 19.5 TFLOPS "
                      f"where the TF32 peak is 8.0x FP32's; FlagPerf's TF32 case turns TF32 on only for --vendor "
                      f"equal to 'nvidia', and FlagPerf passes --vendor=nvidia/A100")
    # shown, not failed: the case stays passed, its table note and its verdict line say why
    case.verdicts = [v]
    assert case.status == Status.PASSED
    assert case_note(case.verdicts) == f"flagged: computation-TF32: {v.note}"
    assert describe(v).startswith(f"computation-TF32 = {tf32:.4g} TFLOPS: flagged (not failed): TF32 measured FP32")
    back = CaseSummary.from_dict(json.loads(json.dumps(case.to_dict())))
    assert back.verdicts == [v]


def test_no_flag_without_the_pair_or_a_fast_tf32_peak(nvidia_peaks):
    fp32, tf32 = case_of("computation-FP32", 19.5), case_of("computation-TF32", 19.4)
    assert tf32_findings([tf32], nvidia_peaks) == []                                  # no FP32 case in the run
    assert tf32_findings([case_of("computation-FP32", 19.5, hw="H100"), tf32], nvidia_peaks) == []   # another chip
    assert tf32_findings([fp32, case_of("computation-TF32", 19.4, unit="GFLOPS")], nvidia_peaks) == []
    assert tf32_findings([fp32, case_of("computation-TF32", None)], nvidia_peaks) == []  # TF32 not measured
    assert tf32_findings([fp32, tf32], None) == []                                     # the vendor has no peaks
    slow = {"X": {"match": ["A100"], "fp32_tflops": 10, "tf32_tflops": 10 * PEAK_RATIO_MIN - 1}}
    assert tf32_findings([fp32, tf32], slow) == []
    partial = {"X": {"match": ["A100"], "fp32_tflops": 10}}
    assert tf32_findings([fp32, tf32], partial) == []
    assert len(tf32_findings([fp32, tf32], nvidia_peaks)) == 1
