"""The excerpt of a failed round (flagperf/results/excerpt.py): the error line in the failure's reason and the
lines that show it. torchrun's output is real: captured here from ``python -m torch.distributed.run
--nproc_per_node=2`` on a script where rank 1 raises, so that its ChildFailedError footer is torch's own."""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from flagperf.records import Failure
from flagperf.results.excerpt import error_excerpt, read_excerpt, verdict_with_excerpt, with_excerpt
from flagperf.results.interpret import NodeEvidence, RoundEvidence, Status, Wait, WaitEnd, interpret_round
from flagperf_contract import NODE_COMMAND_LOG, RankRecord, RankReport

pytest.importorskip("torch.distributed.run")

RANK_1_RAISES = """
import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} starting", flush=True)
if rank == 1:
    time.sleep(0.5)
    {"plain": lambda: 1 / 0, "killed": lambda: os.kill(os.getpid(), 9)}[sys.argv[1]]()
time.sleep(60)
"""

RECORDED = """
import os, time
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if int(os.environ["RANK"]) == 1:
        time.sleep(0.5)
        {}["no_such_key"]
    time.sleep(60)

main()
"""


def torchrun(tmp_path, name, script, *args, tee=False):
    """The combined output of a torchrun of ``script`` with 2 processes, as a node command's node.out.log."""
    src = tmp_path / f"{name}.py"
    src.write_text(script)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            *(["--tee", "3"] if tee else []), str(src), *args]
    out = tmp_path / name / NODE_COMMAND_LOG
    out.parent.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(out, "wb") as f:
        code = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=240).returncode
    assert code != 0, out.read_text()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torchrun")
    return {"plain": torchrun(tmp, "plain", RANK_1_RAISES, "plain"),
            "tee": torchrun(tmp, "tee", RANK_1_RAISES, "plain", tee=True),
            "recorded": torchrun(tmp, "recorded", RECORDED),
            "killed": torchrun(tmp, "killed", RANK_1_RAISES, "killed")}


def excerpt_of(path):
    return error_excerpt(Path(path).read_text().splitlines(), str(path))


@pytest.mark.parametrize("name", ["plain", "tee"])
def test_torchrun_excerpt_is_the_failed_rank_s_traceback(runs, name):
    text = runs[name].read_text()
    assert "ChildFailedError" in text and "Root Cause (first observed failure):" in text   # torch's own footer
    ex = excerpt_of(runs[name])
    assert ex.error == "ZeroDivisionError: division by zero"
    assert (ex.rank, ex.exit_code) == (1, 1)
    assert ex.lines[0] == "Traceback (most recent call last):" and ex.lines[-1] == ex.error
    assert not any("ChildFailedError" in x or "=====" in x or "torch/distributed" in x for x in ex.lines)


def test_torchrun_with_an_error_file_uses_the_recorded_traceback(runs):
    ex = excerpt_of(runs["recorded"])
    assert ex.error == "KeyError: 'no_such_key'" and (ex.rank, ex.exit_code) == (1, 1)
    assert ex.lines[0] == "Traceback (most recent call last):"


def test_torchrun_rank_killed_by_a_signal(runs):
    ex = excerpt_of(runs["killed"])
    assert ex.rank == 1 and ex.exit_code == -9
    assert ex.error.startswith("Signal 9 (SIGKILL) received by PID")


def node_plan(folder, ranks=(0, 1)):
    return SimpleNamespace(launch=SimpleNamespace(mode="node"), local_dir=Path(folder), ranks=tuple(ranks),
                           node_rank=0, label="localhost_noderank0")


def node_command_evidence(log, code):
    """What the judge reads of a node whose command (torchrun) exited ``code``."""
    tail = Path(log).read_text().splitlines()[-12:]
    ranks = RankReport(0, [RankRecord(0, 0, 4242, code)], first_failure=0 if code else None)
    ev = NodeEvidence("localhost_noderank0", "localhost", 0, launcher_exit=1 if code else 0, ranks=ranks,
                      mode="node", rank_logs={0: str(log)}, rank_tails={0: tail})
    return RoundEvidence(Wait(WaitEnd.NODE_FAILED if code else WaitEnd.COMPLETED, node="localhost_noderank0"),
                         [ev], [])


def test_a_failed_torchrun_round_names_the_rank_and_its_error(runs):
    log = runs["plain"]
    v = interpret_round(node_command_evidence(log, 1))
    assert v.status == Status.FAILED and v.failure.reason == "the node command failed (exit code 1)"
    assert any("=====" in x for x in v.failure.last_lines)          # the tail alone is torchrun's footer
    v = verdict_with_excerpt(v, [node_plan(log.parent)])
    assert v.failure.reason == ("the node command failed (exit code 1); rank 1 failed first (exit code 1): "
                                "ZeroDivisionError: division by zero")
    assert v.failure.exit_code == 1 and v.failure.log == str(log)
    assert v.failure.last_lines[-1] == "ZeroDivisionError: division by zero"
    assert not any("=====" in x or "ChildFailedError" in x for x in v.failure.last_lines)


def test_the_rank_s_own_log_is_preferred(runs, tmp_path):
    """A FlagPerf launcher's rank<R>.out.log beside node.out.log (which then has only the footer) holds the
    traceback of torchrun's root cause rank."""
    text = runs["plain"].read_text()
    footer = text[text.index("Traceback (most recent call last):\n  File \"<frozen runpy>\""):]
    (tmp_path / NODE_COMMAND_LOG).write_text(footer)
    (tmp_path / "rank0.out.log").write_text("rank 0 starting\n")
    (tmp_path / "rank1.out.log").write_text("rank 1 starting\nTraceback (most recent call last):\n"
                                            "  File \"train.py\", line 3, in <module>\n    step()\n"
                                            "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    f = with_excerpt(Failure("the node command failed (exit code 1)", "localhost_noderank0", 0, 1,
                             str(tmp_path / NODE_COMMAND_LOG), ("====",)), [node_plan(tmp_path)])
    assert f.reason == ("the node command failed (exit code 1); rank 1 failed first (exit code 1): "
                        "RuntimeError: CUDA error: an illegal memory access was encountered")
    assert f.log == str(tmp_path / "rank1.out.log") and f.last_lines[0] == "Traceback (most recent call last):"


def test_a_round_without_a_result_names_its_last_error(tmp_path):
    """FlagPerf's pytorch launcher tees a rank's output, so that a rank that raised leaves the node command's
    exit code 0: the round fails for its missing result, with the real exit code and the rank's error."""
    log = tmp_path / NODE_COMMAND_LOG
    log.write_text("\n".join([
        "2025-03-02 11:00:00\t[INFO]\t[start_pytorch_task.py,186]Start task with command: python -u run.py",
        "[PerfLog] {\"event\": \"INIT_START\", \"value\": null}",
        "Traceback (most recent call last):",
        "  File \"run_pretraining.py\", line 40, in <module>",
        "    model = create_model(config)",
        "ValueError: bad shape (3, 4)",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "  File \"run_pretraining.py\", line 42, in <module>",
        "    raise RuntimeError('model init failed')",
        "RuntimeError: model init failed",
        "launcher: ranks ended"]) + "\n")
    v = interpret_round(node_command_evidence(log, 0))
    assert v.failure.reason == "the node command printed no FINISHED line and no [FlagPerf Result] lines"
    v = verdict_with_excerpt(v, [node_plan(tmp_path)])
    assert v.failure.reason == ("the node command printed no FINISHED line and no [FlagPerf Result] lines; "
                                "last error: RuntimeError: model init failed")
    assert v.failure.exit_code == 0
    assert v.failure.last_lines[-1] == "RuntimeError: model init failed"


@pytest.mark.parametrize("lines, error", [
    # a launcher's own exception after the rank's: the rank's is the error
    (["Traceback (most recent call last):", "  File \"run.py\", line 9, in <module>", "    1 / 0",
      "ZeroDivisionError: division by zero", "Traceback (most recent call last):",
      "  File \"start_pytorch_task.py\", line 201, in <module>", "    main()",
      "Exception: Exception! process 51 returncode != 0, please check relevant issue"],
     "ZeroDivisionError: division by zero"),
    # a rank's error, then the error another rank raised because of it (its peer went away): the first is the error
    (["Traceback (most recent call last):", "  File \"run_pretraining.py\", line 50, in <module>", "    1 / 0",
      "ZeroDivisionError: planted failure", "Traceback (most recent call last):",
      "  File \"run_pretraining.py\", line 61, in <module>", "    dist.all_reduce(t)",
      "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:17034"],
     "ZeroDivisionError: planted failure"),
    # only a launcher's: it is the error
    (["Traceback (most recent call last):", "  File \"/x/deepspeed/launcher/runner.py\", line 9, in main",
      "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1."],
     "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1."),
    # two ranks' output interleaved in one stream: another process's line inside the traceback is left out
    (["Traceback (most recent call last):", "rank 0: step 3", "  File \"t.py\", line 2, in <module>",
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"],
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    # no traceback: the last line that reads as an error, colour codes removed
    (["step 1", "\x1b[1;31;40m2025-03-02 11:00:00\t[ERROR]\t[helper.py,30]Can't find config dir\x1b[0m", "bye"],
     "2025-03-02 11:00:00\t[ERROR]\t[helper.py,30]Can't find config dir"),
    (["bash: line 1: 4711 Killed                  python3 run_pretraining.py", "done"],
     "bash: line 1: 4711 Killed                  python3 run_pretraining.py"),
])
def test_the_error_line(lines, error):
    assert error_excerpt(lines).error == error


@pytest.mark.parametrize("lines", [[], ["rank 0: starting", "rank 0: working", "0 errors found", "done"]])
def test_no_error_leaves_the_failure_as_it_was(tmp_path, lines):
    log = tmp_path / "rank0.out.log"
    log.write_text("\n".join(lines) + "\n")
    assert error_excerpt(lines) is None and read_excerpt([log]) is None
    f = Failure("rank 0 printed no FINISHED line and no [FlagPerf Result] lines", "n", 0, 0, str(log), ("done",))
    assert with_excerpt(f, []) == f


def test_the_excerpt_reads_the_end_of_a_large_log_only(tmp_path):
    log = tmp_path / "rank0.out.log"
    early = "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'early'\n"
    with open(log, "w") as f:
        f.write(early + "noise line\n" * 200_000)     # 2.2 MB after the error: beyond the window read
    assert read_excerpt([log]) is None
    with open(log, "a") as f:
        f.write("Traceback (most recent call last):\n  File \"a.py\", line 9\nIndexError: late\n")
    assert read_excerpt([log]).error == "IndexError: late"


def test_the_root_cause_rank_s_stream_among_others(runs):
    """Under --tee every line names its rank: another rank's later traceback is not the root cause's."""
    lines = runs["tee"].read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("[default1]:ZeroDivisionError"))
    other = ["[default0]:Traceback (most recent call last):", '[default0]:  File "fail.py", line 9, in <module>',
             "[default0]:torch.distributed.DistBackendError: NCCL communicator was aborted"]
    ex = error_excerpt(lines[:at + 1] + other + lines[at + 1:])
    assert ex.error == "ZeroDivisionError: division by zero" and ex.rank == 1


def test_a_killed_root_cause_is_not_given_another_rank_s_traceback(runs):
    lines = runs["killed"].read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if "Sending process" in x or "failed (exitcode" in x)
    other = ["Traceback (most recent call last):", '  File "fail.py", line 9, in <module>',
             "RuntimeError: connection reset by peer"]
    ex = error_excerpt(lines[:at] + other + lines[at:])
    assert ex.error.startswith("Signal 9 (SIGKILL)") and (ex.rank, ex.exit_code) == (1, -9)
