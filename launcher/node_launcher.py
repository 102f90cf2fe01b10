#!/usr/bin/env python3
"""flagperf node launcher: starts one node's ranks and waits for them.

Runs ON the benchmarked host (stdlib only). Reads the launch spec written by the driver
(``<node_dir>/launch.json``), starts ``nproc`` rank processes with the torch.distributed environment, each
writing stdout and stderr to ``rank<R>.out.log``, and waits for their exits with ``os.waitpid``. When a rank
fails, the others are stopped (SIGTERM to each rank's process group, SIGKILL after the grace period).
On SIGTERM/SIGINT, or when its parent dies, it stops every rank the same way.

Every rank gets ``FLAGPERF_NODE_TOKEN``, a value unique to this launcher, which every descendant inherits, even
one that left the rank's process group (double fork + setsid). Once the ranks have exited (passed, failed or
stopped), the launcher scans ``/proc`` for processes whose environment still holds that token and ends them
(SIGTERM, SIGKILL 2 s later, a few scans to catch processes forked meanwhile): nothing a rank started outlives
its round. What had to be ended is listed under ``reaped`` in ``ranks.json`` and in ``launcher.log``.

In launch mode "node" (``mode`` in the spec) it starts one process instead, the node command (``torchrun ...``,
``bash main.sh``), which starts the node's ranks itself; its output goes to ``node.out.log`` and ``ranks.json``
holds one record for it. Its process group and the token reach whatever it starts, so stopping and reaping
work the same.

In launch mode "mpi" node 0's launcher starts the node command, ``launcher/mpi_launch.py``, which execs one mpirun
over every node of the job (output in ``node.out.log``); the other nodes' launchers start nothing and wait until
the driver stops them once node 0 ended (mpirun started their ranks over ssh). Each rank's wrapper writes
``rank<R>.out.log`` and ``rank<R>.exit`` in its node's directory; ``ranks.json`` holds one record per rank of the
node, read from those files, the first rank that failed on its own marked.

Writes ``launcher.log`` (its own log) and ``ranks.json`` (schema ``flagperf.ranks/1``: every rank's pid and
exit code, and the processes reaped). While the ranks run it keeps ``node_status.json`` (schema
``flagperf.node-status/1``) up to date: every rank running or exited (with its exit code), and the latest STEP
event of the node's first rank, for the driver's live panel. Exit status: 0 when every rank exited 0, 1 when a
rank failed, 143 when stopped by a signal, 2 for a bad spec, 4 when it cannot write its node directory (a full
disk, no inodes, a read-only filesystem): the driver says so instead of "ranks.json missing".
"""

import argparse
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import threading
import time

# FLAGPERF_PATH (the folder holding launcher/) holds the contract module shared with the driver.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from flagperf_contract import (LAUNCH_FILE, LAUNCHER_BAD_SPEC_EXIT, LAUNCHER_CANNOT_WRITE_EXIT,  # noqa: E402
                               LAUNCHER_LOG, LAUNCHER_SIGNALLED_EXIT, NODE_COMMAND_LOG, NODE_STATUS_FILE, RANKS_FILE,
                               ContractError, LaunchSpec, NodeStatus, RankRecord, RankReport, RankState, now_iso,
                               parse_perflog_line, rank_exit_name, rank_log_name, read_json_file, step_fields,
                               write_json_atomic)


NODE_TOKEN_ENV = "FLAGPERF_NODE_TOKEN"     # set for every rank; its value is unique to one node launcher
MPI_NODE_ENV = "FLAGPERF_MPI_NODE_DIR"     # launch mode mpi: set by the ranks' wrapper (mpi_launch.py) to their
                                           # node directory, where that node's launcher looks for what is left
REAP_TERM_GRACE_S = 2.0                    # SIGTERM to SIGKILL for processes left behind by the ranks
REAP_KILL_WAIT_S = 2.0                     # how long to wait for them to vanish after SIGKILL
REAP_PASSES = 5                            # scans of /proc (a process may fork while it is being ended)
CMDLINE_MAX = 200                          # characters of a reaped process's command line kept in the report
STEP_POLL_S = 2.0                          # how often the first rank's log is read for its latest STEP event
STEP_TAIL_BYTES = 64 * 1024                # the last bytes of that log read each time


def _token_entry(token, var=NODE_TOKEN_ENV):
    return f"{var}={token}".encode()


def _has_entry(pid, entry):
    """True when process ``pid`` is alive and its environment holds ``entry`` (b"VAR=value"). A zombie, a
    process gone, or one whose environment cannot be read (another user's, not dumpable) gives False."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return entry in data.split(b"\0")


def process_cmdline(pid, limit=CMDLINE_MAX):
    """The command line of ``pid`` as one string (arguments joined by spaces), cut to ``limit`` characters."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(limit * 4 + 4)
    except OSError:
        return ""
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def find_marked(token, var=NODE_TOKEN_ENV, exclude=()):
    """{pid: command line} of the live processes whose environment holds ``var=token``; the calling process
    and the pids in ``exclude`` are left out, and so are processes whose environment cannot be read."""
    entry = _token_entry(token, var)
    skip = set(exclude) | {os.getpid()}
    found = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) in skip:
            continue
        pid = int(name)
        if _has_entry(pid, entry):
            found[pid] = process_cmdline(pid)
    return found


def _signal_marked(pid, entry, sig):
    """Send ``sig`` to ``pid`` only if it still holds ``entry`` (never to a process that reused the pid).
    With a pidfd the check and the signal refer to the same process. True when the signal was sent."""
    pidfd = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:
            pidfd = None        # kernel without pidfds (< 5.3): check, then signal by pid
    try:
        if not _has_entry(pid, entry):
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _wait_gone(pids, entry, timeout):
    """Poll until none of ``pids`` holds ``entry`` any more, at most ``timeout`` seconds; the pids left."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _has_entry(p, entry)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _has_entry(p, entry)]
    return left


def reap_marked(token, var=NODE_TOKEN_ENV, exclude=(), term_grace_s=REAP_TERM_GRACE_S,
                kill_wait_s=REAP_KILL_WAIT_S, passes=REAP_PASSES, log=None):
    """End every process whose environment holds ``var=token`` (see :func:`find_marked`): SIGTERM, SIGKILL
    after ``term_grace_s`` to those still there, then scan again (at most ``passes`` scans) for processes forked
    meanwhile. Returns one entry per process found, in the order found: ``{"pid", "cmdline", "signal"}``
    (the last signal sent: SIGTERM, or SIGKILL when SIGTERM was not enough), plus ``"survived": True`` for a
    process still there after the last pass."""
    log = log or (lambda msg: None)
    entry = _token_entry(token, var)
    reaped = {}
    left = []
    for _ in range(passes):
        found = find_marked(token, var, exclude)
        if not found:
            left = []
            break
        for pid, cmdline in found.items():
            rec = reaped.setdefault(pid, {"pid": pid, "cmdline": cmdline, "signal": None})
            sig = signal.SIGKILL if rec["signal"] == "SIGKILL" else signal.SIGTERM
            if _signal_marked(pid, entry, sig):
                rec["signal"] = sig.name
                log(f"reaping pid={pid} left behind by the ranks: {sig.name} cmdline={json.dumps(rec['cmdline'])}")
        left = _wait_gone(list(found), entry, term_grace_s)
        for pid in left:
            if _signal_marked(pid, entry, signal.SIGKILL):
                reaped[pid]["signal"] = "SIGKILL"
                log(f"reaping pid={pid}: still there after SIGTERM, SIGKILL")
        left = _wait_gone(left, entry, kill_wait_s)
    for pid in left:
        reaped[pid]["survived"] = True
        log(f"reaping pid={pid}: still running after SIGKILL ({json.dumps(reaped[pid]['cmdline'])})")
    return [r for r in reaped.values() if r["signal"] is not None or r.get("survived")]


class Launcher:
    def __init__(self, spec):
        self.spec = spec
        self.out_dir = spec.out_dir
        self.log_file = open(os.path.join(self.out_dir, LAUNCHER_LOG), "a", buffering=1)
        self.procs = {}         # pid -> record
        self.stopping = None    # reason, once the launcher decided to stop the ranks
        self.lock = threading.RLock()
        self.kill_timer = None
        self.token = "/".join(str(x) for x in (spec.env.get("FLAGPERF_RUN_ID", "-"), spec.case, spec.round,
                                                spec.node_rank, os.getpid(), secrets.token_hex(8)))
        self.reaped = []        # processes left behind by the ranks, ended by reap()
        mode = getattr(spec, "mode", "ranks")
        self.mpi_mode = mode == "mpi"
        self.mpi_peer = self.mpi_mode and spec.node_rank != 0     # mpirun on node 0 starts this node's ranks
        self.node_mode = mode == "node" or (self.mpi_mode and not self.mpi_peer)
        self.stopped = threading.Event()
        self.step = {}          # step_fields of the latest STEP event of the node's first rank
        self.done = threading.Event()

    def log(self, msg):
        try:
            self.log_file.write(f"{now_iso()} {msg}\n")
        except (OSError, ValueError):       # a full disk (or a closed file) must not stop the launcher
            pass

    def rank_env(self, local_rank, rank):
        s = self.spec
        env = dict(os.environ)
        for key, value in s.env_defaults.items():
            env.setdefault(key, value)
        env.update(s.env)
        env["PYTHONUNBUFFERED"] = "1"
        if self.node_mode:      # the node command starts the ranks and gives each its RANK and LOCAL_RANK
            env.pop("RANK", None)
            env.pop("LOCAL_RANK", None)
        else:
            env.update(RANK=str(rank), LOCAL_RANK=str(local_rank))
        env[NODE_TOKEN_ENV] = self.token
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // s.nproc)))
        if s.visible_devices_env:
            env[s.visible_devices_env] = s.visible_devices
        return env

    def start(self):
        s = self.spec
        self.log(f"node_rank={s.node_rank} nnodes={s.nnodes} nproc={s.nproc} pid={os.getpid()} case={s.case}")
        self.log(f"cwd={s.cwd} argv={json.dumps(s.argv)}")
        self.log("env " + " ".join(f"{k}={v}" for k, v in sorted(s.env.items())))
        self.log(f"every rank and its descendants carry {NODE_TOKEN_ENV}={self.token}")
        if self.mpi_peer:
            self.log(f"launch mode mpi: mpirun on node 0 starts ranks {s.ranks[0]}-{s.ranks[-1]} of this node; "
                     f"waiting until the driver ends the round")
            return
        # node mode: one process, the node command, recorded under the node's first global rank
        starts = [(0, s.ranks[0])] if self.node_mode else list(enumerate(s.ranks))
        for local_rank, rank in starts:
            path = os.path.join(self.out_dir, NODE_COMMAND_LOG if self.node_mode else rank_log_name(rank))
            with open(path, "ab") as out:
                proc = subprocess.Popen(s.argv, cwd=s.cwd, env=self.rank_env(local_rank, rank),
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            self.procs[proc.pid] = {"rank": rank, "local_rank": local_rank, "pid": proc.pid, "proc": proc,
                                    "started": now_iso(), "t0": time.monotonic(), "exit_code": None}
            if self.node_mode:
                self.log(f"node command (for ranks {s.ranks[0]}-{s.ranks[-1]}) started pid={proc.pid} log={path}")
            else:
                self.log(f"rank {rank} (local {local_rank}) started pid={proc.pid} log={path}")
            self.write_status()

    def write_status(self):
        """node_status.json: every rank started so far, running or exited, and the first rank's latest STEP."""
        with self.lock:
            doc = NodeStatus(self.spec.node_rank, [
                RankState(r["rank"], "running" if r["exit_code"] is None else "exited", r["exit_code"])
                for r in sorted(self.procs.values(), key=lambda r: r["rank"])],
                dict(self.step), self.spec.ranks[0], now_iso())
        try:
            write_json_atomic(os.path.join(self.out_dir, NODE_STATUS_FILE), doc.to_dict())
        except OSError:         # a full disk: the live view only is lost
            pass

    def watch_steps(self):
        """Until the ranks are done: the latest STEP event in the first rank's log into node_status.json."""
        path = os.path.join(self.out_dir, NODE_COMMAND_LOG if self.node_mode else rank_log_name(self.spec.ranks[0]))
        while not self.done.wait(STEP_POLL_S):
            step = latest_step(path)
            if step is not None and step != self.step:
                self.step = step
                self.write_status()

    def stop_all(self, reason, sig=signal.SIGTERM):
        with self.lock:
            first = self.stopping is None
            if first:
                self.stopping = reason
                self.log(f"stopping ranks: {reason}")
                self.stopped.set()
            for rec in self.procs.values():
                if rec["exit_code"] is None:
                    try:
                        os.killpg(rec["pid"], sig)
                    except ProcessLookupError:
                        pass
            if first:
                self.kill_timer = threading.Timer(self.spec.grace_s, self.stop_all,
                                                  args=(reason, signal.SIGKILL))
                self.kill_timer.daemon = True
                self.kill_timer.start()
            elif sig == signal.SIGKILL:
                self.log("grace period over: SIGKILL to the remaining ranks")

    def wait(self):
        if self.mpi_peer:
            self.stopped.wait()
            self.done.set()
            return
        remaining = len(self.procs)
        while remaining:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            rec = self.procs.get(pid)
            if rec is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            rec["exit_code"] = code
            rec["proc"].returncode = code
            rec["ended"] = now_iso()
            rec["duration_s"] = round(time.monotonic() - rec["t0"], 3)
            rec["stopped_by_launcher"] = self.stopping is not None
            remaining -= 1
            how = f"exit code {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"
            what = "the node command" if self.node_mode else f"rank {rec['rank']}"
            self.log(f"{what} pid={pid} ended: {how} after {rec['duration_s']} s")
            self.write_status()
            if code != 0 and self.stopping is None:
                rec["first_failure"] = True
                self.stop_all(f"{what} failed with {how}")
            # A rank's process group may leave children behind: make sure none survive the rank.
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.kill_timer:
            self.kill_timer.cancel()
        self.done.set()

    def reap(self):
        """End the processes the ranks left behind (they carry this launcher's token); call after wait()."""
        try:
            found = reap_marked(self.token, log=self.log)
            if self.mpi_mode:   # the ranks mpirun started here carry this node's directory instead
                found += reap_marked(self.out_dir, var=MPI_NODE_ENV, log=self.log)
        except Exception as exc:    # never lose ranks.json over the clean-up
            self.log(f"reaping processes left behind failed: {exc!r}")
            return
        self.reaped.extend(found)
        if found:
            self.log(f"reaped {len(found)} process(es) left behind by the ranks")

    def mpi_records(self):
        """Launch mode mpi: one record per rank of this node from its wrapper's rank<R>.exit (exit code, and
        whether it was stopped); a rank without one never ended on its own (stopped, or never started)."""
        out = []
        for local_rank, rank in enumerate(self.spec.ranks):
            path = os.path.join(self.out_dir, rank_exit_name(rank))
            rec = {"rank": rank, "local_rank": local_rank, "exit_code": None, "stopped_by_launcher": True}
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        raise ValueError("not a regular file")
                    fields = os.read(fd, 64).split()
                    ended = os.fstat(fd).st_mtime
                finally:
                    os.close(fd)
                code, stopped = int(fields[0]), fields[1:2] == [b"1"]
                if not -255 <= code <= 255:
                    raise ValueError(f"exit code {code}")
                rec.update(exit_code=code, stopped_by_launcher=stopped, ended_t=ended,
                           ended=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ended)))
            except (OSError, ValueError, IndexError) as exc:
                self.log(f"rank {rank}: no usable {rank_exit_name(rank)} ({exc}): recorded as stopped")
            out.append(rec)
        failed = sorted((r for r in out if r["exit_code"] not in (0, None) and not r["stopped_by_launcher"]),
                        key=lambda r: r["ended_t"])
        if failed:
            failed[0]["first_failure"] = True
        return out

    def report(self, signalled):
        if self.mpi_mode:
            return self.report_mpi(signalled)
        ranks = sorted(self.procs.values(), key=lambda r: r["rank"])
        failed = [r for r in ranks if r.get("first_failure")]
        doc = RankReport(
            node_rank=self.spec.node_rank, stopped=self.stopping, signalled=signalled,
            first_failure=failed[0]["rank"] if failed else None,
            ranks=[RankRecord(r["rank"], r["local_rank"], r["pid"], r["exit_code"], r.get("started"), r.get("ended"),
                              r.get("duration_s"), bool(r.get("stopped_by_launcher"))) for r in ranks],
            reaped=list(self.reaped), mode="node" if self.node_mode else "ranks")
        write_json_atomic(os.path.join(self.out_dir, RANKS_FILE), doc.to_dict())
        if signalled:
            return LAUNCHER_SIGNALLED_EXIT
        return 0 if all(r["exit_code"] == 0 for r in ranks) else 1


    def report_mpi(self, signalled):
        """ranks.json of a node of an MPI job. Node 0: failed when mpirun failed; a peer: failed only when one of
        its ranks did (the driver's SIGTERM is how a peer's round ends)."""
        ranks = self.mpi_records()
        failed = [r for r in ranks if r.get("first_failure")]
        mpirun = list(self.procs.values())
        doc = RankReport(
            node_rank=self.spec.node_rank, stopped=None if self.mpi_peer else self.stopping,
            signalled=signalled and not self.mpi_peer, first_failure=failed[0]["rank"] if failed else None,
            ranks=[RankRecord(r["rank"], r["local_rank"], None, r["exit_code"], None, r.get("ended"), None,
                              bool(r["stopped_by_launcher"])) for r in ranks],
            reaped=list(self.reaped), mode="mpi")
        write_json_atomic(os.path.join(self.out_dir, RANKS_FILE), doc.to_dict())
        if self.mpi_peer:
            return 1 if failed else 0
        if signalled:
            return LAUNCHER_SIGNALLED_EXIT
        if mpirun and all(r["exit_code"] == 0 for r in mpirun):
            return 0
        if not failed:      # mpirun failed before any rank of this node did: its own words, on this output
            tail = mpirun_tail(os.path.join(self.out_dir, NODE_COMMAND_LOG))
            _say(f"mpirun failed ({', '.join(str(r['exit_code']) for r in mpirun) or 'not started'}); the end of "
                 f"{NODE_COMMAND_LOG}:\n" + "\n".join(tail))
        return 1


def mpirun_tail(path, lines=10, tail=16 * 1024):
    """The last ``lines`` non-empty lines of mpirun's output (its message banners of dashes left out)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        os.lseek(fd, max(0, os.fstat(fd).st_size - tail), os.SEEK_SET)
        text = os.read(fd, tail).decode(errors="replace")
    except OSError:
        return []
    finally:
        os.close(fd)
    keep = [ln for ln in text.splitlines() if ln.strip() and set(ln.strip()) != {"-"}
            and not ln.startswith("flagperf mpi (")]
    return ["".join(c if c.isprintable() else "?" for c in ln)[:300] for ln in keep[-lines:]]


def latest_step(path, tail=STEP_TAIL_BYTES):
    """step_fields of the last STEP event in the last ``tail`` bytes of a log (a regular file only), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size = st.st_size
        os.lseek(fd, max(0, size - tail), os.SEEK_SET)
        data = os.read(fd, tail)
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in reversed(data.decode(errors="replace").splitlines()):
        if '"STEP"' in line:
            record = parse_perflog_line(line)
            if record is not None and record.get("event") == "STEP":
                return step_fields(record)
    return None


def watch_parent(launcher, parent):
    """Stop the ranks if the process that started the launcher goes away (driver or ssh session died)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            launcher.stop_all("the launcher's parent process exited")
            return


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help=f"path of {LAUNCH_FILE}")
    args = ap.parse_args(argv)
    try:
        spec = read_json_file(args.spec, LaunchSpec)
        os.makedirs(spec.out_dir, exist_ok=True)
    except (OSError, ContractError) as exc:
        print(f"node_launcher: bad spec: {exc}", file=sys.stderr)
        return LAUNCHER_BAD_SPEC_EXIT
    try:
        launcher = Launcher(spec)
    except OSError as exc:
        _say(f"node_launcher: cannot write in {spec.out_dir}: {exc}")
        return LAUNCHER_CANNOT_WRITE_EXIT
    signalled = []

    def on_signal(signum, _frame):
        signalled.append(signum)
        # A second signal means "now": the driver is in a hurry (it was interrupted), so no grace period.
        sig = signal.SIGKILL if len(signalled) > 1 else signal.SIGTERM
        launcher.stop_all(f"launcher received {signal.Signals(signum).name}", sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    threading.Thread(target=watch_parent, args=(launcher, os.getppid()), daemon=True).start()
    threading.Thread(target=launcher.watch_steps, daemon=True).start()
    try:
        launcher.start()
    except OSError as exc:
        launcher.log(f"cannot start a rank: {exc}")
        launcher.stop_all("a rank could not be started")
        launcher.wait()
        launcher.reap()
        try:
            launcher.report(False)
        except OSError as exc2:
            _say(f"node_launcher: cannot start a rank ({exc}) nor write {RANKS_FILE}: {exc2}")
            return LAUNCHER_CANNOT_WRITE_EXIT
        _say(f"node_launcher: cannot start a rank: {exc}")
        return 1
    launcher.wait()
    launcher.reap()
    try:
        code = launcher.report(bool(signalled))
    except OSError as exc:
        _say(f"node_launcher: cannot write {RANKS_FILE} in {spec.out_dir}: {exc}")
        return LAUNCHER_CANNOT_WRITE_EXIT
    launcher.log(f"launcher done, exit status {code}")
    return code


def _say(text):
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:         # stderr is a file on the same full disk
        pass


if __name__ == "__main__":
    status = main()
    try:        # a full disk under stdout must not turn the status into Python's 120
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        pass
    os._exit(status)
