"""The terminal table of a run (rich), and its failures with their last lines."""

from __future__ import annotations

from rich.table import Table

from flagperf.reporters.base import Reporter

STYLES = {"passed": "green", "failed": "red", "skipped": "yellow"}


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.3e}"


def _note(case) -> str:
    """The first failure of a case, short."""
    for r in case.rounds:
        if r.failure:
            return f"round {r.round}: {r.failure.get('reason', r.status)}"
    return ""


class TerminalReporter(Reporter):
    name = "terminal"
    file_name = None

    def render(self, summary) -> Table:
        table = Table(title=f"flagperf {summary.run_id}: {summary.status}")
        for col, just in (("case", "left"), ("status", "left"), ("rounds", "right"), ("metric", "left"),
                          ("median", "right"), ("mean", "right"), ("min", "right"), ("max", "right"),
                          ("unit", "left"), ("e2e s", "right"), ("note", "left")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for case in summary.cases:
            st, e2e = case.stats.get("value") or {}, case.stats.get("e2e_time") or {}
            status = case.status.value
            table.add_row(
                case.name, f"[{STYLES.get(status, 'yellow')}]{status}[/]",
                f"{len(case.passed_rounds)}/{len(case.rounds)}", case.metric or "-", _num(st.get("median")),
                _num(st.get("mean")), _num(st.get("min")), _num(st.get("max")), case.unit or "",
                _num(e2e.get("median")), _note(case))
        return table

    def failure_lines(self, summary) -> list:
        """Every failed round with its reason and last lines, for ``flagperf report``."""
        out = []
        for h in summary.host_checks:
            out.append(f"host {h.get('host')}: {h.get('outcome')}: {h.get('detail')}; {h.get('remedy')}")
        for case in summary.cases:
            for r in case.rounds:
                if r.failure:
                    out.append(f"{case.name} round {r.round}: {r.status}: {r.failure.get('reason', '')}")
                    out += [f"    | {line}" for line in r.failure.get("last_lines") or []]
        return out
