"""report.html: one self-contained page per run, with plots (plotly, its plotly.js embedded once, inline).

Made from the summary and the node directories of the run directory (so ``flagperf report`` can make it again):
the run's header, the case table with statuses and verdicts, per case the headline metric per round (with the
reference line and band of a verdict), per round and node the monitor time series (CPU, memory, host power and
every accelerator field) with the phases of the round marked, and the slow-node rankings. docs/results.md.

Nothing from a host is trusted: every text that came from a host (names, log lines, environment, reasons)
is HTML-escaped, also where plotly draws it (plotly reads a small HTML subset in its labels); plotly's JSON
escapes ``<`` inside the scripts; the page's Content-Security-Policy forbids every network load.
"""

from __future__ import annotations

import html
import math
import os
import re
from datetime import datetime
from pathlib import Path

from flagperf.reporters.base import Reporter
from flagperf.results.monitors import read_monitor_file, read_status
from flagperf.results.perflog import read_records
from flagperf_contract import HOST_SENSORS

TOTAL_POINTS = 250_000          # monitor points in the whole page, over all traces (keeps the file small)
MAX_TRACE_POINTS = 2_000        # at most this many points per monitor trace
MIN_TRACE_POINTS = 200          # ... and at least this many when the page has many traces
MAX_GPU_ROWS = 10               # accelerator fields plotted per node (known ones first)
_GPU_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*_monitor\.log\Z")
_RANK_LOG = re.compile(r"rank(\d+)\.out\.log\Z")
# Accelerator fields, in row order, with their labels; other numeric fields follow (throttle fields together).
GPU_FIELDS = (("power_w", "power W"), ("sm_clock_mhz", "SM clock MHz"), ("mem_clock_mhz", "memory clock MHz"),
              ("util_pct", "util %"), ("mem_used_mib", "memory used MiB"), ("temp_c", "temperature °C"),
              ("energy_j", "energy J"))
GPU_SKIP = ("gpu", "mem_total_mib")
PHASES = (("INIT_START", "INIT_END", "#9ca3af"), ("RUN_START", "RUN_END", "#2ca02c"))   # shaded, in this color
STATUS_COLORS = {"passed": "#1a7f37", "failed": "#cf222e", "error": "#cf222e", "timeout": "#cf222e",
                 "below_reference": "#bc4c00", "skipped": "#9a6700", "interrupted": "#8250df",
                 "not_run": "#6e7781"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "showSendToCloud": False,
               "modeBarButtonsToRemove": ["sendDataToCloud", "select2d", "lasso2d"]}
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'")
LAYOUT = dict(template="none", font=dict(family="DejaVu Sans, Liberation Sans, Arial, sans-serif", size=12),
              paper_bgcolor="white", plot_bgcolor="white", hovermode="x unified",
              margin=dict(l=70, r=20, t=50, b=45))
AXIS = dict(showgrid=True, gridcolor="#e5e7eb", zeroline=False, linecolor="#9ca3af", showline=True, ticks="outside")


class ReportError(OSError):
    """report.html could not be made (plotly missing, a figure that failed); write_reports reports it."""


def esc(value) -> str:
    """Any value as text safe inside HTML (and inside plotly's labels, which read a subset of HTML)."""
    return html.escape("" if value is None else str(value), quote=True)


def num(v, digits=4) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        return f"{v:.{digits}g}"
    return esc(v)


def _number(v):
    """v when it is a finite int or float (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if math.isfinite(v) else None


def field_of(obj, *names, default=None):
    """The first of ``names`` that ``obj`` (a dict or an object) has and that is not None."""
    for name in names:
        v = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if v is not None:
            return v
    return default


def status_text(status) -> str:
    return str(getattr(status, "value", status) or "-")


def badge(status) -> str:
    s = status_text(status)
    return f'<span class="badge" style="background:{STATUS_COLORS.get(s, "#6e7781")}">{esc(s)}</span>'


def epoch(iso) -> float | None:
    """Seconds since the epoch of an ISO-8601 time with an offset; None for anything else."""
    if not isinstance(iso, str):
        return None
    try:
        t = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


def downsample(xs: list, ys: list, limit: int) -> tuple[list, list]:
    """At most ``limit`` points: the minimum and the maximum of each bucket, in time order (spikes stay)."""
    n = len(xs)
    if n <= limit or limit < 4:
        return xs, ys
    size = math.ceil(n / (limit // 2))
    ox, oy = [], []
    for start in range(0, n, size):
        idx = range(start, min(n, start + size))
        lo = min(idx, key=lambda i: ys[i])
        hi = max(idx, key=lambda i: ys[i])
        for i in sorted({lo, hi}):
            ox.append(xs[i])
            oy.append(ys[i])
    return ox, oy


def _round_value(v):
    return round(v, 3) if isinstance(v, float) else v


# ----------------------------------------------------------------------------------------------- verdicts
def verdicts_of(case) -> list:
    return list(getattr(case, "verdicts", None) or [])


def verdict_band(v) -> tuple:
    """(expected, low, high) of a reference verdict (flagperf.references.verdict): the range in which its result
    is ``within``. ``tolerance`` is the shortfall allowed, ``better_tolerance`` (when set) the excess allowed;
    without it the range ends at ``tolerance`` on the better side too (beyond it: ``above``, flagged only)."""
    expected = _number(field_of(v, "expected"))
    tol = _number(field_of(v, "tolerance"))
    if expected is None or tol is None:
        return expected, None, None
    better = _number(field_of(v, "better_tolerance"))
    better = tol if better is None else better
    worse_side, better_side = abs(expected) * tol, abs(expected) * better
    if field_of(v, "higher_is_better") is False:
        return expected, expected - better_side, expected + worse_side
    return expected, expected - worse_side, expected + better_side


def verdict_result(v) -> str:
    """The verdict's result (within, below, above, not_measured, unit_mismatch) for its badge."""
    return str(field_of(v, "result", default="-"))


def verdict_badge(v) -> str:
    result, ok = verdict_result(v), field_of(v, "ok", default=True)
    color = {"within": "#1a7f37", "above": "#bc4c00", "not_measured": "#6e7781"}.get(result, "#cf222e")
    if ok is False:
        color = "#cf222e"
    return f'<span class="badge" style="background:{color}">{esc(result)}</span>'


def _tolerance_text(v) -> str:
    try:
        from flagperf.references import tolerance_text
        return esc(tolerance_text(v))
    except (ImportError, TypeError, ValueError):
        return num(field_of(v, "tolerance"))


def _case_note(verdicts) -> str:
    try:
        from flagperf.references import case_note
        return esc(case_note(verdicts))
    except (ImportError, TypeError, ValueError, AttributeError):
        return ", ".join(esc(verdict_result(v)) for v in verdicts)


# ------------------------------------------------------------------------------------------ node directories
def node_dir_of(run_dir, rnd, node) -> Path | None:
    """The node's directory inside the run directory; None for a name that would lead outside it."""
    rel = Path(str(rnd.dir or "")) / str(node.node or "")
    if rel.is_absolute() or ".." in rel.parts or not str(node.node or "").strip() or "/" in str(node.node):
        return None
    return Path(run_dir) / rel


def _samples(path) -> list:
    try:
        return read_monitor_file(path)
    except (OSError, ValueError):
        return []


def gpu_file_of(node_dir: Path) -> str | None:
    status, _ = read_status(str(node_dir))
    sensors = status.sensors if status else {}
    name = sensors["gpu"].file if "gpu" in sensors and sensors["gpu"].available else None
    if name and _GPU_FILE.match(name):
        return name
    try:
        names = sorted(f for f in os.listdir(node_dir) if _GPU_FILE.match(f)
                       and f[:-len("_monitor.log")] not in HOST_SENSORS)
    except OSError:
        return None
    return names[0] if names else None


def phases_of(node_dir: Path, node) -> dict:
    """{event: epoch seconds} of the first INIT_START, INIT_END, RUN_START, RUN_END in the node's lowest rank
    log (rank 0's on node 0)."""
    ranks: list[int] = sorted(r["rank"] for r in node.ranks or [] if isinstance(r, dict)
                              and isinstance(r.get("rank"), int) and not isinstance(r.get("rank"), bool))
    if not ranks:
        try:
            ranks = sorted(int(m.group(1)) for m in map(_RANK_LOG.match, os.listdir(node_dir)) if m)
        except OSError:
            ranks = []
    out: dict = {}
    if not ranks:
        return out
    for rec in read_records(node_dir / f"rank{ranks[0]}.out.log"):
        ev, t = rec.get("event"), _number(rec.get("time"))
        if ev in ("INIT_START", "INIT_END", "RUN_START", "RUN_END") and t is not None and ev not in out:
            out[ev] = float(t)
    return out


def read_node(run_dir, rnd, node) -> dict:
    """What a node directory holds for the plots: series {(sensor, key, gpu): ([epoch], [value])}, phases,
    the ranks' start and end, the vendor of the accelerator file."""
    data: dict = {"series": {}, "phases": {}, "start": None, "end": None, "gpu_vendor": None}
    starts = [epoch(r.get("started")) for r in node.ranks or [] if isinstance(r, dict)]
    ends = [epoch(r.get("ended")) for r in node.ranks or [] if isinstance(r, dict)]
    data["start"] = min((t for t in starts if t is not None), default=None)
    data["end"] = max((t for t in ends if t is not None), default=None)
    nd = node_dir_of(run_dir, rnd, node)
    if nd is None or not nd.is_dir():
        return data
    series = data["series"]

    def add(sensor, samples, keys, gpu=None):
        for ts, values in samples:
            t = ts.timestamp()
            for key in keys:
                v = _number(values.get(key))
                if v is not None:
                    xs, ys = series.setdefault((sensor, key, gpu), ([], []))
                    xs.append(t)
                    ys.append(v)

    add("cpu", _samples(nd / "cpu_monitor.log"), ("util_pct",))
    add("mem", _samples(nd / "mem_monitor.log"), ("used_mib",))
    add("pwr", _samples(nd / "pwr_monitor.log"), ("power_w",))
    gpu_file = gpu_file_of(nd)
    if gpu_file:
        data["gpu_vendor"] = gpu_file[:-len("_monitor.log")]
        for ts, values in _samples(nd / gpu_file):
            g = _number(values.get("gpu"))
            if g is None:
                continue
            keys = [k for k in values if k not in GPU_SKIP]
            add("gpu", [(ts, values)], keys, int(g))
    for key, (xs, ys) in series.items():       # bounded at once: a long run's samples are not all kept
        series[key] = downsample(xs, ys, MAX_TRACE_POINTS)
    try:
        data["phases"] = phases_of(nd, node)
    except OSError:
        pass
    return data


# ----------------------------------------------------------------------------------------------- the page
class HtmlReporter(Reporter):
    name = "html"
    file_name = "report.html"

    def write(self, summary, run_dir) -> Path:
        """Write report.html into the run directory atomically (temporary file + rename)."""
        try:
            text = self.render(summary, run_dir)
        except ImportError as exc:
            raise ReportError(f"plotly is not installed ({exc}); pip install plotly") from None
        except OSError:
            raise
        except Exception as exc:    # a report never fails a run: the error goes to the run log instead
            raise ReportError(f"cannot render: {type(exc).__name__}: {exc}") from exc
        path = Path(run_dir) / str(self.file_name)
        tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise
        return path

    def render(self, summary, run_dir=None) -> str:
        from plotly.offline import get_plotlyjs

        run_dir = Path(run_dir if run_dir is not None else summary.run_dir or ".")
        self._figures = 0
        self.figures: list = []         # (div id, plotly figure) of the last render, in page order
        nodes = {(ci, r.round, n.node): read_node(run_dir, r, n)
                 for ci, c in enumerate(summary.cases) for r in c.rounds for n in r.nodes}
        traces = sum(len(d["series"]) for d in nodes.values())
        self._limit = max(MIN_TRACE_POINTS, min(MAX_TRACE_POINTS, TOTAL_POINTS // max(1, traces)))
        body = self._header(summary) + self._cases_table(summary) + self._rankings(summary)
        for ci, case in enumerate(summary.cases):
            body += self._case(ci, case, nodes)
        title = f"flagperf {summary.run_id}: {status_text(summary.status)}"
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f'<title>{esc(title)}</title>\n<style>{STYLE}</style>\n'
                f'<script>window.PlotlyConfig = {{MathJaxConfig: "local"}};</script>\n'
                f'<script charset="utf-8">{get_plotlyjs()}</script>\n</head>\n<body>\n{body}'
                f'<footer>flagperf {esc(summary.flagperf_version)} &middot; {esc(summary.run_id)} &middot; '
                f'{self._figures} plot(s)</footer>\n</body>\n</html>\n')

    # --- pieces ------------------------------------------------------------------------------------------
    def _figure(self, fig, height: int) -> str:
        import plotly.io as pio

        self._figures += 1
        fig.update_layout(height=height)
        fig.update_xaxes(**AXIS)
        fig.update_yaxes(**AXIS)
        self.figures.append((f"plot{self._figures}", fig))
        div = pio.to_html(fig, include_plotlyjs=False, full_html=False, config=PLOT_CONFIG,
                          div_id=f"plot{self._figures}", default_width="100%", default_height=f"{height}px",
                          validate=False)
        return f'<div class="plot">{div}</div>\n'

    def _header(self, s) -> str:
        rows = [("status", badge(s.status) + (" <strong>interrupted</strong> (SIGINT or SIGTERM)"
                                              if s.interrupted else "")),
                ("started", esc(s.started)), ("finished", esc(s.finished or "-")),
                ("duration", f"{num(s.duration_s)} s"),
                ("hosts", f"{len(s.hosts)}: " + ", ".join(f"<code>{esc(h)}</code>" for h in s.hosts)),
                ("vendor / runtime / backend", f"{esc(s.vendor)} / {esc(s.runtime)} / {esc(s.backend or '-')}"),
                ("flagperf", esc(s.flagperf_version)), ("run directory", f"<code>{esc(s.run_dir)}</code>")]
        out = f"<header>\n<h1>flagperf {esc(s.run_id)}</h1>\n<table class=\"kv\">\n"
        out += "".join(f"<tr><th>{k}</th><td>{v}</td></tr>\n" for k, v in rows) + "</table>\n</header>\n"
        if s.host_checks:
            out += "<section>\n<h2>Hosts that failed their check</h2>\n" + _table(
                ["host", "outcome", "detail", "remedy"],
                [[esc(field_of(h, "host")), esc(field_of(h, "outcome")), esc(field_of(h, "detail")),
                  esc(field_of(h, "remedy"))] for h in s.host_checks]) + "</section>\n"
        return out

    def _cases_table(self, s) -> str:
        rows = []
        for ci, c in enumerate(s.cases):
            st, e2e = c.stats.get("value") or {}, c.stats.get("e2e_time") or {}
            verdict = _case_note(verdicts_of(c)) or "-"
            note = next((esc(f"round {r.round}: {(r.failure or {}).get('reason', status_text(r.status))}")
                         for r in c.rounds if r.failure), "")
            rows.append([f'<a href="#case{ci}">{esc(c.name)}</a>', badge(c.status),
                         f"{len(c.passed_rounds)}/{len(c.rounds)}", esc(c.metric or "-"), num(st.get("median")),
                         num(st.get("min")), num(st.get("max")), esc(c.unit or ""), num(e2e.get("median")),
                         verdict, note])
        return ("<section>\n<h2>Cases</h2>\n"
                + _table(["case", "status", "rounds", "metric", "median", "min", "max", "unit", "e2e s",
                          "verdict", "note"], rows, num_cols=(2, 4, 5, 6, 8)) + "</section>\n")

    def _verdicts(self, c) -> str:
        vs = verdicts_of(c)
        if not vs:
            return ""
        rows = []
        for v in vs:
            expected, low, high = verdict_band(v)
            dev = _number(field_of(v, "deviation"))
            measured = num(field_of(v, "measured"))
            if field_of(v, "measured_unit") is not None:
                measured += f" {esc(field_of(v, 'measured_unit'))}"
            source = field_of(v, "source", default="")
            note = field_of(v, "note", default="")
            rows.append([esc(field_of(v, "metric", default="-")), num(expected), _tolerance_text(v),
                         f"{num(low)} … {num(high)}" if low is not None else "-", measured,
                         "-" if dev is None else f"{dev * 100:+.3g}%", esc(field_of(v, "unit", default="")),
                         verdict_badge(v), esc(source) + (f"<br>{esc(note)}" if note else "")])
        return "<h3>Reference verdicts</h3>\n" + _table(
            ["metric", "expected", "tolerance", "within", "measured (median)", "deviation", "unit", "result",
             "source"], rows, num_cols=(1, 2, 4, 5))

    def _rankings(self, s) -> str:
        """each cases (results.slownodes): hosts, then GPUs, ranked by the headline metric; outliers in red."""
        rankings = [r for r in getattr(s, "rankings", None) or [] if isinstance(r, dict)]
        if not rankings:
            return ""
        out = "<section>\n<h2>Slow-node rankings</h2>\n"
        for rk in rankings:
            entries = [e for e in rk.get("entries") or [] if isinstance(e, dict)]
            unit = rk.get("unit") or ""
            better = "lower" if rk.get("higher_is_better") is False else "higher"
            out += (f"<h3>{esc(rk.get('case'))}: hosts ranked by {esc(rk.get('metric'))}"
                    f"{' (' + esc(unit) + ')' if unit else ''}, {better} is better</h3>\n")
            if rk.get("rule"):
                out += f"<p class=\"muted\">outlier: {esc(rk.get('rule'))}</p>\n"
            rows = []
            for e in entries:
                outlier = bool(e.get("outlier"))
                rows.append([num(e.get("rank")), esc(e.get("host")), "-" if e.get("gpu") is None else num(e.get("gpu")),
                             num(e.get("value")), num(e.get("score"), 3),
                             '<span class="bad">OUTLIER</span>' if outlier else "no"])
            for h in rk.get("failed_hosts") or []:
                rows.append(["-", esc(h), "-", "-", "-", '<span class="bad">no result (failed)</span>'])
            out += _table(["rank", "host", "gpu", "value", "score", "outlier"], rows, num_cols=(0, 2, 3, 4),
                          row_class=lambda r: "outlier" if "OUTLIER" in r[5] else "")
            hosts = [e for e in entries if e.get("gpu") is None]
            gpus = [e for e in entries if e.get("gpu") is not None]
            for group, what in ((hosts, "host"), (gpus, "GPU")):
                out += self._ranking_bars(rk, group, what)
        return out + "</section>\n"

    def _ranking_bars(self, rk, entries, what) -> str:
        import plotly.graph_objects as go

        labels, values, colors = [], [], []
        for e in entries:
            if _number(e.get("value")) is None:
                continue
            where = esc(e.get("host")) + ("" if e.get("gpu") is None else f" gpu {num(e.get('gpu'))}")
            labels.append(f"{num(e.get('rank'))}. {where}" if e.get("gpu") is None else where)
            values.append(e.get("value"))
            colors.append("#cf222e" if e.get("outlier") else "#1f77b4")
        if not values:
            return ""
        unit = rk.get("unit") or ""
        fig = go.Figure(go.Bar(x=values, y=labels, orientation="h", marker_color=colors,
                               hovertemplate="%{y}: %{x}<extra></extra>"), layout=LAYOUT)
        if _number(rk.get("median")) is not None and what == "host":
            fig.add_vline(x=rk["median"], line_dash="dash", line_color="#7f7f7f",
                          annotation_text=f"median {num(rk['median'])}", annotation_position="top")
        fig.update_yaxes(autorange="reversed", type="category")
        fig.update_xaxes(title_text=esc(unit or rk.get("metric")))
        fig.update_layout(title=dict(text=f"{esc(rk.get('case'))}: {esc(rk.get('metric'))} per {what} "
                                          f"(red: outlier)", x=0),
                          margin=dict(l=220, r=20, t=50, b=45), hovermode="closest")
        return self._figure(fig, max(220, 90 + 24 * len(values)))

    def _case(self, ci, c, nodes) -> str:
        out = (f'<section class="case" id="case{ci}">\n<h2>{esc(c.name)} {badge(c.status)}</h2>\n'
               f"<p><code>{esc(c.key)}</code>: {num(c.nnodes)} node(s) x {num(c.nproc)} rank(s), "
               f"{num(c.repeat)} round(s), data: {esc(c.data_dir or '-')}</p>\n")
        out += self._verdicts(c)
        out += _table(["round", "status", "value", "e2e s", "duration s", "note"],
                      [[num(r.round), badge(r.status), num(r.value), num(r.e2e_time), num(r.duration_s),
                        esc((r.failure or {}).get("reason", ""))] for r in c.rounds], num_cols=(0, 2, 3, 4))
        for r in c.rounds:
            f = r.failure or {}
            lines = f.get("last_lines")
            if lines and isinstance(lines, list):
                where = ""
                if f.get("rank") is not None:
                    where = f" (node {esc(f.get('node'))}, rank {esc(f.get('rank'))})"
                elif f.get("node"):
                    where = f" (node {esc(f.get('node'))})"
                out += (f"<p>Round {num(r.round)}{where}, last lines of <code>{esc(f.get('log', ''))}</code>:</p>\n"
                        f"<pre>{esc(chr(10).join(str(x) for x in lines))}</pre>\n")
        out += self._metrics(c)
        first = next((r for r in c.rounds if isinstance((r.finished or {}).get("env"), dict)), None)
        if first:
            env = ", ".join(f"{esc(k)} {esc(v)}" for k, v in first.finished["env"].items()
                            if not isinstance(v, (dict, list)))
            out += f"<p class=\"muted\">Environment (round {num(first.round)}, rank 0): {env}</p>\n"
        out += self._headline(c)
        for r in c.rounds:
            if not r.nodes:
                continue
            datas = [(n, nodes.get((ci, r.round, n.node)) or {}) for n in r.nodes]
            t0 = min((d["start"] for _, d in datas if d.get("start") is not None), default=None)
            if t0 is None:
                t0 = min((xs[0] for _, d in datas for xs, _ in (d.get("series") or {}).values() if xs), default=None)
            out += f"<h3>Round {num(r.round)} {badge(r.status)}: monitors</h3>\n"
            for n, d in datas:
                out += self._node(c, r, n, d, t0)
        return out + "</section>\n"

    def _metrics(self, c) -> str:
        """Every metric of the passed rounds with its unit (also those read from FlagPerf's own lines)."""
        stats = c.stats
        names = [n for n in stats if n not in ("value", "e2e_time") and isinstance(stats.get(n), dict)]
        if not names:
            return ""
        units = c.metric_units()
        origin = (c.head or {}).get("origin")
        caption = f" (from {esc(origin)})" if origin else ""
        rows = [[esc(n), num(stats[n].get("median")), num(stats[n].get("min")), num(stats[n].get("max")),
                 esc(units.get(n, ""))] for n in names]
        return (f"<p>Metrics over the passed rounds{caption}:</p>\n"
                + _table(["metric", "median", "min", "max", "unit"], rows, num_cols=(1, 2, 3)))

    def _headline(self, c) -> str:
        """The headline metric per round (each cases: one line per host, from every host's own result), with
        the band of its reference verdict; a plot per other metric that has a verdict."""
        import statistics

        import plotly.graph_objects as go

        series: dict = {}   # name: [(round, value)]
        if getattr(c, "each", False):
            for r in c.rounds:
                for n in r.nodes:
                    f = getattr(n, "finished", None) or {}
                    v = _number(f.get("value")) if status_text(getattr(n, "status", "")) == "passed" else None
                    if v is not None and f.get("metric") == c.metric:
                        series.setdefault(str(n.host), []).append((r.round, v))
        if not series:
            pts = [(r.round, _number(r.value)) for r in c.passed_rounds]
            series = {str(c.metric or "value"): [(k, v) for k, v in pts if v is not None]}
        if not any(series.values()):
            return '<p class="muted">No round produced a value: no metric plot.</p>\n'
        vs = [v for v in verdicts_of(c) if field_of(v, "metric") in (None, c.metric)]
        median = _number(((c.stats.get("value") or {}).get("median")))
        out = self._metric_plot(go, c.metric or "value", c.unit, series, vs, c, median)
        for v in verdicts_of(c):
            m = field_of(v, "metric")
            if m in (None, c.metric):
                continue
            pts = [(r.round, _number((r.metrics.get(m) or {}).get("value")) if isinstance(r.metrics.get(m), dict)
                    else None) for r in c.passed_rounds]
            pts = [(k, x) for k, x in pts if x is not None]
            if pts:
                unit = field_of(v, "unit") or next((r.metrics[m].get("unit") for r in c.passed_rounds
                                                    if isinstance(r.metrics.get(m), dict)), "")
                out += self._metric_plot(go, m, unit, {str(m): pts}, [v], c,
                                         statistics.median(x for _, x in pts) if len(pts) > 1 else None)
        return out

    def _metric_plot(self, go, metric, unit, series, verdicts, c, median) -> str:
        fig = go.Figure(layout=LAYOUT)
        for v in verdicts:
            expected, low, high = verdict_band(v)
            if low is not None and high is not None:
                fig.add_hrect(y0=low, y1=high, fillcolor="#2ca02c", opacity=0.12, line_width=0, layer="below")
            if expected is not None:
                fig.add_hline(y=expected, line_color="#2ca02c", line_width=2,
                              annotation_text=f"reference {num(expected)}", annotation_position="top left")
        for i, (name, points) in enumerate(sorted(series.items())):
            color = PALETTE[i % len(PALETTE)]
            fig.add_trace(go.Scatter(x=[k for k, _ in points], y=[v for _, v in points], mode="lines+markers",
                                     name=esc(name), marker=dict(size=9, color=color), line=dict(color=color),
                                     hovertemplate=f"{esc(name)}, round %{{x}}: %{{y}}<extra></extra>"))
        if median is not None and sum(len(p) for p in series.values()) > 1:
            fig.add_hline(y=median, line_dash="dash", line_color="#7f7f7f",
                          annotation_text=f"median {num(median)}", annotation_position="bottom right")
        rounds = [r.round for r in c.rounds] or [1]
        fig.update_xaxes(title_text="round", tickmode="array", tickvals=rounds,
                         range=[min(rounds) - 0.5, max(rounds) + 0.5])
        fig.update_yaxes(title_text=esc(unit or metric), rangemode="tozero")
        fig.update_layout(title=dict(text=f"{esc(c.name)}: {esc(metric)} per round", x=0),
                          showlegend=len(series) > 1, hovermode="closest")
        return self._figure(fig, 340)

    def _node(self, c, r, n, d, t0) -> str:
        from plotly.subplots import make_subplots
        import plotly.graph_objects as go

        title = f"{esc(n.node)} (host <code>{esc(n.host)}</code>, node rank {num(n.node_rank)})"
        mon = n.monitors or {}
        notes = []
        for sensor, reason in sorted((mon.get("unavailable") or {}).items()):
            notes.append(f"{esc(sensor)}: {esc(reason)}")
        for name, reason in sorted((mon.get("unreadable") or {}).items()):
            notes.append(f"{esc(name)}: {esc(reason)}")
        note = f'<p class="muted">{"; ".join(notes)}</p>\n' if notes else ""
        series = d.get("series") or {}
        if not series or t0 is None:
            return f"<h4>{title}</h4>\n<p class=\"muted\">No monitor data in its node directory.</p>\n{note}"
        rows = []       # (label, [(trace name, gpu or None, xs, ys)])
        for sensor, key, label in (("cpu", "util_pct", "CPU util %"), ("mem", "used_mib", "memory used MiB"),
                                   ("pwr", "power_w", "host power W")):
            if (sensor, key, None) in series:
                rows.append((label, [(label, None, *series[(sensor, key, None)])]))
        gpu_keys = sorted({k for (s, k, _g) in series if s == "gpu"})
        known = [k for k, _ in GPU_FIELDS if k in gpu_keys]
        throttle = [k for k in gpu_keys if "throttl" in k and k not in known]
        other = [k for k in gpu_keys if k not in known and k not in throttle]
        labels = dict(GPU_FIELDS)
        vendor = d.get("gpu_vendor") or "gpu"
        gpu_rows = [(f"{vendor} {labels[k]}", [k]) for k in known] + [(f"{vendor} {k}", [k]) for k in other]
        if throttle:
            gpu_rows.append((f"{vendor} throttle", throttle))
        for label, keys in gpu_rows[:MAX_GPU_ROWS]:
            traces = []
            for k in keys:
                for g in sorted(g for (s, kk, g) in series if s == "gpu" and kk == k):
                    name = f"gpu {g}" + (f" {k}" if len(keys) > 1 else "")
                    traces.append((name, g, *series[("gpu", k, g)]))
            rows.append((esc(label), traces))
        fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=min(0.08, 0.3 / len(rows)),
                            subplot_titles=[label for label, _ in rows])
        fig.update_layout(**LAYOUT)
        seen_gpu = set()
        for i, (label, traces) in enumerate(rows, 1):
            for name, g, xs, ys in traces:
                px, py = downsample([round(x - t0, 3) for x in xs], [_round_value(y) for y in ys], self._limit)
                color = PALETTE[g % len(PALETTE)] if g is not None else "#444444"
                show = g is not None and name not in seen_gpu
                seen_gpu.add(name)
                fig.add_trace(go.Scatter(x=px, y=py, mode="lines", name=esc(name), legendgroup=esc(name),
                                         showlegend=show, line=dict(color=color, width=1.5)), row=i, col=1)
        self._phases(fig, d, t0)
        fig.update_xaxes(title_text="s since the round's ranks started", row=len(rows), col=1)
        fig.update_layout(title=dict(text=f"{esc(c.name)} round {num(r.round)}: {esc(n.node)}", x=0),
                          legend=dict(orientation="h", y=-0.12 if len(rows) < 3 else -0.05))
        return f"<h4>{title}</h4>\n{note}" + self._figure(fig, 90 + 170 * len(rows)) + _phase_caption(d)

    def _phases(self, fig, d, t0) -> None:
        """Shade the phases (init, run) from the PerfLog events, and mark the ranks' start and end."""
        ph = d.get("phases") or {}
        for start, end, color in PHASES:
            x0 = ph.get(start)
            x1 = ph.get(end, d.get("end"))
            if x0 is None or x1 is None or x1 < x0:
                continue
            fig.add_shape(type="rect", xref="x", yref="paper", x0=round(x0 - t0, 3), x1=round(x1 - t0, 3),
                          y0=0, y1=1, fillcolor=color, opacity=0.13, line_width=0, layer="below")
        for t in (d.get("start"), d.get("end")):
            if t is not None:
                fig.add_shape(type="line", xref="x", yref="paper", x0=round(t - t0, 3), x1=round(t - t0, 3), y0=0,
                              y1=1, line=dict(color="#6e7781", width=1, dash="dash"))


def _phase_caption(d) -> str:
    ph = d.get("phases") or {}
    parts = []
    if "INIT_START" in ph:
        parts.append(f'<span class="swatch" style="background:{PHASES[0][2]}"></span> init (INIT_START to INIT_END)')
    if "RUN_START" in ph:
        parts.append(f'<span class="swatch" style="background:{PHASES[1][2]}"></span> run (RUN_START to RUN_END)')
    parts.append("dashed lines: the ranks' start and end (ranks.json)")
    return f'<p class="caption">{"; ".join(parts)}.</p>\n'


def _table(header, rows, num_cols=(), row_class=None) -> str:
    """An HTML table; the cells are HTML already (escaped by the caller)."""
    def cell(tag, i, text):
        return f'<{tag} class="num">{text}</{tag}>' if i in num_cols else f"<{tag}>{text}</{tag}>"

    out = "<table>\n<thead><tr>" + "".join(cell("th", i, esc(h)) for i, h in enumerate(header))
    out += "</tr></thead>\n<tbody>\n"
    for row in rows:
        cls = row_class(row) if row_class else ""
        out += (f'<tr class="{cls}">' if cls else "<tr>") + "".join(cell("td", i, c) for i, c in enumerate(row))
        out += "</tr>\n"
    return out + "</tbody>\n</table>\n"


STYLE = """
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 0 auto; max-width: 1360px;
       padding: 16px 24px; color: #1f2328; font-size: 14px; }
h1 { font-size: 22px; margin: 8px 0 12px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #d0d7de;
padding-bottom: 4px; } h3 { font-size: 15px; margin-top: 20px; } h4 { font-size: 13px; margin: 14px 0 4px; }
table { border-collapse: collapse; margin: 8px 0; } th, td { border: 1px solid #d0d7de; padding: 3px 8px;
text-align: left; vertical-align: top; } th { background: #f6f8fa; } td.num, th.num { text-align: right;
font-variant-numeric: tabular-nums; } table.kv th { width: 190px; }
.badge { color: white; border-radius: 10px; padding: 1px 8px; font-size: 12px; white-space: nowrap; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; padding: 8px; overflow-x: auto; max-height: 300px;
white-space: pre-wrap; word-break: break-all; }
code { background: #f6f8fa; padding: 0 3px; } .muted { color: #59636e; } .bad { color: #cf222e; font-weight: bold; }
tr.outlier td { background: #ffebe9; } .plot { border: 1px solid #eaeef2; margin: 6px 0 14px; }
.swatch { display: inline-block; width: 14px; height: 10px; opacity: 0.35; border: 1px solid #9ca3af; }
.caption { color: #59636e; font-size: 12px; margin: -10px 0 14px; }
footer { margin-top: 30px; color: #59636e; font-size: 12px; }
"""
