"""configs/test_conf.yaml, the embedded default, is quick: on a GPU node its hw label "quick" selects
vendors/nvidia/<model>/config_quick.yaml (short time budgets, two gemm dtypes, all_reduce up to 256 MiB), and a rough
estimate of its wall time on 4 GPUs (start-up per case plus the seconds its time budgets buy) stays within 90 s;
configs/examples/gpu_full.yaml keeps the long sweeps. On a CPU the same file runs the benchmarks' small defaults.
(It runs for real on this machine's CPU in tests/e2e/test_local_run.py; bench/default_wall.sh times it on a GPU.)"""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from flagperf.config import load_config
from flagperf.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs" / "test_conf.yaml"
FULL = REPO / "configs" / "examples" / "gpu_full.yaml"
MODELS = ("gemm", "devmem", "collectives", "p2p", "llm")
START_UP_S = 9.0        # per case on a GPU node: the ranks' imports, CUDA and NCCL set-up, calibration, the check
DRIVER_S = 10.0         # the driver's own share of a run: the host check, monitors, collect, reports
LIMIT_S = 90.0


def as_vendor(tmp_path, source: Path, vendor: str):
    """``source``'s keys with VENDOR ``vendor`` (this machine has no GPU), results under tmp_path."""
    data = yaml.safe_load(source.read_text())
    data.update(VENDOR=vendor, FLAGPERF_PATH=str(REPO), FLAGPERF_LOG_PATH=str(tmp_path / "result"),
                CLUSTER=str(REPO / "configs" / "cluster.yaml"))
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def case_configs(tmp_path, source: Path, vendor="nvidia", gpus=4) -> dict:
    plan = build_plan(as_vendor(tmp_path, source, vendor), "run-quick", {"localhost": gpus})
    return {c.case.model: (dict(c.rounds[0].nodes[0].case_config), c) for c in plan.cases}


def estimate_s(model: str, cfg: dict, nproc: int) -> float:
    """A rough wall time of one round on a GPU node: start-up plus what the case config's budgets buy."""
    if model == "gemm":
        timed = cfg["time_budget_s"] + cfg.get("sustained_s", 0) * len(cfg["dtypes"])
    elif model == "devmem":
        timed = cfg["time_budget_s"] + (1.0 if cfg.get("capacity_search", True) else 0.0)
    elif model == "p2p" and cfg.get("pairs") == "all":
        timed = nproc * (nproc - 1) * cfg["max_seconds_per_pair"]
    elif model == "llm":
        timed = cfg["time_budget_s"] + (30.0 if cfg.get("compile") in ("auto", True) else 0.0)
    else:
        timed = cfg["time_budget_s"]
    return START_UP_S + timed


def run_estimate(configs: dict, nproc: int) -> float:
    return DRIVER_S + sum(estimate_s(m, cfg, nproc) * case.case.repeat for m, (cfg, case) in configs.items())


def test_the_default_covers_compute_memory_interconnect_and_training():
    cfg = load_config(DEFAULT)
    assert [(c.model, c.hw, c.nnodes, c.nproc, c.repeat) for c in cfg.test.cases] == \
        [(m, "quick", 1, None, 1) for m in MODELS]
    assert cfg.test.runtime == "bare"


def test_on_4_gpus_it_takes_the_quick_sizes_and_fits_90_s(tmp_path):
    configs = case_configs(tmp_path, DEFAULT)
    assert sorted(configs) == sorted(MODELS)
    for model, (cfg, case) in configs.items():
        override = REPO / "vendors" / "nvidia" / model / "config_quick.yaml"
        assert override in [Path(f) for f in case.config_files], model
        for key, value in yaml.safe_load(override.read_text()).items():
            assert cfg[key] == value, (model, key)
        assert cfg["nproc"] == 4
    gemm, coll = configs["gemm"][0], configs["collectives"][0]
    assert gemm["dtypes"] == ["bf16", "tf32"] and gemm["sustained_s"] == 0 and gemm["m"] == 8192
    assert coll["ops"] == ["all_reduce"] and coll["sizes"][-1] == "256M"
    assert configs["llm"][0]["compile"] is False and configs["llm"][0]["min_steps"] == 120
    total = run_estimate(configs, 4)
    assert total <= LIMIT_S, {m: estimate_s(m, cfg, 4) for m, (cfg, _) in configs.items()}


def test_the_full_example_keeps_the_long_sweeps(tmp_path):
    """The estimate is not blind: the vendor's full sizes do not fit 90 s, and they are gpu_full.yaml's."""
    configs = case_configs(tmp_path, FULL)
    assert configs["gemm"][0]["dtypes"] == ["bf16", "fp16", "tf32", "fp32", "fp64", "int8", "fp8"]
    assert configs["collectives"][0]["max_size"] == "4G" and configs["collectives"][0]["sizes"] is None
    assert configs["llm"][0]["preset"] == "1b"
    assert run_estimate(configs, 4) > 3 * LIMIT_S
    assert "gpu_full.yaml" in (REPO / "README.md").read_text()


def test_on_a_cpu_the_benchmarks_small_defaults_run(tmp_path):
    """No nvidia override reaches a CPU run; the cpu vendor only shortens llm's window."""
    configs = case_configs(tmp_path, DEFAULT, vendor="cpu", gpus=2)
    for model, (cfg, case) in configs.items():
        assert not any("/vendors/nvidia/" in str(f) for f in case.config_files), model
    assert configs["gemm"][0]["m"] == 512 and configs["collectives"][0]["sizes"][-1] == "4M"
    assert configs["llm"][0]["preset"] == "tiny" and configs["llm"][0]["time_budget_s"] == 5


@pytest.mark.parametrize("path", sorted(REPO.glob("vendors/*/*/config_quick.yaml")), ids=str)
def test_quick_override_keys_are_keys_the_benchmark_reads(path):
    known = yaml.safe_load((REPO / "benchmarks" / path.parent.name / "case_config.yaml").read_text())
    assert set(yaml.safe_load(path.read_text())) <= set(known), path


def _benchmark(model, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks" / model))
    for own in ("data", "model"):
        monkeypatch.delitem(sys.modules, own, raising=False)
    spec = importlib.util.spec_from_file_location(f"quick_{model}_main", REPO / "benchmarks" / model / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", MODELS)
def test_the_benchmark_accepts_the_quick_values(tmp_path, model, capsys, monkeypatch):
    pytest.importorskip("torch")
    cfg, _ = case_configs(tmp_path, DEFAULT)[model]
    module = _benchmark(model, monkeypatch)
    try:
        if model == "gemm":
            c = module.read_config(cfg, SimpleNamespace(is_cuda=True, device=SimpleNamespace(type="cuda")))
            assert c["dtypes"] == ["bf16", "tf32"] and c["direct"] is False
        else:
            c = module.read_config(cfg)
    except SystemExit as exc:       # harness.config_error
        pytest.fail(f"{model}: the quick values are refused: {capsys.readouterr().err.strip()} ({exc})")
    finally:
        for name in (f"quick_{model}_main", "data", "model"):
            sys.modules.pop(name, None)
    if model == "p2p":
        assert c["pairs"] == "all" and c["max_seconds_per_pair"] == 0.25
