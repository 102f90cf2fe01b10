"""FlagPerf's result formats (flagperf/results/flagperf_lines.py): [FlagPerf Result] lines, FlagPerf's PerfLog
FINISHED, and the FINISHED payload built from them, on lines as FlagPerf's toolkits and benchmarks print them."""
import json

import pytest

from flagperf.results.flagperf_lines import (FlagPerfResult, build_finished, is_flagperf_finished, parse_result_line,
                                             parse_results, perflog_unit, read_log)
from flagperf_contract import Finished, validate_finished


@pytest.mark.parametrize("line, name, value, unit, rank", [
    ("[FlagPerf Result]computation-BF16=783.422TFLOPS", "computation-BF16", 783.422, "TFLOPS", None),
    ("[FlagPerf Result]main_memory-bandwidth=4278.02GB/s\n", "main_memory-bandwidth", 4278.02, "GB/s", None),
    ("[FlagPerf Result]Rank 0's computation-FP32=51.2TFLOPS", "computation-FP32", 51.2, "TFLOPS", 0),
    ("[FlagPerf Result]Rank 13's computation-FP32=49.87TFLOPS", "computation-FP32", 49.87, "TFLOPS", 13),
    ("[FlagPerf Result]interconnect-P2P_intraserver-latency=2.31us", "interconnect-P2P_intraserver-latency", 2.31,
     "us", None),
    ("[FlagPerf Result]main_memory-capacity-usage=95.2%", "main_memory-capacity-usage", 95.2, "%", None),
    ("[FlagPerf Result]transfer-bandwidth=1.2e+03GB/s", "transfer-bandwidth", 1200.0, "GB/s", None),
    ("[FlagPerf Result] host2device-bandwidth = 25.3 GB/s  ", "host2device-bandwidth", 25.3, "GB/s", None),
    ("[rank0]: [FlagPerf Result]Rank 1's computation-TF32=406TFLOPS\r\n", "computation-TF32", 406.0, "TFLOPS", 1),
    ("[FlagPerf Result]energy=1.5EFLOPS", "energy", 1.5, "EFLOPS", None),
    ("[FlagPerf Result]count=42", "count", 42.0, "", None),
])
def test_result_lines(line, name, value, unit, rank):
    assert parse_result_line(line) == FlagPerfResult(name, value, unit, rank, 0)


@pytest.mark.parametrize("line", [
    "computation-BF16=783.422TFLOPS",                       # no marker
    "[FlagPerf Result]computation-BF16=TFLOPS",             # no number
    "[FlagPerf Result]=12TFLOPS",                           # no name
    "[FlagPerf Result]computation-BF16",                    # no '='
    "[FlagPerf Result]x=nanTFLOPS",
    "[FlagPerf Result]x=1e999TFLOPS",                       # not finite
    "[PerfLog] {\"event\": \"FINISHED\"}",
])
def test_not_result_lines(line):
    assert parse_result_line(line) is None


def test_results_printed_at_once_on_one_line():
    line = ("[FlagPerf Result]Rank 1's computation-FP32=0.0735TFLOPS[FlagPerf Result]Rank 0's "
            "computation-FP32=0.061255TFLOPS\n")
    assert parse_results([line]) == [FlagPerfResult("computation-FP32", 0.0735, "TFLOPS", 1, 0),
                                     FlagPerfResult("computation-FP32", 0.061255, "TFLOPS", 0, 0)]


def test_rank_of_the_log_and_node_are_kept():
    lines = ["start test", "[FlagPerf Result]a=1GB/s", "[FlagPerf Result]Rank 3's b=2TFLOPS", "done"]
    assert parse_results(lines, node=1, rank=2) == [FlagPerfResult("a", 1.0, "GB/s", 2, 1),
                                                    FlagPerfResult("b", 2.0, "TFLOPS", 3, 1)]


def test_toolkit_lines_become_a_valid_finished():
    results = parse_results(["[FlagPerf Result]computation-FP32=12.3TFLOPS",
                             "[FlagPerf Result]computation-FP64=6.1TFLOPS",
                             "[FlagPerf Result]kernel-latency=3.5us"])
    payload = build_finished("computation", results, None, e2e_time=4.5)
    assert validate_finished(payload) == []
    f = Finished.from_dict(payload)
    assert (f.benchmark, f.metric, f.value, f.unit, f.higher_is_better, f.e2e_time) == \
        ("computation", "computation-FP32", 12.3, "TFLOPS", True, 4.5)
    assert f.metrics == {"computation-FP32": {"value": 12.3, "unit": "TFLOPS"},
                         "computation-FP64": {"value": 6.1, "unit": "TFLOPS"},
                         "kernel-latency": {"value": 3.5, "unit": "us"}}
    assert payload["origin"] == "[FlagPerf Result] lines"
    assert f.checks["details"]["lines"] == 3


def test_a_latency_headline_is_lower_is_better():
    payload = build_finished("lat", parse_results(["[FlagPerf Result]p2p-latency=2.5us"]))
    assert payload["higher_is_better"] is False and payload["e2e_time"] == 0.0


def test_ranked_lines_keep_their_rank_and_give_per_rank():
    lines = [f"[FlagPerf Result]Rank {r}'s computation-FP32={v}TFLOPS" for r, v in ((1, 40.5), (0, 41.0), (2, 39.0))]
    payload = build_finished("computation-FP32", parse_results(lines))
    assert payload["metric"] == "computation-FP32" and payload["value"] == 41.0       # rank 0's
    assert payload["metrics"]["computation-FP32@rank1"] == {"value": 40.5, "unit": "TFLOPS", "rank": 1}
    assert set(payload["metrics"]) == {"computation-FP32@rank0", "computation-FP32@rank1", "computation-FP32@rank2"}
    assert payload["checks"]["details"]["per_rank"] == {"metric": "computation-FP32", "values": [41.0, 40.5, 39.0]}


def test_same_name_on_two_nodes_and_twice_in_one_log():
    results = parse_results(["[FlagPerf Result]bw=10GB/s", "[FlagPerf Result]bw=11GB/s"]) + \
        parse_results(["[FlagPerf Result]bw=9GB/s"], node=1)
    payload = build_finished("bw", results)
    assert payload["metrics"] == {"bw": {"value": 10.0, "unit": "GB/s"}, "bw#2": {"value": 11.0, "unit": "GB/s"},
                                  "bw@node1": {"value": 9.0, "unit": "GB/s", "node": 1}}
    assert payload["value"] == 10.0


PERFLOG = {"event": "FINISHED", "value": {"e2e_time": 1832.4, "training_sequences_per_second": 912.7,
                                           "converged": True, "final_loss": 1.73, "final_mlm_accuracy": 0.721,
                                           "num_trained_samples": 1638400, "vendor": "nvidia"},
           "metadata": {"file": "run_pretraining.py", "lineno": 231, "time_ms": 1732262410123, "rank": 0}}


def test_flagperf_perflog_finished():
    assert is_flagperf_finished(PERFLOG)
    assert not is_flagperf_finished({"event": "FINISHED", "schema": "flagperf.perflog/1", "value": 1.0})
    payload = build_finished("bert", [], PERFLOG, e2e_time=99.0)
    f = Finished.from_dict(payload)
    assert (f.metric, f.value, f.unit, f.higher_is_better, f.e2e_time) == \
        ("training_sequences_per_second", 912.7, "sequences/s", True, 1832.4)
    assert f.metrics["converged"] == {"value": 1, "unit": "bool"}
    assert f.metrics["final_loss"] == {"value": 1.73, "unit": ""}
    assert f.metrics["e2e_time"] == {"value": 1832.4, "unit": "s"}
    assert f.checks["details"]["converged"] is True and f.checks["details"]["vendor"] == "nvidia"
    assert f.checks["details"]["metadata"]["lineno"] == 231
    assert payload["origin"] == "FlagPerf [PerfLog] FINISHED"


def test_perflog_without_throughput_falls_back_to_e2e_time():
    payload = build_finished("x", [], {"event": "FINISHED", "value": {"e2e_time": 12.5, "final_acc": 0.9}})
    assert (payload["metric"], payload["value"], payload["unit"], payload["higher_is_better"]) == \
        ("e2e_time", 12.5, "s", False)


def test_nothing_to_build():
    assert build_finished("x", [], None) is None
    assert build_finished("x", [], {"event": "FINISHED", "value": {"converged": False, "note": "n/a"}}) is None


@pytest.mark.parametrize("key, unit", [("e2e_time", "s"), ("raw_train_time", "s"),
                                       ("training_images_per_second", "images/s"), ("tokens_per_s", "tokens/s"),
                                       ("final_accuracy", "")])
def test_perflog_units(key, unit):
    assert perflog_unit(key) == unit


def test_read_log(tmp_path):
    log = tmp_path / "node.out.log"
    log.write_text("\n".join([
        "torchrun: starting",
        "[FlagPerf Result]Rank 0's computation-FP32=0.05TFLOPS",
        "[PerfLog] " + json.dumps({"event": "STEP", "value": {"loss": 2.0}}),
        "[PerfLog] " + json.dumps(PERFLOG),
        "[PerfLog] {\"event\": \"FINISHED\", cut off",
    ]) + "\n")
    results, finished = read_log(log, node=0)
    assert results == [FlagPerfResult("computation-FP32", 0.05, "TFLOPS", 0, 0)]
    assert finished == PERFLOG
    assert read_log(tmp_path / "missing.log") == ([], None)


def test_read_log_refuses_a_fifo(tmp_path):
    import os
    fifo = tmp_path / "node.out.log"
    os.mkfifo(fifo)
    problems: list = []
    assert read_log(fifo, problems=problems) == ([], None)
    assert problems and "FIFO" in problems[0]
