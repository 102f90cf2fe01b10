"""configs/acceptance.yaml for real, its CPU variant: the shipped cases as they are, on this machine with VENDOR cpu
(the benchmarks' small CPU defaults, about a minute on two cores), through `flagperf run` with --junit and
--prometheus; the run ends in one verdict for the node and both files say the same."""

import json
import xml.etree.ElementTree as ET

import yaml
from prometheus_client.parser import text_string_to_metric_families

from .conftest import REPO, only_run_dir, run_cli


def test_the_acceptance_run_on_the_cpu_ends_in_a_verdict(tmp_path):
    data = yaml.safe_load((REPO / "configs" / "acceptance.yaml").read_text())
    data.update(VENDOR="cpu", FLAGPERF_LOG_PATH=str(tmp_path / "result"))
    conf = tmp_path / "acceptance.yaml"
    conf.write_text(yaml.safe_dump(data, sort_keys=False))
    junit, prom = tmp_path / "verdicts.xml", tmp_path / "flagperf.prom"
    code, out, err = run_cli(["run", "--config", conf, "--junit", junit, "--prometheus", prom], timeout=600)
    summary = json.loads((only_run_dir(tmp_path / "result") / "summary.json").read_text())
    outliers = [(r["case"], e) for r in summary["rankings"] for e in r["entries"] if e["outlier"]]
    assert code == 0, (summary["verdicts"], outliers, out[-3000:], err)
    status = {c["model"]: c["status"] for c in summary["cases"]}
    assert status == {"gemm": "passed", "devmem": "passed", "h2d": "skipped", "p2p": "passed",
                      "collectives": "passed", "llm": "passed"}, status
    # every GPU (here: rank) of the each cases is ranked, and the p2p matrix measured both directions
    gemm = next(r for r in summary["rankings"] if r["case"].startswith("gemm-"))
    assert sorted(e["gpu"] for e in gemm["entries"] if e["gpu"] is not None) == [0, 1]
    (p2p,) = [c for c in summary["cases"] if c["model"] == "p2p"]
    matrix = p2p["rounds"][0]["nodes"][0]["finished"]["checks"]["details"]["matrix"]
    assert {(link["src"], link["dst"]) for link in matrix["nodes"][0]["links"]} == {(0, 1), (1, 0)}
    (verdict,) = summary["verdicts"]
    assert verdict["host"] == "localhost" and verdict["verdict"] in ("accept", "degraded"), verdict
    assert all(r["severity"] == "degraded" for r in verdict["reasons"]), verdict
    # the same verdict in JUnit XML and in Prometheus text exposition
    root = ET.fromstring(junit.read_bytes())
    names = [tc.get("name") for tc in root.iter("testcase")]
    assert {"localhost.check", "localhost.health", "localhost.failure", "localhost.ranking",
            "localhost.link"} <= set(names), names
    assert root.find("testsuite").get("failures") == "0"
    state = {s.labels["verdict"]: s.value for f in text_string_to_metric_families(prom.read_text())
             if f.name == "flagperf_node_verdict" for s in f.samples if s.labels["host"] == "localhost"}
    assert state[verdict["verdict"]] == 1 and sum(state.values()) == 1
