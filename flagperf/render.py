"""Terminal rendering with rich: the dry-run plan and the check table (a run's table is a reporter).

A host's answers (check details, remedies) enter the table as :func:`flagperf.untrusted.for_markup` text; the plan's
lines are printed through :func:`flagperf.untrusted.for_terminal` by the caller.
"""

from __future__ import annotations

import shlex

from rich.table import Table

from flagperf.mpilaunch import mpi_job_lines
from flagperf.untrusted import for_markup


def plan_lines(plan, backend=None) -> list:
    cfg = plan.config
    t = cfg.test
    v = cfg.vendor
    out = [
        f"run directory: {plan.run_dir}   (nothing is created by --dry-run)",
        f"vendor: {v.name} ({t.vendor_reason}); device {v.torch_device or v.device}, backend {v.dist_backend}"
        + (f", torch plug-in {v.torch_plugin}" if v.torch_plugin else "")
        + (f", backend module {v.dist_backend_module}" if v.dist_backend_module else "")
        + f"; accelerator monitor {v.gpu_monitor}",
        f"scheduler: {cfg.cluster.scheduler}; runtime: {t.runtime}; monitor interval {t.monitor_interval:g} s; "
        f"case timeout {t.case_timeout:g} s; clear caches: {'yes' if t.clear_caches else 'no'}",
        f"hosts: {', '.join(h.address for h in plan.hosts)}",
    ]
    out += [f"note: {n}" for n in plan.notes]
    for case in plan.cases:
        c = case.case
        out.append("")
        shape = f"{c.nnodes} node(s) x {c.nproc} rank(s)" if not c.each else \
            f"each: {c.nnodes} independent job(s), one per host, each 1 node x {c.nproc} rank(s) (no cross-host " \
            f"rendezvous; a host failing does not stop the others)"
        rounds = f"{c.repeat} round(s)"
        if c.pairs:
            stages = len(case.rounds) // max(1, c.repeat)
            shape = (f"pairs: every pair of the {c.nnodes} hosts ({c.nnodes * (c.nnodes - 1) // 2} pair(s)) as a "
                     f"2-node job of 2 node(s) x {c.nproc} rank(s), {c.nnodes // 2} disjoint pair(s) at a time "
                     f"(a pair failing does not stop the others)")
            rounds = f"{c.repeat} round(s) x {stages} stage(s)"
        out.append(f"case {case.name}  [{c.key}]  {shape}, {rounds}, data: {c.data_dir or '-'}")
        out.append(f"  case config: {', '.join(str(p) for p in case.config_files) or '-'}")
        out += [f"  {n}" for n in case.notes]
        if c.pairs:
            out += pair_schedule_lines(case)
        for rnd in case.rounds:
            out.append(f"  round {rnd.index}: {rnd.local_dir}")
            for node in rnd.nodes:
                spec = node.launch
                out.append(f"    node {node.node_rank} on {node.host.address}: global ranks "
                           f"{', '.join(map(str, node.ranks))}; MASTER_ADDR={node.master_addr} "
                           f"MASTER_PORT={spec.env['MASTER_PORT']} WORLD_SIZE={spec.env['WORLD_SIZE']}"
                           + (f" {spec.visible_devices_env}={spec.visible_devices}"
                              if spec.visible_devices_env else ""))
                out.append(f"      node dir: {node.node_dir}")
                out.append(f"      monitor:  {shlex.join(node.monitor_argv)}")
                out.append(f"      launcher: {shlex.join(node.launcher_argv)}")
                env = " ".join(f"{k}={shlex.quote(val)}" for k, val in spec.env.items())
                if spec.mode == "mpi":     # one mpirun on node 0 starts every node's ranks
                    what = "mpirun starter (node 0, log node.out.log)" if node.node_rank == 0 else \
                        "rank command (started by node 0's mpirun)"
                    out.append(f"      {what}: (cd {shlex.quote(spec.cwd)} && {shlex.join(spec.argv)})")
                    if node.node_rank == 0:
                        out += [f"      {line}" for line in mpi_job_lines(spec.argv)]
                elif spec.mode == "node":    # one command per node, which starts the ranks
                    out.append(f"      node command (once per node, log node.out.log): (cd {shlex.quote(spec.cwd)} "
                               f"&& {env} {shlex.join(spec.argv)})")
                else:
                    out.append(f"      rank:     (cd {shlex.quote(spec.cwd)} && {env} RANK=<r> LOCAL_RANK=<l> "
                               f"{shlex.join(spec.argv)})")
                if backend is not None:
                    out += [f"      {line}" for line in backend.describe(node)]
    return out


def pair_schedule_lines(case) -> list:
    """A pairs case's schedule: one line per round (repeat and stage), its pairs with their MASTER_PORT, and the
    host that sits out (an odd number of hosts)."""
    out = ["  schedule (node 0 of each pair first; its MASTER_PORT):"]
    hosts = [h.address for h in case.hosts]
    for rnd in case.rounds:
        nodes = {n.label: n for n in rnd.nodes}
        pairs = [f"{nodes[a].host.address} <-> {nodes[b].host.address} ({nodes[a].master_port})"
                 for a, b, *_ in rnd.jobs]
        busy = {n.host.address for n in rnd.nodes}
        idle = [h for h in hosts if h not in busy]
        out.append(f"    round {rnd.index} = repeat {rnd.repeat} stage {rnd.stage}: {', '.join(pairs)}"
                   + (f"; sits out: {', '.join(idle)}" if idle else ""))
    return out


def check_table(results) -> Table:
    table = Table(title="host check")
    for col in ("host", "outcome", "detail", "remedy"):
        table.add_column(col)
    for r in results:
        style = "green" if r.ok else "red"
        table.add_row(for_markup(r.host), f"[{style}]{for_markup(r.outcome)}[/]", for_markup(r.detail),
                      for_markup(r.remedy or ""))
    return table
