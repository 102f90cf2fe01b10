"""Reporters: each turns a :class:`~flagperf.results.summary.Summary` into one form, one module each.

File reporters write into the run directory after every run and on ``flagperf report``; the terminal reporter
prints. Add one by writing a module with a ``Reporter`` subclass and one ``register`` line below.
"""

from __future__ import annotations

import importlib

from flagperf.reporters.base import ReportOutcome, Reporter

_REGISTRY: dict = {}


def register(name: str, target: str) -> None:
    _REGISTRY[name] = target


def reporter(name: str) -> Reporter:
    module, _, cls = _REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


def file_reporters() -> list:
    """Every registered reporter that writes a file, in registration order."""
    return [r for r in (reporter(n) for n in _REGISTRY) if r.file_name]


def write_reports(summary, run_dir) -> list[ReportOutcome]:
    """Write every file report of the run, in registration order; one outcome each (its path, or the error),
    none for a reporter that had nothing to write (its ``write`` returned None)."""
    out = []
    for rep in file_reporters():
        try:
            path = rep.write(summary, run_dir)
        except OSError as exc:
            out.append(ReportOutcome(rep.name, None, f"cannot write {rep.file_name}: {exc}"))
            continue
        if path is not None:
            out.append(ReportOutcome(rep.name, path, None))
    return out


register("terminal", "flagperf.reporters.terminal:TerminalReporter")
register("markdown", "flagperf.reporters.markdown:MarkdownReporter")
register("html", "flagperf.reporters.html:HtmlReporter")
register("detail", "flagperf.reporters.detail:DetailReporter")     # detail_result.json (FlagPerf base's)
register("nccl_tests", "flagperf.reporters.nccltests:NcclTestsReporter")   # nccl_tests/<case>.<op>.json
register("junit", "flagperf.reporters.junit:JunitReporter")            # --junit FILE only
register("prometheus", "flagperf.reporters.prometheus:PrometheusReporter")   # --prometheus FILE only

__all__ = ["ReportOutcome", "Reporter", "file_reporters", "register", "reporter", "write_reports"]
