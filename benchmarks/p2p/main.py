"""Point-to-point (send/recv) bandwidth between pairs of ranks, one direction and both at once, with the received
data checked: by default a link matrix, every ordered pair of ranks (GPUs) of a node, within a time budget per
pair; or the listed pairs over a sweep of message sizes. See README.md and docs/benchmarks.md."""
import os
import socket
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import harness  # noqa: E402

LOG = harness.PerfLog(benchmark="p2p")
LOG.event("INIT_START")  # before `import torch`, so that e2e_time includes it

# torch is imported in main() once the case config is read: config errors (exit 2) and SKIPPED stay cheap.
torch = dist = None

MODES = ("uni", "bi")
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
NCCL_TYPES = {"fp32": "float", "bf16": "bfloat16"}     # nccl-tests' type names
PERIOD = 61            # check pattern p(i) = 1 + i % 61
CHUNK = 1 << 24        # elements per step when writing / verifying the check pattern
SKIP_REASON = "p2p needs at least 2 ranks"
DEFAULT_BUDGET_S = 2.0  # time_budget_s when the case config has none (the CPU default's value)
MATRIX = "all"          # pairs: all -> every ordered pair of ranks of a node (the link matrix)
DEFAULT_PAIR_S = 1.0    # max_seconds_per_pair when the case config has none (the CPU default's value)
MAX_PAIR_S = 5.0        # max_seconds_per_pair may not exceed this
PAIR_OVERHEAD = 1.5     # a pair's wall time / its timed samples: warm-up (<= 1/4), calibration, barriers, check
NETWORK_ENV = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")   # force_network: set to "1" before the process group


# --------------------------------------------------------------------------- configuration

def read_config(cfg):
    """Pure Python (no torch): the validated case configuration."""
    keys = harness.CaseKeys(cfg, "p2p")
    c = {"sizes": keys.size_sweep()}
    pairs = cfg.get("pairs", MATRIX)
    if pairs == MATRIX:
        c["pairs"] = MATRIX
    else:
        ok = isinstance(pairs, list) and pairs and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                        for x in p) and p[0] != p[1] for p in pairs)
        if not ok:
            keys.error(f"pairs must be {MATRIX!r} (every ordered pair of ranks of a node) or a non-empty list of "
                       f"[src, dst] rank pairs with src != dst, got {pairs!r}")
        c["pairs"] = [list(p) for p in dict.fromkeys(tuple(p) for p in pairs)]
    modes = keys.choices("modes", list(MODES), MODES)
    c["modes"] = [m for m in MODES if m in modes]
    c["dtype"] = keys.choice("dtype", "fp32", DTYPES)
    c["timing"] = keys.timing(warmup=5, budget_s=DEFAULT_BUDGET_S)
    c["max_seconds_per_pair"] = keys.number("max_seconds_per_pair", DEFAULT_PAIR_S, lambda v: 0 < v <= MAX_PAIR_S,
                                            f"a number of seconds > 0 and <= {MAX_PAIR_S:g}")
    c["force_network"] = keys.flag("force_network", False)
    c["seed"] = keys.int("seed", 1234, minimum=0)
    return c


def force_network(forced, env=None):
    """force_network: NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 in this rank's environment (``env``, os.environ
    by default), before the process group starts, so that NCCL connects the ranks of one host through its network
    transport (InfiniBand/RoCE, else sockets) instead of NVLink/PCIe peer access or shared memory. Returns what
    goes into the details: ``forced`` and the values the variables had before (None: unset), which force_network
    replaces."""
    env = os.environ if env is None else env
    before = {name: env.get(name) for name in NETWORK_ENV}
    if forced:
        for name in NETWORK_ENV:
            env[name] = "1"
    return {"forced": bool(forced), "before": before}


# --------------------------------------------------------------------------- data

def _p(start, end, device):
    idx = torch.arange(start, end, dtype=torch.int64, device=device)
    return (idx % PERIOD + 1).to(torch.float64)


def fill_pattern(t, coef, dt):
    """t[i] = dt(coef * p(i)), chunk by chunk."""
    for a in range(0, t.numel(), CHUNK):
        b = min(a + CHUNK, t.numel())
        t[a:b].copy_((_p(a, b, t.device) * coef).to(dt))


def mismatches(t, coef, dt):
    """How many elements of t differ from dt(coef * p(i)) (exact: the data only moved). NaN counts."""
    bad = 0
    for a in range(0, t.numel(), CHUNK):
        b = min(a + CHUNK, t.numel())
        e = (_p(a, b, t.device) * coef).to(dt)
        bad += int((t[a:b] != e).sum().item())
    return bad


# --------------------------------------------------------------------------- where the ranks are

def node_of(rank):
    """This rank's node: NODE_RANK (the launcher sets it), else rank // LOCAL_WORLD_SIZE."""
    if os.environ.get("NODE_RANK", "").strip():
        return harness.env_int("NODE_RANK", 0)
    lws = harness.env_int("LOCAL_WORLD_SIZE", 0)
    return rank // lws if lws > 0 else None


def gather_where(ctx):
    """Every rank's node, host, local rank, GPU identity and the NETWORK_ENV values it runs with, indexed by global
    rank (an all_gather_object: also the first collective of the group, before any send/recv)."""
    where = [None] * ctx.world_size
    dist.all_gather_object(where, {"node": node_of(ctx.rank), "host": socket.gethostname(),
                                   "local_rank": ctx.local_rank, "gpu": harness.gpu_identity(ctx),
                                   "network_env": {name: os.environ.get(name) for name in NETWORK_ENV}})
    return where


def same_node(a, b):
    """Whether two ranks' `where` entries are on one node: their nodes when both are known, else their hosts."""
    return a["node"] == b["node"] if a["node"] is not None and b["node"] is not None else a["host"] == b["host"]


def pair_info(where, pairs):
    """For every pair: its ranks' nodes and hosts, and whether they share a node."""
    return [{"pair": [src, dst], "same_node": bool(same_node(where[src], where[dst])),
             "nodes": [where[src]["node"], where[dst]["node"]], "hosts": [where[src]["host"], where[dst]["host"]]}
            for src, dst in pairs]


def node_groups(where):
    """The ranks of every node, each node's ranks in local-rank order, the nodes in the order of their first rank."""
    groups = {}
    for rank, w in enumerate(where):
        key = ("node", w["node"]) if w["node"] is not None else ("host", w["host"])
        groups.setdefault(key, []).append(rank)
    return [sorted(g, key=lambda r: (where[r]["local_rank"], r)) for g in groups.values()]


def matrix_steps(where):
    """The link matrix's steps: [(i, j, [(src, dst), ...])] for every ordered pair (i, j) of local positions, with
    the pair (i-th rank, j-th rank) of every node that has both, measured at the same time (the nodes' links are
    their own). With one rank per node there is no pair within a node: every ordered pair of ranks, one by one."""
    groups = node_groups(where)
    if max(len(g) for g in groups) < 2:
        groups = [list(range(len(where)))]
    width = max(len(g) for g in groups)
    return [(i, j, [(g[i], g[j]) for g in groups if len(g) > max(i, j)])
            for i in range(width) for j in range(width) if i != j]


def pairs_within(c, world_size):
    """The configured pairs within WORLD_SIZE, and {"<src>_<dst>": why} for the others."""
    pairs, skipped = [], {}
    for p in c["pairs"]:
        if max(p) >= world_size:
            skipped[f"{p[0]}_{p[1]}"] = f"pair {p} outside WORLD_SIZE={world_size}"
        else:
            pairs.append(p)
    return pairs, skipped


# --------------------------------------------------------------------------- one window: pairs at once

def connect(pairs, ctx, dt):
    """One untimed exchange of one element each way on every pair of ``pairs`` (all at once): NCCL sets up a pair's
    connection on its first transfer, which then stays out of the timed windows."""
    mine = next((p for p in pairs if ctx.rank in p), None)
    if mine is not None:
        peer = mine[1] if ctx.rank == mine[0] else mine[0]
        sbuf = torch.zeros(1, dtype=dt, device=ctx.device)
        rbuf = torch.empty(1, dtype=dt, device=ctx.device)
        ops = [dist.P2POp(dist.isend, sbuf, peer), dist.P2POp(dist.irecv, rbuf, peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    ctx.barrier()


def run_one(pairs, mode, nbytes, ctx, dt, gen, fault_rank, budget, label):
    """Every rank calls this; ``pairs`` are disjoint and measured at the same time (the ranks in none of them only
    join the barriers and the all-reduces that agree on the counts). The timing fills budget.share_s seconds
    (recorded in ``budget`` as <mode>_<src>_<dst>_<label> of the first pair). Returns {(src, dst): result} for
    every pair, or None when nbytes is less than one element."""
    rank = ctx.rank
    elt = torch.empty((), dtype=dt).element_size()
    count = nbytes // elt
    if count < 1:
        return None  # the same on every rank: nobody joins a barrier for it
    mine = next((tuple(p) for p in pairs if rank in p), None)
    active = mine is not None
    if active:
        src, dst = mine
        peer = dst if rank == src else src
        sbuf = torch.empty(count, dtype=dt, device=ctx.device).uniform_(-1.0, 1.0, generator=gen)  # never zeros
        rbuf = torch.empty(count, dtype=dt, device=ctx.device).uniform_(-1.0, 1.0, generator=gen)
        if mode == "uni":
            if rank == src:
                def fn():
                    dist.send(sbuf, dst)
            else:
                def fn():
                    dist.recv(rbuf, src)
        else:
            def fn():
                ops = [dist.P2POp(dist.isend, sbuf, peer), dist.P2POp(dist.irecv, rbuf, peer)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
    else:
        def fn():
            pass
    a, b = pairs[0]
    more = f" (+{len(pairs) - 1} pairs at once)" if len(pairs) > 1 else ""
    # the idle ranks run the same number of barriers (before_repeat) and time nothing; time_fn all-reduces the
    # calibration (MAX), so the idle ranks take the pairs' counts
    t = budget.time(f"{mode}_{a}_{b}_{label}", fn, ctx, label=f"p2p {mode} {a}->{b}{more} {label}",
                    before_repeat=ctx.barrier)
    times = [0.0] * ctx.world_size
    if active:
        times[rank] = t["median"]
    times = ctx.all_reduce(times, "sum")

    # check: the sender's data is (sender + 1) * p; the receiver's buffer starts at -1
    bad, checked = 0, 0
    if active:
        fill_pattern(sbuf, rank + 1, dt)
        rbuf.fill_(-1)
    ctx.barrier()
    if active:
        fn()
        ctx.sync()
        receives = mode == "bi" or rank == dst
        if receives:
            harness.corrupt_for_test("p2p", rbuf, rank == fault_rank)
            bad = mismatches(rbuf, peer + 1, dt)
            checked = count
    moved = count * elt * (2 if mode == "bi" else 1)
    bads = [0.0] * ctx.world_size
    bads[rank] = float(bad)
    bads = ctx.all_reduce(bads, "sum")              # every rank's mismatches: the pair's #wrong
    out = {}
    for p in pairs:
        t_pair = max(times[p[0]], times[p[1]])      # the slower of the two ranks
        here = tuple(p) == mine
        out[tuple(p)] = {"bytes": count * elt, "count": count, "time_s": t_pair, "bw": moved / t_pair / 1e9,
                         "bad": bad if here else 0, "wrong": int(bads[p[0]] + bads[p[1]]),
                         "checked": checked if here else 0, "warmup": t.get("warmup"), "iters": t["iters"],
                         "repeats": t["repeats"], "measured_s": t["measured_s"]}
    return out


# --------------------------------------------------------------------------- the two plans: listed pairs, matrix

def _step(results, mode, s, r, ctx, labels):
    """Record one window's results and emit its STEP events and table rows."""
    for (src, dst), res in r.items():
        results[(src, dst, mode, s)] = res
        harness.sweep_step(LOG, ctx, res, {"pair": [src, dst], "mode": mode}, labels[s],
                           {"bw": res["bw"], "mismatches": res["bad"]},
                           f"{f'{src}->{dst}' if mode == 'uni' else f'{src}<->{dst}':>7} {mode:>4}",
                           f"{res['bw']:>10.3f} {res['bad']:>5}")


def sweep(pairs, c, ctx, dt, gen, skipped, labels):
    """Listed pairs: every pair, size and mode, one pair at a time, within time_budget_s split evenly over them;
    prints rank 0's table. Returns ({(src, dst, mode, size): result}, the BudgetReport)."""
    budget = harness.BudgetReport(c["timing"], len(pairs) * len(c["sizes"]) * len(c["modes"]),
                                  split="evenly over the timed windows: one per pair, size and mode")
    results = {}
    for src, dst in pairs:
        connect([(src, dst)], ctx, dt)
        for s in c["sizes"]:
            for mode in c["modes"]:
                r = run_one([[src, dst]], mode, s, ctx, dt, gen, pairs[0][1], budget, labels[s])
                if r is None:
                    skipped[f"{src}_{dst}_{labels[s]}"] = f"{s} bytes is less than one {c['dtype']} element"
                    continue
                _step(results, mode, s, r, ctx, labels)
            if ctx.is_cuda:
                torch.cuda.empty_cache()
    return results, budget


def matrix_windows(steps, modes):
    """The matrix's timed windows in order: [(mode, step pairs)]: uni for every ordered pair (i, j), bi once per
    unordered pair (i < j: both directions at once), right after its uni window."""
    out = []
    for i, j, pairs in steps:
        for mode in modes:
            if mode == "uni" or i < j:
                out.append((mode, pairs))
    return out


def matrix_budget(c, steps, windows):
    """The matrix's budget: max_seconds_per_pair / PAIR_OVERHEAD seconds of timed samples per ordered pair (the
    rest of max_seconds_per_pair is for warm-up, calibration, barriers and the check), split evenly over the
    windows."""
    t = c["timing"]
    total = len(steps) * c["max_seconds_per_pair"] / PAIR_OVERHEAD
    return harness.BudgetReport(harness.Timing(t.warmup, total, t.iters, t.repeats), len(windows),
                                split=f"max_seconds_per_pair ({c['max_seconds_per_pair']:g} s) / {PAIR_OVERHEAD:g} "
                                      f"of timed samples per ordered pair, evenly over the windows: uni per ordered "
                                      f"pair, bi per unordered pair")


def sweep_matrix(steps, c, ctx, dt, gen, skipped, labels):
    """The link matrix: every ordered pair of every node at the largest size (the headline's), uni per ordered
    pair and bi per unordered pair, the nodes' pairs at once. Returns ({(src, dst, mode, size): result}, the
    BudgetReport)."""
    s = max(c["sizes"])
    windows = matrix_windows(steps, c["modes"])
    budget = matrix_budget(c, steps, windows)
    results, connected = {}, set()
    fault_rank = steps[0][2][0][1]
    for mode, pairs in windows:
        key = frozenset(frozenset(p) for p in pairs)
        if key not in connected:
            connect(pairs, ctx, dt)
            connected.add(key)
        r = run_one([list(p) for p in pairs], mode, s, ctx, dt, gen, fault_rank, budget, labels[s])
        if r is None:
            skipped[labels[s]] = f"{s} bytes is less than one {c['dtype']} element"
            break
        _step(results, mode, s, r, ctx, labels)
        if ctx.is_cuda:
            torch.cuda.empty_cache()
    return results, budget


# --------------------------------------------------------------------------- results

def sweep_metrics(results, c, first, labels):
    """bw and time per pair, mode and size; bw at the largest size per pair and mode; the other modes of the
    first pair. -> (metrics, headline result, headline size)."""
    metrics, largest = {}, {}
    for (src, dst, mode, s), r in results.items():
        metrics[f"bw_{mode}_{src}_{dst}_{labels[s]}"] = {"value": r["bw"], "unit": "GB/s"}
        metrics[f"time_us_{mode}_{src}_{dst}_{labels[s]}"] = {"value": r["time_s"] * 1e6, "unit": "us"}
        largest[(src, dst, mode)] = max(s, largest.get((src, dst, mode), 0))
    for (src, dst, mode), s in largest.items():
        metrics[f"bw_{mode}_{src}_{dst}"] = {"value": results[(src, dst, mode, s)]["bw"], "unit": "GB/s"}
    for mode in c["modes"][1:]:
        metrics[f"bw_{mode}"] = dict(metrics[f"bw_{mode}_{first[0]}_{first[1]}"])
    if len(c["sizes"]) > 1:         # a size sweep: nccl-tests' average bus bandwidth (sweep_rows' busbw)
        for (src, dst, mode) in largest:
            bws = [nccl_bw(mode, r) for (a, b, m, _), r in results.items() if (a, b, m) == (src, dst, mode)]
            metrics[f"avg_busbw_{mode}_{src}_{dst}"] = {"value": sum(bws) / len(bws), "unit": "GB/s"}
    head_size = largest[(first[0], first[1], c["modes"][0])]
    return metrics, results[(first[0], first[1], c["modes"][0], head_size)], head_size


def nccl_bw(mode, r):
    """nccl-tests' sendrecv algbw (= busbw): the bytes one rank sends / time; bi is its two-rank ring (each rank
    sends to the other), so half of flagperf's bi figure, which counts both directions."""
    return r["bytes"] / r["time_s"] / 1e9 if mode == "bi" else r["bw"]


def sweep_rows(results, dt_name):
    """details.sweep of the listed pairs: one entry per pair, mode and size, ascending, in nccl-tests' terms, as its
    sendrecv prints them (op ``<mode>_<src>_<dst>``; algbw = busbw = nccl_bw; wrong: the pair's mismatched
    elements)."""
    return [{"op": f"{mode}_{src}_{dst}", "size_bytes": r["bytes"], "count": r["count"],
             "dtype": NCCL_TYPES[dt_name], "redop": "none", "root": -1, "placement": "out_of_place",
             "time_us": r["time_s"] * 1e6, "algbw": nccl_bw(mode, r), "busbw": nccl_bw(mode, r), "wrong": r["wrong"],
             "warmup": r["warmup"], "iters": r["iters"], "repeats": r["repeats"]}
            for (src, dst, mode, _), r in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                                   MODES.index(kv[0][2]), kv[0][3]))]


def link_matrix(results, where, labels, forced):
    """The link figures at each pair's largest size, by node: ``nodes`` [{node, host, gpus, links}] for the pairs
    within a node (``gpus``: the node's ranks with their device index ``gpu`` and identity; ``links``: per ordered
    pair ``src``/``dst`` (device indices), their ranks, ``uni_gbps`` and ``bi_gbps``: both directions at once,
    the same for (a, b) and (b, a); null where not measured), and ``cross_node`` for pairs across nodes."""
    largest = {}
    for (src, dst, mode, s) in results:
        largest[(src, dst, mode)] = max(s, largest.get((src, dst, mode), 0))
    bw = {k: results[(*k, s)]["bw"] for k, s in largest.items()}
    ordered = list(dict.fromkeys((src, dst) for src, dst, _ in largest))
    sizes = sorted(set(largest.values()))
    nodes, cross = {}, []
    for src, dst in ordered:
        uni = bw.get((src, dst, "uni"))
        bi = bw.get((src, dst, "bi"), bw.get((dst, src, "bi")))
        a, b = where[src], where[dst]
        if not same_node(a, b):
            cross.append({"src_rank": src, "dst_rank": dst, "hosts": [a["host"], b["host"]],
                          "nodes": [a["node"], b["node"]], "uni_gbps": uni, "bi_gbps": bi})
            continue
        node = nodes.setdefault(a["node"] if a["node"] is not None else a["host"],
                                {"node": a["node"], "host": a["host"], "ranks": set(), "links": []})
        node["ranks"].update((src, dst))
        node["links"].append({"src": a["local_rank"], "dst": b["local_rank"], "src_rank": src, "dst_rank": dst,
                              "uni_gbps": uni, "bi_gbps": bi})
    out_nodes = []
    for node in nodes.values():
        gpus = [{"gpu": where[r]["local_rank"], "rank": r, **where[r]["gpu"]} for r in sorted(node.pop("ranks"))]
        out_nodes.append({**node, "gpus": gpus})
    return {"unit": "GB/s", "size": labels[sizes[-1]] if sizes else None, "network_forced": forced,
            "uni": "src sends to dst: bytes / time", "bi": "src and dst send to each other at once: 2 x bytes / time",
            "nodes": out_nodes, "cross_node": cross}


def print_matrix(matrix):
    """Rank 0's readable matrix: per node, uni (row: sender, column: receiver) and bi (both ways at once)."""
    for node in matrix["nodes"]:
        gpus = sorted({g["gpu"] for g in node["gpus"]})
        cells = {(link["src"], link["dst"]): link for link in node["links"]}
        forced = ", network forced" if matrix["network_forced"] else ""
        print(f"p2p link matrix, node {node['node']} ({node['host']}), {matrix['size']} per transfer, GB/s{forced}",
              flush=True)
        for mode, title in (("uni", "uni: row sends to column"), ("bi", "bi: both directions at once")):
            if not any(link[f"{mode}_gbps"] is not None for link in node["links"]):
                continue
            print(f"  {title}", flush=True)
            print("  " + f"{'':>8}" + "".join(f"{f'gpu{g}':>10}" for g in gpus), flush=True)
            for a in gpus:
                row = []
                for b in gpus:
                    v = (cells.get((a, b)) or {}).get(f"{mode}_gbps")
                    row.append(f"{'-' if v is None else f'{v:.1f}':>10}")
                print("  " + f"{f'gpu{a}':>8}" + "".join(row), flush=True)
    for link in matrix["cross_node"]:
        print(f"p2p cross-node {link['src_rank']}->{link['dst_rank']} ({link['hosts'][0]} -> {link['hosts'][1]}): "
              f"uni {link['uni_gbps']} GB/s, bi {link['bi_gbps']} GB/s", flush=True)


def summary_metrics(matrix, modes):
    """``bw_<mode>_min`` and ``bw_<mode>_median`` over the links within nodes (bi: once per unordered pair)."""
    metrics = {}
    for mode in modes:
        values, seen = [], set()
        for node in matrix["nodes"]:
            for link in node["links"]:
                key = (node["host"], node["node"], frozenset((link["src"], link["dst"])) if mode == "bi"
                       else (link["src"], link["dst"]))
                if link[f"{mode}_gbps"] is not None and key not in seen:
                    seen.add(key)
                    values.append(link[f"{mode}_gbps"])
        if values:
            metrics[f"bw_{mode}_min"] = {"value": min(values), "unit": "GB/s"}
            metrics[f"bw_{mode}_median"] = {"value": statistics.median(values), "unit": "GB/s"}
    return metrics


def network_details(network, where, backend):
    """force_network's record: whether it was forced, the values every rank ran with, and what it replaced."""
    seen = [w["network_env"] for w in where]
    d = {"forced": network["forced"], "env": seen[0], "ranks_agree": all(s == seen[0] for s in seen),
         "replaced": {k: v for k, v in network["before"].items() if network["forced"] and v not in (None, "1")}}
    if backend != "nccl":
        d["note"] = f"the {backend} backend does not read {', '.join(NETWORK_ENV)}"
    return d


# --------------------------------------------------------------------------- main

def main():
    global torch, dist
    _args, cfg = harness.parse_args()
    c = read_config(cfg)
    world_size = harness.skip_below_ranks(LOG, 2, SKIP_REASON)
    matrix_mode = c["pairs"] == MATRIX
    skipped = {}
    if not matrix_mode:
        pairs, skipped = pairs_within(c, world_size)
        if not pairs:
            LOG.skipped(f"no pair of {c['pairs']} within WORLD_SIZE={world_size}")
    network = force_network(c["force_network"])     # before the process group: NCCL reads them at init

    import torch as _torch
    import torch.distributed as _dist
    torch, dist = _torch, _dist

    ctx = harness.setup_distributed(cfg)
    rank, n = ctx.rank, ctx.world_size
    nnodes = harness.env_int("NNODES", 1)
    dt_name = c["dtype"]
    dt = getattr(torch, DTYPES[dt_name])
    gen = torch.Generator(device=ctx.device).manual_seed(c["seed"] + rank)
    where = gather_where(ctx)
    if matrix_mode:
        steps = matrix_steps(where)
        pairs = [list(p) for _, _, step in steps for p in step]
    info = pair_info(where, pairs)
    LOG.event("INIT_END", backend=ctx.backend, device=str(ctx.device), world_size=n)

    labels = {s: harness.format_size(s) for s in c["sizes"]}
    if rank == 0:
        what = (f"link matrix of {len(pairs)} ordered pairs at {labels[max(c['sizes'])]}" if matrix_mode else
                f"pairs {[(i['pair'], 'same node' if i['same_node'] else 'cross node') for i in info]}")
        print(f"p2p: {n} ranks on {nnodes} node(s), backend {ctx.backend}, device {ctx.device.type}, dtype {dt_name}, "
              f"{what}{', network forced' if network['forced'] else ''}", flush=True)
        print(f"{'pair':>7} {'mode':>4} {'size':>6} {'bytes':>12} {'time_us':>11} {'GB/s':>10} {'bad':>5}", flush=True)
    LOG.event("RUN_START")
    if matrix_mode:
        results, budget = sweep_matrix(steps, c, ctx, dt, gen, skipped, labels)
    else:
        results, budget = sweep(pairs, c, ctx, dt, gen, skipped, labels)
    LOG.event("RUN_END")

    failures = [{"pair": [k[0], k[1]], "mode": k[2], "size": labels[k[3]], "mismatches": r["bad"]}
                for k, r in results.items() if r["bad"]]
    matrix = link_matrix(results, where, labels, network["forced"])
    details = {
        "world_size": n, "nnodes": nnodes, "backend": ctx.backend, "dtype": dt_name, "modes": c["modes"],
        "plan": "matrix" if matrix_mode else "pairs",
        "sizes": [labels[max(c["sizes"])]] if matrix_mode else [labels[s] for s in c["sizes"]],
        "pairs": info, "skipped": skipped,
        "checked_elements_this_rank": sum(r["checked"] for r in results.values()),
        "timing": "slower rank of the pair, median of `repeats` samples of `iters` back-to-back transfers (counts "
                  "per window in `counts`, sized by the time budget unless iters/repeats are set); device events "
                  "on CUDA",
        "transfers": "one rank per device; torch.distributed send/recv (uni) and batch_isend_irecv (bi) of the "
                     f"{ctx.backend} backend",
        "bw": "uni: bytes / time; bi: 2 x bytes / time (both directions together); GB = 1e9 B",
        "check": f"the sender's data is (sender + 1) * (1 + i % {PERIOD}); the receiver compares every element",
        "network": network_details(network, where, ctx.backend),
        "matrix": matrix,
    }
    if matrix_mode:
        details["max_seconds_per_pair"] = c["max_seconds_per_pair"]
    else:
        details["sweep"] = sweep_rows(results, dt_name)
    details.update(budget.details())
    harness.check_all_ranks(LOG, ctx, failures, details)
    if not results:
        harness.config_error(f"p2p: every size is too small (skipped: {skipped})")

    first = pairs[0]
    metrics, head, head_size = sweep_metrics(results, c, first, labels)
    metrics.update(summary_metrics(matrix, c["modes"]))
    details["headline"] = f"bw_{c['modes'][0]} of pair {first} at {labels[head_size]}"
    if rank == 0:
        print_matrix(matrix)
    env = harness.env_info(ctx, nnodes=nnodes, node_rank=node_of(rank), dtype=dt_name, pairs=info,
                           sizes=details["sizes"], network_forced=network["forced"])
    ctx.destroy()
    LOG.finished(metric=f"bw_{c['modes'][0]}", value=head["bw"], unit="GB/s", higher_is_better=True,
                 metrics=metrics, checks={"passed": True, "details": details}, env=env)


if __name__ == "__main__":
    main()
