"""The result lines of FlagPerf's operation benchmarks and the Finish Info line of its inference cases
(flagperf/results/flagperf_lines.py), written here in the formats FlagPerf prints them."""
import pytest

from flagperf.results.flagperf_lines import (KIND_INFERENCE, FlagPerfResult, build_finished, parse_finish_info,
                                             parse_result_line, parse_results, read_log)
from flagperf_contract import Finished, validate_finished

OPERATION_LINES = [
    "Using nativetorch",
    "[FlagPerf Result]Operation mm in nativetorch at FP16:",
    "[FlagPerf Result]FLOPS utilization: cputime=80.12%, kerneltime=85.3%",
    "[FlagPerf Result]cputime=4177.02 us, throughput=239.41 op/s, equals to 263.23 TFLOPS",
    "[FlagPerf Result]kerneltime=4146.18 us, throughput=241.19 op/s, equals to 265.19 TFLOPS",
    "[FlagPerf Result]Correctness with CPU golden Reference: True",
    "[FlagPerf Result]First time latency: no warmup=150712.5 us, warmup=4240.62 us",
]

FINISH = ("2024-05-01 10:00:00.123 | Finish Info | __main__:<module>:159 - {'vendor': 'nvidia', 'compiler': "
          "'tensorrt', 'precision': 'fp16', 'batchsize': 256, 'flops': 2.9e+15, 'e2e_time(second)': 1250.5, "
          "'p_validation_whole(qps)': 1100.2, 'p_validation_core(qps)': 1500.7, 'p_inference_whole(qps)': 2100.0, "
          "'*p_inference_core(qps)': 4500.25, 'val_average_acc': 0.7921, 'infer_average_acc': 0.7915}")


def names(results):
    return [(r.name, r.value, r.unit) for r in results]


def test_operation_lines_are_one_metric_per_figure():
    assert names(parse_results(OPERATION_LINES)) == [
        ("FLOPS utilization cputime", 80.12, "%"), ("FLOPS utilization kerneltime", 85.3, "%"),
        ("cputime", 4177.02, "us"), ("cputime throughput", 239.41, "op/s"), ("cputime TFLOPS", 263.23, "TFLOPS"),
        ("kerneltime", 4146.18, "us"), ("kerneltime throughput", 241.19, "op/s"),
        ("kerneltime TFLOPS", 265.19, "TFLOPS"), ("correctness", 1.0, "bool"),
        ("First time latency no warmup", 150712.5, "us"), ("First time latency warmup", 4240.62, "us")]


def test_operation_lines_become_a_valid_finished():
    payload = build_finished("mm", parse_results(OPERATION_LINES), None, e2e_time=3.0)
    validate_finished(payload)
    Finished.from_dict(payload)
    assert (payload["metric"], payload["value"], payload["unit"]) == ("FLOPS utilization cputime", 80.12, "%")
    m = payload["metrics"]
    assert m["FLOPS utilization kerneltime"] == {"value": 85.3, "unit": "%"}
    assert m["cputime TFLOPS"] == {"value": 263.23, "unit": "TFLOPS"} and m["kerneltime"]["unit"] == "us"
    assert m["correctness"] == {"value": 1.0, "unit": "bool"}
    assert payload["checks"]["passed"] is True and payload["checks"]["details"]["correctness"] is True


def test_a_false_correctness_fails_the_checks():
    lines = OPERATION_LINES[:-2] + ["[FlagPerf Result]Correctness with CPU golden Reference: False"]
    payload = build_finished("mm", parse_results(lines))
    assert payload["checks"]["passed"] is False and payload["checks"]["details"]["correctness"] is False
    assert payload["metrics"]["correctness"]["value"] == 0.0


@pytest.mark.parametrize("line, expected", [
    # a rank prefix applies to every item; a non-finite item is left out, the others kept
    ("[FlagPerf Result]Rank 2's FLOPS utilization: cputime=nan%, kerneltime=85.3%",
     [FlagPerfResult("FLOPS utilization kerneltime", 85.3, "%", 2, 0)]),
    ("[FlagPerf Result] programmable_op_perf: sigmoid_rvv=12.5us, tanh_rvv=4us",
     [FlagPerfResult("programmable_op_perf sigmoid_rvv", 12.5, "us"), FlagPerfResult("programmable_op_perf tanh_rvv",
                                                                                     4.0, "us")]),
    # a comma inside a unit is no second item
    ("[FlagPerf Result]bw=1.5GB/s, measured", [FlagPerfResult("bw", 1.5, "GB/s, measured")]),
    ("[FlagPerf Result]cputime=inf us, throughput=1 op/s, equals to 2 TFLOPS",
     [FlagPerfResult("cputime throughput", 1.0, "op/s"), FlagPerfResult("cputime TFLOPS", 2.0, "TFLOPS")]),
])
def test_multi_value_lines(line, expected):
    assert parse_results([line]) == expected


def test_single_lines_keep_their_meaning():
    assert parse_result_line("[FlagPerf Result]Rank 1's computation-FP32=51.2TFLOPS") == \
        FlagPerfResult("computation-FP32", 51.2, "TFLOPS", 1, 0)
    assert parse_result_line("[FlagPerf Result]Operation mm in nativetorch at FP16:") is None


def test_finish_info_is_one_metric_per_number_headline_first():
    results = parse_finish_info(FINISH, node=1)
    assert all(r.kind == KIND_INFERENCE and r.node == 1 for r in results)
    assert names(results) == [
        ("p_inference_core", 4500.25, "qps"), ("batchsize", 256.0, ""), ("flops", 2.9e15, "FLOPS"),
        ("e2e_time", 1250.5, "s"), ("p_validation_whole", 1100.2, "qps"), ("p_validation_core", 1500.7, "qps"),
        ("p_inference_whole", 2100.0, "qps"), ("val_average_acc", 0.7921, ""), ("infer_average_acc", 0.7915, "")]
    payload = build_finished("vit_l_16", parse_finish_info(FINISH))
    validate_finished(payload)
    assert (payload["metric"], payload["value"], payload["unit"]) == ("p_inference_core", 4500.25, "qps")
    assert payload["origin"] == "FlagPerf inference Finish Info" and payload["higher_is_better"] is True
    assert payload["metrics"]["e2e_time"] == {"value": 1250.5, "unit": "s"}


def test_finish_info_without_a_compiler_heads_with_the_validation_core():
    line = ("\x1b[1m2024-05-01 10:00:00.123\x1b[0m | \x1b[31mFinish Info\x1b[0m | __main__:<module>:159 - "
            "{'vendor': 'cpu', 'compiler': None, 'batchsize': 8, 'p_validation_core(qps)': 12.5, "
            "'*p_inference_core(qps)': None, 'val_average_acc': True}")
    assert names(parse_finish_info(line)) == [("p_validation_core", 12.5, "qps"), ("batchsize", 8.0, "")]


@pytest.mark.parametrize("line", [
    "2024-05-01 10:00:00.123 | INFO | x:y:1 - Finish Info later",
    "2024-05-01 10:00:00.123 | Finish Info | x:y:1 - {'a': __import__('os').system('true')}",
    "2024-05-01 10:00:00.123 | Finish Info | x:y:1 - {'a': 1" + "}" * 3,
    "2024-05-01 10:00:00.123 | Finish Info | x:y:1 - {" + "[" * 5000 + "]" * 5000 + "}",
    "2024-05-01 10:00:00.123 | Finish Info | x:y:1 - {'a': " + "9" * 20000 + "}",
    "2024-05-01 10:00:00.123 | Finish Info | x:y:1 - {'a': float('inf'), 1: 2}",
    "2024-05-01 10:00:00.123 | Finish Info | x:y:1 - {'\\x1b[2Jqps': 3, 'b': 1e999, 'c': 2j}",
])
def test_what_is_no_finish_info(line):
    assert parse_finish_info(line) == []


def test_read_log_takes_the_finish_info_of_a_node_log(tmp_path):
    log = tmp_path / "node.out.log"
    log.write_text("2024-05-01 10:00:00.000 | Init Begin | __main__:main:25 - building dataloader and model\n"
                   + FINISH + "\n")
    results, finished = read_log(log)
    assert finished is None and results[0].name == "p_inference_core" and len(results) == 9
