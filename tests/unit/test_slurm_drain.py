"""SLURM_DRAIN_REJECTED without a cluster: the key, the drain reason (one line, bounded, no controls, no quote), and
the backend hook the finish stage calls with the node verdicts (Backend.act_on_verdicts). The drain itself, on the
real Slurm cluster the tests start, read back with `sinfo -R`: tests/e2e/test_slurm.py."""

import logging

from flagperf.backends import Backend
from flagperf.backends.slurm import DRAIN_REASON_MAX_CHARS, drain_reason
from flagperf.config import load_config
from flagperf.errors import EXIT_CASE_FAILED
from flagperf.options.slurm import SlurmOptions
from flagperf.pipeline import Run
from flagperf.plan import build_plan
from flagperf.records import GpuIdentity, NodeVerdict, VerdictReason
from flagperf.results.summary import Summary

from tests.unit.fakebackend import FakeBackend, NodeScript, make_config
from tests.unit.test_untrusted import PAYLOADS

GPU = GpuIdentity(2, "GPU-5c1d", "1654922001234", "00000000:19:00.0")


def _configs(tmp_path, cluster: str):
    (tmp_path / "cluster.yaml").write_text("SCHEDULER: slurm\n" + cluster)
    (tmp_path / "test_conf.yaml").write_text('VENDOR: cpu\nRUNTIME: bare\nCLUSTER: cluster.yaml\nCASES:\n'
                                             '  "gemm:pytorch:x:1:1:1": null\n')
    return tmp_path / "test_conf.yaml"


def test_the_key_is_off_by_default_and_a_bool(tmp_path, run_cli):
    opts = load_config(_configs(tmp_path, "")).cluster.options
    assert isinstance(opts, SlurmOptions) and opts.drain_rejected is False
    assert opts.to_dict()["SLURM_DRAIN_REJECTED"] is False
    assert load_config(_configs(tmp_path, "SLURM_DRAIN_REJECTED: true\n")).cluster.options.drain_rejected is True
    conf = _configs(tmp_path, "SLURM_DRAIN_REJECTED: sometimes\n")
    rc, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"flagperf: config error: {tmp_path / 'cluster.yaml'}:2: SLURM_DRAIN_REJECTED: expected ")
    (tmp_path / "ssh.yaml").write_text("HOSTS: [localhost]\nSLURM_DRAIN_REJECTED: true\n")
    rc, out, err = run_cli("run", "--config", conf, "--cluster", tmp_path / "ssh.yaml", "--dry-run")
    assert rc == 2 and "SLURM_DRAIN_REJECTED" in err       # a Slurm key: unknown under SCHEDULER ssh


def test_the_reason_is_the_run_id_and_the_first_reject_reason():
    v = NodeVerdict.of("gpu017", [VerdictReason("link", "degraded", "gpu 0 -> gpu 1", "slow link", "r"),
                                  VerdictReason("health", "reject", GPU.label(), "ECC uncorrected: 3", "r", GPU),
                                  VerdictReason("failure", "reject", "node", "rank 2 exited 1", "r")])
    assert drain_reason("run1", v) == ("flagperf run1: gpu 2 (GPU-5c1d, serial 1654922001234, pci "
                                       "00000000:19:00.0): ECC uncorrected: 3")
    node = NodeVerdict.of("n", [VerdictReason("failure", "reject", "node", "rank 2 exited 1", "r")])
    assert drain_reason("run1", node) == "flagperf run1: rank 2 exited 1"


def test_the_reason_is_one_bounded_line_without_controls_or_quotes():
    for name, p in PAYLOADS.items():
        v = NodeVerdict.of("n", [VerdictReason("health", "reject", p, p + '"end"\ud800', "r")])
        reason = drain_reason(f"run{p[:20]}", v)
        assert len(reason) <= DRAIN_REASON_MAX_CHARS, name
        assert reason.isprintable() and '"' not in reason and "  " not in reason, (name, reason)
        assert reason.startswith("flagperf run"), name


class Acting(FakeBackend):
    """A backend that records the verdicts it is given and answers one line per rejected node."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.acted = []

    def act_on_verdicts(self, verdicts, run_id):
        self.acted.append((list(verdicts), run_id))
        return [(False, f"acted on {v.host}: {v.verdict}") for v in verdicts if v.verdict == "reject"]


def test_the_finish_stage_gives_the_verdicts_to_the_backend(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:2:1"])
    plan = build_plan(cfg, "run20250101000000")
    backend = Acting(scripts=NodeScript(exit_code=1, rank_exit={1: 7}))
    said = []
    code = Run(plan, say=said.append, backend=backend).execute()
    assert code == EXIT_CASE_FAILED
    summary = Summary.load(plan.run_dir / "summary.json")
    ((verdicts, run_id),) = backend.acted          # once, after the verdicts were made
    assert run_id == "run20250101000000" and verdicts == summary.verdicts
    assert [(v.host, v.verdict) for v in verdicts] == [("localhost", "reject")]
    assert any("acted on localhost: reject" in line for line in said), said
    log = (plan.run_dir / "flagperf_run.log").read_text()
    assert "acted on localhost: reject" in log


def test_a_backend_does_nothing_with_the_verdicts_by_default():
    assert Backend.act_on_verdicts(FakeBackend(), [NodeVerdict.of("h", [])], "r") == []
    assert FakeBackend(log=logging.getLogger("x")).act_on_verdicts([], "r") == []
