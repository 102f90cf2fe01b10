"""nnodes ``pairs``: a 2-node job on every pair of hosts, n/2 disjoint pairs at a time (a round-robin schedule).
The case key and its config errors, the schedule, the plan (masters, ports, node ranks, directories), the dry
run, the pipeline on the FakeBackend (a pair failing stops its other node and no other pair), and the pair
matrix with its findings (results.pairs) on synthetic summaries."""
import itertools
import json
import re
import zlib

import pytest

from flagperf.config import CaseSpec, load_config
from flagperf.errors import EXIT_CASE_FAILED, ConfigError
from flagperf.pipeline import Run
from flagperf.plan import build_plan, pair_schedule
from flagperf.records import VerdictReason
from flagperf.render import plan_lines
from flagperf.results.interpret import Status
from flagperf.results.pairs import pair_findings, pair_findings_by_host, pair_lines, pair_matrix
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary

from tests.unit.fakebackend import FakeBackend, NodeScript, finished_record, make_config
from tests.unit.test_flagperf_training import cluster_conf, make_tree, training_conf

RUN_ID = "run20250101000000"
HOSTS = ("h1", "h2", "h3", "h4")
KEY = "gemm:pytorch:H100:pairs:2:2"
NAME = "gemm-pytorch-H100-pairsx2"


# ---------------------------------------------------------------------------------------------- case key
@pytest.mark.parametrize("field", ["pairs", "Pairs", "PAIRS", " pairs "])
def test_pairs_is_parsed_case_insensitively(field):
    case = CaseSpec.parse(f"p2p:pytorch:H100:{field}:8:1")
    assert case.pairs and not case.each and case.nproc == 8 and case.name == "p2p-pytorch-H100-pairsx8"
    assert CaseSpec.parse("p2p:pytorch:H100:pairs:auto:1").name == "p2p-pytorch-H100-pairsxauto"
    assert not CaseSpec.parse("p2p:pytorch:H100:2:8:1").pairs and not CaseSpec.parse("p2p:pytorch:H:each:1:1").pairs


@pytest.mark.parametrize("key, message", [
    ("p2p:pytorch:H100:pair:8:1", "nnodes must be a positive integer, each or pairs, got 'pair'"),
    ("p2p:pytorch:H100:pairsx:8:1", "nnodes must be a positive integer, each or pairs, got 'pairsx'"),
    ("p2p:pytorch:H100:1:pairs:1", "nproc must be a positive integer or auto, got 'pairs'"),
    ("p2p:pytorch:H100:pairs:8:pairs", "repeat must be a positive integer, got 'pairs'"),
])
def test_pairs_only_in_nnodes(key, message):
    with pytest.raises(ValueError) as exc:
        CaseSpec.parse(key)
    assert str(exc.value) == message


# ---------------------------------------------------------------------------------------------- config
def config_error(tmp_path, hosts, key=KEY, cluster_text=None) -> list:
    if cluster_text is not None:
        make_config(tmp_path, ["gemm:pytorch:H100:1:2:1"])     # the test config, with a case that loads
        (tmp_path / "test.yaml").write_text((tmp_path / "test.yaml").read_text().replace(
            '"gemm:pytorch:H100:1:2:1"', f'"{key}"'))
        (tmp_path / "cluster.yaml").write_text(cluster_text)
        with pytest.raises(ConfigError) as exc:
            load_config(tmp_path / "test.yaml", detect=lambda: ("cpu", "test"))
        return exc.value.problems
    with pytest.raises(ConfigError) as exc:
        make_config(tmp_path, [key], hosts=hosts)
    return exc.value.problems


@pytest.mark.parametrize("hosts", [("h1",), ("localhost",), ("h1", "h1")])
def test_fewer_than_two_hosts_is_one_line(tmp_path, hosts):
    (problem,) = config_error(tmp_path, hosts)
    assert problem == (f"{tmp_path / 'test.yaml'}:8: CASES[{KEY!r}]: nnodes pairs needs at least 2 hosts in HOSTS, "
                       f"{tmp_path / 'cluster.yaml'} lists 1")


def test_a_scheduler_without_a_host_list_is_one_line(tmp_path):
    (problem,) = config_error(tmp_path, (), cluster_text="SCHEDULER: slurm\n")
    assert problem == (f"{tmp_path / 'test.yaml'}:8: CASES[{KEY!r}]: nnodes pairs pairs the hosts of HOSTS, but "
                       f"SCHEDULER 'slurm' picks its nodes itself; list the hosts (SCHEDULER: ssh) or give a "
                       f"number of nodes")
    assert "\n" not in problem


def test_localhost_beside_ssh_hosts_and_ports_past_65535(tmp_path):
    (problem,) = config_error(tmp_path / "a", ("localhost", "h2", "h3"))
    assert problem.endswith("nnodes pairs: 'localhost' is listed beside SSH hosts, which cannot reach its "
                            "MASTER_ADDR 127.0.0.1; list this machine by an address they can reach")
    (problem,) = config_error(tmp_path / "b", (), cluster_text="HOSTS: [a, b, c, d, e]\nMASTER_PORT: 65535\n")
    assert "nnodes pairs: the 2 simultaneous pair jobs listen on MASTER_PORT 65535 to 65536, past 65535" in problem
    cfg = make_config(tmp_path / "d", [KEY], hosts=HOSTS + ("h2",))     # h2 twice: paired once
    (case,) = cfg.test.cases
    assert case.pairs and case.nnodes == 5 and case.nproc == 2


def test_a_flagperf_training_case_cannot_run_as_pairs(tmp_path):
    tree = make_tree(tmp_path, shape=(2, 8))
    with pytest.raises(ConfigError) as exc:
        load_config(training_conf(tmp_path, tree, ["m_pytorch:pytorch:A100:pairs:8:1"]),
                    cluster_conf(tmp_path, hosts=("10.0.0.1", "10.0.0.2")))
    assert exc.value.problems == [
        f"{tmp_path / 'test_conf.py'}: CASES['m_pytorch:pytorch:A100:pairs:8:1']: nnodes pairs runs flagperf's "
        f"benchmarks and toolkits, not a FlagPerf training case (its launcher names its round folders by number); "
        f"give it a number of nodes"]


# ---------------------------------------------------------------------------------------------- schedule
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16])
def test_round_robin_pairs_every_two_hosts_once_and_no_host_twice_in_a_stage(n):
    stages = pair_schedule(n)
    assert len(stages) == (n - 1 if n % 2 == 0 else n)
    seen = []
    for stage in stages:
        assert len(stage) == n // 2
        hosts = [h for pair in stage for h in pair]
        assert len(hosts) == len(set(hosts))
        assert all(0 <= a < b < n for a, b in stage)
        seen += stage
    assert sorted(seen) == list(itertools.combinations(range(n), 2))
    if n % 2:       # an odd number: every host sits out exactly one stage
        idle = [set(range(n)) - {h for p in stage for h in p} for stage in stages]
        assert sorted(h for s in idle for h in s) == list(range(n))


@pytest.mark.parametrize("n", [0, 1])
def test_round_robin_of_fewer_than_two_hosts_is_empty(n):
    assert pair_schedule(n) == []


# ---------------------------------------------------------------------------------------------- plan
def test_plan_every_stage_is_a_round_of_disjoint_two_node_jobs(tmp_path):
    cfg = make_config(tmp_path, [KEY], hosts=HOSTS, vendor="nvidia")
    plan = build_plan(cfg, RUN_ID)
    (case,) = plan.cases
    assert case.name == NAME and case.case.pairs and case.case.nnodes == 4
    assert [h.address for h in plan.hosts] == list(HOSTS) and sorted(h.address for h in case.hosts) == list(HOSTS)
    assert [r.local_dir.name for r in case.rounds] == [f"round{k}-stage{s}" for k in (1, 2) for s in (1, 2, 3)]
    assert [(r.index, r.repeat, r.stage) for r in case.rounds] == [
        (1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 2, 1), (5, 2, 2), (6, 2, 3)]
    pairs = []
    for rnd in case.rounds:
        assert len(rnd.nodes) == 4 and len({n.host.address for n in rnd.nodes}) == 4
        assert rnd.jobs == [[rnd.nodes[0].label, rnd.nodes[1].label], [rnd.nodes[2].label, rnd.nodes[3].label]]
        for j in (0, 1):
            a, b = rnd.nodes[2 * j], rnd.nodes[2 * j + 1]
            assert HOSTS.index(a.host.address) < HOSTS.index(b.host.address)     # node 0: the first in HOSTS
            assert (a.node_rank, b.node_rank, a.job, b.job) == (0, 1, j, j)
            assert (a.ranks, b.ranks) == ((0, 1), (2, 3))
            for n in (a, b):
                env = n.launch.env
                assert n.master_addr == a.host.address and n.master_port == 29650 + j
                assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["NNODES"], env["NODE_RANK"], env["WORLD_SIZE"],
                        env["LOCAL_WORLD_SIZE"]) == (a.host.address, str(29650 + j), "2", str(n.node_rank), "4", "2")
                assert n.launch.nnodes == 2 and n.case_config["nnodes"] == 2 and n.case_config["pairwise"] is True
                assert n.label == f"{n.host.address}_noderank{n.node_rank}"
                assert str(n.local_dir).endswith(f"{RUN_ID}/{NAME}/{rnd.local_dir.name}/{n.label}")
                assert n.node_dir.endswith(f"{RUN_ID}/{NAME}/{rnd.local_dir.name}/{n.label}")
            pairs.append((a.host.address, b.host.address))
    assert sorted(pairs) == sorted(list(itertools.combinations(HOSTS, 2)) * 2)
    # a plain case keeps round<k> and no job
    plain = build_plan(make_config(tmp_path / "p", ["gemm:pytorch:H100:2:2:1"], hosts=HOSTS, vendor="nvidia"),
                       RUN_ID)
    (rnd,) = plain.cases[0].rounds
    assert rnd.local_dir.name == "round1" and rnd.stage is None and rnd.jobs == []
    assert "pairwise" not in rnd.nodes[0].case_config


def test_plan_of_an_odd_number_of_hosts_lets_one_sit_out_each_stage(tmp_path):
    hosts = HOSTS + ("h5",)
    (case,) = build_plan(make_config(tmp_path, ["gemm:pytorch:H100:pairs:1:1"], hosts=hosts), RUN_ID).cases
    assert len(case.rounds) == 5 and all(len(r.nodes) == 4 for r in case.rounds)
    first = [n.host.address for n in case.rounds[0].nodes]
    assert [h.address for h in case.hosts] == first + [h for h in hosts if h not in first]   # every host, once
    idle = [set(hosts) - {n.host.address for n in r.nodes} for r in case.rounds]
    assert sorted(h for s in idle for h in s) == sorted(hosts)
    for rnd in case.rounds:
        assert sorted(n.master_port for n in rnd.nodes) == [29650, 29650, 29651, 29651]


def test_dry_run_shows_the_schedule(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:H100:pairs:2:1"], hosts=HOSTS + ("h5",))
    text = "\n".join(plan_lines(build_plan(cfg, RUN_ID), FakeBackend()))
    assert ("case gemm-pytorch-H100-pairsx2  [gemm:pytorch:H100:pairs:2:1]  pairs: every pair of the 5 hosts "
            "(10 pair(s)) as a 2-node job of 2 node(s) x 2 rank(s), 2 disjoint pair(s) at a time") in text
    assert "1 round(s) x 5 stage(s)" in text
    assert "round 1 = repeat 1 stage 1: h2 <-> h5 (29650), h3 <-> h4 (29651); sits out: h1" in text
    assert "round 5 = repeat 1 stage 5: h1 <-> h2 (29650), h4 <-> h5 (29651); sits out: h3" in text
    assert "node 1 on h4: global ranks 2, 3; MASTER_ADDR=h3 MASTER_PORT=29651 WORLD_SIZE=4" in text


def test_dry_run_through_the_cli(tmp_path, write, run_cli):
    write(tmp_path, "cluster.yaml", "HOSTS: [10.0.0.1, 10.0.0.2, 10.0.0.3]\nMASTER_PORT: 29700\n")
    conf = write(tmp_path, "test.yaml", """\
        VENDOR: cpu
        RUNTIME: bare
        CLUSTER: cluster.yaml
        FLAGPERF_LOG_PATH: logs
        CASES:
          "gemm:pytorch:local:pairs:1:1": null
        """)
    code, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert code == 0, out + err
    assert "round 1 = repeat 1 stage 1: 10.0.0.2 <-> 10.0.0.3 (29700); sits out: 10.0.0.1" in out
    assert "round 3: " in out and "gemm-pytorch-local-pairsx1/round1-stage3" in out
    assert not (tmp_path / "logs").exists()
    write(tmp_path, "cluster.yaml", "HOSTS: [10.0.0.1]\n")
    code, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip() == (f"flagperf: config error: {conf}:6: CASES['gemm:pytorch:local:pairs:1:1']: nnodes pairs "
                           f"needs at least 2 hosts in HOSTS, {tmp_path / 'cluster.yaml'} lists 1")


# ---------------------------------------------------------------------------------------------- pipeline
def run(tmp_path, scripts, hosts=HOSTS, key="gemm:pytorch:H100:pairs:1:1", **kw):
    cfg = make_config(tmp_path, [key], hosts=hosts, **kw)
    plan = build_plan(cfg, RUN_ID)
    said: list = []
    backend = FakeBackend(scripts=scripts)
    code = Run(plan, say=said.append, backend=backend).execute()
    return code, Summary.load(plan.run_dir / "summary.json"), said, plan, backend


def pair_of(node, plan):
    rnd = next(r for c in plan.cases for r in c.rounds if r.index == node.launch.round)
    job = [n for n in rnd.nodes if n.job == node.job]
    return job[0].host.address, job[1].host.address


def test_every_pair_passes_and_is_in_the_matrix(tmp_path):
    values = {("h1", "h4"): 10.0, ("h2", "h3"): 10.2, ("h1", "h3"): 9.9, ("h2", "h4"): 10.1, ("h1", "h2"): 10.0,
              ("h3", "h4"): 4.0}
    holder: dict = {}

    def script(node):
        pair = pair_of(node, holder["plan"])
        return NodeScript(records={0: [finished_record(value=values[pair], metric="bw_uni", unit="GB/s")]})
    cfg = make_config(tmp_path, ["gemm:pytorch:H100:pairs:1:1"], hosts=HOSTS)
    holder["plan"] = plan = build_plan(cfg, RUN_ID)
    said: list = []
    code = Run(plan, say=said.append, backend=FakeBackend(scripts=script)).execute()
    s = Summary.load(plan.run_dir / "summary.json")
    (c,) = s.cases
    assert c.pairs and not c.each and c.status == "passed" and len(c.rounds) == 3
    assert [r.dir for r in c.rounds] == [f"gemm-pytorch-H100-pairsx1/round1-stage{i}" for i in (1, 2, 3)]
    for r in c.rounds:
        assert r.status == "passed" and [n.node_rank for n in r.nodes] == [0, 1, 0, 1]
        assert all(n.status == "passed" and n.finished["metric"] == "bw_uni" for n in r.nodes)
    data = json.loads((plan.run_dir / "summary.json").read_text())
    assert data["cases"][0]["pairs"] is True and "each" not in data["cases"][0]
    matrix = pair_matrix(s)
    assert {(p.a, p.b): p.value for p in matrix} == values
    assert all(p.jobs == 1 and p.failed == 0 for p in matrix)
    (finding,) = pair_findings(s)
    assert finding.subject == "host h3 <-> host h4" and finding.severity == "reject" and finding.source == "link"
    assert c.status == "passed" and code == EXIT_CASE_FAILED     # the case passed; a node rejected fails the run
    verdicts = {v.host: v for v in s.verdicts}
    for host in ("h3", "h4"):
        assert verdicts[host].verdict == "reject"
        assert [r.subject for r in verdicts[host].reasons if r.source == "link"] == ["host h3 <-> host h4"]
    assert verdicts["h1"].verdict == verdicts["h2"].verdict == "accept"
    assert any("round 2/3 (round1-stage2)" in line for line in said), said
    assert any(line.startswith("ERROR: LINK reject: gemm-pytorch-H100-pairsx1: host h3 <-> host h4: bw_uni 4 GB/s")
               for line in said), said
    assert any("  h3 <-> h4: 4 GB/s (40% of the median 10), score" in line for line in said), said


def test_a_failing_pair_stops_its_other_node_and_no_other_pair(tmp_path):
    holder: dict = {}

    def script(node):
        pair = pair_of(node, holder["plan"])
        if pair == ("h1", "h3"):        # stage 2: h1 <-> h3 and h2 <-> h4
            return NodeScript(exit_code=1, rank_exit={1: 5}) if node.node_rank == 1 else NodeScript(hang=True)
        return NodeScript(delay_s=0.3)
    cfg = make_config(tmp_path, ["gemm:pytorch:H100:pairs:1:1"], hosts=HOSTS)
    holder["plan"] = plan = build_plan(cfg, RUN_ID)
    said: list = []
    backend = FakeBackend(scripts=script)
    code = Run(plan, say=said.append, backend=backend).execute()
    assert code == EXIT_CASE_FAILED
    s = Summary.load(plan.run_dir / "summary.json")
    r1, r2, r3 = s.cases[0].rounds
    assert r1.status == r3.status == "passed" and r2.status == "failed"
    assert r2.failure.reason == "h1 <-> h3: rank 1 failed (exit code 5)"
    assert r2.failure.nodes == ("h1_noderank0", "h3_noderank1")
    st = {n.node: n.status for n in r2.nodes}
    assert st == {"h1_noderank0": "failed", "h3_noderank1": "failed", "h2_noderank0": "passed",
                  "h4_noderank1": "passed"}
    name = "gemm-pytorch-H100-pairsx1"
    assert backend.launchers[(name, 2, "h1_noderank0")].signals != []        # its pair partner was stopped
    assert backend.launchers[(name, 2, "h2_noderank0")].signals == []        # the other pair was not
    assert backend.launchers[(name, 2, "h4_noderank1")].signals == []
    assert any("stopping h1_noderank0, the other node of h3_noderank1's pair job" in line for line in said), said
    assert any("h3_noderank1 failed; the other pairs go on" in line for line in said), said
    (bad,) = [p for p in pair_matrix(s) if p.value is None]
    assert (bad.a, bad.b, bad.failed, bad.jobs) == ("h1", "h3", 1, 1)
    (finding,) = pair_findings(s)
    assert finding.subject == "host h1 <-> host h3" and finding.severity == "reject"
    assert "rank 1 failed (exit code 5)" in finding.detail


def test_a_node_that_cannot_start_keeps_its_partner_from_starting(tmp_path):
    from flagperf.backends import BackendError
    cfg = make_config(tmp_path, ["gemm:pytorch:H100:pairs:1:1"], hosts=HOSTS)
    plan = build_plan(cfg, RUN_ID)
    backend = FakeBackend()
    original = backend.prepare_node

    def prepare(node):
        if node.label == "h4_noderank1" and node.launch.round == 1:     # stage 1: h1 <-> h4, h2 <-> h3
            raise BackendError("h4_noderank1: cannot prepare the node: disk full")
        original(node)
    backend.prepare_node = prepare
    Run(plan, say=lambda _: None, backend=backend).execute()
    s = Summary.load(plan.run_dir / "summary.json")
    r1 = s.cases[0].rounds[0]
    name = "gemm-pytorch-H100-pairsx1"
    assert ("spawn_launcher", name, 1, "h1_noderank0") not in backend.calls
    assert ("spawn_launcher", name, 1, "h2_noderank0") in backend.calls
    assert {n.node: n.status for n in r1.nodes} == {"h1_noderank0": "error", "h4_noderank1": "error",
                                                     "h2_noderank0": "passed", "h3_noderank1": "passed"}
    assert r1.status == "error" and r1.failure.reason.startswith("h1 <-> h4: ")
    assert all(r.status == "passed" for r in s.cases[0].rounds[1:])
    assert pair_findings(s) == []       # a backend error is no link's doing


# ---------------------------------------------------------------------------------------------- scoring
def summary_of(hosts, value, repeat=1, metric="bw_uni", unit="GB/s", higher=True) -> Summary:
    """A pairs case's summary with ``value(a, b)`` as the figure of pair a <-> b (None: its job failed)."""
    rounds, index = [], 0
    for k in range(1, repeat + 1):
        for s, stage in enumerate(pair_schedule(len(hosts)), 1):
            index += 1
            nodes = []
            for a, b in stage:
                v = value(hosts[a], hosts[b])
                fin = None if v is None else {"metric": metric, "value": v, "unit": unit, "higher_is_better": higher}
                for rank, h in enumerate((hosts[a], hosts[b])):
                    failure = None
                    if v is None:
                        from flagperf.records import Failure
                        failure = Failure("rank 1 failed (exit code 1)", f"{hosts[b]}_noderank1", 1)
                    nodes.append(NodeSummary(f"{h}_noderank{rank}", h, rank, status=Status.FAILED if v is None else
                                             Status.PASSED, failure=failure, finished=fin))
            rounds.append(RoundSummary(index, f"c/round{k}-stage{s}", Status.PASSED, nodes=nodes))
    case = CaseSummary("c", "p2p:pytorch:cpu:pairs:1:1", "p2p", "pytorch", "cpu", len(hosts), 1, repeat,
                       rounds=rounds, pairs=True)
    return Summary("run1", "/r", "0", "now", cases=[case])


def jitter(a, b) -> float:
    """A deterministic +-3% spread per pair, as real measurements have."""
    return 1.0 + ((zlib.crc32(f"{a}-{b}".encode()) % 7) - 3) / 100.0


H8 = tuple(f"h{i}" for i in range(1, 9))


@pytest.mark.parametrize("hosts", [HOSTS[:2], HOSTS[:3], HOSTS, H8])
def test_uniform_pairs_point_to_nothing(hosts):
    s = summary_of(hosts, lambda a, b: 20.0 * jitter(a, b), repeat=2)
    matrix = pair_matrix(s)
    assert len(matrix) == len(hosts) * (len(hosts) - 1) // 2
    assert all(p.jobs == 2 and len(p.values) == 2 and not p.slow and p.host is None for p in matrix)
    assert pair_findings(s) == [] and pair_findings_by_host(s) == {}


@pytest.mark.parametrize("hosts", [HOSTS[:3], HOSTS, H8])
def test_one_slow_pair_is_named_as_a_link(hosts):
    a, b = hosts[1], hosts[2]
    s = summary_of(hosts, lambda x, y: 16.0 if (x, y) == (a, b) else 20.0 * jitter(x, y))
    (finding,) = pair_findings(s)
    assert isinstance(finding, VerdictReason)
    assert (finding.source, finding.severity, finding.subject, finding.case) == \
        ("link", "degraded", f"host {a} <-> host {b}", "c")
    assert finding.detail.startswith("bw_uni 16 GB/s against a median of ")
    assert re.search(r"over the pairs \((7[89]|8[0-3])%\), robust score", finding.detail), finding.detail
    assert f"check the path between {a} and {b}" in finding.remedy
    assert finding.gpu is None
    assert pair_findings_by_host(s) == {a: [finding], b: [finding]}
    slow = [p for p in pair_matrix(s) if p.slow]
    assert [(p.a, p.b, p.host) for p in slow] == [(a, b, None)] and slow[0].score > 3.5
    assert abs(slow[0].ratio - 0.8) < 0.03


def test_three_hosts_name_the_host_whose_both_pairs_are_slow():
    s = summary_of(HOSTS[:3], lambda x, y: 12.0 * jitter(x, y) if "h1" in (x, y) else 20.0 * jitter(x, y))
    (finding,) = pair_findings(s)
    assert (finding.subject, finding.severity) == ("host h1 (all its pairs)", "reject")


@pytest.mark.parametrize("hosts", [HOSTS, HOSTS + ("h5",), H8])
def test_a_host_whose_every_pair_is_slow_is_named(hosts):
    bad = hosts[-1]
    s = summary_of(hosts, lambda x, y: 16.0 * jitter(x, y) if bad in (x, y) else 20.0 * jitter(x, y))
    (finding,) = pair_findings(s)
    assert (finding.source, finding.severity, finding.subject) == ("link", "degraded", f"host {bad} (all its pairs)")
    assert finding.detail.startswith(f"every pair with {bad} is below the median of ")
    assert all(f"{h} " in finding.detail for h in hosts if h != bad)
    assert f"check host {bad}'s network interface" in finding.remedy
    assert pair_findings_by_host(s) == {bad: [finding]}
    matrix = pair_matrix(s)
    assert {(p.a, p.b) for p in matrix if p.host == bad} == {p for p in itertools.combinations(hosts, 2) if bad in p}
    assert not any(p.slow for p in matrix if bad not in (p.a, p.b))


def test_more_than_a_quarter_below_is_reject_and_lower_is_better_is_honoured():
    s = summary_of(HOSTS, lambda x, y: 14.0 if (x, y) == ("h1", "h2") else 20.0)
    (finding,) = pair_findings(s)
    assert finding.severity == "reject" and finding.subject == "host h1 <-> host h2"
    s = summary_of(HOSTS, lambda x, y: 12.0 * jitter(x, y) if "h4" in (x, y) else 20.0 * jitter(x, y))
    (finding,) = pair_findings(s)
    assert finding.severity == "reject" and finding.subject == "host h4 (all its pairs)"
    s = summary_of(HOSTS, lambda x, y: 3.0 if "h2" in (x, y) else 1.0, metric="latency_us", unit="us", higher=False)
    (finding,) = pair_findings(s)
    assert finding.subject == "host h2 (all its pairs)" and finding.severity == "reject"
    s = summary_of(HOSTS, lambda x, y: 0.5 if "h2" in (x, y) else 1.0, metric="latency_us", unit="us", higher=False)
    assert pair_findings(s) == []       # faster than the rest is no fault


def test_failed_pairs_are_links_or_a_host_and_nothing_when_every_pair_failed():
    s = summary_of(HOSTS, lambda x, y: None if (x, y) == ("h1", "h4") else 20.0)
    (finding,) = pair_findings(s)
    assert (finding.subject, finding.severity) == ("host h1 <-> host h4", "reject")
    assert "failed in 1 of 1 round(s) and passed in none: rank 1 failed (exit code 1)" in finding.detail
    s = summary_of(HOSTS, lambda x, y: None if "h4" in (x, y) else 20.0)
    (finding,) = pair_findings(s)
    assert (finding.subject, finding.severity) == ("host h4 (all its pairs)", "reject")
    assert pair_findings(summary_of(HOSTS, lambda x, y: None)) == []
    assert all(p.value is None and p.failed == 1 for p in pair_matrix(summary_of(HOSTS, lambda x, y: None)))


def test_a_flaky_pair_is_degraded():
    calls: dict = {}

    def value(x, y):
        calls[(x, y)] = calls.get((x, y), 0) + 1
        return None if (x, y) == ("h2", "h3") and calls[(x, y)] == 1 else 20.0
    s = summary_of(HOSTS, value, repeat=3)
    (finding,) = pair_findings(s)
    assert (finding.subject, finding.severity) == ("host h2 <-> host h3", "degraded")
    assert finding.detail.startswith("the 2-node job failed in 1 of 3 round(s)")
    (p,) = [p for p in pair_matrix(s) if (p.a, p.b) == ("h2", "h3")]
    assert p.values == (20.0, 20.0) and p.value == 20.0 and not p.slow


def test_pair_lines_show_the_matrix_and_the_findings():
    s = summary_of(HOSTS, lambda x, y: 16.0 if "h3" in (x, y) else 20.0)
    lines = pair_lines(s)
    assert lines[0] == "c: host pairs by bw_uni (GB/s, higher is better)"
    assert "  h1 <-> h3: 16 GB/s (80% of the median 20); SLOW: host h3" in lines
    assert "  h1 <-> h2: 20 GB/s (100% of the median 20), score 0" in lines
    assert lines[-1].startswith("LINK degraded: c: host h3 (all its pairs): every pair with h3")


def test_cases_other_than_pairs_have_no_matrix():
    s = summary_of(HOSTS, lambda x, y: 20.0)
    s.cases[0].pairs = False
    assert pair_matrix(s) == [] and pair_findings(s) == [] and pair_lines(s) == []


def test_the_pairs_flag_survives_summary_json(tmp_path):
    s = summary_of(HOSTS, lambda x, y: 12.0 if (x, y) == ("h1", "h2") else 20.0)
    s.save(tmp_path / "summary.json")
    back = Summary.load(tmp_path / "summary.json")
    assert back.cases[0].pairs and pair_findings(back) == pair_findings(s)


def test_containers_of_a_pairs_round_have_their_own_names(tmp_path):
    cfg = make_config(tmp_path, [KEY], hosts=HOSTS, vendor="nvidia", runtime="docker")
    (case,) = build_plan(cfg, RUN_ID).cases
    names = [n.container.name for r in case.rounds for n in r.nodes]
    assert len(names) == 24 and len(set(names)) == 24     # 2 repeats x 3 stages x 4 nodes
