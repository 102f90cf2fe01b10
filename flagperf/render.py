"""Terminal rendering with rich: the dry-run plan, the check table, the summary table."""

from __future__ import annotations

import shlex

from rich.table import Table


def plan_lines(plan) -> list:
    cfg = plan.config
    t = cfg.test
    out = [
        f"run directory: {plan.run_dir}   (nothing is created by --dry-run)",
        f"vendor: {cfg.vendor.name} ({t.vendor_reason}); device {cfg.vendor.device}, backend "
        f"{cfg.vendor.dist_backend}; runtime: {t.runtime}; monitor interval {t.monitor_interval:g} s; "
        f"case timeout {t.case_timeout:g} s; clear caches: {'yes' if t.clear_caches else 'no'}",
        f"hosts: {', '.join(h.address for h in plan.hosts)}",
    ]
    for case in plan.cases:
        c = case.case
        out.append("")
        out.append(f"case {case.name}  [{c.key}]  {c.nnodes} node(s) x {c.nproc} rank(s), {c.repeat} round(s), "
                   f"data: {c.data_dir or '-'}")
        out.append(f"  case config: {', '.join(str(p) for p in case.config_files) or '-'}")
        for rnd in case.rounds:
            out.append(f"  round {rnd.index}: {rnd.local_dir}")
            for node in rnd.nodes:
                spec = node.launch_spec
                out.append(f"    node {node.node_rank} on {node.host.address}: global ranks "
                           f"{', '.join(map(str, node.ranks))}; MASTER_ADDR={spec['env']['MASTER_ADDR']} "
                           f"MASTER_PORT={spec['env']['MASTER_PORT']} WORLD_SIZE={spec['env']['WORLD_SIZE']}"
                           + (f" {spec['visible_devices_env']}={spec['visible_devices']}"
                              if spec["visible_devices_env"] else ""))
                out.append(f"      node dir: {node.node_dir}")
                if spec.get("container_name"):
                    out.append(f"      container: {spec['container_name']} (vendor image from "
                               f"vendors/{cfg.vendor.name}/{c.framework}/Dockerfile)")
                out.append(f"      monitor:  {shlex.join(node.monitor_argv)}")
                out.append(f"      launcher: {shlex.join(node.launcher_argv)}")
                out.append(f"      rank:     (cd {shlex.quote(spec['cwd'])} && {shlex.join(spec['argv'])})")
    return out


def check_table(results) -> Table:
    table = Table(title="host check")
    for col in ("host", "outcome", "detail", "remedy"):
        table.add_column(col)
    for r in results:
        style = "green" if r.ok else "red"
        table.add_row(r.host, f"[{style}]{r.outcome}[/]", r.detail, r.remedy or "")
    return table


def summary_table(summary: dict) -> Table:
    table = Table(title=f"flagperf {summary['run_id']}: {summary['status']}")
    for col, just in (("case", "left"), ("status", "left"), ("rounds", "right"), ("metric", "left"),
                      ("median", "right"), ("mean", "right"), ("min", "right"), ("max", "right"),
                      ("unit", "left"), ("e2e s", "right"), ("note", "left")):
        table.add_column(col, justify=just)
    for case in summary["cases"]:
        st = case["stats"].get("value") or {}
        e2e = case["stats"].get("e2e_time") or {}
        style = {"passed": "green", "failed": "red", "skipped": "yellow"}.get(case["status"], "yellow")
        table.add_row(
            case["name"], f"[{style}]{case['status']}[/]", f"{case['rounds_passed']}/{len(case['rounds'])}",
            case["metric"] or "-", _num(st.get("median")), _num(st.get("mean")), _num(st.get("min")),
            _num(st.get("max")), case["unit"] or "", _num(e2e.get("median")), _note(case),
        )
    return table


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.3e}"


def _note(case) -> str:
    """The first failure of a case, short."""
    for r in case["rounds"]:
        f = r.get("failure")
        if f:
            return f"round {r['round']}: {f.get('reason', r['status'])}"
    return ""
