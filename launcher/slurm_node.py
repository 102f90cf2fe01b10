#!/usr/bin/env python3
"""flagperf under Slurm: the node side of one job step, run once per node by ``srun --ntasks-per-node=1``.

Runs ON the allocated node (stdlib and flagperf_contract only). The driver wrote one spec per node rank
(``nodes`` of the specs file) before it knew which nodes Slurm would give: host names appear in it as
placeholders (``tokens``, ``{slurm-node<k>}`` -> the k-th host of the allocation) and, when MASTER_PORT is
derived from the job id, the port as ``port_placeholder``. This program picks the spec of ``SLURM_NODEID``,
fills both in from ``FLAGPERF_SLURM_HOSTS`` (the batch script's ``scontrol show hostnames $SLURM_JOB_NODELIST``)
and ``SLURM_JOB_ID``, creates the node directory, and then

* ``launch``: writes the node's files (launch.json, case_config.json), runs the node launcher with its output
  in the node directory, and records the launcher's exit status in the node directory (``exit_file``) before
  exiting with it;
* ``monitor``: runs the monitor in place of itself (exec), its output in the node directory.

Stopping: Slurm signals every process of a step. The node launchers are stopped with SIGURG to the step, which
ranks ignore by default: this program then sends SIGTERM to its node launcher only, which stops its ranks with
its grace period and records them (a second SIGURG, a second later or more: SIGTERM again, which the launcher
takes as "now"). The driver sends it; so does this program when its own launcher failed, so that the other
nodes stop at once even when the driver is gone.

Exit status: the launcher's; 2 for a bad spec or environment (the reason on stderr).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from flagperf_contract import slurm_derived_port, substitute_placeholders, write_atomic  # noqa: E402

SPECS_SCHEMA = "flagperf.slurm-nodes/1"
BAD_EXIT = 2
URG_SAME_S = 1.0                        # SIGURGs closer than this are one stop request
STOP_POLL_S = 0.05                      # how often a stop request waits for the launcher to be ready for it
MAX_SPECS_BYTES = 64 * 1024 * 1024
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")


class SpecError(Exception):
    pass


def node_spec(specs, node_id, hosts, job_id):
    """The spec of node ``node_id`` with its placeholders filled in (SpecError says what is wrong)."""
    if not isinstance(specs, dict) or specs.get("schema") != SPECS_SCHEMA:
        raise SpecError("not a flagperf Slurm specs file (schema %s)" % SPECS_SCHEMA)
    nodes = specs.get("nodes")
    if not isinstance(nodes, list) or not 0 <= node_id < len(nodes):
        raise SpecError("no spec for SLURM_NODEID %d (the job has specs for %s node(s))"
                        % (node_id, len(nodes) if isinstance(nodes, list) else 0))
    for h in hosts:
        if not _HOST.fullmatch(h):
            raise SpecError("%r is not a host name" % h)
    table = {}
    for token, index in (specs.get("tokens") or {}).items():
        if not isinstance(index, int) or not 0 <= index < len(hosts):
            raise SpecError("placeholder %s names host %r of an allocation of %d" % (token, index, len(hosts)))
        table[token] = hosts[index]
    placeholder = specs.get("port_placeholder")
    port = (str(placeholder), str(slurm_derived_port(job_id))) if placeholder else None
    spec = substitute_placeholders(nodes[node_id], table, port)
    node_dir = spec.get("node_dir")
    if not isinstance(node_dir, str) or not node_dir.startswith("/") or "/../" in node_dir + "/":
        raise SpecError("node_dir must be an absolute path, got %r" % (node_dir,))
    for key in ("launcher_argv", "monitor_argv"):
        argv = spec.get(key)
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise SpecError("%s must be a non-empty list of strings" % key)
    return spec


def make_node_dir(path):
    """Create the node directory; refuse one that is a symlink (nothing written through a link)."""
    os.makedirs(path, exist_ok=True)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
        raise SpecError("%s is not a directory of this user (a symlink?); not writing there" % path)


def write_file(directory, name, data):
    """Write ``name`` in ``directory`` atomically, never through a symlink."""
    if "/" in name or name in ("", ".", ".."):
        raise SpecError("bad file name %r" % name)
    write_atomic(os.path.join(directory, name), data, mode=0o644)


def redirect_output(path):
    """stdout and stderr of this process (and what it starts) appended to ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def load(specs_path):
    node_id = int(os.environ["SLURM_NODEID"])
    job_id = int(os.environ["SLURM_JOB_ID"])
    hosts = [h for h in os.environ.get("FLAGPERF_SLURM_HOSTS", "").split(",") if h]
    if not hosts:
        raise SpecError("FLAGPERF_SLURM_HOSTS is empty (the batch script sets it)")
    me = os.environ.get("SLURMD_NODENAME", "")
    if node_id < len(hosts) and me and hosts[node_id] != me:
        raise SpecError("SLURM_NODEID %d is %s, but the allocation's host %d is %s"
                        % (node_id, me, node_id, hosts[node_id]))
    with open(specs_path, "rb") as f:
        raw = f.read(MAX_SPECS_BYTES + 1)
    if len(raw) > MAX_SPECS_BYTES:
        raise SpecError("%s is larger than %d bytes" % (specs_path, MAX_SPECS_BYTES))
    specs = json.loads(raw)
    return specs, node_spec(specs, node_id, hosts, job_id)


def launch(specs, spec):
    node_dir = spec["node_dir"]
    make_node_dir(node_dir)
    redirect_output(os.path.join(node_dir, specs.get("out_file") or "launcher.out.log"))
    for name, content in (spec.get("files") or {}).items():
        write_file(node_dir, name, json.dumps(content, indent=1).encode())
    stops = []          # stop requests (SIGURG), and SIGTERMs Slurm sent this step
    pending = []        # stop requests not yet passed on: the launcher was not ready for them
    last_urg = [0.0]
    launcher_log = os.path.join(node_dir, spec.get("launcher_log") or "launcher.log")

    def on_stop(signum, _frame):
        now = time.monotonic()
        if now - last_urg[0] < URG_SAME_S:      # the same stop, asked by the driver and by another node
            return
        last_urg[0] = now
        stops.append(signum)
        pending.append(signum)

    signal.signal(signal.SIGURG, on_stop)
    # Slurm sends SIGTERM to every process of the step (time limit, scancel): the launcher gets its own.
    signal.signal(signal.SIGTERM, lambda *_: stops.append(signal.SIGTERM))
    t0 = time.time()
    child = subprocess.Popen(spec["launcher_argv"], stdin=subprocess.DEVNULL)
    while True:
        try:
            code = child.wait(timeout=STOP_POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        # The launcher handles SIGTERM once it writes its log (before that, SIGTERM would kill it unrecorded).
        if pending and launcher_ready(launcher_log):
            pending.pop(0)
            child.send_signal(signal.SIGTERM)
    record = {"exit_code": code, "node": os.environ.get("SLURMD_NODENAME", ""),
              "node_id": int(os.environ["SLURM_NODEID"]), "job_id": os.environ.get("SLURM_JOB_ID"),
              "started": t0, "ended": time.time(),
              "signals": [signal.Signals(s).name for s in stops]}
    try:
        write_file(node_dir, specs.get("exit_file") or "slurm_exit.json", json.dumps(record).encode())
    except OSError as exc:      # a full disk: the launcher said so in its own files; keep its status
        print("slurm_node: cannot record the exit status in %s: %s" % (node_dir, exc), file=sys.stderr)
    if code != 0 and not stops:
        stop_step()
    return code if code >= 0 else 128 - code


def launcher_ready(path):
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def stop_step():
    """This node failed: ask every node of the step to stop its launcher (SIGURG to the step), so that the job ends
    promptly and gracefully even without the driver."""
    step = "%s.%s" % (os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURM_STEP_ID", ""))
    try:
        subprocess.run(["scancel", "--signal=URG", step], stdin=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        print("slurm_node: cannot ask the other nodes to stop (scancel %s): %s" % (step, exc), file=sys.stderr)


def monitor(specs, spec):
    node_dir = spec["node_dir"]
    make_node_dir(node_dir)
    redirect_output(os.path.join(node_dir, specs.get("monitor_out_file") or "monitor.out.log"))
    argv = spec["monitor_argv"]
    os.execvp(argv[0], argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("launch", "monitor"):
        print("usage: slurm_node.py launch|monitor SPECS_FILE", file=sys.stderr)
        return BAD_EXIT
    try:
        specs, spec = load(argv[1])
        if argv[0] == "launch":
            return launch(specs, spec)
        monitor(specs, spec)
        return 0
    except (SpecError, OSError, KeyError, ValueError) as exc:
        print("slurm_node %s on %s: %s" % (argv[0], os.environ.get("SLURMD_NODENAME", "?"), exc), file=sys.stderr)
        return BAD_EXIT


if __name__ == "__main__":
    sys.exit(main())
