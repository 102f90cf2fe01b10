"""Link scoring (flagperf/results/links.py): the p2p matrix read from a run's summary (medians over rounds, each
cases, nodes of a multi-node case, hostile payloads) and the findings on synthetic matrices: one slow link among
12, one slow GPU named as the GPU, a uniform matrix, 2 GPUs, a slow node, both directions, the network path."""
import json
import math
import random

import pytest

from flagperf.records import GpuIdentity, VerdictReason
from flagperf.results.interpret import Status
from flagperf.results.links import REJECT_SHORTFALL, RULE, link_findings, link_matrix
from flagperf.results.slownodes import SHORTFALL_FLOOR
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from flagperf.results.verdict import node_verdicts

UNI, BI = 370.0, 730.0


def matrix_node(n_gpus, uni=None, bi=None, node=0, host="h", noise=0.003, seed=1, gpus=None):
    """A matrix node as the p2p benchmark writes it: every ordered pair, uni from ``uni`` ({(a, b): GB/s}, else
    UNI with a little noise), bi per unordered pair (the same figure in both rows)."""
    rnd = random.Random(seed)
    uni, bi = uni or {}, bi or {}
    bis = {}
    links = []
    for a in range(n_gpus):
        for b in range(n_gpus):
            if a == b:
                continue
            key = (min(a, b), max(a, b))
            if key not in bis:
                bis[key] = bi.get(key, BI * (1 + rnd.uniform(-noise, noise)))
            links.append({"src": a, "dst": b, "src_rank": a, "dst_rank": b,
                          "uni_gbps": uni.get((a, b), UNI * (1 + rnd.uniform(-noise, noise))), "bi_gbps": bis[key]})
    return {"node": node, "host": host, "links": links,
            "gpus": gpus if gpus is not None else [{"gpu": g, "rank": g} for g in range(n_gpus)]}


def payload(*nodes, forced=False, benchmark="p2p", size="4G"):
    return {"benchmark": benchmark, "metric": "bw_uni", "value": 1.0, "unit": "GB/s", "higher_is_better": True,
            "metrics": {}, "checks": {"passed": True, "details": {"matrix": {
                "unit": "GB/s", "size": size, "network_forced": forced, "nodes": list(nodes), "cross_node": []}}},
            "env": {}}


def case(name, rounds, each=False, nproc=4, model="p2p"):
    return CaseSummary(name, f"{model}:pytorch:gpu:1:{nproc}:1", model, "pytorch", "gpu", 1, nproc, len(rounds),
                       rounds=rounds, each=each)


def one_node_round(fin, host="h", status=Status.PASSED, k=1):
    return RoundSummary(k, f"c/round{k}", status, finished=fin if status == Status.PASSED else None,
                        nodes=[NodeSummary(f"{host}_noderank0", host, 0)])


def each_round(fins_by_host, k=1):
    nodes = [NodeSummary(f"{h}_noderank0", h, 0, status=Status.PASSED, finished=f) for h, f in fins_by_host.items()]
    return RoundSummary(k, f"c/round{k}", Status.PASSED, finished=next(iter(fins_by_host.values())), nodes=nodes)


def summary(*cases):
    return Summary("run1", "/tmp/run1", "0.1", "now", cases=list(cases))


def single(n_gpus=4, **kw):
    return summary(case("p2p-pytorch-gpu-1x4", [one_node_round(payload(matrix_node(n_gpus, **kw)))]))


def subjects(findings):
    return [(h, r.subject, r.severity) for h, r in findings]


# ------------------------------------------------------------------------------------------------ the matrix
def test_matrix_medians_over_rounds_and_failed_rounds_left_out():
    rounds = [one_node_round(payload(matrix_node(2, uni={(0, 1): v})), k=k) for k, v in ((1, 100.0), (2, 300.0),
                                                                                       (3, 200.0))]
    rounds.append(one_node_round(None, status=Status.FAILED, k=4))
    (node,) = link_matrix(summary(case("p", rounds)))
    assert node.host == "h" and node.rounds == 3 and node.gpus == (0, 1) and node.size == "4G"
    assert node.uni[(0, 1)] == 200.0 and set(node.uni) == {(0, 1), (1, 0)} and set(node.bi) == {(0, 1)}
    d = node.to_dict()
    assert [(x["src"], x["dst"]) for x in d["links"]] == [(0, 1), (1, 0)]
    assert d["links"][0]["bi_gbps"] == d["links"][1]["bi_gbps"] == node.bi[(0, 1)]


def test_matrix_of_each_case_and_of_a_multi_node_case():
    each = case("p2p-each", [each_round({"a": payload(matrix_node(2)), "b": payload(matrix_node(3))})], each=True)
    multi_round = RoundSummary(1, "m/round1", Status.PASSED,
                               finished=payload(matrix_node(2, node=0, host="x"), matrix_node(2, node=1, host="y")),
                               nodes=[NodeSummary("10.0.0.1_noderank0", "10.0.0.1", 0),
                                      NodeSummary("10.0.0.2_noderank1", "10.0.0.2", 1)])
    multi = case("p2p-2x2", [multi_round])
    other = case("gemm", [one_node_round(payload(matrix_node(2), benchmark="gemm"))], model="gemm")
    got = [(n.case, n.host, n.gpus) for n in link_matrix(summary(each, multi, other))]
    # the host is the driver's name of the node (node rank -> host), not the name a rank printed
    assert got == [("p2p-each", "a", (0, 1)), ("p2p-each", "b", (0, 1, 2)), ("p2p-2x2", "10.0.0.1", (0, 1)),
                   ("p2p-2x2", "10.0.0.2", (0, 1))]


@pytest.mark.parametrize("bad", [
    "nodes", {"nodes": "x"}, {"nodes": [None, 1, "a", {"links": "x"}]},
    {"nodes": [{"node": 0, "links": [{"src": True, "dst": 1, "uni_gbps": 1.0}, {"src": 0, "dst": 0, "uni_gbps": 1.0},
                                     {"src": -1, "dst": 1, "uni_gbps": 1.0}, {"src": 0, "dst": 1, "uni_gbps": "9"},
                                     {"src": 0, "dst": 1, "uni_gbps": math.nan}, {"src": 0, "dst": 1, "uni_gbps": -5},
                                     {"src": 0, "dst": 10 ** 9, "uni_gbps": 1.0}, "link"]}]},
])
def test_malformed_matrices_give_no_links(bad):
    fin = payload()
    fin["checks"]["details"]["matrix"] = bad
    assert link_matrix(summary(case("p", [one_node_round(fin)]))) == []
    assert link_findings(summary(case("p", [one_node_round(fin)]))) == []


def test_reported_identity_strings_are_kept_only_when_plain():
    gpus = [{"gpu": 0, "uuid": "GPU-aaaa", "pci_bus_id": "00000000:19:00.0"},
            {"gpu": 1, "uuid": "GPU-\x1b[2Jx", "name": "x" * 500}]
    (node,) = link_matrix(single(2, gpus=gpus))
    assert node.reported == {0: {"uuid": "GPU-aaaa", "pci_bus_id": "00000000:19:00.0"}, 1: {}}


# ---------------------------------------------------------------------------------------------------- findings
def test_uniform_matrix_has_no_finding():
    assert link_findings(single(4)) == []
    assert link_findings(single(8, noise=0.02)) == []


def test_one_slow_link_among_twelve_is_named():
    ids = {"h": {i: GpuIdentity(i, f"GPU-{i}", f"serial{i}", f"00000000:1{i}:00.0") for i in range(4)}}
    findings = link_findings(single(4, uni={(0, 1): 180.0}), identities=ids)
    assert subjects(findings) == [("h", "gpu 0 -> gpu 1", "reject")]
    (host, r), = findings
    assert isinstance(r, VerdictReason) and r.source == "link" and r.case == "p2p-pytorch-gpu-1x4"
    assert r.gpu == ids["h"][0]
    # both GPUs named by their cards, the figure against the node's median
    assert ids["h"][0].label() in r.detail and ids["h"][1].label() in r.detail
    assert "180.0 GB/s vs the node's median 3" in r.detail and "-51%" in r.detail
    assert "nvidia-smi nvlink --status -i 0" in r.remedy and "-i 1" in r.remedy
    assert ids["h"][1].label() in r.remedy
    # a little slow (-11%): degraded, not reject
    assert subjects(link_findings(single(4, uni={(2, 3): 330.0}))) == [("h", "gpu 2 -> gpu 3", "degraded")]
    assert SHORTFALL_FLOOR < 0.11 < REJECT_SHORTFALL < 0.51
    # 3% slow: within the floor, nothing
    assert link_findings(single(4, uni={(2, 3): 359.0})) == []


def test_one_slow_gpu_is_named_as_the_gpu_not_its_links():
    slow = {(a, b): 200.0 for a in range(4) for b in range(4) if a != b and 2 in (a, b)}
    bi = {(a, b): 400.0 for a in range(4) for b in range(a + 1, 4) if 2 in (a, b)}
    findings = link_findings(single(4, uni=slow, bi=bi))
    assert subjects(findings) == [("h", "gpu 2 (unknown, serial unknown, pci unknown)", "reject")]
    r = findings[0][1]
    assert r.gpu is not None and r.gpu.index == 2
    assert "median of its links 200.0 GB/s" in r.detail and "2->0 200.0" in r.detail
    assert "nvidia-smi nvlink --status -i 2" in r.remedy
    # also on 3 and on 8 GPUs
    for n in (3, 8):
        slow = {(a, b): 200.0 for a in range(n) for b in range(n) if a != b and 1 in (a, b)}
        assert [s for _, s, _ in subjects(link_findings(single(n, uni=slow)))] == [
            "gpu 1 (unknown, serial unknown, pci unknown)"], n


def test_a_gpu_that_only_sends_slowly_is_named_as_the_gpu():
    slow = {(0, b): 150.0 for b in (1, 2, 3)}
    assert [s for _, s, _ in subjects(link_findings(single(4, uni=slow)))] == [
        "gpu 0 (unknown, serial unknown, pci unknown)"]


def test_two_slow_links_of_one_gpu_stay_links():
    findings = link_findings(single(4, uni={(0, 1): 200.0, (0, 2): 210.0}))
    assert subjects(findings) == [("h", "gpu 0 -> gpu 1", "reject"), ("h", "gpu 0 -> gpu 2", "reject")]


def test_both_directions_and_bi_of_one_pair_are_one_finding():
    findings = link_findings(single(4, uni={(1, 3): 200.0, (3, 1): 205.0}, bi={(1, 3): 400.0}))
    assert subjects(findings) == [("h", "gpu 1 <-> gpu 3", "reject")]
    detail = findings[0][1].detail
    assert "uni 1 -> 3: 200.0 GB/s" in detail and "uni 3 -> 1: 205.0 GB/s" in detail and "bi 1 <-> 3: 400.0" in detail


def test_two_gpus_one_host_cannot_be_judged_but_pooled_hosts_can():
    # one host of 2 GPUs: two uni figures and one bi, nothing to compare them with
    assert link_findings(single(2, uni={(0, 1): 100.0})) == []
    assert link_findings(single(2)) == []
    # an each case of 6 hosts of 2 GPUs: the slow direction of one host stands out among 12 links
    fins = {f"h{i}": payload(matrix_node(2, seed=i, uni={(0, 1): 150.0} if i == 3 else None)) for i in range(6)}
    findings = link_findings(summary(case("p2p-each", [each_round(fins)], each=True, nproc=2)))
    assert subjects(findings) == [("h3", "gpu 0 -> gpu 1", "reject")]


def test_a_node_whose_links_are_all_slow_is_named_as_the_node():
    slow_uni = {(a, b): 250.0 for a in range(4) for b in range(4) if a != b}
    slow_bi = {(a, b): 500.0 for a in range(4) for b in range(a + 1, 4)}
    fins = {f"h{i}": payload(matrix_node(4, seed=i, uni=slow_uni if i == 2 else None, bi=slow_bi if i == 2 else None))
            for i in range(5)}
    findings = link_findings(summary(case("p2p-each", [each_round(fins)], each=True)))
    assert subjects(findings) == [("h2", "node", "reject")]
    assert "every GPU link of the node is slow" in findings[0][1].detail
    assert "fabric" in findings[0][1].remedy


def test_network_forced_links_get_a_network_remedy_and_are_scored_on_their_own():
    # over the network ~4 GB/s a link, one at 2 GB/s; beside an NVLink case at ~370 GB/s, with which the network
    # figures are never pooled (else every forced link would be "slow")
    uni = {(a, b): 4.0 + 0.01 * a for a in range(4) for b in range(4) if a != b}
    uni[(0, 1)] = 2.0
    bi = {(a, b): 8.0 for a in range(4) for b in range(a + 1, 4)}
    forced = case("p2p-net", [one_node_round(payload(matrix_node(4, uni=uni, bi=bi), forced=True))])
    nvlink = case("p2p", [one_node_round(payload(matrix_node(4)))])
    findings = link_findings(summary(nvlink, forced))
    assert subjects(findings) == [("h", "gpu 0 -> gpu 1", "reject")]
    assert findings[0][1].case == "p2p-net" and "NIC" in findings[0][1].remedy
    assert [n.network_forced for n in link_matrix(summary(nvlink, forced))] == [False, True]


def test_identities_matched_by_the_reported_uuid_else_reported_else_index():
    gpus = [{"gpu": 0, "uuid": "GPU-b"}, {"gpu": 1, "uuid": "GPU-zz", "pci_bus_id": "00000000:07:00.0"},
            {"gpu": 2}, {"gpu": 3}]
    # the host's cards by NVML index: index 0 is another card than the one rank 0 used (GPU-b is index 5)
    ids = {"h": {0: GpuIdentity(0, "GPU-a", "s0", "p0"), 5: GpuIdentity(5, "GPU-b", "s5", "p5"),
                 2: GpuIdentity(2, "unknown", "s2", "p2")}}
    s = single(4, gpus=gpus, uni={(0, 1): 100.0, (2, 3): 100.0})
    got = {r.subject: r for _, r in link_findings(s, identities=ids)}
    r01, r23 = got["gpu 0 -> gpu 1"], got["gpu 2 -> gpu 3"]
    assert r01.gpu.serial == "s5"                                   # by UUID
    assert "gpu 1 (GPU-zz, serial unknown, pci 00000000:07:00.0)" in r01.detail  # what the benchmark reported
    assert r23.gpu.serial == "s2"                                   # by index, no UUID either side
    assert "gpu 3 (unknown, serial unknown, pci unknown)" in r23.detail


def test_summary_json_round_trip_keeps_the_findings(tmp_path):
    s = single(4, uni={(0, 1): 180.0})
    s.save(tmp_path / "summary.json")
    loaded = Summary.load(tmp_path / "summary.json")
    assert subjects(link_findings(loaded)) == subjects(link_findings(s)) == [("h", "gpu 0 -> gpu 1", "reject")]


def test_rule_names_the_floors():
    assert "25%" in RULE and "5%" in RULE and "3.5" in RULE


def test_findings_feed_the_node_verdicts():
    s = single(4, uni={(0, 1): 180.0})
    (v,) = node_verdicts(s, links=link_findings(s))
    assert (v.host, v.verdict, [(r.source, r.subject) for r in v.reasons]) == ("h", "reject",
                                                                               [("link", "gpu 0 -> gpu 1")])
    (v,) = node_verdicts(single(4), links=link_findings(single(4)))
    assert v.verdict == "accept"


def test_identities_from_the_health_files_of_the_node_directories(tmp_path):
    s = single(4, uni={(0, 1): 180.0})
    node_dir = tmp_path / "c" / "round1" / "h_noderank0"
    node_dir.mkdir(parents=True)
    gpus = [{"index": i, "uuid": f"GPU-{i}", "serial": f"132{i}", "pci_bus_id": f"00000000:1{i}:00.0"}
            for i in range(4)]
    (node_dir / "health.json").write_text(json.dumps({"schema": "flagperf.health/1", "samples": [{"gpus": gpus}]}))
    (_, r), = link_findings(s, run_dir=tmp_path)
    assert r.gpu == GpuIdentity(0, "GPU-0", "1320", "00000000:10:00.0")
    assert "gpu 1 (GPU-1, serial 1321, pci 00000000:11:00.0)" in r.detail
    # identities given for the host win over the files; a round dir that leaves the run directory is not read
    (_, r), = link_findings(s, run_dir=tmp_path, identities={"h": {0: GpuIdentity(0, "GPU-x", "9")}})
    assert r.gpu.serial == "9"
    (tmp_path / "run").mkdir()
    s.cases[0].rounds[0].dir = "../c/round1"        # tmp_path/c/round1, outside tmp_path/run
    (_, r), = link_findings(s, run_dir=tmp_path / "run")
    assert r.gpu == GpuIdentity(0)
