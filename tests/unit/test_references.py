"""Reference files and verdicts (flagperf/references.py): loading and strict validation, the choice of file and
entry, the verdict rules, the status below_reference and its exit code, summary.json and the reporters."""
import json
import textwrap
from pathlib import Path

import pytest
import yaml

from flagperf.catalog import benchmark_names
from flagperf.errors import EXIT_CASE_FAILED, EXIT_OK, ConfigError
from flagperf.pipeline import Run
from flagperf.records import ReferenceVerdict
from flagperf.plan import build_plan
from flagperf.references import (ABOVE, BELOW, NOT_MEASURED, UNIT_MISMATCH, WITHIN, MetricRef, case_note, describe,
                                 judge_case, load_reference_dir, load_reference_file, select_file, verdict)
from flagperf.reporters import reporter
from flagperf.results.interpret import Status, case_status, run_status
from flagperf.results.summary import CaseSummary, RoundSummary, Summary

from tests.unit.fakebackend import FakeBackend, NodeScript, finished_record, make_config

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = benchmark_names(REPO)

GOOD = """\
match: ["Test CPU"]
description: a test device
benchmarks:
  gemm:
    - metrics:
        tflops_fp32: {expected: 10, tolerance: 0.1, unit: TFLOP/s, source: docs/results/README.md}
    - world_size: 2
      metrics:
        tflops_fp32: {expected: 20, tolerance: 0.1, unit: TFLOP/s, source: docs/results/README.md}
  llm:
    - preset: 1b
      config: {seq_len: 2048}
      metrics:
        tokens_per_s: {expected: 1000, tolerance: 0.05, unit: tokens/s, source: "https://example.org/figure"}
        step_time_median_s: {expected: 0.5, tolerance: 0.2, higher_is_better: false, unit: s,
                             source: docs/results/training.md}
"""


def write(tmp_path, text, name="refs.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ loading
def test_load_good_file(tmp_path):
    ref, problems = load_reference_file(write(tmp_path, GOOD), BENCHMARKS)
    assert problems == []
    assert ref.match == ("Test CPU",) and ref.description == "a test device"
    assert [(e.benchmark, e.qualifiers, e.config) for e in ref.entries] == [
        ("gemm", (), ()), ("gemm", (("world_size", 2),), ()), ("llm", (("preset", "1b"),), (("seq_len", 2048),))]
    step = ref.entries[2].metrics[1]
    assert step == MetricRef("step_time_median_s", 0.5, 0.2, "s", "docs/results/training.md",
                             higher_is_better=False)


def _entry(metric="{expected: 10, tolerance: 0.1, unit: TFLOP/s, source: x}", qual=""):
    return f"match: [X]\nbenchmarks:\n  gemm:\n    - {qual}metrics:\n        tflops_fp32: {metric}\n"


OK_BENCH = "benchmarks: {gemm: [{metrics: {a: {expected: 1, tolerance: 0, unit: u, source: s}}}]}\n"
BAD = [
    pytest.param("benchmarks: {gemm: [{metrics: {a: {expected: 1, tolerance: 0, unit: u, source: s}}}]}\n",
                 None, ["match: required key is missing"], id="match-missing"),
    pytest.param("match: H100\n" + OK_BENCH, 1, ["match: expected a non-empty list"], id="match-not-list"),
    pytest.param("match: [X]\n" + OK_BENCH + "benchmark: {}\n", 3, ["benchmark: unknown key; expected one of: match"],
                 id="unknown-top-key"),
    pytest.param("match: [X]\nbenchmarks:\n  gemmm: [{metrics: {a: {expected: 1, tolerance: 0, unit: u, "
                 "source: s}}}]\n",
                 3, ["benchmarks.gemmm: no benchmark 'gemmm'; known: "], id="unknown-benchmark"),
    pytest.param("match: [X]\nbenchmarks:\n  gemm: 5\n", 3, ["benchmarks.gemm: expected a list of entries"],
                 id="entries-not-list"),
    pytest.param(_entry(qual="world_size: 0\n      "), 4,
                 ["benchmarks.gemm[0].world_size: expected a positive integer"], id="world-size-zero"),
    pytest.param(_entry(qual="nproc: true\n      "), 4, ["benchmarks.gemm[0].nproc: expected a positive integer"],
                 id="nproc-bool"),
    pytest.param(_entry(qual="gpus: 2\n      "), 4, ["benchmarks.gemm[0].gpus: unknown key"], id="unknown-qualifier"),
    pytest.param(_entry(qual="config: {sizes: {a: 1}}\n      "), 4,
                 ["benchmarks.gemm[0].config.sizes: expected a string, number"], id="config-value-mapping"),
    pytest.param(_entry("{expected: 10, tolerance: 2, unit: TFLOP/s, source: x}"), 5,
                 ["benchmarks.gemm[0].metrics.tflops_fp32.tolerance: expected a relative tolerance from 0 to 1"],
                 id="tolerance-too-large"),
    pytest.param(_entry("{expected: -1, tolerance: 0.1, unit: TFLOP/s, source: x}"), 5,
                 ["benchmarks.gemm[0].metrics.tflops_fp32.expected: expected a finite number > 0, got -1"],
                 id="expected-negative"),
    pytest.param(_entry("{expected: .nan, tolerance: 0.1, unit: TFLOP/s, source: x}"), 5,
                 ["tflops_fp32.expected: expected a finite number > 0"], id="expected-nan"),
    pytest.param(_entry("{expected: 10, tolerance: 0.1, source: x}"), 5,
                 ["benchmarks.gemm[0].metrics.tflops_fp32.unit: required key is missing"], id="unit-missing"),
    pytest.param(_entry("{expected: 10, tolerance: 0.1, unit: TFLOP/s, source: ''}"), 5,
                 ["tflops_fp32.source: expected a path under docs/results/ or a URL"], id="source-empty"),
    pytest.param(_entry("{expected: 10, tolerance: 0.1, unit: TFLOP/s, source: x, tolerence: 1}"), 5,
                 ["tflops_fp32.tolerence: unknown key"], id="unknown-metric-key"),
    pytest.param(_entry("{expected: 10, tolerance: 0.1, unit: TFLOP/s, source: x, better_tolerance: -1}"), 5,
                 ["tflops_fp32.better_tolerance: expected a relative tolerance >= 0"], id="better-negative"),
    pytest.param(_entry("{expected: 10, tolerance: 0.1, unit: TFLOP/s, source: x, higher_is_better: maybe}"), 5,
                 ["tflops_fp32.higher_is_better: expected true or false"], id="direction-not-bool"),
    pytest.param(_entry("12"), 5, ["benchmarks.gemm[0].metrics.tflops_fp32: expected a mapping"],
                 id="metric-not-mapping"),
    pytest.param("match: [X]\nbenchmarks:\n  gemm:\n    - {metrics: {a: {expected: 1, tolerance: 0, unit: u, "
                 "source: s}}}\n    - {metrics: {a: {expected: 2, tolerance: 0, unit: u, source: s}}}\n", 5,
                 ["benchmarks.gemm[1].metrics.a: also given by benchmarks.gemm[0] with the same qualifiers"],
                 id="duplicate-metric"),
    pytest.param("match: [X]\nbenchmarks: {gemm: [{}]}\n", 2,
                 ["benchmarks.gemm[0]: metrics: required key is missing"], id="metrics-missing"),
    pytest.param("- a\n", None, ["expected a mapping with match"], id="not-a-mapping"),
    pytest.param("match: [X\n", 2, ["YAML syntax error"], id="yaml-syntax"),
]


@pytest.mark.parametrize("text,line,words", BAD)
def test_bad_files_give_one_line_errors(tmp_path, text, line, words):
    path = write(tmp_path, text)
    ref, problems = load_reference_file(path, BENCHMARKS, need_match=True)
    assert ref is None
    assert len(problems) == 1, problems
    (p,) = problems
    assert "\n" not in p
    assert p.startswith(f"{path}:{line}: " if line else f"{path}: "), p
    for w in words:
        assert w in p, p


def test_match_is_optional_in_a_references_file(tmp_path):
    ref, problems = load_reference_file(write(tmp_path, GOOD.replace('match: ["Test CPU"]\n', "")), BENCHMARKS,
                                        need_match=False)
    assert problems == [] and ref.match == ()
    assert select_file([ref], "anything at all") is ref


def test_reference_dir_refuses_two_files_claiming_one_device(tmp_path):
    write(tmp_path, GOOD, "a.yaml")
    write(tmp_path, GOOD.replace('"Test CPU"', '"test cpu", "Other"'), "b.yaml")
    files, problems = load_reference_dir(tmp_path, BENCHMARKS)
    assert len(files) == 2
    assert problems == [f"{tmp_path / 'b.yaml'}: match: 'test cpu' is also claimed by {tmp_path / 'a.yaml'}; "
                        f"a device name must select one file"]
    assert load_reference_dir(tmp_path / "missing", BENCHMARKS) == ((), [])


def test_select_file_longest_match_case_insensitive(tmp_path):
    a, _ = load_reference_file(write(tmp_path, GOOD.replace('"Test CPU"', '"H200"'), "a.yaml"), BENCHMARKS)
    b, _ = load_reference_file(write(tmp_path, GOOD.replace('"Test CPU"', '"H200 NVL"'), "b.yaml"), BENCHMARKS)
    assert select_file([a, b], "NVIDIA H200") is a
    assert select_file([a, b], "NVIDIA h200 nvl") is b
    assert select_file([a, b], "NVIDIA H100 80GB HBM3") is None
    assert select_file([a, b], None) is None


# ------------------------------------------------------------------------------------------------ the config key
def conf_with(tmp_path, line):
    return make_config(tmp_path, ["gemm:pytorch:local:1:1:1"], extra=line + "\n" if line else "")


def test_references_key_loads_the_file(tmp_path):
    write(tmp_path, GOOD)
    cfg = conf_with(tmp_path, "REFERENCES: refs.yaml")
    assert cfg.test.references == str(tmp_path / "refs.yaml")
    assert [r.path for r in cfg.references] == [str(tmp_path / "refs.yaml")]
    assert cfg.to_dict()["REFERENCES"] == str(tmp_path / "refs.yaml")


def test_references_default_is_the_vendor_folder_and_false_turns_it_off(tmp_path):
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:1:1"], vendor="nvidia")
    assert cfg.test.references is None
    assert sorted(Path(r.path).name for r in cfg.references) == ["h100_sxm.yaml", "h200.yaml"]
    assert cfg.to_dict()["REFERENCES"] == [r.path for r in cfg.references]
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:1:1"], vendor="nvidia", extra="REFERENCES: false\n")
    assert cfg.test.references is False and cfg.references == ()
    assert conf_with(tmp_path, "").references == ()        # vendor cpu ships no references


@pytest.mark.parametrize("line,words", [
    ("REFERENCES: nothere.yaml",
     ["REFERENCES: expected a reference file (YAML, docs/references.md)", "does not exist"]),
    ("REFERENCES: .", ["REFERENCES: expected a reference file", "is a directory"]),
    ("REFERENCES: true", ["REFERENCES: expected a reference file (YAML, docs/references.md) or false, got true"]),
    ("REFERENCES: 5", ["REFERENCES: expected a string, got int 5"]),
])
def test_references_key_errors(tmp_path, line, words):
    with pytest.raises(ConfigError) as exc:
        conf_with(tmp_path, line)
    (p,) = exc.value.problems
    assert p.startswith(f"{tmp_path / 'test.yaml'}:7: "), p
    assert all(w in p for w in words), p


def test_bad_reference_file_through_the_cli_exits_2(tmp_path, run_cli):
    refs = write(tmp_path, _entry("{expected: 10, tolerance: 0.1, unit: TFLOP/s}"))
    conf = write(tmp_path, f"VENDOR: cpu\nRUNTIME: bare\nFLAGPERF_LOG_PATH: result\nREFERENCES: {refs.name}\n"
                           f"CASES:\n  \"gemm:pytorch:local:1:1:1\": null\n", "test.yaml")
    rc, out, err = run_cli("run", "--config", conf, "--dry-run")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.splitlines() == [f"flagperf: config error: {refs}:5: benchmarks.gemm[0].metrics.tflops_fp32.source: "
                                f"required key is missing"]
    assert not (tmp_path / "result").exists()


# ------------------------------------------------------------------------------------------------ verdict rules
M = MetricRef("tflops", 100.0, 0.1, "TFLOP/s", "docs/results/README.md")


@pytest.mark.parametrize("m,value,result,ok", [
    (M, 100.0, WITHIN, True),
    (M, 90.5, WITHIN, True),
    (M, 89.0, BELOW, False),
    (M, 111.0, ABOVE, True),                            # far above: flagged, not failed
    (MetricRef("t", 100.0, 0.1, "TFLOP/s", "s", better_tolerance=0.5), 140.0, WITHIN, True),
    (MetricRef("t", 100.0, 0.1, "TFLOP/s", "s", better_tolerance=0.2), 125.0, ABOVE, False),
    (MetricRef("t", 100.0, 0.1, "TFLOP/s", "s", better_tolerance=0.2), 85.0, BELOW, False),
    (MetricRef("ms", 100.0, 0.1, "TFLOP/s", "s", higher_is_better=False), 109.0, WITHIN, True),
    (MetricRef("ms", 100.0, 0.1, "TFLOP/s", "s", higher_is_better=False), 115.0, BELOW, False),
    (MetricRef("ms", 100.0, 0.1, "TFLOP/s", "s", higher_is_better=False), 50.0, ABOVE, True),
    (M, None, NOT_MEASURED, True),
])
def test_verdict_rules(m, value, result, ok):
    v = verdict(m, value, 3, "TFLOP/s", reference="r.yaml")
    assert (v.result, v.ok) == (result, ok)
    assert v.metric == m.name and v.expected == 100.0 and v.measured == value and v.rounds == 3
    assert v.source == m.source and v.reference == "r.yaml" and v.unit == "TFLOP/s"
    assert ReferenceVerdict.from_dict(json.loads(json.dumps(v.to_dict()))) == v
    line = describe(v)
    assert m.name in line and "expected 100 TFLOP/s" in line


def test_verdict_unit_mismatch_fails():
    v = verdict(M, 100.0, 1, "GB/s")
    assert v.result == UNIT_MISMATCH and not v.ok and v.measured_unit == "GB/s"
    assert "unit mismatch" in describe(v)


def test_payload_direction_for_the_headline():
    v = verdict(M, 120.0, 1, "TFLOP/s", higher_is_better=False)
    assert v.higher_is_better is False and v.result == BELOW
    assert describe(v).startswith("tflops = 120 TFLOP/s (+20%): below reference: expected 100 TFLOP/s, "
                                  "tolerance +10%")


# ------------------------------------------------------------------------------------------------ judging a case
def case_summary(model="gemm", nnodes=1, nproc=1, values=(9.5, 10.5, 10.0), device="Test CPU", metric="tflops_fp32",
                 metrics=None, statuses=None, unit="TFLOP/s"):
    rounds = []
    for i, v in enumerate(values):
        fin = {"metric": metric, "value": v, "unit": unit, "higher_is_better": True,
               "metrics": metrics or {}, "env": {"device_name": device}}
        st = (statuses or {}).get(i + 1, Status.PASSED)
        rounds.append(RoundSummary(i + 1, f"c/round{i + 1}", st, 1.0, None, fin if st == Status.PASSED else None))
    return CaseSummary(f"{model}-pytorch-local-{nnodes}x{nproc}", f"{model}:pytorch:local:{nnodes}:{nproc}:3",
                       model, "pytorch", "local", nnodes, nproc, len(values), None, rounds)


def test_judge_headline_median_and_entry_by_world_size(tmp_path):
    ref, _ = load_reference_file(write(tmp_path, GOOD), BENCHMARKS)
    c = case_summary()
    verdicts, used, device = judge_case(c, [ref], {})
    assert used is ref and device == "Test CPU"
    (v,) = verdicts
    assert v.measured == 10.0 and v.expected == 10 and v.rounds == 3 and v.result == WITHIN
    c2 = case_summary(nproc=2, values=(10.0,))
    (v,) = judge_case(c2, [ref], {})[0]
    assert v.expected == 20 and v.result == BELOW and not v.ok     # the world_size 2 entry wins
    assert judge_case(case_summary(device="Other CPU"), [ref], {}) == ([], None, "Other CPU")


def test_judge_ignores_failed_rounds_and_checks_other_metrics(tmp_path):
    ref, _ = load_reference_file(write(tmp_path, GOOD), BENCHMARKS)
    c = case_summary("llm", metric="tokens_per_s", values=(1000.0, 1.0, 990.0), statuses={2: Status.FAILED},
                     unit="tokens/s",
                     metrics={"step_time_median_s": {"value": 0.7, "unit": "s"}})
    assert judge_case(c, [ref], {"preset": "1b", "seq_len": 64}) == ([], ref, "Test CPU")  # config does not fit
    verdicts, _, _ = judge_case(c, [ref], {"preset": "1b", "seq_len": 2048})
    by = {v.metric: v for v in verdicts}
    assert by["tokens_per_s"].measured == 995.0 and by["tokens_per_s"].rounds == 2 and by["tokens_per_s"].ok
    assert by["step_time_median_s"].result == BELOW and by["step_time_median_s"].higher_is_better is False


# ------------------------------------------------------------------------------------------------ status and summary
def test_status_below_reference_is_a_failure():
    ok = [verdict(M, 100.0, 1, None)]
    bad = [verdict(M, 100.0, 1, None), verdict(M, 1.0, 1, None)]
    assert [v.ok for v in bad] == [True, False]
    assert case_status(["passed", "passed"], ok) == Status.PASSED
    assert case_status(["passed", "skipped"], bad) == Status.BELOW_REFERENCE
    assert case_status(["passed", "failed"], bad) == Status.FAILED          # a failed round says more
    assert case_status(["passed"]) == Status.PASSED
    assert run_status([Status.PASSED, Status.BELOW_REFERENCE], interrupted=False) == Status.FAILED
    assert run_status([Status.BELOW_REFERENCE], interrupted=True) == Status.INTERRUPTED


def test_summary_keeps_verdicts_and_reads_older_files(tmp_path):
    c = case_summary()
    c.verdicts = [verdict(MetricRef("tflops_fp32", 1e6, 0.05, "TFLOP/s", "x"), 10.0, 3, "TFLOP/s")]
    s = Summary("run1", str(tmp_path), "0", "now", cases=[c])
    s.save(tmp_path / "summary.json")
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["status"] == "failed" and data["cases"][0]["status"] == "below_reference"
    assert data["cases"][0]["verdicts"][0]["metric"] == "tflops_fp32"
    back = Summary.load(tmp_path / "summary.json")
    assert back.cases[0].verdicts == c.verdicts and back.cases[0].status == Status.BELOW_REFERENCE
    del data["cases"][0]["verdicts"]                                        # written before verdicts existed
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = Summary.load(tmp_path / "old.json")
    assert old.cases[0].verdicts == [] and old.status == Status.PASSED


def test_reporters_name_metric_expected_tolerance_and_measured(tmp_path):
    bad = case_summary()
    bad.verdicts = [verdict(MetricRef("tflops_fp32", 1e6, 0.05, "TFLOP/s", "docs/results/README.md"), 10.0, 3,
                            "TFLOP/s", reference="refs.yaml")]
    good = case_summary(nproc=2)
    good.verdicts = [verdict(MetricRef("tflops_fp32", 10, 0.5, "TFLOP/s", "x"), 10.0, 3, "TFLOP/s")]
    s = Summary("run1", str(tmp_path), "0", "now", cases=[bad, good])
    md = reporter("markdown").render(s)
    assert "below_reference" in md and "| tflops_fp32 | 10 | 1e+06 | -5% | TFLOP/s | below (fails) |" in md
    assert "passed (within reference)" in md
    assert "Reference `refs.yaml`: **below reference**: tflops_fp32 = 10 TFLOP/s (-100%): below reference: " \
           "expected 1e+06 TFLOP/s, tolerance -5%" in md
    term = reporter("terminal")
    lines = term.failure_lines(s)
    assert lines == [f"{bad.name}: below_reference: tflops_fp32 = 10 TFLOP/s (-100%): below reference: expected "
                     f"1e+06 TFLOP/s, tolerance -5%; source docs/results/README.md"]
    from rich.console import Console
    console = Console(width=300, record=True)
    console.print(term.render(s))
    text = console.export_text()
    assert "below reference: tflops_fp32 10 vs 1e+06 TFLOP/s (-5%)" in text and "passed (within reference)" in text
    assert case_note([]) == "" and case_note([verdict(M, None, 0, None)]) == "no referenced metric measured"


# ------------------------------------------------------------------------------------------------ the pipeline
def test_pipeline_verdicts_exit_code_and_log(tmp_path):
    write(tmp_path, """\
        benchmarks:
          gemm:
            - metrics:
                tflops: {expected: 1000, tolerance: 0.05, unit: TFLOPS, source: docs/results/README.md}
          llm:
            - preset: tiny
              metrics:
                tflops: {expected: 12, tolerance: 0.5, unit: TFLOPS, source: docs/results/training.md}
                latency: {expected: 0.5, tolerance: 0.1, higher_is_better: false, unit: ms, source: x}
        """)
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:1:1", "llm:pytorch:local:1:1:1"],
                      extra="REFERENCES: refs.yaml\n")
    plan = build_plan(cfg, "run20250101000000")
    scripts = {"*": NodeScript(records={0: [finished_record(env={"device": "cpu", "device_name": "Fake CPU"})]})}
    said: list = []
    code = Run(plan, say=said.append, backend=FakeBackend(scripts=scripts)).execute()
    assert code == EXIT_CASE_FAILED
    s = Summary.load(plan.run_dir / "summary.json")
    gemm, llm = s.cases
    assert s.status == Status.FAILED
    assert gemm.status == Status.BELOW_REFERENCE and [v.result for v in gemm.verdicts] == [BELOW]
    assert llm.status == Status.PASSED and [v.result for v in llm.verdicts] == [WITHIN, WITHIN]
    line = ("ERROR: gemm-pytorch-local-1x1: tflops = 12.5 TFLOPS (-98.8%): below reference: expected 1000 TFLOPS, "
            "tolerance -5%; source docs/results/README.md")
    assert line in said, said
    assert "case gemm-pytorch-local-1x1: BELOW_REFERENCE" in said
    log = (plan.run_dir / "flagperf_run.log").read_text()
    assert line.removeprefix("ERROR: ") in log and f"references from {tmp_path / 'refs.yaml'}" in log
    assert "passed (within reference)" in (plan.run_dir / "report.md").read_text()


def test_pipeline_without_matching_reference_passes(tmp_path):
    write(tmp_path, GOOD)
    cfg = make_config(tmp_path, ["gemm:pytorch:local:1:1:1"], extra="REFERENCES: refs.yaml\n")
    plan = build_plan(cfg, "run20250101000000")
    code = Run(plan, say=lambda m: None, backend=FakeBackend()).execute()
    assert code == EXIT_OK
    s = Summary.load(plan.run_dir / "summary.json")
    assert s.cases[0].verdicts == [] and s.status == Status.PASSED


# ------------------------------------------------------------------------------------------------ shipped files
def test_shipped_reference_files_load_and_cite_sources():
    for vendor in (REPO / "vendors").iterdir():
        files, problems = load_reference_dir(vendor / "references", BENCHMARKS)
        assert problems == [], problems
        for f in files:
            for e in f.entries:
                for m in e.metrics:
                    assert m.source.startswith(("https://", "http://")) or (
                        m.source.startswith("docs/results/") and (REPO / m.source).exists()), (f.path, m)


def _vendor_case_config(model):
    cfg = {}
    for p in (REPO / "benchmarks" / model / "case_config.yaml",
              REPO / "vendors" / "nvidia" / model / "case_config.yaml"):
        if p.is_file():
            cfg.update(yaml.safe_load(p.read_text()) or {})
    return cfg


@pytest.mark.parametrize("name", ["h200x2-suite-summary.json", "h200x2-suite-rerun-summary.json",
                                  "h200x2-suite-restructure-summary.json", "h200x4-comm-train-summary.json",
                                  "h200x2-default-summary.json"])
def test_shipped_h200_references_pass_the_runs_they_come_from(name):
    files, _ = load_reference_dir(REPO / "vendors" / "nvidia" / "references", BENCHMARKS)
    data = json.loads((REPO / "docs" / "results" / name).read_text())
    for c in data["cases"]:
        for r in c["rounds"]:       # written before rounds kept rank 0's whole FINISHED payload
            if r.get("finished") is None and r.get("value") is not None:
                r["finished"] = {"metric": c["metric"], "unit": c["unit"], "higher_is_better": True,
                                 "value": r["value"], "metrics": r["metrics"], "env": r["env"]}
    s = Summary.from_dict(data)
    judged = 0
    for c in s.cases:
        verdicts, ref, device = judge_case(c, files, _vendor_case_config(c.model))
        assert ref is None or Path(ref.path).name == "h200.yaml", device
        for v in verdicts:
            # the default run of that day ran fewer dtypes: a metric it lacks is not measured, never failed
            assert v.ok and v.result in (WITHIN, NOT_MEASURED), (name, c.name, describe(v))
            judged += v.result == WITHIN
    assert judged > 0



def test_shipped_h100_references_pass_the_suite_run_they_come_from():
    files, _ = load_reference_dir(REPO / "vendors" / "nvidia" / "references", BENCHMARKS)
    s = Summary.from_dict(json.loads((REPO / "docs" / "results" / "h100x1-suite-summary.json").read_text()))
    within = set()
    for c in s.cases:
        verdicts, ref, device = judge_case(c, files, _vendor_case_config(c.model))
        assert ref is not None and Path(ref.path).name == "h100_sxm.yaml", device
        for v in verdicts:
            assert v.ok, (c.name, describe(v))
            if v.result == WITHIN:
                within.add(v.metric)
    # every kernel figure the one-GPU machine can measure has an H100 reference now
    assert {"tflops_bf16", "tflops_fp16", "tflops_tf32", "tflops_fp32", "tflops_fp64", "tflops_fp8", "tops_int8",
            "copy_bw_gbs_4096mib", "h2d_pinned_gbs_1024mib", "d2h_pinned_gbs_1024mib", "triad_gbs"} <= within
