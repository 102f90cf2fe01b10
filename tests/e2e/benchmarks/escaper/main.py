"""Test-only benchmark: every rank leaves a daemon behind, out of its process group, then passes or fails.

Each rank double-forks with ``setsid`` a Python process that sleeps 600 s; its argv holds
``escaper-daemon`` and this file's path, so a test can look for it. The rank waits until the daemon runs,
prints ``daemon pid=<pid>``, then sleeps ``sleep_s`` and ends: rank 0 prints a valid FINISHED line, and the
rank named by ``fail_rank`` exits with ``fail_code`` instead. With ``daemon_ignores_term: true`` the daemon
ignores SIGTERM (only SIGKILL ends it). The node launcher must end every daemon after the round.
"""
import os
import sys
import time

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
from common import harness  # noqa: E402

DAEMON = """# escaper-daemon
import os, signal, sys, time
if sys.argv[3] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(int(sys.argv[1]), b"%d\\n" % os.getpid())
os.close(int(sys.argv[1]))
time.sleep(600)
"""


def leave_daemon(ignores_term):
    """Double fork + setsid: the daemon is in a new session, reparented away from the rank. Its pid."""
    r, w = os.pipe()
    os.set_inheritable(w, True)
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", DAEMON, str(w), "escaper-daemon",
                                          "1" if ignores_term else "0", os.path.abspath(__file__)])
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    with os.fdopen(r, "rb") as f:
        line = f.readline()
    return int(line)


log = harness.PerfLog()
log.event("INIT_START")
args, cfg = harness.parse_args()
rank = int(os.environ["RANK"])
log.event("RUN_START")
t0 = time.time()
pid = leave_daemon(bool(cfg.get("daemon_ignores_term", False)))
print(f"rank {rank} daemon pid={pid}", flush=True)
if rank == cfg.get("fail_rank", -1):
    time.sleep(cfg.get("fail_after_s", 0.3))
    print(f"rank {rank}: failing on purpose with exit code {cfg.get('fail_code', 7)}", flush=True)
    sys.exit(cfg.get("fail_code", 7))
time.sleep(cfg.get("sleep_s", 0.3))
log.event("RUN_END")
if rank == 0:
    log.finished(benchmark="escaper", metric="slept_s", value=time.time() - t0, unit="s", higher_is_better=False,
                 metrics={}, checks={"passed": True, "details": {}}, env={"device": "cpu"})
