"""The node launcher's clean-up of processes that escape their rank: the /proc scan for its token, and reaping."""
import os
import secrets
import signal
import subprocess
import sys
import time

from launcher.node_launcher import NODE_TOKEN_ENV, find_marked, process_cmdline, reap_marked

# Ignores SIGTERM (only SIGKILL ends it), says when it is ready, and gives up by itself after 30 s.
CHILD = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print('ready', flush=True); time.sleep(30)")


def start_marked(token):
    env = dict(os.environ, **{NODE_TOKEN_ENV: token})
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "reap-test-marker"], env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_scan_finds_the_marked_process_and_reap_kills_it():
    token = "run/case/1/0/%d/%s" % (os.getpid(), secrets.token_hex(8))
    proc = start_marked(token)
    try:
        found = find_marked(token)
        assert list(found) == [proc.pid]                        # only it: not this process, nothing else
        assert "reap-test-marker" in found[proc.pid] and found[proc.pid] == process_cmdline(proc.pid)
        assert find_marked(token + "x") == {} and find_marked(token[:-1]) == {}   # exact value only
        assert find_marked(token, var=NODE_TOKEN_ENV + "_OTHER") == {}
        assert find_marked(token, exclude=[proc.pid]) == {}
        assert len(process_cmdline(proc.pid, limit=10)) == 10

        logged = []
        t0 = time.monotonic()
        reaped = reap_marked(token, term_grace_s=0.3, kill_wait_s=2.0, log=logged.append)
        assert time.monotonic() - t0 < 30           # a hang catcher: 0.3 s of grace, then SIGKILL
        assert [(r["pid"], r["signal"]) for r in reaped] == [(proc.pid, "SIGKILL")]   # SIGTERM was ignored
        assert "reap-test-marker" in reaped[0]["cmdline"] and "survived" not in reaped[0]
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert any(f"reaping pid={proc.pid}" in line and "SIGTERM" in line for line in logged), logged
        assert any("SIGKILL" in line for line in logged), logged
        assert find_marked(token) == {}                          # a zombie or a dead process is not found
        assert reap_marked(token) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_scan_of_an_unknown_token_finds_nothing_and_skips_unreadable_processes():
    # pid 1 and kernel threads are usually unreadable or unmarked: the scan must neither fail nor find them.
    assert find_marked("no-such-token-" + secrets.token_hex(8)) == {}
    assert reap_marked("no-such-token-" + secrets.token_hex(8), passes=1) == []
