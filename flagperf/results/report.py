"""A Markdown report of a run, made from its summary.json alone (so it can be made again at any time)."""

from __future__ import annotations


def _num(v, digits=4) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    return f"{v:.{digits}g}"


def _table(header, rows) -> list:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def markdown(summary: dict) -> str:
    s = summary
    lines = [
        f"# flagperf {s['run_id']}: {s['status']}",
        "",
        f"- started {s.get('started')}, finished {s.get('finished')}, {_num(s.get('duration_s'))} s",
        f"- vendor `{s.get('vendor')}`, runtime `{s.get('runtime')}`, hosts: {', '.join(s.get('hosts') or [])}",
        f"- flagperf {s.get('flagperf_version')}; run directory `{s.get('run_dir')}`",
        "",
        "## Cases",
        "",
    ]
    rows = []
    for c in s["cases"]:
        st = c["stats"].get("value") or {}
        rows.append([c["name"], c["status"], f"{c['rounds_passed']}/{len(c['rounds'])}", c.get("metric") or "-",
                     _num(st.get("median")), _num(st.get("min")), _num(st.get("max")), c.get("unit") or "",
                     _num((c["stats"].get("e2e_time") or {}).get("median"))])
    lines += _table(["case", "status", "rounds", "metric", "median", "min", "max", "unit", "e2e s"], rows)
    for c in s["cases"]:
        lines += ["", f"## {c['name']}", "",
                  f"`{c['key']}`: {c['nnodes']} node(s) x {c['nproc']} rank(s), {c['repeat']} round(s), "
                  f"data: {c.get('data_dir') or '-'}", ""]
        lines += _table(["round", "status", "value", "e2e s", "duration s", "note"],
                        [[r["round"], r["status"], _num(r.get("value")), _num(r.get("e2e_time")),
                          _num(r.get("duration_s")), (r.get("failure") or {}).get("reason", "")]
                         for r in c["rounds"]])
        for r in c["rounds"]:
            f = r.get("failure") or {}
            if f.get("last_lines"):
                where = f" (node {f.get('node')}, rank {f.get('rank')}, exit code {f.get('exit_code')})" \
                    if f.get("rank") is not None else ""
                lines += ["", f"Round {r['round']}{where}, last lines of `{f.get('log', '')}`:", "", "```"]
                lines += f["last_lines"] + ["```"]
        metrics = [(name, st) for name, st in c["stats"].items() if name not in ("value", "e2e_time") and st]
        if metrics:
            units = {}
            for r in c["rounds"]:
                for name, m in (r.get("metrics") or {}).items():
                    units[name] = m.get("unit", "") if isinstance(m, dict) else ""
            lines += ["", "Metrics over the passed rounds:", ""]
            lines += _table(["metric", "median", "min", "max", "unit"],
                            [[n, _num(st["median"]), _num(st["min"]), _num(st["max"]), units.get(n, "")]
                             for n, st in metrics])
        first = next((r for r in c["rounds"] if r.get("env")), None)
        if first:
            env = ", ".join(f"{k} {v}" for k, v in first["env"].items() if not isinstance(v, (dict, list)))
            lines += ["", f"Environment (round {first['round']}, rank 0): {env}"]
        mon_rows = []
        for r in c["rounds"]:
            for n in r.get("nodes") or []:
                m = n.get("monitors") or {}
                gpus = (m.get("gpu") or {}).get("devices") or []
                mon_rows.append([r["round"], n["node"],
                                 _num((m.get("cpu") or {}).get("util_pct_mean")),
                                 _num((m.get("mem") or {}).get("used_mib_max")),
                                 _num((m.get("pwr") or {}).get("power_w_mean")),
                                 _num(max((g.get("temp_c_max") or 0 for g in gpus), default=None)),
                                 _num(max((g.get("power_w_max") or 0 for g in gpus), default=None)),
                                 _num(max((g.get("util_pct_mean") or 0 for g in gpus), default=None))])
        if mon_rows:
            lines += ["", "Monitors (per node and round; `-`: sensor unavailable):", ""]
            lines += _table(["round", "node", "cpu % mean", "mem MiB max", "host W mean", "GPU °C max",
                             "GPU W max", "GPU util % mean"], mon_rows)
    return "\n".join(lines) + "\n"
