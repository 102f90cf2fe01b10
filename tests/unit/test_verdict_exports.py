"""The node verdicts as JUnit XML (flagperf/reporters/junit.py) and Prometheus text exposition
(flagperf/reporters/prometheus.py), read back with independent parsers (ElementTree, junitparser, prometheus_client's
own text parser), and `flagperf report --junit FILE --prometheus FILE` for real."""

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest
from junitparser import Failure as JFailure
from junitparser import JUnitXml
from prometheus_client.parser import text_string_to_metric_families

from flagperf.records import (REASON_SOURCES, GpuIdentity, NodeVerdict, RankEntry, Ranking, ReferenceVerdict,
                              VerdictReason)
from flagperf.reporters import file_reporters, reporter
from flagperf.reporters.junit import HOST_MAX_CHARS, xml_text
from flagperf.reporters.prometheus import LABEL_MAX_CHARS, label
from flagperf.results.interpret import Status
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary

from tests.unit.test_untrusted import PAYLOADS, REPO

GPU2 = GpuIdentity(2, "GPU-5c1d2e3f-0000-1111-2222-333344445555", "1654922001234", "00000000:19:00.0",
                   "NVIDIA H100 80GB HBM3")
ECC = VerdictReason("health", "reject", GPU2.label(), "ECC uncorrected volatile errors: 3",
                    "drain the node and replace the GPU (RMA)", GPU2)
SLOW_LINK = VerdictReason("link", "degraded", "gpu 0 -> gpu 1", "p2p uni 1 GiB: 250 GB/s, 68% of the node median",
                          "check NVLink status: nvidia-smi nvlink --status")
GOVERNOR = VerdictReason("health", "degraded", "node", "CPU frequency governor powersave",
                         "set the governor to performance (cpupower frequency-set -g performance)")
FAILED = VerdictReason("failure", "reject", "node", "gemm-pytorch-gpu-eachx4 round 1: rank 2 exited 1",
                       "read the rank's log", None, "gemm-pytorch-gpu-eachx4")
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def summary(verdicts, **kw) -> Summary:
    args = dict(run_id="run20261201120000-abc123", run_dir="/r", flagperf_version="1.2",
                started="2026-12-01T12:00:00.000+00:00", finished="2026-12-01T12:08:00.500+00:00", duration_s=480.5,
                vendor="nvidia", runtime="bare", backend="ssh", hosts=[v.host for v in verdicts], verdicts=verdicts)
    args.update(kw)
    return Summary(**args)


def three_nodes() -> Summary:
    return summary([NodeVerdict.of("node-a", [], [GpuIdentity(0, "GPU-a0")]),
                    NodeVerdict.of("node-b", [GOVERNOR, SLOW_LINK]),
                    NodeVerdict.of("node-c", [ECC, FAILED, SLOW_LINK], [GpuIdentity(0, "GPU-c0"), GPU2])])


def cases_of(xml_text_: str) -> dict:
    """{test case name: (kind, message, text)}: kind failure, degraded (system-out) or passed."""
    root = ET.fromstring(xml_text_.encode("utf-8"))
    out = {}
    for tc in root.iter("testcase"):
        f, so = tc.find("failure"), tc.find("system-out")
        if f is not None:
            out[tc.get("name")] = ("failure", f.get("message"), f.text or "")
        elif so is not None:
            out[tc.get("name")] = ("degraded", None, so.text or "")
        else:
            out[tc.get("name")] = ("passed", None, "")
    return out


def families(text: str) -> dict:
    """{metric name: [(labels, value)]} as prometheus_client's own parser reads the exposition."""
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


# -- JUnit ------------------------------------------------------------------------------------------------------
def test_junit_one_suite_one_case_per_node_and_source():
    text = reporter("junit").render(three_nodes())
    root = ET.fromstring(text.encode("utf-8"))
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "flagperf run20261201120000-abc123"
    assert suite.get("timestamp") == "2026-12-01T12:00:00.000+00:00" and float(suite.get("time")) == 480.5
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["run_id"] == "run20261201120000-abc123"
    assert (props["verdict node-a"], props["verdict node-b"], props["verdict node-c"]) == \
        ("accept", "degraded", "reject")
    cases = cases_of(text)
    # check, health and failure always; link where the node has a link reason (no link measured, nothing ranked)
    assert sorted(cases) == sorted([f"node-{n}.{s}" for n in "abc" for s in ("check", "health", "failure")] +
                                   ["node-b.link", "node-c.link"])
    assert int(suite.get("tests")) == 11 and int(suite.get("failures")) == 2 and int(root.get("failures")) == 2
    assert {n for n, c in cases.items() if c[0] == "passed"} == {
        "node-a.check", "node-a.health", "node-a.failure", "node-b.check", "node-b.failure", "node-c.check"}
    kind, message, body = cases["node-c.health"]
    assert kind == "failure" and message.startswith("[reject] gpu 2 (GPU-5c1d2e3f-")
    assert "ECC uncorrected volatile errors: 3" in message
    assert "serial 1654922001234, pci 00000000:19:00.0" in body and "remedy: drain the node and replace" in body
    kind, message, body = cases["node-c.failure"]
    assert kind == "failure" and "(case gemm-pytorch-gpu-eachx4)" in message and "remedy: read the rank" in body
    # degraded: a passing test case with the reason as a system-out note, the same on a rejected node
    for name in ("node-b.health", "node-b.link", "node-c.link"):
        kind, message, body = cases[name]
        assert kind == "degraded" and body.startswith("DEGRADED: [degraded]") and "remedy: " in body, name
    assert "governor powersave" in cases["node-b.health"][2]


def test_junit_reads_back_with_junitparser():
    xml = JUnitXml.fromstring(reporter("junit").render(three_nodes()))
    suites = list(xml)
    assert len(suites) == 1 and suites[0].tests == 11 and suites[0].failures == 2
    failed = sorted(c.name for c in suites[0] if any(isinstance(r, JFailure) for r in c.result))
    assert failed == ["node-c.failure", "node-c.health"]
    assert [c.system_out.splitlines()[0] for c in suites[0] if c.name == "node-b.link"] == \
        ["DEGRADED: [degraded] gpu 0 -> gpu 1: p2p uni 1 GiB: 250 GB/s, 68% of the node median"]


def test_junit_a_rejected_source_lists_its_degraded_reasons_too():
    worse = VerdictReason("link", "reject", "host a <-> host b", "8 GB/s, 20% of the median", "reseat the cable")
    text = reporter("junit").render(summary([NodeVerdict.of("a", [SLOW_LINK, worse])]))
    kind, message, body = cases_of(text)["a.link"]
    assert kind == "failure" and message == "[reject] host a <-> host b: 8 GB/s, 20% of the median"
    assert body.index("[reject]") < body.index("[degraded] gpu 0 -> gpu 1") and "reseat the cable" in body


def p2p_case(hosts) -> CaseSummary:
    """An each p2p case whose hosts each measured a link matrix of 2 GPUs (checks.details.matrix)."""
    def finished(host):
        links = [{"src": 0, "dst": 1, "uni_gbps": 370.0, "bi_gbps": 730.0}, {"src": 1, "dst": 0, "uni_gbps": 371.0}]
        return {"benchmark": "p2p", "metric": "bw_uni", "value": 370.0, "unit": "GB/s",
                "checks": {"passed": True, "details": {"matrix": {"size": "4G", "nodes": [{"node": 0,
                                                                                           "links": links}]}}}}
    nodes = [NodeSummary(f"{h}_noderank0", h, 0, 0, status=Status.PASSED, finished=finished(h)) for h in hosts]
    return CaseSummary("p2p-x", "p2p:pytorch:x:each:2:1", "p2p", "pytorch", "x", len(hosts), 2, 1, None,
                       [RoundSummary(1, "p2p-x/round1", Status.PASSED, 1.0, None, finished(hosts[0]), nodes)],
                       each=True)


def test_junit_reference_ranking_and_link_cases_only_where_the_run_judged_them():
    ref = ReferenceVerdict("tflops_bf16", 700.0, 1, "TFLOP/s", 710.0, 0.1)
    case = CaseSummary("gemm-x", "gemm:pytorch:x:each:4:1", "gemm", "pytorch", "x", 1, 4, 1, None,
                       [RoundSummary(1, "gemm-x/round1", Status.PASSED)], verdicts=[ref])
    ranking = Ranking("gemm-x", "tflops_bf16", "TFLOP/s", True, "rule", 700.0,
                      (RankEntry("a", None, 700.0, 0.0, False, 1, 1),), ("c",))
    text = reporter("junit").render(summary([NodeVerdict.of(h, []) for h in "abcd"], cases=[case, p2p_case("bd")],
                                            rankings=[ranking]))
    names = set(cases_of(text))
    always = ("check", "health", "failure", "reference")
    assert names == {f"{h}.{s}" for h in "abcd" for s in always} | {"a.ranking", "c.ranking", "b.link", "d.link"}
    names = set(cases_of(reporter("junit").render(summary([NodeVerdict.of("a", [])]))))
    assert names == {"a.check", "a.health", "a.failure"}


def test_junit_without_verdicts_is_an_empty_suite():
    root = ET.fromstring(reporter("junit").render(summary([])).encode("utf-8"))
    assert root.find("testsuite").get("tests") == "0" and not list(root.iter("testcase"))


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_junit_hostile_host_and_reason_stay_text(name):
    p = PAYLOADS[name] + "\ud800\ufffe"
    hostile = VerdictReason("health", "reject", p, p, p, GpuIdentity(1, p, p, p, p), p)
    text = reporter("junit").render(summary([NodeVerdict.of(p, [hostile, VerdictReason("link", "degraded", p, p,
                                                                                          p)])],
                                            run_id=p, started=p, vendor=p, backend=p))
    assert not XML_FORBIDDEN.search(text)
    root = ET.fromstring(text.encode("utf-8"))         # well-formed: nothing closed or opened early
    assert [e.tag for e in root] == ["testsuite"]
    suite = root[0]
    assert [e.tag for e in suite] == ["properties"] + ["testcase"] * 4
    host = xml_text(p, limit=HOST_MAX_CHARS)
    assert [tc.get("name") for tc in suite.iter("testcase")] == [f"{host}.{s}" for s in
                                                                 ("check", "health", "failure", "link")]
    failure = suite.find("testcase/failure")
    assert failure.get("type") == "reject" and failure.get("message").startswith("[reject] ")
    names = [tc.get("name") for tc in suite.iter("testcase")]
    for value in [failure.get("message"), failure.text, suite.get("name")] + names:
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", value), (name, value[:80])
    if name == "script":       # escaped by the library, and read back as the same text
        assert "<script>" in failure.text and "&lt;script&gt;" in text and "<script>" not in text


def test_junit_texts_are_bounded():
    huge = VerdictReason("health", "reject", "node", "D" * 100_000, "R" * 100_000)
    text = reporter("junit").render(summary([NodeVerdict.of("a", [huge])]))
    assert len(text) < 60_000 and "more characters)" in text


# -- Prometheus -----------------------------------------------------------------------------------------------------
def test_prometheus_gauges_per_node_verdict_and_reason():
    text = reporter("prometheus").render(three_nodes())
    fams = families(text)
    assert all(NAME.fullmatch(name) for name in fams)
    assert all(line.split(" ")[3] == "gauge" for line in text.splitlines() if line.startswith("# TYPE"))
    (info,) = fams["flagperf_run_info"]
    assert info == ({"run_id": "run20261201120000-abc123", "status": "passed", "flagperf_version": "1.2",
                     "vendor": "nvidia", "backend": "ssh"}, 1.0)
    assert fams["flagperf_run_start_timestamp_seconds"] == [({}, 1796126400.0)]
    assert fams["flagperf_run_end_timestamp_seconds"] == [({}, 1796126880.5)]
    assert fams["flagperf_run_duration_seconds"] == [({}, 480.5)]
    assert {s[0]["verdict"]: s[1] for s in fams["flagperf_nodes"]} == {"accept": 1, "degraded": 1, "reject": 1}
    state = {(s[0]["host"], s[0]["verdict"]): s[1] for s in fams["flagperf_node_verdict"]}
    assert len(state) == 9 and sum(state.values()) == 3
    assert state[("node-a", "accept")] == state[("node-b", "degraded")] == state[("node-c", "reject")] == 1
    reasons = {(s[0]["host"], s[0]["source"], s[0]["severity"]): s[1] for s in fams["flagperf_node_reasons"]}
    assert len(reasons) == 3 * len(REASON_SOURCES) * 2           # every source and severity, 0 included
    assert {k: v for k, v in reasons.items() if v} == {
        ("node-b", "health", "degraded"): 1, ("node-b", "link", "degraded"): 1, ("node-c", "health", "reject"): 1,
        ("node-c", "failure", "reject"): 1, ("node-c", "link", "degraded"): 1}
    gpus = {(s[0]["host"], s[0]["gpu"], s[0]["uuid"], s[0]["severity"]): s[1] for s in fams["flagperf_gpu_reasons"]}
    assert gpus[("node-c", "2", GPU2.uuid, "reject")] == 1 and gpus[("node-c", "0", "GPU-c0", "reject")] == 0
    assert gpus[("node-a", "0", "GPU-a0", "reject")] == 0
    (pulled,) = [s[0] for s in fams["flagperf_gpu_reasons"] if s[1]]
    assert (pulled["serial"], pulled["pci_bus_id"]) == (GPU2.serial, GPU2.pci_bus_id)


def test_prometheus_without_verdicts_or_times():
    fams = families(reporter("prometheus").render(summary([], started="", finished=None)))
    assert {s[0]["verdict"]: s[1] for s in fams["flagperf_nodes"]} == {"accept": 0, "degraded": 0, "reject": 0}
    assert "flagperf_run_start_timestamp_seconds" not in fams and "flagperf_run_end_timestamp_seconds" not in fams
    assert fams["flagperf_node_verdict"] == [] and fams["flagperf_node_reasons"] == []


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_prometheus_hostile_labels_stay_one_series_each(name):
    p = PAYLOADS[name] + "\ud800"
    hostile = VerdictReason("health", "reject", p, p, p, GpuIdentity(1, p, p, p, p))
    text = reporter("prometheus").render(summary([NodeVerdict.of(p, [hostile]), NodeVerdict.of("good", [])],
                                                 run_id=p, vendor=p, backend=p, started=p))
    text.encode("utf-8")        # no lone surrogate left
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert all(NAME.fullmatch(line.split("{")[0].split(" ")[0]) for line in lines)
    fams = families(text)
    hosts = [s[0]["host"] for s in fams["flagperf_node_verdict"]]
    assert hosts == [label(p)] * 3 + ["good"] * 3
    assert all(len(h) <= LABEL_MAX_CHARS + 40 for h in hosts)
    assert not any(re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", h) for h in hosts)
    assert {(s[0]["host"], s[0]["verdict"]): s[1] for s in fams["flagperf_node_verdict"]}[(label(p), "reject")] == 1
    (gpu,) = [s[0] for s in fams["flagperf_gpu_reasons"] if s[1]]
    assert gpu["uuid"] == label(p) and gpu["gpu"] == "1"
    if '"' in p:
        assert '\\"' in text        # escaped by prometheus_client, read back as the quote
        assert '"' in fams["flagperf_run_info"][0][0]["run_id"]


# -- the registry, the model ------------------------------------------------------------------------------------------
def test_exports_are_not_written_into_every_run_directory():
    names = [r.name for r in file_reporters()]
    assert "junit" not in names and "prometheus" not in names
    assert reporter("junit").file_name is None and reporter("prometheus").file_name is None


def test_rendered_from_a_saved_summary_as_from_the_model(tmp_path):
    s = three_nodes()
    s.save(tmp_path / "summary.json")
    loaded = Summary.load(tmp_path / "summary.json")
    for name in ("junit", "prometheus"):
        assert reporter(name).render(loaded) == reporter(name).render(s)


# -- the CLI, for real ------------------------------------------------------------------------------------------------
def saved_run(tmp_path, s=None):
    run_dir = tmp_path / "run1"
    run_dir.mkdir()
    (s or three_nodes()).save(run_dir / "summary.json")
    return run_dir


def test_report_writes_both_files(tmp_path, run_cli):
    run_dir = saved_run(tmp_path)
    junit, prom = tmp_path / "out" / "verdicts.xml", tmp_path / "out" / "flagperf.prom"
    junit.parent.mkdir()
    rc, out, err = run_cli("report", run_dir, "--junit", junit, "--prometheus", prom, cwd=tmp_path)
    assert rc == 0, out + err
    assert f"report junit: {junit}" in out and f"report prometheus: {prom}" in out and err == ""
    assert sorted(cases_of(junit.read_text()))[0] == "node-a.check"
    assert families(prom.read_text())["flagperf_nodes"]
    assert sorted(p.name for p in junit.parent.iterdir()) == ["flagperf.prom", "verdicts.xml"]   # no temp file
    # again, with the files there: replaced whole; --html keeps stdout for the page's path
    rc, out, err = run_cli("report", run_dir, "--html", "--junit", junit, cwd=tmp_path)
    assert rc == 0, err
    assert out.strip().endswith("report.html") and f"report junit: {junit}" in err


def test_report_refuses_export_paths_it_cannot_write(tmp_path, run_cli):
    run_dir = saved_run(tmp_path)
    rc, out, err = run_cli("report", run_dir, "--junit", tmp_path / "missing" / "v.xml", "--prometheus",
                           tmp_path / "gone" / "v.prom", cwd=tmp_path)
    assert rc == 2 and out == ""
    assert err.splitlines() == [f"flagperf: --junit {tmp_path / 'missing' / 'v.xml'}: the folder "
                                f"{tmp_path / 'missing'} does not exist",
                                f"flagperf: --prometheus {tmp_path / 'gone' / 'v.prom'}: the folder "
                                f"{tmp_path / 'gone'} does not exist"]
    rc, out, err = run_cli("report", run_dir, "--prometheus", tmp_path, cwd=tmp_path)
    assert rc == 2 and "is a directory" in err and "Traceback" not in err
    rc, out, err = run_cli("report", run_dir, "--prometheus", tmp_path / "v.txt", cwd=tmp_path)
    assert rc == 0 and "collector reads only files named *.prom" in err and (tmp_path / "v.txt").is_file()


def test_run_checks_export_paths_before_anything_runs(tmp_path, run_cli, write):
    conf = write(tmp_path, "test_conf.yaml", """\
        VENDOR: cpu
        RUNTIME: bare
        CASES:
          "gemm:pytorch:local:1:1:1": null
        """)
    rc, out, err = run_cli("run", "--config", conf, "--dry-run", "--junit", tmp_path / "no" / "x.xml",
                           cwd=tmp_path)
    assert rc == 2 and err.strip() == f"flagperf: --junit {tmp_path / 'no' / 'x.xml'}: the folder " \
                                      f"{tmp_path / 'no'} does not exist"
    rc, out, err = run_cli("run", "--config", conf, "--dry-run", "--junit", tmp_path / "x.xml", cwd=tmp_path)
    assert rc == 0 and not (tmp_path / "x.xml").exists()        # a dry run writes nothing


def test_report_says_which_package_an_export_needs(tmp_path, run_cli, write):
    run_dir = saved_run(tmp_path)
    hide = write(tmp_path, "hide/sitecustomize.py", "import sys\nsys.modules['junitparser'] = None\n")
    rc, out, err = run_cli("report", run_dir, "--junit", tmp_path / "v.xml", "--prometheus", tmp_path / "v.prom",
                           cwd=tmp_path, env={"PYTHONPATH": os.pathsep.join([str(hide.parent), str(REPO)])})
    assert rc == 1
    assert "flagperf: report junit: needs the Python package junitparser (pip install junitparser)" in err
    assert not (tmp_path / "v.xml").exists() and (tmp_path / "v.prom").is_file()      # the other one is written
    assert json.loads((run_dir / "summary.json").read_text())["verdicts"]
