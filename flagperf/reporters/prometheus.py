"""The node verdicts as Prometheus text exposition, for a node exporter's textfile collector
(``flagperf run|report --prometheus FILE``; the collector reads ``*.prom`` files), made with prometheus_client.

Every metric is a gauge (docs/results.md, "JUnit XML and Prometheus"):

- ``flagperf_run_info{run_id, status, flagperf_version, vendor, backend} 1``;
- ``flagperf_run_start_timestamp_seconds``, ``flagperf_run_end_timestamp_seconds`` (Unix time) and
  ``flagperf_run_duration_seconds``;
- ``flagperf_nodes{verdict}``: how many nodes got each verdict;
- ``flagperf_node_verdict{host, verdict}``: one series per node and verdict state, 1 for the node's verdict and 0
  for the others (so an alert reads ``flagperf_node_verdict{verdict="reject"} == 1``);
- ``flagperf_node_reasons{host, source, severity}``: how many reasons of each source and severity the node has
  (0 included, every source and severity);
- ``flagperf_gpu_reasons{host, gpu, uuid, serial, pci_bus_id, severity}``: how many reasons name each GPU.

The run id is a label of ``flagperf_run_info`` only, so a node's series stay the same series from run to run.
Label values are escaped by prometheus_client (``\\``, ``"``, newline); control characters, bidi overrides and
lone surrogates are made visible first with :func:`flagperf.untrusted.for_terminal`, and each value is capped.
"""

from __future__ import annotations

import datetime

from flagperf.records import REASON_SOURCES, SEVERITIES, VERDICTS, GpuIdentity
from flagperf.reporters.base import Reporter
from flagperf.reporters.junit import verdicts_of, xml_text

LABEL_MAX_CHARS = 256       # one label value


def label(value) -> str:
    """A label value: one line, controls and lone surrogates visible, at most LABEL_MAX_CHARS (plus a marker)."""
    return xml_text(value, newlines=False, limit=LABEL_MAX_CHARS)


def unix_time(iso: str | None) -> float | None:
    """Seconds since the epoch of an ISO 8601 time with its UTC offset (summary.json's ``started``), or None."""
    if not iso:
        return None
    try:
        t = datetime.datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return None
    return t.timestamp() if t.tzinfo is not None else None


def _gpu_labels(host: str, g: GpuIdentity) -> list:
    return [label(host), str(g.index), label(g.uuid), label(g.serial), label(g.pci_bus_id)]


class _Verdicts:
    """A prometheus_client collector of one summary (a custom collector: nothing global is registered)."""

    def __init__(self, summary):
        self.summary = summary

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
        s = self.summary
        verdicts = verdicts_of(s)
        info = InfoMetricFamily("flagperf_run", "The flagperf run these verdicts come from.")
        info.add_metric([], {"run_id": label(s.run_id), "status": label(s.status.value),
                             "flagperf_version": label(s.flagperf_version), "vendor": label(s.vendor),
                             "backend": label(s.backend or "")})
        yield info
        for name, doc, value in (
                ("flagperf_run_start_timestamp_seconds", "When the run started (Unix time).", unix_time(s.started)),
                ("flagperf_run_end_timestamp_seconds", "When the run finished (Unix time).", unix_time(s.finished)),
                ("flagperf_run_duration_seconds", "How long the run took.", float(s.duration_s or 0.0))):
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)
        nodes = GaugeMetricFamily("flagperf_nodes", "Nodes with each verdict.", labels=["verdict"])
        for state in VERDICTS:
            nodes.add_metric([state], sum(1 for v in verdicts if v.verdict == state))
        yield nodes
        state_set = GaugeMetricFamily("flagperf_node_verdict", "1 for the node's verdict (accept, degraded, "
                                      "reject), 0 for the other states.", labels=["host", "verdict"])
        reasons = GaugeMetricFamily("flagperf_node_reasons", "Reasons of the node's verdict, by source and "
                                    "severity.", labels=["host", "source", "severity"])
        gpus = GaugeMetricFamily("flagperf_gpu_reasons", "Reasons of the node's verdict that name this GPU, by "
                                 "severity.", labels=["host", "gpu", "uuid", "serial", "pci_bus_id", "severity"])
        seen = set()
        for v in verdicts:
            host = label(v.host)
            if host in seen:        # two hosts the same once made a label (cut at LABEL_MAX_CHARS): one series
                continue
            seen.add(host)
            for state in VERDICTS:
                state_set.add_metric([host, state], 1.0 if v.verdict == state else 0.0)
            for source in REASON_SOURCES:
                for severity in SEVERITIES:
                    reasons.add_metric([host, source, severity], sum(1 for r in v.reasons if r.source == source
                                                                     and r.severity == severity))
            named = {}
            for g in list(v.gpus) + [r.gpu for r in v.reasons if r.gpu is not None]:
                named.setdefault(tuple(_gpu_labels(v.host, g)), g)
            for key, g in named.items():
                for severity in SEVERITIES:
                    gpus.add_metric(list(key) + [severity],
                                    sum(1 for r in v.reasons if r.gpu is not None and r.severity == severity
                                        and tuple(_gpu_labels(v.host, r.gpu)) == key))
        yield state_set
        yield reasons
        yield gpus


class PrometheusReporter(Reporter):
    name = "prometheus"
    file_name = None        # written only where asked (--prometheus FILE), not into every run directory

    def render(self, summary) -> str:
        from prometheus_client import CollectorRegistry, generate_latest
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Verdicts(summary))
        return generate_latest(registry).decode("utf-8")
