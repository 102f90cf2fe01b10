"""Run the communication benchmarks (collectives, p2p) for real on CPU with gloo ranks, one subprocess per rank,
and check their PerfLog output: the FINISHED schema, algbw/busbw as nccl-tests defines them, the checks,
SKIPPED on one rank and CHECK_FAILED (exit 3) on every rank when one rank's result is corrupted."""
import json
import math

import pytest
import yaml

from flagperf.results.interpret import Status
from flagperf.results.links import link_findings, link_matrix
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from tests.e2e.test_benchmarks_cpu import BENCH, check_budget, check_run, free_port, perflog, run_case, run_ranks

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# small and quick: the 3-rank runs share 2 cores (a small time budget; FIXED: explicit counts, no budget)
QUICK = {"warmup": 1, "time_budget_s": 0.4}
FIXED = {"warmup": 1, "iters": 3, "repeats": 2}


def label_bytes(label):
    return int(label[:-1]) * UNITS[label[-1]] if label[-1] in UNITS else int(label[:-1])


def bus_factor(op, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n}.get(op, 1.0)


def run_nodes(tmp_path, model, nnodes, overrides=None):
    """Like run_case, but as nnodes nodes of one rank each (NODE_RANK = RANK, LOCAL_RANK 0): a cross-node pair."""
    cfg = yaml.safe_load((BENCH / model / "case_config.yaml").read_text()) or {}
    cfg.update(overrides or {})
    cfg.update(model=model, framework="pytorch", hw="cpu", nnodes=nnodes, nproc=1, data_dir=str(tmp_path))
    port, ranks = free_port(), []
    for r in range(nnodes):
        node_dir = tmp_path / f"node{r}"
        node_dir.mkdir()
        (node_dir / "case_config.json").write_text(json.dumps(cfg))
        ranks.append((node_dir, dict(WORLD_SIZE=str(nnodes), RANK=str(r), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                                     NODE_RANK=str(r), NNODES=str(nnodes), MASTER_PORT=str(port))))
    return run_ranks(model, tmp_path, ranks)


def assert_same_everywhere(fins):
    """Times are all-reduced (MAX), so every rank reports the same metrics."""
    for fin in fins[1:]:
        assert fin["metrics"] == fins[0]["metrics"]
        assert fin["value"] == fins[0]["value"]


def assert_check_failed(results, failing_rank):
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 3, f"rank {rank} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
        records = perflog(out)
        events = [r["event"] for r in records]
        assert "FINISHED" not in events and events[-1] == "CHECK_FAILED", events
        details = records[-1]["checks"]["details"]
        assert records[-1]["checks"]["passed"] is False
        assert details["test_fault"] == "result"
        assert details["failed_ranks"] == [failing_rank]
        assert bool(details["failures"]) == (rank == failing_rank)
    return [perflog(out)[-1]["checks"]["details"] for _, out, _ in results]


def assert_skipped(results, reason):
    (rc, out, err), = results
    assert rc == 0, f"exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    records = perflog(out)
    assert [r["event"] for r in records] == ["INIT_START", "SKIPPED"]
    assert reason in records[-1]["reason"]


# --------------------------------------------------------------------------- collectives

@pytest.mark.parametrize("nproc", [2, 3])
def test_collectives(tmp_path, nproc):
    """2 ranks: the CPU defaults (fp32, exact checks); 3 ranks: bf16, sizes from min_size/max_size, the (n-1)/n
    factors and sizes that do not split evenly across 3 ranks."""
    overrides = {} if nproc == 2 else dict(QUICK, dtype="bf16", sizes=None, min_size="64K", max_size="1M",
                                           step_factor=16)
    labels = ["64K", "256K", "1M", "4M"] if nproc == 2 else ["64K", "1M"]
    elt = 4 if nproc == 2 else 2
    results = run_case(tmp_path, "collectives", nproc, overrides)
    fins = check_run(results, "collectives", "busbw_all_reduce")
    assert_same_everywhere(fins)
    fin = fins[0]
    assert fin["unit"] == "GB/s"
    m, details = fin["metrics"], fin["checks"]["details"]
    assert details["world_size"] == nproc and details["nnodes"] == 1 and details["backend"] == "gloo"
    assert details["sizes"] == labels and details["ops"] == list(OPS) and details["skipped"] == {}
    assert details["dtype"] == ("fp32" if nproc == 2 else "bf16")
    for op in OPS:
        if nproc == 2 or op not in ("all_reduce", "reduce_scatter"):
            # data that only moves, or fp32/bf16 sums of at most 61 * 3 = 183: exact
            assert details[f"max_rel_err_{op}"] == 0 and details[f"tol_{op}"] == 0
        else:
            # 3 ranks, bf16: sums up to 61 * 6 = 366 > 256 are not all exact; at most (n - 1) roundings
            assert details[f"tol_{op}"] == 2 * 2.0 ** -7
            assert 0 <= details[f"max_rel_err_{op}"] <= details[f"tol_{op}"]
        assert details["bus_factor"][op] == pytest.approx(bus_factor(op, nproc), rel=1e-12)
        for label in labels:
            algbw, busbw = m[f"algbw_{op}_{label}"]["value"], m[f"busbw_{op}_{label}"]["value"]
            time_s = m[f"time_us_{op}_{label}"]["value"] * 1e-6
            assert algbw > 0 and time_s > 0
            assert busbw == pytest.approx(algbw * bus_factor(op, nproc), rel=1e-9)
            size = details["bytes_rounded"].get(f"{op}_{label}", label_bytes(label))
            if op in ("all_gather", "reduce_scatter"):  # S = n x a whole count per rank, as nccl-tests
                assert size == label_bytes(label) // (elt * nproc) * elt * nproc
            else:
                assert size == label_bytes(label)
            assert algbw == pytest.approx(size / time_s / 1e9, rel=1e-9)
        if op != "all_reduce":
            assert m[f"busbw_{op}"] == m[f"busbw_{op}_{labels[-1]}"]
    assert fin["value"] == m[f"busbw_all_reduce_{labels[-1]}"]["value"]
    assert "busbw_all_reduce" not in m
    assert fin["env"]["nnodes"] == 1 and fin["env"]["sizes"] == labels
    # the budget: split over op x size, the same counts on every rank (or the collectives would deadlock)
    budget = 2.0 if nproc == 2 else 0.4
    details = check_budget(fins, budget, [f"{op}_{label}" for op in OPS for label in labels])
    assert 0 < details["measured_s"] <= 4 * budget
    # in-place all_reduce grows its values n-fold per call: at most 60 / log10(n) calls between refills
    assert all(details["counts"][f"all_reduce_{label}"]["iters"] <= int(60 / math.log10(nproc)) for label in labels)
    if nproc == 3:  # 64K / (3 ranks x 2 B) is not whole: all_gather and reduce_scatter move 65532 bytes
        assert details["bytes_rounded"]["all_gather_64K"] == 65532
    steps = [r for r in perflog(results[0][1]) if r["event"] == "STEP"]
    assert [(s["op"], s["size"]) for s in steps] == [(op, label) for op in OPS for label in labels]
    assert all((s["iters"], s["repeats"]) == (details["counts"][f"{s['op']}_{s['size']}"]["iters"],
                                              details["counts"][f"{s['op']}_{s['size']}"]["repeats"]) for s in steps)


def test_collectives_too_small_budget_warns_and_finishes(tmp_path):
    """One call alone takes longer than the budget share: every rank measures 1 sample of 1 call per op and
    size (the ranks agree: no deadlock), warns on stderr and in the details, and the case passes."""
    results = run_case(tmp_path, "collectives", 2, {"sizes": ["64K", "1M"], "time_budget_s": 1e-7})
    fins = check_run(results, "collectives", "busbw_all_reduce")
    details = check_budget(fins, 1e-7, [f"{op}_{s}" for op in OPS for s in ("64K", "1M")], modes=("minimum",))
    assert {(c["warmup"], c["iters"], c["repeats"]) for c in details["counts"].values()} == {(1, 1, 1)}
    for fin, (_, _, err) in zip(fins, results):
        assert "more than the budget" in fin["checks"]["details"]["budget_warning"]
        assert "budget warning: all_reduce 64K: one call takes" in err


def test_collectives_one_rank_skipped(tmp_path):
    assert_skipped(run_case(tmp_path, "collectives", 1), "collectives need at least 2 ranks")


def test_collectives_wrong_result_fails_check(tmp_path):
    results = run_case(tmp_path, "collectives", 2, dict(FIXED, sizes=["64K", "1M"]), fault="result")
    details = assert_check_failed(results, failing_rank=1)
    assert {(f["op"], f["size"]) for f in details[1]["failures"]} == {(op, s) for op in OPS for s in ("64K", "1M")}
    assert all(f["max_rel_err"] > 1 for f in details[1]["failures"])  # one element made wrong


@pytest.mark.parametrize("model, overrides, message", [
    ("collectives", {"sizes": ["64Q"]}, "cannot read size"),
    ("collectives", {"ops": ["all_to_all"]}, "ops must be"),
    ("p2p", {"pairs": [[1, 1]]}, "pairs must be"),
    ("p2p", {"sizes": None, "min_size": "4M", "max_size": "1M"}, "min_size"),
    ("collectives", {"time_budget_s": -1}, "collectives: time_budget_s must be a positive number of seconds"),
    ("collectives", {"time_budget_s": "2s"}, "collectives: time_budget_s must be a positive number of seconds"),
    ("collectives", {"time_budget_s": None}, "collectives: time_budget_s must be a positive number of seconds"),
    ("collectives", {"iters": 0}, "collectives: iters must be an integer >= 1"),
    ("p2p", {"time_budget_s": float("inf")}, "p2p: time_budget_s must be a positive number of seconds"),
    ("p2p", {"time_budget_s": [1]}, "p2p: time_budget_s must be a positive number of seconds"),
    ("p2p", {"repeats": 1.5}, "p2p: repeats must be an integer >= 1"),
    ("p2p", {"pairs": "every"}, "p2p: pairs must be 'all'"),
    ("p2p", {"max_seconds_per_pair": 6}, "p2p: max_seconds_per_pair must be a number of seconds > 0 and <= 5"),
    ("p2p", {"max_seconds_per_pair": 0}, "p2p: max_seconds_per_pair must be a number of seconds > 0 and <= 5"),
    ("p2p", {"force_network": "yes"}, "p2p: force_network must be true or false"),
])
def test_config_errors(tmp_path, model, overrides, message):
    (rc, out, err), = run_case(tmp_path, model, 1, overrides)
    assert rc == 2 and message in err, (rc, out, err)


# --------------------------------------------------------------------------- p2p

def check_p2p_metrics(fin, pairs, labels, modes=("uni", "bi")):
    m = fin["metrics"]
    for src, dst in pairs:
        for mode in modes:
            for label in labels:
                bw = m[f"bw_{mode}_{src}_{dst}_{label}"]["value"]
                time_s = m[f"time_us_{mode}_{src}_{dst}_{label}"]["value"] * 1e-6
                moved = label_bytes(label) * (2 if mode == "bi" else 1)
                assert bw > 0 and bw == pytest.approx(moved / time_s / 1e9, rel=1e-9)
            assert m[f"bw_{mode}_{src}_{dst}"] == m[f"bw_{mode}_{src}_{dst}_{labels[-1]}"]
    src, dst = pairs[0]
    assert fin["metric"] == "bw_uni" and fin["unit"] == "GB/s"
    assert fin["value"] == m[f"bw_uni_{src}_{dst}_{labels[-1]}"]["value"]
    assert m["bw_bi"] == m[f"bw_bi_{src}_{dst}"]


def test_p2p_cross_node(tmp_path):
    """Two "nodes" of one rank each: the listed pair 0 -> 1 crosses nodes."""
    results = run_nodes(tmp_path, "p2p", 2, {"pairs": [[0, 1]]})
    fins = check_run(results, "p2p", "bw_uni")
    assert_same_everywhere(fins)
    labels = ["64K", "256K", "1M", "4M"]
    check_p2p_metrics(fins[0], [[0, 1]], labels)
    details = fins[1]["checks"]["details"]
    assert details["pairs"] == [{"pair": [0, 1], "same_node": False, "nodes": [0, 1],
                                 "hosts": details["pairs"][0]["hosts"]}]
    assert details["world_size"] == 2 and details["nnodes"] == 2 and details["backend"] == "gloo"
    check_budget(fins, 2.0, [f"{mode}_0_1_{label}" for label in labels for mode in ("uni", "bi")])
    # rank 1 received every element once one way and once both ways
    assert details["checked_elements_this_rank"] == 2 * sum(label_bytes(x) // 4 for x in labels)
    assert fins[0]["env"]["nnodes"] == 2 and [f["env"]["node_rank"] for f in fins] == [0, 1]
    matrix = details["matrix"]
    assert details["plan"] == "pairs" and matrix["nodes"] == [] and matrix["size"] == "4M"
    assert [(x["src_rank"], x["dst_rank"], x["nodes"]) for x in matrix["cross_node"]] == [(0, 1, [0, 1])]
    assert matrix["cross_node"][0]["uni_gbps"] == fins[0]["metrics"]["bw_uni_0_1"]["value"]


def test_p2p_three_ranks_two_pairs(tmp_path):
    """One node of 3 ranks: pairs 0 -> 1 and 2 -> 0 (rank 1 waits at the barriers of the second pair);
    a pair outside the world size is skipped."""
    overrides = dict(QUICK, pairs=[[0, 1], [2, 0], [0, 7]], sizes=None, min_size="64K", max_size="1M",
                     step_factor=16)
    results = run_case(tmp_path, "p2p", 3, overrides)
    fins = check_run(results, "p2p", "bw_uni")
    assert_same_everywhere(fins)
    labels = ["64K", "1M"]
    check_p2p_metrics(fins[0], [[0, 1], [2, 0]], labels)
    details = fins[0]["checks"]["details"]
    assert [(p["pair"], p["same_node"]) for p in details["pairs"]] == [([0, 1], True), ([2, 0], True)]
    assert "0_7" in details["skipped"]
    # rank 1 is idle in pair (2, 0) but takes the pair's counts (time_fn all-reduces the calibration)
    check_budget(fins, 0.4, [f"{mode}_{a}_{b}_{label}" for a, b in ([0, 1], [2, 0]) for label in labels
                             for mode in ("uni", "bi")])
    checked = [f["checks"]["details"]["checked_elements_this_rank"] for f in fins]
    per_size = sum(label_bytes(x) // 4 for x in labels)
    # rank 0: receives in bi of pair (0, 1), uni + bi of pair (2, 0); rank 1: uni + bi of (0, 1); rank 2: bi of (2, 0)
    assert checked == [3 * per_size, 2 * per_size, per_size]
    # the matrix holds the listed pairs at their largest size
    (node,) = details["matrix"]["nodes"]
    m = fins[0]["metrics"]
    assert [(x["src"], x["dst"], x["uni_gbps"], x["bi_gbps"]) for x in node["links"]] == [
        (a, b, m[f"bw_uni_{a}_{b}"]["value"], m[f"bw_bi_{a}_{b}"]["value"]) for a, b in ([0, 1], [2, 0])]
    assert [g["gpu"] for g in node["gpus"]] == [0, 1, 2]


def check_matrix(fins, nproc, budget_per_pair):
    """The link matrix of one node of ``nproc`` ranks: every ordered pair one way, every unordered pair both ways
    (the same figure in both rows), at the largest size; metrics, details and the budget per pair."""
    ordered = [(a, b) for a in range(nproc) for b in range(nproc) if a != b]
    m, details = fins[0]["metrics"], fins[0]["checks"]["details"]
    assert details["plan"] == "matrix" and details["sizes"] == ["4M"]
    assert [p["pair"] for p in details["pairs"]] == [list(p) for p in ordered]
    assert all(p["same_node"] for p in details["pairs"])
    for a, b in ordered:
        assert m[f"bw_uni_{a}_{b}"] == m[f"bw_uni_{a}_{b}_4M"] and m[f"bw_uni_{a}_{b}"]["value"] > 0
        assert (f"bw_bi_{a}_{b}" in m) == (a < b)
    (node,) = details["matrix"]["nodes"]
    assert node["node"] == 0 and [g["gpu"] for g in node["gpus"]] == list(range(nproc))
    assert [(x["src"], x["dst"]) for x in node["links"]] == ordered
    for x in node["links"]:
        a, b = min(x["src"], x["dst"]), max(x["src"], x["dst"])
        assert x["uni_gbps"] == m[f"bw_uni_{x['src']}_{x['dst']}"]["value"]
        assert x["bi_gbps"] == m[f"bw_bi_{a}_{b}"]["value"]
    unis = [m[f"bw_uni_{a}_{b}"]["value"] for a, b in ordered]
    assert m["bw_uni_min"]["value"] == min(unis)
    assert fins[0]["value"] == m["bw_uni_0_1"]["value"] and m["bw_bi"] == m["bw_bi_0_1"]
    # the budget: max_seconds_per_pair / 1.5 of timed samples per ordered pair; uni windows per ordered pair, bi
    # per unordered pair, right after the uni window of (a, b), a < b
    windows = [w for a, b in ordered for w in ([f"uni_{a}_{b}_4M"] + ([f"bi_{a}_{b}_4M"] if a < b else []))]
    check_budget(fins, len(ordered) * budget_per_pair / 1.5, windows)
    assert details["max_seconds_per_pair"] == budget_per_pair
    return details


def test_p2p_matrix_two_ranks(tmp_path):
    """The default: the link matrix of the 2 ranks, 0 -> 1 and 1 -> 0 one way, 0 <-> 1 both ways, printed by rank 0;
    the driver reads it back from the run's summary (results.links)."""
    results = run_case(tmp_path, "p2p", 2)
    fins = check_run(results, "p2p", "bw_uni")
    assert_same_everywhere(fins)
    details = check_matrix(fins, 2, 1.0)
    assert details["network"] == {"forced": False, "env": {"NCCL_P2P_DISABLE": None, "NCCL_SHM_DISABLE": None},
                                  "ranks_agree": True, "replaced": {},
                                  "note": "the gloo backend does not read NCCL_P2P_DISABLE, NCCL_SHM_DISABLE"}
    steps = [(r["pair"], r["mode"]) for r in perflog(results[0][1]) if r["event"] == "STEP"]
    assert steps == [([0, 1], "uni"), ([0, 1], "bi"), ([1, 0], "uni")]
    out = results[0][1]
    assert "p2p link matrix, node 0" in out and "uni: row sends to column" in out
    assert "p2p link matrix" not in results[1][1]
    # rank 1 received once one way (0 -> 1) and once both ways; rank 0 the same (1 -> 0, bi)
    assert [f["checks"]["details"]["checked_elements_this_rank"] for f in fins] == [2 * (4 << 20) // 4] * 2
    # the driver's side: the matrix from a summary that holds this FINISHED line
    rnd = RoundSummary(1, "p2p/round1", Status.PASSED, finished=fins[0], nodes=[NodeSummary("h_noderank0", "h", 0)])
    s = Summary("run1", str(tmp_path), "0", "now", cases=[CaseSummary("p2p", "p2p:pytorch:cpu:1:2:1", "p2p",
                                                                      "pytorch", "cpu", 1, 2, 1, rounds=[rnd])])
    (node,) = link_matrix(s)
    assert (node.host, node.gpus, node.size, node.network_forced) == ("h", (0, 1), "4M", False)
    assert node.uni == {(0, 1): fins[0]["metrics"]["bw_uni_0_1"]["value"],
                        (1, 0): fins[0]["metrics"]["bw_uni_1_0"]["value"]}
    assert node.bi == {(0, 1): fins[0]["metrics"]["bw_bi_0_1"]["value"]}
    assert link_findings(s) == []       # two GPUs of one host: nothing to compare a link with


def test_p2p_matrix_three_ranks_network_forced(tmp_path):
    """3 ranks: 6 ordered pairs and 3 unordered ones; force_network sets NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1
    in every rank's environment before the process group starts (replacing a value the case's env gave), and the
    payload says so."""
    cfg = yaml.safe_load((BENCH / "p2p" / "case_config.yaml").read_text())
    cfg.update(force_network=True, max_seconds_per_pair=0.3, warmup=1, model="p2p", framework="pytorch", hw="cpu",
               nnodes=1, nproc=3, data_dir=str(tmp_path))
    node_dir = tmp_path / "node0"
    node_dir.mkdir()
    (node_dir / "case_config.json").write_text(json.dumps(cfg))
    port = free_port()
    results = run_ranks("p2p", tmp_path, [
        (node_dir, dict(RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="3", NODE_RANK="0", NNODES="1",
                        WORLD_SIZE="3", MASTER_PORT=str(port), NCCL_P2P_DISABLE="0")) for r in range(3)])
    fins = check_run(results, "p2p", "bw_uni")
    assert_same_everywhere(fins)
    details = check_matrix(fins, 3, 0.3)
    for fin in fins:
        net = fin["checks"]["details"]["network"]
        assert net["forced"] is True and net["ranks_agree"] is True
        assert net["env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
        assert net["replaced"] == {"NCCL_P2P_DISABLE": "0"}
        assert fin["env"]["network_forced"] is True
    assert details["matrix"]["network_forced"] is True
    assert "network forced" in results[0][1]
    (node,) = link_matrix(Summary("r", str(tmp_path), "0", "now", cases=[CaseSummary(
        "p2p", "k", "p2p", "pytorch", "cpu", 1, 3, 1, rounds=[RoundSummary(
            1, "d", Status.PASSED, finished=fins[0], nodes=[NodeSummary("h_noderank0", "h", 0)])])]))
    assert node.network_forced is True and len(node.uni) == 6 and len(node.bi) == 3


def test_p2p_matrix_one_rank_per_node_crosses_nodes(tmp_path):
    """One rank per node: no pair within a node, so the matrix is every ordered pair of ranks, across nodes."""
    results = run_nodes(tmp_path, "p2p", 2, {"max_seconds_per_pair": 0.3, "warmup": 1})
    fins = check_run(results, "p2p", "bw_uni")
    details = fins[0]["checks"]["details"]
    assert details["plan"] == "matrix" and [p["pair"] for p in details["pairs"]] == [[0, 1], [1, 0]]
    assert not any(p["same_node"] for p in details["pairs"])
    assert details["matrix"]["nodes"] == []
    assert [(x["src_rank"], x["dst_rank"]) for x in details["matrix"]["cross_node"]] == [(0, 1), (1, 0)]


def test_p2p_one_rank_skipped(tmp_path):
    assert_skipped(run_case(tmp_path, "p2p", 1), "p2p needs at least 2 ranks")


def test_p2p_wrong_result_fails_check(tmp_path):
    """The matrix (the default): rank 1 receives in 0 -> 1 and in 0 <-> 1; both fail its check."""
    results = run_case(tmp_path, "p2p", 2, dict(FIXED, sizes=["64K"]), fault="result")
    details = assert_check_failed(results, failing_rank=1)
    assert {(f["mode"], f["size"], f["mismatches"]) for f in details[1]["failures"]} == {("uni", "64K", 1),
                                                                                        ("bi", "64K", 1)}
