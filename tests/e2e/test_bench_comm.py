"""Run the communication benchmarks (collectives, p2p) for real on CPU with gloo ranks, one subprocess per rank,
and check their PerfLog output: the FINISHED schema, algbw/busbw as nccl-tests defines them, the checks,
SKIPPED on one rank and CHECK_FAILED (exit 3) on every rank when one rank's result is corrupted."""
import json
import math

import pytest
import yaml

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
    """Two "nodes" of one rank each: the pair 0 -> 1 crosses nodes."""
    results = run_nodes(tmp_path, "p2p", 2)
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


def test_p2p_one_rank_skipped(tmp_path):
    assert_skipped(run_case(tmp_path, "p2p", 1), "p2p needs at least 2 ranks")


def test_p2p_wrong_result_fails_check(tmp_path):
    results = run_case(tmp_path, "p2p", 2, dict(FIXED, sizes=["64K"]), fault="result")
    details = assert_check_failed(results, failing_rank=1)
    assert {(f["mode"], f["size"], f["mismatches"]) for f in details[1]["failures"]} == {("uni", "64K", 1),
                                                                                        ("bi", "64K", 1)}
