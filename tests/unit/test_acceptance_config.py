"""configs/acceptance.yaml: it loads, plans every case on every host (each), finds its NVIDIA override files, and every
key those files set is one the benchmark reads, with a value the benchmark's own reader accepts.
(It runs for real on the CPU in tests/e2e/test_acceptance.py.)"""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from flagperf.config import load_config
from flagperf.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
ACCEPTANCE = REPO / "configs" / "acceptance.yaml"
MODELS = ("gemm", "devmem", "h2d", "p2p", "collectives", "llm")


def acceptance_cases() -> dict:
    return yaml.safe_load(ACCEPTANCE.read_text())["CASES"]


def nvidia_config(tmp_path, hosts=("localhost",)):
    """acceptance.yaml's keys with VENDOR nvidia (this machine has no GPU), on the given hosts."""
    data = yaml.safe_load(ACCEPTANCE.read_text())
    data.update(VENDOR="nvidia", FLAGPERF_LOG_PATH=str(tmp_path / "result"))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"HOSTS": list(hosts)}))
    data["CLUSTER"] = "cluster.yaml"
    path = tmp_path / "acceptance.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def test_it_loads_and_runs_every_case_on_every_host():
    cfg = load_config(ACCEPTANCE)
    assert [(c.model, c.hw, c.each, c.nproc) for c in cfg.test.cases] == \
        [(m, "acceptance", True, None) for m in MODELS]
    assert cfg.test.case_timeout == 600
    # the pairwise network test is there, to uncomment for a cluster of 2 or more hosts
    assert '# "p2p:pytorch:acceptance_net:pairs:1:1": null' in ACCEPTANCE.read_text()


def test_its_dry_run_is_clean(tmp_path, run_cli):
    """As shipped, on this machine (VENDOR auto): every case planned, nothing written."""
    rc, out, err = run_cli("run", "--config", ACCEPTANCE, "--dry-run", cwd=tmp_path)
    assert rc == 0 and "warning" not in err.lower(), err
    for model in MODELS:
        assert f"[{model}:pytorch:acceptance:each:auto:1]  each: 1 independent job(s)" in out, model
    assert "(nothing is created by --dry-run)" in out and list(tmp_path.iterdir()) == []


def test_a_gpu_node_gets_the_acceptance_sizes(tmp_path):
    plan = build_plan(nvidia_config(tmp_path), "run-acceptance", {"localhost": 4})
    by_model = {c.case.model: c for c in plan.cases}
    assert sorted(by_model) == sorted(MODELS)
    for model, case in by_model.items():
        (rnd,) = case.rounds
        (node,) = rnd.nodes
        cfg = dict(node.case_config)
        assert cfg["nproc"] == 4 and cfg["each"] is True, model
        override = REPO / "vendors" / "nvidia" / model / "config_acceptance.yaml"
        assert override in [Path(f) for f in case.config_files], model
        for key, value in yaml.safe_load(override.read_text()).items():
            assert cfg[key] == value, (model, key)
    llm = dict(by_model["llm"].rounds[0].nodes[0].case_config)
    assert llm["preset"] == "1b" and llm["min_steps"] == 120        # the vendor's 1B shape, a short window
    assert dict(by_model["collectives"].rounds[0].nodes[0].case_config)["sizes"][-1] == "4G"


def test_it_plans_every_host_of_a_cluster(tmp_path):
    plan = build_plan(nvidia_config(tmp_path, ("10.0.0.1", "10.0.0.2", "10.0.0.3")), "run-acceptance",
                      {h: 8 for h in ("10.0.0.1", "10.0.0.2", "10.0.0.3")})
    for case in plan.cases:
        assert [n.host.address for n in case.rounds[0].nodes] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def test_the_pairwise_network_test_uncommented_on_a_cluster(tmp_path):
    text = ACCEPTANCE.read_text().replace('  # "p2p:pytorch:acceptance_net:pairs:1:1": null',
                                          '  "p2p:pytorch:acceptance_net:pairs:1:1": null')
    data = yaml.safe_load(text)
    data.update(VENDOR="nvidia", FLAGPERF_LOG_PATH=str(tmp_path / "result"), CLUSTER="cluster.yaml")
    (tmp_path / "cluster.yaml").write_text("HOSTS: [10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4]\n")
    (tmp_path / "acceptance.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    plan = build_plan(load_config(tmp_path / "acceptance.yaml"), "run-acceptance",
                      {f"10.0.0.{i}": 8 for i in range(1, 5)})
    (pairs,) = [c for c in plan.cases if c.case.pairs]
    assert len(pairs.rounds) == 3 and all(len(r.nodes) == 4 for r in pairs.rounds)   # 3 stages of 2 pairs
    cfg = dict(pairs.rounds[0].nodes[0].case_config)
    assert cfg["pairs"] == [[0, 1]] and cfg["sizes"] == ["1G"] and cfg["nproc"] == 1 and cfg["nnodes"] == 2


@pytest.mark.parametrize("name", sorted(p.name for p in REPO.glob("vendors/nvidia/*/config_acceptance*.yaml")))
def test_override_keys_are_keys_the_benchmark_reads(name):
    """A key the benchmark does not know would be ignored without a word: every key of an acceptance override is
    one the benchmark's case_config.yaml documents."""
    for path in REPO.glob(f"vendors/nvidia/*/{name}"):
        model = path.parent.name
        known = yaml.safe_load((REPO / "benchmarks" / model / "case_config.yaml").read_text())
        assert set(yaml.safe_load(path.read_text())) <= set(known), path


def _benchmark(model, monkeypatch):
    """benchmarks/<model>/main.py as a module, its folder first on sys.path as when it runs as a script (its own
    modules: llm's data.py, model.py); it puts benchmarks/ there itself for the ``common`` harness."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks" / model))
    for own in ("data", "model"):
        monkeypatch.delitem(sys.modules, own, raising=False)
    spec = importlib.util.spec_from_file_location(f"acceptance_{model}_main", REPO / "benchmarks" / model / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", MODELS)
def test_the_benchmark_accepts_the_acceptance_values(tmp_path, model, capsys, monkeypatch):
    pytest.importorskip("torch")
    plan = build_plan(nvidia_config(tmp_path), "run-acceptance", {"localhost": 4})
    (case,) = [c for c in plan.cases if c.case.model == model]
    cfg = dict(case.rounds[0].nodes[0].case_config)
    module = _benchmark(model, monkeypatch)
    try:
        if model == "gemm":
            c = module.read_config(cfg, SimpleNamespace(is_cuda=False, device=SimpleNamespace(type="cpu")))
            assert c["dtypes"] == ["bf16", "fp16", "fp32", "fp64"] and c["sustained_s"] == 4    # fp8: CUDA only
        else:
            c = module.read_config(cfg)
    except SystemExit as exc:       # harness.config_error
        pytest.fail(f"{model}: the acceptance values are refused: {capsys.readouterr().err.strip()} ({exc})")
    finally:
        for name in (f"acceptance_{model}_main", "data", "model"):
            sys.modules.pop(name, None)
    if model == "p2p":
        assert c["pairs"] == "all" and c["max_seconds_per_pair"] == 2
