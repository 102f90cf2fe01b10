"""The driver/host contract (flagperf_contract.py): typed files, round trips, errors, FINISHED validation,
PerfLog lines and the JSON helpers."""
import json
import math
import os

import pytest

from flagperf_contract import (LAUNCH_SCHEMA, MONITOR_STATUS_SCHEMA, PERFLOG_PREFIX, PERFLOG_SCHEMA, RANKS_SCHEMA,
                               ContractError, Finished, LaunchSpec, MonitorStatus, RankRecord, RankReport,
                               SensorStatus, monitor_file_name, parse_perflog_line, perflog_line, rank_log_name,
                               read_json_file, validate_finished, write_json_atomic)

from tests.unit.fakebackend import finished_record


def launch_spec(**kw) -> LaunchSpec:
    args = dict(case="gemm:pytorch:local:1:2:1", case_name="gemm-pytorch-local-1x2", framework="pytorch", round=1,
                node_rank=0, nnodes=1, nproc=2, ranks=[0, 1], argv=["python3", "-u", "main.py"], cwd="/fp/gemm",
                env={"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "2"}, out_dir="/r/n0",
                env_defaults={"NCCL_NVLS_ENABLE": "0"}, visible_devices_env="CUDA_VISIBLE_DEVICES",
                visible_devices="0,1", data_dir="/data", grace_s=10.0, container_name="c1")
    args.update(kw)
    return LaunchSpec(**args)


def rank_report() -> RankReport:
    return RankReport(0, [RankRecord(0, 0, 100, 0, "2025-01-01T00:00:00.000+00:00", "2025-01-01T00:00:01.000+00:00",
                                     1.0, False),
                          RankRecord(1, 1, 101, -15, None, None, None, True)],
                      first_failure=None, stopped="rank 3 failed", signalled=False)


def monitor_status() -> MonitorStatus:
    return MonitorStatus(pid=7, interval_s=0.5, started="2025-01-01T00:00:00.000+00:00",
                         sensors={"cpu": SensorStatus(True, source="psutil", file="cpu_monitor.log"),
                                  "gpu": SensorStatus(True, source="nvml", file="nvidia_monitor.log",
                                                      extra={"devices": [0, 1]}),
                                  "pwr": SensorStatus(False, reason="no RAPL")},
                         run_id="run1", stopped="2025-01-01T00:01:00.000+00:00", stop_reason="SIGTERM", samples=120,
                         sample_ms_mean=1.5)


# ------------------------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("make, cls, schema", [(launch_spec, LaunchSpec, LAUNCH_SCHEMA),
                                               (rank_report, RankReport, RANKS_SCHEMA),
                                               (monitor_status, MonitorStatus, MONITOR_STATUS_SCHEMA)])
def test_round_trip(tmp_path, make, cls, schema):
    obj = make()
    d = obj.to_dict()
    assert d["schema"] == schema
    assert cls.from_dict(d) == obj
    assert cls.from_dict(json.loads(json.dumps(d))) == obj
    write_json_atomic(tmp_path / "f.json", d)
    assert read_json_file(tmp_path / "f.json", cls) == obj


def test_launch_spec_defaults_round_trip():
    spec = LaunchSpec("k", "n", "pytorch", 1, 0, 1, 1, [0], ["p"], "/c", {}, "/o")
    d = spec.to_dict()
    assert d["grace_s"] == 10.0 and d["visible_devices_env"] is None and d["container_name"] is None
    minimal = {k: d[k] for k in ("schema",) + LaunchSpec._REQUIRED}
    assert LaunchSpec.from_dict(minimal) == spec


def test_rank_report_helpers():
    r = rank_report()
    assert r.rank(1).exit_code == -15 and r.rank(1).stopped_by_launcher and r.rank(9) is None
    d = r.to_dict()
    d["ranks"][0].pop("stopped_by_launcher")
    d["ranks"][1]["stopped_by_launcher"] = None
    again = RankReport.from_dict(d)
    assert [x.stopped_by_launcher for x in again.ranks] == [False, False]
    d.pop("signalled")
    assert RankReport.from_dict(d).signalled is False


def test_monitor_status_leaves_out_nones_and_keeps_extras():
    m = MonitorStatus(1, 1, "t", {"gpu": SensorStatus(False, reason="no nvml", extra={"tried": ["nvml"]})})
    d = m.to_dict()
    assert d == {"schema": MONITOR_STATUS_SCHEMA, "pid": 1, "interval_s": 1, "started": "t",
                 "sensors": {"gpu": {"available": False, "reason": "no nvml", "tried": ["nvml"]}}}
    assert MonitorStatus.from_dict(d) == m


# ------------------------------------------------------------------------------------------------ from_dict errors
def without(d, key):
    return {k: v for k, v in d.items() if k != key}


def changed(d, **kw):
    return dict(d, **kw)


L = launch_spec().to_dict()
R = rank_report().to_dict()
M = monitor_status().to_dict()


@pytest.mark.parametrize("cls, data, words", [
    # wrong schema / not an object
    (LaunchSpec, changed(L, schema="flagperf.launch/0"),
     "expected schema 'flagperf.launch/1', got 'flagperf.launch/0'"),
    (LaunchSpec, without(L, "schema"), "expected schema 'flagperf.launch/1', got None"),
    (LaunchSpec, [L], "expected a JSON object with schema 'flagperf.launch/1'"),
    (RankReport, changed(R, schema=LAUNCH_SCHEMA), "expected schema 'flagperf.ranks/1', got 'flagperf.launch/1'"),
    (RankReport, "ranks", "expected a JSON object"),
    (MonitorStatus, changed(M, schema=RANKS_SCHEMA), "expected schema 'flagperf.monitor-status/1'"),
    (MonitorStatus, None, "expected a JSON object"),
    # missing keys
    (LaunchSpec, without(L, "argv"), "missing key 'argv'"),
    (LaunchSpec, without(without(L, "cwd"), "env"), "missing key 'cwd'; missing key 'env'"),
    (RankReport, without(R, "ranks"), "missing key 'ranks'"),
    (RankReport, changed(R, ranks=[without(R["ranks"][0], "exit_code")]), "ranks[0]: missing key 'exit_code'"),
    (MonitorStatus, without(M, "pid"), "missing key 'pid'"),
    (MonitorStatus, changed(M, sensors={"cpu": {"reason": "x"}}), "sensors['cpu']: missing key 'available'"),
    # wrong types
    (LaunchSpec, changed(L, round="1"), "'round': expected an integer, got '1'"),
    (LaunchSpec, changed(L, nproc=True), "'nproc': expected an integer, got True"),
    (LaunchSpec, changed(L, argv=[]), "'argv': expected a non-empty list of strings"),
    (LaunchSpec, changed(L, argv=["python", 3]), "'argv': expected a non-empty list of strings"),
    (LaunchSpec, changed(L, ranks=[0]), "'ranks': expected nproc (2) integers"),
    (LaunchSpec, changed(L, ranks=[0, "1"]), "'ranks': expected nproc (2) integers"),
    (LaunchSpec, changed(L, env={"A": 1}), "'env': expected an object of strings"),
    (LaunchSpec, changed(L, env_defaults={"A": None}), "'env_defaults': expected an object of strings"),
    (LaunchSpec, changed(L, visible_devices_env=0), "'visible_devices_env': expected a string or null"),
    (LaunchSpec, changed(L, grace_s="10"), "'grace_s': expected a number"),
    (RankReport, changed(R, node_rank=0.0), "'node_rank': expected an integer"),
    (RankReport, changed(R, ranks={}), "'ranks': expected a list"),
    (RankReport, changed(R, ranks=[5]), "ranks[0]: expected a rank record object, got int"),
    (RankReport, changed(R, signalled="no"), "'signalled': expected true or false"),
    (RankReport, changed(R, ranks=[changed(R["ranks"][0], exit_code=1.5)]),
     "ranks[0]: 'exit_code': expected an integer"),
    (MonitorStatus, changed(M, interval_s="1"), "'interval_s': expected a number"),
    (MonitorStatus, changed(M, sensors=[]), "'sensors': expected an object"),
    (MonitorStatus, changed(M, sensors={"cpu": {"available": "yes"}}), "sensors['cpu']: 'available': expected true"),
    # NaN and infinities are not numbers
    (LaunchSpec, changed(L, grace_s=math.nan), "'grace_s': expected a number, got nan"),
    (MonitorStatus, changed(M, interval_s=math.inf), "'interval_s': expected a number, got inf"),
    (RankReport, changed(R, ranks=[changed(R["ranks"][0], duration_s=math.nan)]), "ranks[0]: 'duration_s'"),
])
def test_from_dict_errors(cls, data, words):
    with pytest.raises(ContractError) as exc:
        cls.from_dict(data)
    assert words in str(exc.value), str(exc.value)


def test_contract_error_is_a_value_error():
    assert issubclass(ContractError, ValueError)


# ------------------------------------------------------------------------------------------------ FINISHED
def payload(**kw):
    d = finished_record(**kw)
    d.pop("event")
    return d


@pytest.mark.parametrize("data", [payload(), dict(payload(), event="FINISHED", rank=0, time=1.0),
                                  payload(value=0, e2e_time=0), payload(metrics={}),
                                  payload(checks={"passed": True}), payload(higher_is_better=False)],
                         ids=["plain", "extra-keys", "ints", "no-metrics", "no-details", "lower-better"])
def test_validate_finished_valid(data):
    assert validate_finished(data) == []
    f = Finished.from_dict(data)
    assert f.value == data["value"] and f.to_dict() == data


@pytest.mark.parametrize("data, words", [
    (None, ["expected a FINISHED object, got NoneType"]),
    ([], ["expected a FINISHED object, got list"]),
    ({}, ["missing key 'schema'", "missing key 'value'", "missing key 'env'"]),
    (payload(schema="flagperf.perflog/2"), ["unsupported schema 'flagperf.perflog/2'"]),
    (payload(value=math.nan), ["'value': expected a number, got nan"]),
    (payload(value=-math.inf), ["'value': expected a number, got -inf"]),
    (payload(e2e_time=None), ["'e2e_time': expected a number, got None"]),
    (payload(value=True), ["'value': expected a number, got True"]),
    (payload(metric=""), ["'metric': expected a non-empty string"]),
    (payload(benchmark=3), ["'benchmark': expected a string"]),
    (payload(metrics={"bw": 3.0}), ["metrics['bw']: expected {'value': finite number, 'unit': string}"]),
    (payload(metrics={"bw": {"value": math.nan, "unit": "GB/s"}}), ["metrics['bw']"]),
    (payload(metrics={"bw": {"value": 1.0}}), ["metrics['bw']"]),
    (payload(checks={"passed": False, "details": {}}), ["checks.passed is not true"]),
    (payload(checks={"passed": 1}), ["checks.passed is not true"]),
    (payload(checks={}), ["checks.passed is not true"]),
    (payload(checks={"passed": True, "details": []}), ["checks.details: expected an object"]),
    (payload(checks=True), ["'checks': expected an object"]),
    (payload(env="cpu"), ["'env': expected an object"]),
])
def test_validate_finished_problems(data, words):
    problems = validate_finished(data)
    for w in words:
        assert any(w in p for p in problems), problems
    with pytest.raises(ContractError):
        Finished.from_dict(data)


# ------------------------------------------------------------------------------------------------ PerfLog lines
def test_perflog_line_round_trip():
    rec = finished_record()
    line = perflog_line(rec)
    assert line.startswith(PERFLOG_PREFIX) and "\n" not in line
    assert parse_perflog_line(line) == rec
    assert parse_perflog_line("2025-01-01 12:00:00 rank0: " + line + "\n") == rec     # prefixed by a logger


def test_perflog_line_refuses_nan():
    with pytest.raises(ValueError):
        perflog_line(finished_record(value=math.nan))


@pytest.mark.parametrize("line", [
    "", "plain output", "[PerfLog]", "[PerfLog] ", "[PerfLog] {", '[PerfLog] {"event": "FINISHED", "value": 1',
    "[PerfLog] [1, 2]", '[PerfLog] "FINISHED"', '[PerfLog] {"value": 1}', '[PerfLog] {"event": 3}',
    "[PerfLog] null", "[perflog] {\"event\": \"X\"}", "\x00\xff garbage \ufffd",
])
def test_parse_perflog_line_garbage(line):
    assert parse_perflog_line(line) is None


def test_parse_perflog_line_accepts_nan_tokens_for_validation_to_refuse():
    rec = parse_perflog_line('[PerfLog] {"event": "FINISHED", "value": NaN}')
    assert rec is not None and math.isnan(rec["value"])
    assert any("'value'" in p for p in validate_finished(rec))


def test_file_names():
    assert rank_log_name(3) == "rank3.out.log"
    assert monitor_file_name("gpu", "nvidia") == "nvidia_monitor.log"
    assert monitor_file_name("cpu", "nvidia") == "cpu_monitor.log"


def test_schema_ids():
    assert PERFLOG_SCHEMA == "flagperf.perflog/1"


# ------------------------------------------------------------------------------------------------ JSON files
def test_read_json_file_names_the_file(tmp_path):
    missing = tmp_path / "nope" / "ranks.json"
    with pytest.raises(ContractError) as exc:
        read_json_file(missing, RankReport)
    assert str(exc.value) == f"{missing}: missing"

    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(ContractError) as exc:
        read_json_file(bad, RankReport)
    assert str(exc.value).startswith(f"{bad}: unreadable: ")

    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(without(R, "node_rank")))
    with pytest.raises(ContractError) as exc:
        read_json_file(wrong, RankReport)
    assert str(exc.value) == f"{wrong}: missing key 'node_rank'"

    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(ContractError) as exc:
        read_json_file(str(binary), MonitorStatus)
    assert str(exc.value).startswith(f"{binary}: unreadable: ")

    with pytest.raises(ContractError) as exc:
        read_json_file(tmp_path, MonitorStatus)                 # a directory
    assert str(exc.value).startswith(f"{tmp_path}: unreadable: ")


def test_write_json_atomic(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    write_json_atomic(path, {"b": 1, "a": [1, 2]}, indent=2)
    assert json.loads(path.read_text()) == {"b": 1, "a": [1, 2]}
    assert path.read_text().endswith("\n")
    assert os.listdir(tmp_path) == ["out.json"]
    write_json_atomic(str(path), {"when": tmp_path})               # default=str for odd values
    assert json.loads(path.read_text()) == {"when": str(tmp_path)}
    assert os.listdir(tmp_path) == ["out.json"]


def test_write_json_atomic_refuses_nan_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.json"
    write_json_atomic(path, {"v": 1})
    with pytest.raises(ValueError):
        write_json_atomic(path, {"v": math.nan})
    assert json.loads(path.read_text()) == {"v": 1}
    leftovers = [p for p in os.listdir(tmp_path) if p != "out.json"]
    assert leftovers == [], f"write_json_atomic left a temporary file behind: {leftovers}"


# ------------------------------------------------------------------------------ ranks.json: reaped processes
def test_rank_report_reaped_round_trip_and_older_files():
    reaped = [{"pid": 4321, "cmdline": "python3 -c ... escaper-daemon", "signal": "SIGTERM"},
              {"pid": 4322, "cmdline": "sleep 600", "signal": "SIGKILL", "survived": True}]
    report = RankReport(0, [RankRecord(0, 0, 100, 0)], reaped=reaped)
    d = report.to_dict()
    assert d["reaped"] == reaped
    assert RankReport.from_dict(json.loads(json.dumps(d))) == report
    assert rank_report().to_dict()["reaped"] == [] and rank_report().reaped == []
    older = rank_report().to_dict()
    older.pop("reaped")                          # written before the field existed: still valid
    assert RankReport.from_dict(older).reaped == []


@pytest.mark.parametrize("reaped, message", [
    ("none", "'reaped': expected a list"),
    ([5], "reaped[0]: expected a reaped process object, got int"),
    ([{"cmdline": "x"}], "reaped[0]: missing key 'pid'"),
    ([{"pid": "1"}], "reaped[0]: 'pid': expected an integer"),
    ([{"pid": 1, "signal": 9}], "reaped[0]: 'signal': expected a string or null"),
])
def test_rank_report_bad_reaped(reaped, message):
    d = rank_report().to_dict()
    d["reaped"] = reaped
    with pytest.raises(ContractError, match=message.replace("[", r"\[").replace("]", r"\]")):
        RankReport.from_dict(d)
