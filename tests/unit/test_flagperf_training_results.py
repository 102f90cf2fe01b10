"""FlagPerf's training cases' result formats (flagperf/results/flagperf_lines.py): the summary lines of its LLM
cases (MFU, tokens/s, FlagScale's step-time pair, stages, Key/Value), the files its launchers write into a node
directory (rank<R>.out.log, rank<R>.log.txt, start_<framework>_task.log), the FINISHED payload built from them,
the verdict of a round that printed none, and a PerfLog line over the line limit. Every log line here is written
for the test, in the form FlagPerf's cases print."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from flagperf.results import flagperf_lines, perflog
from flagperf.results.flagperf_lines import (KIND_TRAINING, ORIGIN_TRAINING, FlagPerfResult, build_finished,
                                             flagperf_node_files, node_results, parse_training_lines, perflog_unit)
from flagperf.results.interpret import NodeEvidence, RoundEvidence, Status, Wait, WaitEnd, interpret_round
from flagperf_contract import NODE_COMMAND_LOG, Finished, RankRecord, RankReport, validate_finished


def training(name, value, unit, node=0, measured=True):
    return FlagPerfResult(name, value, unit, None, node, KIND_TRAINING, measured)


# ------------------------------------------------------------------------------------------- one format each
@pytest.mark.parametrize("line, expected", [
    # print("MFU: ", x): two spaces; print(f"MFU: {mfu}"); logger.info("MFU: " + str(MFU)) under loguru's prefix
    ("MFU:  0.3931", training("mfu", 0.3931, "fraction")),
    ("MFU: 0.4127\n", training("mfu", 0.4127, "fraction")),
    ("2025-03-02 11:40:07.118 | INFO     | __main__:<module>:138 - MFU: 0.388", training("mfu", 0.388, "fraction")),
    ("MFU: 39.3%", training("mfu", 39.3, "%")),
    ("System tokens per second:  1523712.5", training("tokens_per_s", 1523712.5, "tokens/s")),
    ("Tokens/p/s:  2976.0", training("tokens_per_s_per_chip", 2976.0, "tokens/s/chip")),
    ("2025-03-02 11:40:07.117 | INFO     | __main__:<module>:137 - Throughput(token per chip per second): 3120.4",
     training("tokens_per_s_per_chip", 3120.4, "tokens/s/chip")),
    ("2025-03-02 11:40:07.119 | INFO     | __main__:<module>:139 - Throughput(token per TFLOPS): 3.155",
     training("tokens_per_s_per_tflops", 3.155, "tokens/s/TFLOPS")),
    ("Tokens/TFLOPS:  3.0091", training("tokens_per_s_per_tflops", 3.0091, "tokens/s/TFLOPS")),
    ("Theory TFLOPS:  989", training("theory_tflops", 989.0, "TFLOPS", measured=False)),
    ("Actual computing power:  377.5", training("actual_tflops", 377.5, "TFLOPS")),
    ("avg_iter_time(s): 4.125", training("avg_iter_time", 4.125, "s")),
    ("finetune time is 5121.7", training("finetune_time", 5121.7, "s")),
    ("pretrain time is 2210.03", training("pretrain_time", 2210.03, "s")),
    ("tokens_finetune is 612.5", training("tokens_finetune", 612.5, "tokens/sample", measured=False)),
    ("Key: avg_epoch_time, Value: 812.5", training("avg_epoch_time", 812.5, "s", measured=False)),
    ("Key: avg_train_prep, Value: tensor(1.4331, device='cuda:0')",
     training("avg_train_prep", 1.4331, "", measured=False)),
    ("[default0]:MFU: 0.401", training("mfu", 0.401, "fraction")),                   # torchrun --tee
    ("\x1b[1;37;40m2025-03-02 11:40:07,5\t[INFO]\t[run.py,88]MFU: 0.35\x1b[0m",      # FlagPerf's coloured logger
     training("mfu", 0.35, "fraction")),
])
def test_each_summary_line(line, expected):
    results, refused = parse_training_lines([line])
    assert results == [expected] and refused == []


@pytest.mark.parametrize("line", [
    "MFU is computed from the step time",          # no number
    "MFU: 0.39 (expected 0.40)",                   # the number must end the line
    "theMFU: 0.39",                                # the label must start the line or its message
    "Tokens/p/s",
    "3.1 2976.0",                                  # FlagScale's pair without its MFU line after it
    "Step 12/500, Loss: 3.1",                      # progress, no result
    "MFU: " + "9" * 5000,                          # longer than a summary line can be
])
def test_not_summary_lines(line):
    assert parse_training_lines([line]) == ([], [])


def test_flagscale_pair_before_its_mfu():
    # print(infos); print(ave_steptime, tps); print(f"MFU: {mfu}")
    lines = ["[3.91, 3.88, 3.9]", "3.8925 1052.36", "MFU: 0.3344", "finetune time is 4011.2"]
    results, refused = parse_training_lines(lines)
    assert refused == []
    assert results == [training("step_time", 3.8925, "s"), training("tokens_per_s_per_chip", 1052.36, "tokens/s/chip"),
                       training("mfu", 0.3344, "fraction"), training("finetune_time", 4011.2, "s")]


def test_stages_prefix_the_names_and_the_average_is_the_headline():
    lines = ["Pretrain stage", "System tokens per second:  410.2", "Tokens/p/s:  51.3", "Theory TFLOPS:  312",
             "Tokens/TFLOPS:  0.1644", "MFU:  0.2301", "Finetune stage", "System tokens per second:  380.9",
             "Tokens/p/s:  47.6", "MFU:  0.6412", "two-stage average", "MFU:  0.4702", "Actual computing power:  146.7"]
    results, _ = parse_training_lines(lines)
    names = [r.name for r in results]
    assert names == ["pretrain_tokens_per_s", "pretrain_tokens_per_s_per_chip", "pretrain_theory_tflops",
                     "pretrain_tokens_per_s_per_tflops", "pretrain_mfu", "finetune_tokens_per_s",
                     "finetune_tokens_per_s_per_chip", "finetune_mfu", "average_mfu", "average_actual_tflops"]
    payload = build_finished("llava1.5_7b", results, None, e2e_time=7300.0)
    assert (payload["metric"], payload["value"], payload["unit"]) == ("average_mfu", 0.4702, "fraction")


def test_megatron_summary_becomes_a_valid_finished():
    lines = ["bash pretrain_llama3.sh /data 8 1 0 10.1.1.1 29501 /megatron 1 100 1 1 /tok adapter.sh",
             "System tokens per second:  310882.4", "Tokens/p/s:  38860.3", "MFU:  0.3795"]
    results, refused = parse_training_lines(lines)
    payload = build_finished("llama3_8B", results, None, e2e_time=1204.5)
    assert validate_finished(payload) == [] and refused == []
    f = Finished.from_dict(payload)
    assert (f.metric, f.value, f.unit, f.higher_is_better, f.e2e_time) == ("mfu", 0.3795, "fraction", True, 1204.5)
    assert f.metrics == {"tokens_per_s": {"value": 310882.4, "unit": "tokens/s"},
                         "tokens_per_s_per_chip": {"value": 38860.3, "unit": "tokens/s/chip"},
                         "mfu": {"value": 0.3795, "unit": "fraction"}}
    assert payload["origin"] == ORIGIN_TRAINING and f.checks["details"]["lines"] == 3


def test_headline_without_mfu_is_tokens_per_chip():
    results, _ = parse_training_lines(["Theory TFLOPS:  989", "Tokens/p/s:  2100.5", "System tokens per second: 16804"])
    assert build_finished("m", results)["metric"] == "tokens_per_s_per_chip"


def test_a_node_1_summary_is_kept_apart_and_node_0_heads():
    r0, _ = parse_training_lines(["MFU: 0.41"], node=0)
    r1, _ = parse_training_lines(["MFU: 0.40"], node=1)
    payload = build_finished("m", r1 + r0)
    assert payload["metrics"] == {"mfu@node1": {"value": 0.40, "unit": "fraction", "node": 1},
                                  "mfu": {"value": 0.41, "unit": "fraction"}}
    assert payload["value"] == 0.41


# ----------------------------------------------------------------------------- nothing is invented
def test_a_megatron_run_without_step_times_is_refused():
    # the launcher found no "elapsed time per iteration" and divided by its -1.0 default
    lines = ["System tokens per second:  -4194304.0", "Tokens/p/s:  -524288.0", "MFU:  -3.18", "Theory TFLOPS:  989"]
    results, refused = parse_training_lines(lines, where="rank0.log.txt")
    assert [r.name for r in results] == ["theory_tflops"]
    assert refused[0] == "rank0.log.txt: 'System tokens per second:  -4194304.0': not a positive number"
    assert len(refused) == 3
    assert build_finished("m", results, None, refused=refused) is None


def test_description_lines_alone_are_no_result():
    results, refused = parse_training_lines(["Theory TFLOPS:  989", "tokens_finetune is 612.5",
                                             "Key: avg_train_loss, Value: 1.91"])
    assert len(results) == 3 and refused == []
    assert build_finished("m", results) is None


@pytest.mark.parametrize("line", ["MFU: nan", "MFU: inf", "Tokens/p/s:  0.0"])
def test_not_finite_or_zero_is_refused(line):
    results, refused = parse_training_lines([line])
    assert results == [] and len(refused) == 1


@pytest.mark.parametrize("key, unit", [("throughput(ips)_raw", "samples/s"), ("throuhgput(ips)_no_eval", "samples/s"),
                                       ("throughput(sps)_pure_compute", "sequences/s"),
                                       ("val_items_per_sec", "items/s"), ("training_images_per_second", "images/s"),
                                       ("num_trained_samples", "")])
def test_perflog_throughput_units(key, unit):
    assert perflog_unit(key) == unit


# -------------------------------------------------------------------------------- the files of a node
def node_plan(folder, mode="node", ranks=(0, 1), node_rank=0):
    return SimpleNamespace(launch=SimpleNamespace(mode=mode), local_dir=Path(folder), ranks=tuple(ranks),
                           node_rank=node_rank, label=f"h_noderank{node_rank}")


def test_flagperf_launcher_files_of_a_node_command(tmp_path):
    (tmp_path / "start_pytorch_task.log").write_text("2025-03-02 11:00:00 FlagperfLogger started.\n")
    (tmp_path / "start_x_task.log.bak").write_text("")
    names = [p.name for p, _ in flagperf_node_files(node_plan(tmp_path))]
    assert names == ["rank0.out.log", "rank0.log.txt", "rank1.out.log", "rank1.log.txt", "noderank0.out.log",
                     "start_pytorch_task.log"]
    assert flagperf_node_files(node_plan(tmp_path, mode="ranks")) == []


def test_a_tee_d_rank_log_and_node_out_log_count_once(tmp_path):
    """FlagPerf's pytorch launcher tees every rank's output into rank<R>.out.log and its own stdout (the node
    command's node.out.log): the results are read from both and kept once, a rank's [FlagPerf Result] line as
    that rank's."""
    rank0 = ["[PerfLog] " + json.dumps({"event": "INIT_START"}), "[FlagPerf Result]Rank 0's x=1.5TFLOPS",
             "[FlagPerf Result]y=2GB/s", "MFU: 0.31"]
    (tmp_path / "rank0.out.log").write_text("\n".join(rank0) + "\n")
    (tmp_path / "rank1.out.log").write_text("[FlagPerf Result]y=2GB/s\n")
    (tmp_path / NODE_COMMAND_LOG).write_text("\n".join(rank0 + ["[FlagPerf Result]y=2GB/s", "launcher: done"]) + "\n")
    results = node_results(node_plan(tmp_path))
    assert results == [FlagPerfResult("x", 1.5, "TFLOPS", 0, 0), FlagPerfResult("y", 2.0, "GB/s", 0, 0),
                       training("mfu", 0.31, "fraction"), FlagPerfResult("y", 2.0, "GB/s", 1, 0)]


def test_megatron_launcher_log_txt_and_task_log_are_read(tmp_path):
    (tmp_path / "rank0.log.txt").write_text("System tokens per second:  99000.0\nTokens/p/s:  12375.0\nMFU:  0.301\n")
    (tmp_path / "start_megatron_task.log").write_text("2025-03-02 11:00:00\t[INFO]\t[start.py,118]Hello Flagscale\n")
    (tmp_path / NODE_COMMAND_LOG).write_text("launcher: started\n")
    refused: list = []
    results = node_results(node_plan(tmp_path, ranks=range(8)), refused=refused)
    assert [r.name for r in results] == ["tokens_per_s", "tokens_per_s_per_chip", "mfu"] and refused == []


def test_a_launcher_file_is_read_from_its_end_only(tmp_path, monkeypatch):
    monkeypatch.setattr(flagperf_lines, "FLAGPERF_FILE_MAX_BYTES", 4096)
    (tmp_path / "rank0.log.txt").write_text("MFU: 0.5\n" + "x" * 10_000 + "\n" + "noise\n" * 10 + "MFU: 0.25\n")
    assert [r.value for r in node_results(node_plan(tmp_path))] == [0.25]


def test_a_refused_summary_in_a_launcher_file_is_returned(tmp_path):
    (tmp_path / "rank0.log.txt").write_text("MFU:  -1.5\n")
    refused: list = []
    assert node_results(node_plan(tmp_path), refused=refused) == []
    assert refused == ["rank0.log.txt: 'MFU:  -1.5': not a positive number"]


def test_task_logs_are_regular_files_only(tmp_path):
    (tmp_path / "start_paddle_task.log").symlink_to("/dev/zero")
    (tmp_path / "start_pytorch_task.log").mkdir()
    assert flagperf_lines.task_logs(tmp_path) == []


# ---------------------------------------------------------------------------------------- the verdict
def evidence(results=(), refused=(), records=(), mode="node"):
    ranks = RankReport(0, [RankRecord(0, 0, 100, 0, duration_s=812.0)])
    ev = NodeEvidence("h_noderank0", "h", 0, launcher_exit=0, ranks=ranks, mode=mode, benchmark="llama3_8B",
                      rank_logs={0: "/run/h_noderank0/node.out.log"}, rank_tails={0: ["launcher: done"]},
                      flagperf_results=list(results), flagperf_refused=list(refused))
    return RoundEvidence(Wait(WaitEnd.COMPLETED), [ev], list(records))


def test_summary_lines_pass_the_round():
    results, _ = parse_training_lines(["Tokens/p/s:  2976.0", "MFU:  0.3931"])
    v = interpret_round(evidence(results))
    assert v.status == Status.PASSED
    assert (v.finished.metric, v.finished.value, v.finished.unit, v.finished.e2e_time) == \
        ("mfu", 0.3931, "fraction", 812.0)


def test_a_log_without_any_result_line_still_fails():
    lines = ["training: step 100/100 loss 2.01", "saving checkpoint", "Theory TFLOPS:  989",
             "Key: avg_train_loss, Value: 2.0"]
    results, refused = parse_training_lines(lines)
    v = interpret_round(evidence(results, refused))
    assert v.status == Status.FAILED
    assert v.failure.reason == "the node command printed no FINISHED line and no [FlagPerf Result] lines"
    assert v.failure.exit_code == 0 and v.finished is None


def test_a_refused_summary_fails_the_round_saying_why():
    results, refused = parse_training_lines(["Tokens/p/s:  -524288.0", "MFU:  -3.18"], where="rank0.log.txt")
    v = interpret_round(evidence(results, refused))
    assert v.status == Status.FAILED
    assert v.failure.reason == ("invalid result: the node command printed no FINISHED line, and its training summary "
                                "is no result: rank0.log.txt: 'Tokens/p/s:  -524288.0': not a positive number")


def test_a_perflog_line_over_the_limit_fails_naming_file_and_size(tmp_path, monkeypatch):
    monkeypatch.setattr(perflog, "LINE_MAX_BYTES", 4096)
    log = tmp_path / "rank0.out.log"
    big = "[PerfLog] " + json.dumps({"event": "FINISHED", "value": {"e2e_time": 1.0, "blob": "z" * 9000}})
    log.write_text("starting\n" + big + "\n" + "done\n")
    records = perflog.read_records(log)
    assert [r["event"] for r in records] == [perflog.UNREADABLE]
    v = interpret_round(evidence(records=records, mode="ranks"))
    assert v.status == Status.FAILED
    assert v.failure.reason == (f"invalid result: rank 0 printed a PerfLog line of {len(big)} bytes (at byte 9 of "
                                f"{log}), longer than the 4096-byte line limit: not read")


def test_a_long_line_at_the_end_of_the_file_and_a_long_other_line(tmp_path, monkeypatch):
    monkeypatch.setattr(perflog, "LINE_MAX_BYTES", 1024)
    log = tmp_path / "rank0.out.log"
    log.write_text("x" * 3000 + "\n" + "[PerfLog] " + "y" * 2000)       # the last one still being written
    (r,) = perflog.read_records(log)
    assert r["event"] == perflog.UNREADABLE and "a PerfLog line of 2010 bytes (at byte 3001 of" in r["reason"]


# ------------------------------------------------------------------------- a whole round, in the fake pipeline
def fake_run(tmp_path, script):
    from flagperf.pipeline import Run
    from flagperf.plan import build_plan
    from flagperf.results.summary import Summary
    from tests.unit.fakebackend import FakeBackend, make_config

    plan = build_plan(make_config(tmp_path, ["gemm:pytorch:local:1:2:1"]), "run20250101000000")
    said: list = []
    Run(plan, say=said.append, backend=FakeBackend(scripts=script)).execute()
    (c,) = Summary.load(plan.run_dir / "summary.json").cases
    (r,) = c.rounds
    return c, r, said


def test_a_round_with_summary_lines_passes_through_the_pipeline(tmp_path):
    from tests.unit.fakebackend import NodeScript
    c, r, _ = fake_run(tmp_path, NodeScript(records={}, raw_lines={0: ["System tokens per second:  8120.5",
                                                                      "Tokens/p/s:  4060.25", "MFU:  0.4125"]}))
    assert r.status == "passed" and c.metric == "mfu" and c.unit == "fraction"
    assert r.finished["origin"] == ORIGIN_TRAINING and r.value == 0.4125
    assert r.metrics["tokens_per_s_per_chip"] == {"value": 4060.25, "unit": "tokens/s/chip"}


def test_a_round_with_none_of_the_lines_fails_through_the_pipeline(tmp_path):
    from tests.unit.fakebackend import NodeScript
    lines = ["Traceback (most recent call last):", '  File "run_pretraining.py", line 7, in <module>',
             "    import deepspeed", "ModuleNotFoundError: No module named 'deepspeed'"]
    c, r, said = fake_run(tmp_path, NodeScript(records={}, raw_lines={0: lines}))
    assert r.status == "failed" and c.status == "failed"
    assert r.failure.reason == ("rank 0 printed no FINISHED line and no [FlagPerf Result] lines; last error: "
                                "ModuleNotFoundError: No module named 'deepspeed'")
    assert r.failure.exit_code == 0 and list(r.failure.last_lines) == lines
    assert any("last error: ModuleNotFoundError" in line for line in said)


def test_where_every_rank_prints_the_summary_rank_0_s_heads(tmp_path):
    (tmp_path / "rank0.out.log").write_text("Tokens/p/s:  101.0\nMFU:  0.30\nMFU:  0.31\n")
    (tmp_path / "rank1.out.log").write_text("Tokens/p/s:  99.0\nMFU:  0.29\n")
    (tmp_path / NODE_COMMAND_LOG).write_text("MFU:  0.29\nTokens/p/s:  99.0\nTokens/p/s:  101.0\nMFU:  0.30\n")
    payload = build_finished("tinyllm", node_results(node_plan(tmp_path)))
    assert (payload["metric"], payload["value"]) == ("mfu#2", 0.31)      # rank 0's last
    assert {k: m["value"] for k, m in payload["metrics"].items()} == {
        "tokens_per_s_per_chip": 101.0, "mfu": 0.30, "mfu#2": 0.31, "tokens_per_s_per_chip#2": 99.0, "mfu#3": 0.29}
