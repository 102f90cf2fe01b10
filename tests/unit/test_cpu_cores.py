"""nproc above the cores of a CPU host: the config's load warns for localhost (its cores are known there), the host
check warns for every other host from the cores its probe counted; one line each, naming the host, its cores, the
nproc and what the figures then mean. It never fails the check."""

from flagperf.checks import HostCheck, core_warnings, ranks_per_host
from flagperf.pipeline import Run
from flagperf.plan import build_plan
from tests.unit.fakebackend import FakeBackend, make_config

CPU = type("V", (), {"device": "cpu"})()
GPU = type("V", (), {"device": "cuda"})()


def ok(host, cores):
    return HostCheck(host, "ok", "fake", "", {"cpu_count": cores, "python": [3, 11, 0]})


def test_a_cpu_host_with_fewer_cores_than_ranks_is_named():
    (line,) = core_warnings(CPU, [ok("10.0.0.1", 2), ok("10.0.0.2", 8)], {"10.0.0.1": 4, "10.0.0.2": 4})
    assert line.startswith("host 10.0.0.1: nproc 4 is above its 2 CPU core(s): the ranks share cores")
    assert "not what the host delivers" in line and "at most 2" in line


def test_no_warning_where_it_does_not_apply():
    assert core_warnings(CPU, [ok("10.0.0.1", 4)], {"10.0.0.1": 4}) == []          # as many ranks as cores
    assert core_warnings(GPU, [ok("10.0.0.1", 2)], {"10.0.0.1": 4}) == []          # ranks on accelerators
    assert core_warnings(CPU, [ok("localhost", 1)], {"localhost": 4}) == []        # said at load already
    assert core_warnings(CPU, [ok("10.0.0.1", None)], {"10.0.0.1": 4}) == []       # cores not counted
    failed = HostCheck("10.0.0.1", "timeout", "x", "", {"cpu_count": 1})
    assert core_warnings(CPU, [failed], {"10.0.0.1": 4}) == []


def test_ranks_per_host_adds_nodes_of_one_round_on_one_host(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:2:3:1", "gemm:pytorch:local:1:auto:1"],
                      hosts=("10.0.0.1", "10.0.0.1"))
    assert ranks_per_host(build_plan(cfg, "run-x")) == {"10.0.0.1": 6}
    cfg = make_config(tmp_path / "b", ["gemm:pytorch:local:1:auto:1"], hosts=("10.0.0.1", "10.0.0.2"))
    assert ranks_per_host(build_plan(cfg, "run-x")) == {"10.0.0.1": 2}      # auto: 2 ranks on the cpu vendor


class FewCores(FakeBackend):
    def probe(self, hosts, need):
        return [HostCheck(c.host, c.outcome, c.detail, c.remedy, {**(c.info or {}), "cpu_count": 1})
                for c in super().probe(hosts, need)]


def test_a_run_warns_after_the_check_and_goes_on(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:2:1"], hosts=("10.0.0.1",))
    said = []
    code = Run(build_plan(cfg, "run20250101000000"), say=said.append, backend=FewCores()).execute()
    assert code == 0, said
    warned = [m for m in said if "nproc 2 is above its 1 CPU core(s)" in m]
    assert len(warned) == 1 and "warning: host 10.0.0.1: " in warned[0], said
