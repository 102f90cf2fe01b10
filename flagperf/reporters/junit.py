"""The node verdicts as JUnit XML, for CI systems (``flagperf run|report --junit FILE``), made with junitparser.

One ``<testsuite>`` per run (name ``flagperf <run id>``, the run's start and duration, its id, status and every
node's verdict as properties), and one ``<testcase>`` per node and reason source (``<host>.check``,
``<host>.health``, ``<host>.failure``, ``<host>.reference``, ``<host>.ranking``, ``<host>.link``):

- a source with a ``reject`` reason is a ``<failure>``: ``type`` reject, ``message`` the first reject reason,
  the text every reason of that source with its subject, detail and remedy (degraded ones too, marked so);
- a source with only ``degraded`` reasons passes, with those reasons in its ``<system-out>`` (``DEGRADED: ...``),
  so that a usable but suspect node shows without failing the pipeline;
- a source without a reason passes.

``check``, ``health`` and ``failure`` are judged in every run and always have their test case; ``reference``,
``ranking`` and ``link`` have one only where the run judged them (a case with reference verdicts; the host ranked
in an ``each`` case; its links measured by a p2p link matrix or a ``pairs`` case) or where the node has a reason
from them, so that a check the run did not make never shows as passed.
docs/results.md, "JUnit XML and Prometheus", has the mapping.

The XML escaping is junitparser's (ElementTree's); what XML 1.0 cannot carry at all (control characters, lone
surrogates) is made visible first with :func:`flagperf.untrusted.for_terminal`, so a hostile host name or reason
stays text and the file stays well-formed.
"""

from __future__ import annotations

import re
from xml.dom import minidom

from flagperf.records import REASON_SOURCES, NodeVerdict, VerdictReason
from flagperf.reporters.base import Reporter
from flagperf.results.links import link_matrix
from flagperf.results.pairs import pair_matrix
from flagperf.untrusted import for_terminal

ALWAYS_JUDGED = ("check", "health", "failure")     # sources every run judges
MESSAGE_MAX_CHARS = 1024    # a failure's message attribute (one line); the text holds every reason in full
TEXT_MAX_CHARS = 16384      # one reason's detail or remedy in a failure's text or a system-out note
HOST_MAX_CHARS = 512        # a host's name in a test case's name and a property's
CLASSNAME = "flagperf.verdicts"

_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")     # left by for_terminal, refused by XML 1.0


def xml_text(value, newlines: bool = False, limit: int = TEXT_MAX_CHARS) -> str:
    """``value`` as text XML 1.0 can hold: control characters and bidi overrides shown as escapes (a newline kept
    when ``newlines``), lone surrogates and U+FFFE/U+FFFF as ``\\uXXXX``; capped at ``limit`` with a marker. The
    XML library escapes ``< > & "`` itself."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", for_terminal(value, newlines=newlines, limit=limit))


def verdicts_of(summary) -> list:
    """The node verdicts of a summary (``NodeVerdict``), in order, each host once (the first); [] for a summary
    written before verdicts were kept."""
    seen, out = set(), []
    for v in summary.verdicts or []:
        if v.host not in seen:
            seen.add(v.host)
            out.append(v)
    return out


def judged_sources(summary, verdicts) -> dict:
    """{host: the reason sources that get a test case for it}, in REASON_SOURCES order (module docstring): check,
    health and failure always; reference where a case of the run has reference verdicts; ranking where the host
    is in an each case's ranking; link where a p2p link matrix or a pairs case measured the host's links; and any
    source a reason of the host comes from."""
    referenced = any(c.verdicts for c in summary.cases)
    ranked = {e.host for r in summary.rankings for e in r.entries} | \
        {h for r in summary.rankings for h in r.failed_hosts}
    linked = {n.host for n in link_matrix(summary)} | {h for p in pair_matrix(summary) for h in (p.a, p.b)}
    out = {}
    for v in verdicts:
        found = set(ALWAYS_JUDGED) | {r.source for r in v.reasons}
        if referenced:
            found.add("reference")
        if v.host in ranked:
            found.add("ranking")
        if v.host in linked:
            found.add("link")
        out[v.host] = [s for s in REASON_SOURCES if s in found]
    return out


def reason_line(r: VerdictReason) -> str:
    """``[reject] gpu 2 (GPU-..., serial ..., pci ...): <detail>`` (one line, the case when there is one)."""
    case = f" (case {r.case})" if r.case else ""
    return f"[{r.severity}] {r.subject}{case}: {r.detail}"


def _reasons_text(reasons) -> str:
    lines = []
    for r in reasons:
        lines.append(xml_text(reason_line(r), limit=TEXT_MAX_CHARS))
        if r.remedy:
            lines.append("  remedy: " + xml_text(r.remedy, limit=TEXT_MAX_CHARS))
    return "\n".join(lines)


def _junitparser():
    """junitparser, a dependency only this reporter needs: imported when a file is made, so that a missing one
    is this export's error, not an ImportError of every reporter."""
    import junitparser
    return junitparser


class JunitReporter(Reporter):
    name = "junit"
    file_name = None        # written only where asked (--junit FILE), not into every run directory

    def render(self, summary) -> str:
        jp = _junitparser()
        verdicts = verdicts_of(summary)
        suite = jp.TestSuite(xml_text(f"flagperf {summary.run_id}"))
        if summary.started:
            suite.timestamp = xml_text(summary.started)
        for name, value in (("run_id", summary.run_id), ("status", summary.status.value),
                            ("flagperf_version", summary.flagperf_version), ("vendor", summary.vendor),
                            ("backend", summary.backend or "")):
            suite.add_property(name, xml_text(value))
        for v in verdicts:
            suite.add_property("verdict " + xml_text(v.host, limit=HOST_MAX_CHARS), v.verdict)
        sources = judged_sources(summary, verdicts)
        suite.add_testcases([self._case(jp, v, source) for v in verdicts for source in sources[v.host]])
        xml = jp.JUnitXml(xml_text("flagperf"))
        xml.add_testsuite(suite)
        xml.update_statistics()
        suite.time = xml.time = round(float(summary.duration_s or 0.0), 3)  # the statistics sum the cases' times
        # indented by minidom (as junitparser's own pretty writer does, which older versions offer for a path only)
        return minidom.parseString(xml.tostring()).toprettyxml(indent="  ", encoding="utf-8").decode("utf-8")

    @staticmethod
    def _case(jp, verdict: NodeVerdict, source: str):
        case = jp.TestCase(f"{xml_text(verdict.host, limit=HOST_MAX_CHARS)}.{source}", CLASSNAME)
        reasons = [r for r in verdict.reasons if r.source == source]
        rejects = [r for r in reasons if r.severity == "reject"]
        if rejects:
            failure = jp.Failure(xml_text(reason_line(rejects[0]), limit=MESSAGE_MAX_CHARS), "reject")
            failure.text = _reasons_text(rejects + [r for r in reasons if r.severity != "reject"])
            case.result = [failure]
        elif reasons:
            case.system_out = "DEGRADED: " + _reasons_text(reasons)
        return case
