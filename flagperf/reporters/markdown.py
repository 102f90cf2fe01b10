"""report.md: a run for people, made from its summary alone (so ``flagperf report`` can make it again).

Every text that came from a host, a result file or a config goes through :mod:`flagperf.untrusted`
(``for_markdown`` in text and table cells, ``markdown_code`` in code spans, ``markdown_fence`` around log lines):
the page renders it as text, never as HTML, a link, an image, a heading or a table row.
"""

from __future__ import annotations

from flagperf.references import case_note, describe, tolerance_text
from flagperf.reporters.base import Reporter
from flagperf.results import ncclview
from flagperf.results.interpret import Status, describe_exit
from flagperf.results.nodefigures import SPREAD_FLAG_PCT, node_figures
from flagperf.results.slownodes import describe as describe_outlier
from flagperf.results.slownodes import gpu_text, outliers
from flagperf.results.stragglers import case_stragglers
from flagperf.untrusted import for_markdown, markdown_code, markdown_fence


class _Md(str):
    """A table cell that is this module's own Markdown (``**yes**``), not text to escape."""


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
    out += ["| " + " | ".join(c if isinstance(c, _Md) else for_markdown(c) for c in row) + " |" for row in rows]
    return out


def _status_text(c) -> str:
    """The case's status; 'passed (within reference)' when reference verdicts back it."""
    note = case_note(c.verdicts or [])
    return note if c.status == Status.PASSED and note.startswith("passed") else str(c.status)


def _reference_lines(c) -> list:
    """The case's reference verdicts (summary.json's ``verdicts``) as a table; nothing when it has none."""
    verdicts = c.verdicts or []
    if not verdicts:
        return []
    files = sorted({v.reference for v in verdicts if v.reference})
    head = f"Reference {', '.join(markdown_code(f) for f in files) or '-'}: "
    if c.status == Status.BELOW_REFERENCE:
        head += "**below reference**: " + for_markdown("; ".join(describe(v) for v in verdicts if not v.ok))
    else:
        head += for_markdown(case_note(verdicts))
    rows = [[v.metric, _num(v.measured), _num(v.expected), tolerance_text(v),
             v.unit, v.result + ("" if v.ok else " (fails)"),
             v.source] for v in verdicts]
    return ["", head, ""] + _table(["metric", "measured (median)", "expected", "tolerance", "unit", "result",
                                    "source"], rows)


def _nccl_lines(c) -> list:
    """nccl-tests' view of a collectives or p2p case (flagperf.results.ncclview): per op a table with its columns,
    sizes ascending, and its average bus bandwidth under it; nothing for any other case."""
    lines = []
    for t in ncclview.op_tables(c):
        lines += ["", f"nccl-tests' view: {markdown_code(t.op)}, round {t.round}:", ""]
        lines += _table(list(ncclview.COLUMNS), [ncclview.row_cells(row) for row in t.rows])
        lines += ["", for_markdown(ncclview.footer(t))]
    return lines


def _straggler_lines(c) -> list:
    """A training case's flagged stragglers (flagperf.results.stragglers), one line per round that flagged a rank
    (passed, or failed its own check: said so), then the rule; nothing where none was flagged."""
    found = case_stragglers(c)
    if not found:
        return []
    lines = ["", "Stragglers (a finding, not a failed check):", ""]
    for s in found:
        margin = f", margin {s.margin_pct:g}%" if s.margin_pct is not None else ""
        failed = "; the round failed its own check" if s.check_failed else ""
        lines.append(f"- round {s.round}: **{for_markdown(s.note())}** (judged by each rank's "
                     f"{for_markdown(s.judged_by)} probe time{margin}{failed})")
    if found[-1].rule:
        lines += ["", f"Rule: {for_markdown(found[-1].rule)}"]
    return lines


VERDICT_MARKS = {"accept": "accept", "degraded": "**degraded**", "reject": "**REJECT**"}


def _node_figure_lines(cases) -> list:
    """Per node of every case with per-device figures (results.nodefigures), its headline metric: the node
    aggregate (a sum only over simultaneous windows), the devices' median, min, max and spread; every flagged
    spread first, in bold, naming the slowest device."""
    figures = [(c, f) for c in cases for f in node_figures(c)]
    if not figures:
        return []
    lines = ["", "## Node figures (per device, headline metric)", ""]
    lines += [f"- **SPREAD: {for_markdown(c.name)}: node {for_markdown(f.node)}: {for_markdown(f.reason)}**"
              for c, f in figures if f.flagged]
    lines += ["", f"A spread above {SPREAD_FLAG_PCT:g}% between the devices of one node is flagged; the node "
                  "aggregate is their sum only when their timed windows were simultaneous.", ""]
    lines += _table(["case", "node", "metric", "aggregate", "median", "min", "max", "unit", "spread %", "overlap",
                     "devices", "note"],
                    [[c.name, f.node, f.metric, _num(f.aggregate) if f.aggregate is not None else "not summed",
                      _num(f.median), _num(f.min), _num(f.max), f.unit, _num(f.spread_pct, 3),
                      _num(f.overlap, 3), " ".join(f"{lr}:{_num(v)}" for lr, v in f.per_device),
                      f.reason] for c, f in figures])
    return lines


def _verdict_lines(verdicts) -> list:
    """The node verdicts: one line per node, then a table of every reason (reject first)."""
    if not verdicts:
        return []
    lines = ["", "## Node verdicts", ""]
    lines += [f"- {for_markdown(v.host)}: {VERDICT_MARKS.get(v.verdict, for_markdown(v.verdict))}"
              + (f" ({len(v.reasons)} reason(s))" if v.reasons else "") for v in verdicts]
    rows = [[v.host, r.severity, r.source, r.case or "", r.subject, r.detail, r.remedy]
            for v in verdicts for r in v.reasons]
    if rows:
        lines += [""] + _table(["node", "severity", "source", "case", "subject", "detail", "remedy"], rows)
    lines += ["", "reject: send back or drain; degraded: usable, with these reasons; the run exits 1 when a node is "
                  "rejected (docs/results.md, \"verdicts\")."]
    return lines


class MarkdownReporter(Reporter):
    name = "markdown"
    file_name = "report.md"

    def render(self, s) -> str:
        lines = [
            f"# flagperf {for_markdown(s.run_id)}: {s.status}",
            "",
            f"- started {for_markdown(s.started)}, finished {for_markdown(s.finished)}, {_num(s.duration_s)} s",
            f"- vendor {markdown_code(s.vendor)}, runtime {markdown_code(s.runtime)}, backend "
            f"{markdown_code(s.backend or '-')}, hosts: {', '.join(for_markdown(h) for h in s.hosts)}",
            f"- flagperf {for_markdown(s.flagperf_version)}; run directory {markdown_code(s.run_dir)}",
        ]
        if s.interrupted:
            lines.append("- **interrupted** (SIGINT or SIGTERM): rounds that did not finish are marked so")
        lines += _verdict_lines(getattr(s, "verdicts", None) or [])
        if s.host_checks:
            lines += ["", "## Hosts that failed their check", ""]
            lines += _table(["host", "outcome", "detail", "remedy"],
                            [[h.get("host"), h.get("outcome"), h.get("detail"), h.get("remedy")]
                             for h in s.host_checks])
        lines += ["", "## Cases", ""]
        rows = []
        for c in s.cases:
            st, e2e = c.stats.get("value") or {}, c.stats.get("e2e_time") or {}
            rows.append([c.name, _status_text(c), f"{len(c.passed_rounds)}/{len(c.rounds)}", c.metric or "-",
                         _num(st.get("median")), _num(st.get("min")), _num(st.get("max")), c.unit or "",
                         _num(e2e.get("median"))])
        lines += _table(["case", "status", "rounds", "metric", "median", "min", "max", "unit", "e2e s"], rows)
        lines += _node_figure_lines(s.cases)
        lines += self._rankings(s.rankings or [])
        for c in s.cases:
            lines += self._case(c)
        return "\n".join(lines) + "\n"

    def _rankings(self, rankings) -> list:
        """each cases: the outliers first, in bold, then every host (and GPU) ranked, best first."""
        if not rankings:
            return []
        lines = ["", "## Slow hosts and GPUs (each cases)", ""]
        flagged = outliers(rankings)
        units = {r.case: r.unit for r in rankings}
        if flagged:
            lines += [f"- **OUTLIER: {for_markdown(describe_outlier(case, e, units.get(case)))}**"
                      for case, e in flagged]
            lines += ["", "The run exits 1 while an outlier is flagged; the cases' status is not changed by it."]
        else:
            lines.append("No outlier: no host or GPU is slower than the rule allows.")
        for r in rankings:
            lines += ["", f"{markdown_code(r.case)}: {for_markdown(r.metric or '-')} ({for_markdown(r.unit or '')}, "
                          f"{'higher' if r.higher_is_better is not False else 'lower'} is better), "
                          f"median of the hosts {_num(r.median)}. Rule: {for_markdown(r.rule)}", ""]
            lines += _table(["rank", "host", "gpu", "value", "score", "outlier"],
                            [["-" if e.rank is None else e.rank, e.host,
                              "-" if e.gpu is None else e.gpu if e.identity is None else gpu_text(e),
                              _num(e.value), _num(e.score, 3),
                              _Md("**yes**") if e.outlier else "no"] for e in r.entries])
            if r.failed_hosts:
                lines += ["", "Hosts without a passed round (not ranked): "
                          + ", ".join(for_markdown(h) for h in r.failed_hosts)]
        return lines

    def _case(self, c) -> list:
        lines = ["", f"## {for_markdown(c.name)}", "",
                 f"{markdown_code(c.key)}: {c.nnodes} node(s) x {c.nproc} rank(s), {c.repeat} round(s), data: "
                 f"{for_markdown(c.data_dir or '-')}", ""]
        lines += _table(["round", "status", "value", "e2e s", "duration s", "note"],
                        [[r.round, r.status, _num(r.value), _num(r.e2e_time), _num(r.duration_s),
                          r.failure.reason if r.failure else ""] for r in c.rounds])
        for r in c.rounds:
            f = r.failure
            if f is not None and f.last_lines:
                where = ""
                if f.rank is not None:
                    where = f" (node {f.node}, rank {f.rank}, {describe_exit(f.exit_code)})"
                elif f.node:
                    where = f" (node {f.node})"
                lines += ["", f"Round {r.round}{for_markdown(where)}, last lines of {markdown_code(f.log or '')}:",
                          ""]
                lines += markdown_fence(f.last_lines)
        lines += _straggler_lines(c)
        lines += _reference_lines(c)
        lines += _nccl_lines(c)
        metrics = [(name, st) for name, st in c.stats.items() if name not in ("value", "e2e_time") and st]
        if metrics:
            units = c.metric_units()
            origin = (c.head or {}).get("origin")      # read from FlagPerf's own lines
            lines += ["", f"Metrics over the passed rounds{f' (from {for_markdown(origin)})' if origin else ''}:",
                      ""]
            lines += _table(["metric", "median", "min", "max", "unit"],
                            [[n, _num(st["median"]), _num(st["min"]), _num(st["max"]), units.get(n, "")]
                             for n, st in metrics])
        first = next((r for r in c.rounds if isinstance((r.finished or {}).get("env"), dict)), None)
        if first:
            env = ", ".join(f"{for_markdown(k)} {for_markdown(v)}" for k, v in first.finished["env"].items()
                            if not isinstance(v, (dict, list)))
            lines += ["", f"Environment (round {first.round}, rank 0): {env}"]
        mon_rows = []
        for r in c.rounds:
            for n in r.nodes:
                m = n.monitors or {}
                gpus = (m.get("gpu") or {}).get("devices") or []
                mon_rows.append([r.round, n.node,
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
        return lines
