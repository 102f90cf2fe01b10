#!/usr/bin/env python3
"""flagperf's MPI starter: node 0's node command in launch mode "mpi" (docs/benchmarks.md, "launch: mpi").

Runs ON node 0 (stdlib only), started by the node launcher. ``--job`` is a JSON object written by the driver:

    {"contexts": [{"host", "slots", "cwd", "node_dir", "node_rank", "argv"}, ...],   node 0 first
     "env": [names exported to every rank], "shell_config": "<ssh_config text>" or null, "mpi_args": [...]}

It finds ``mpirun`` (Open MPI) or ``mpiexec`` (MPICH's Hydra) on node 0, writes the cluster's SSH settings as an
ssh_config file into node 0's directory (``mpi_ssh_config``: host keys checked, BatchMode), prints the mpirun
command line it runs (one JSON line), and execs it: one MPMD app context per node, so that every node's ranks
start in that node's case folder with that node's argv, in flagperf's rank order (node i holds ranks
i*nproc .. i*nproc+nproc-1). Every rank runs under a small sh wrapper that exports RANK, LOCAL_RANK and NODE_RANK
from the MPI library's variables and FLAGPERF_MPI_NODE_DIR (the node directory: that node's launcher ends whatever
still carries it when the round is over), sends the rank's output to ``<node dir>/rank<R>.out.log`` on its own
host, and writes ``<node dir>/rank<R>.exit`` (``<exit code> <stopped>``) when the rank ends.

Open MPI: ``--mca plm_rsh_agent ssh --mca plm_rsh_args "-F <config>"`` (no tree spawn: only node 0 connects),
``-x NAME`` in every app context, ``--allow-run-as-root`` when node 0's user is root. MPICH: ``-launcher ssh
-launcher-exec <node dir>/mpi_ssh`` (a two-line script running ``ssh -F <config>``), ``-genv NAME VALUE``.
Exit status: mpirun's; 127 when neither is installed; 2 for a bad job description.
"""

import json
import os
import shutil
import subprocess
import sys

SSH_CONFIG = "mpi_ssh_config"
SSH_SCRIPT = "mpi_ssh"
NOT_FOUND_EXIT = 127
BAD_JOB_EXIT = 2

# Every rank: export RANK/LOCAL_RANK/NODE_RANK, output to <node dir>/rank<R>.out.log, run the argv in the
# background so that a SIGTERM from mpirun reaches it, then record "<exit code> <stopped>" in rank<R>.exit.
# A rank ended by SIGHUP, SIGINT or SIGTERM (129, 130, 143) was stopped: that is how mpirun and its daemons end
# the other ranks of a job (they may signal the rank before its wrapper); a rank that fails on its own exits with
# its code or dies of another signal (SIGSEGV, SIGABRT, SIGKILL by the OOM killer).
# Arguments: node dir, node rank, argv...
RANK_WRAPPER = "; ".join([
    'd=$1; nr=$2; shift 2',
    'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-}}}',
    'case $r in ""|*[!0-9]*) echo "flagperf: no MPI rank in the environment (OMPI_COMM_WORLD_RANK, PMI_RANK)" >&2;'
    ' exit 97;; esac',
    'lr=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${PMI_LOCAL_RANK:-0}}}',
    'export RANK="$r" LOCAL_RANK="$lr" NODE_RANK="$nr" FLAGPERF_MPI_NODE_DIR="$d"',
    'exec >>"$d/rank$r.out.log" 2>&1 </dev/null',
    't=0',
    '"$@" & c=$!',
    'trap \'t=1; kill -TERM "$c" 2>/dev/null\' TERM INT HUP',
    'wait "$c"; s=$?',
    'while kill -0 "$c" 2>/dev/null; do wait "$c"; s=$?; done',
    'case $s in 129|130|143) t=1;; esac',
    'echo "$s $t" >"$d/rank$r.exit"',
    'exit "$s"',
])


class JobError(ValueError):
    pass


def read_job(text):
    try:
        job = json.loads(text)
    except ValueError as exc:
        raise JobError(f"--job is not JSON: {exc}") from None
    if not isinstance(job, dict) or not isinstance(job.get("contexts"), list) or not job["contexts"]:
        raise JobError("--job: expected an object with a non-empty 'contexts' list")
    for i, c in enumerate(job["contexts"]):
        ok = isinstance(c, dict) and all(isinstance(c.get(k), str) and c.get(k) for k in ("host", "cwd", "node_dir")) \
            and isinstance(c.get("slots"), int) and c["slots"] > 0 and isinstance(c.get("node_rank"), int) \
            and isinstance(c.get("argv"), list) and c["argv"] and all(isinstance(a, str) for a in c["argv"])
        if not ok:
            raise JobError(f"--job: contexts[{i}]: expected host, slots, cwd, node_dir, node_rank and argv")
    for key in ("env", "mpi_args"):
        if not isinstance(job.get(key, []), list) or not all(isinstance(a, str) for a in job.get(key, [])):
            raise JobError(f"--job: {key}: expected a list of strings")
    if job.get("shell_config") is not None and not isinstance(job["shell_config"], str):
        raise JobError("--job: shell_config: expected a string or null")
    return job


def flavor(program):
    """"openmpi" or "mpich" from ``<program> --version`` (Intel MPI is Hydra too); None when neither says so."""
    try:
        out = subprocess.run([program, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60, check=False).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "Open MPI" in out or "OpenRTE" in out:
        return "openmpi"
    if "HYDRA" in out or "Hydra" in out or "MPICH" in out or "Intel(R) MPI" in out:
        return "mpich"
    return None


def find_mpirun():
    """(path, flavor) of node 0's MPI starter: mpirun, else mpiexec; (None, None) when there is none."""
    for name in ("mpirun", "mpiexec"):
        path = shutil.which(name)
        if path:
            kind = flavor(path)
            if kind:
                return path, kind
    return None, None


def write_private(path, text, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def mpirun_argv(job, program, kind, node_dir, env, is_root):
    """The mpirun (or mpiexec) argv for ``job``: global options, then one app context per node."""
    ssh_cfg = os.path.join(node_dir, SSH_CONFIG)
    contexts = []
    for c in job["contexts"]:
        wrapped = ["sh", "-c", RANK_WRAPPER, "flagperf-rank", c["node_dir"], str(c["node_rank"]), *c["argv"]]
        if kind == "openmpi":
            exports = [x for name in job.get("env", []) if name in env for x in ("-x", name)]
            contexts.append(["-np", str(c["slots"]), "--host", f"{c['host']}:{c['slots']}", "--wdir", c["cwd"],
                             *exports, *wrapped])
        else:
            contexts.append(["-n", str(c["slots"]), "-hosts", c["host"], "-wdir", c["cwd"], *wrapped])
    if kind == "openmpi":
        argv = [program]
        if is_root:
            argv.append("--allow-run-as-root")
        if job.get("shell_config") is not None:
            argv += ["--mca", "plm_rsh_agent", "ssh", "--mca", "plm_rsh_args", f"-F {ssh_cfg}"]
        argv += ["--mca", "plm_rsh_no_tree_spawn", "1"]
    else:
        argv = [program]
        if job.get("shell_config") is not None:
            argv += ["-launcher", "ssh", "-launcher-exec", os.path.join(node_dir, SSH_SCRIPT)]
        argv += [x for name in job.get("env", []) if name in env for x in ("-genv", name, env[name])]
    argv += job.get("mpi_args", [])
    for i, ctx in enumerate(contexts):
        argv += ([":"] if i else []) + ctx
    return argv


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--job":
        print("usage: mpi_launch.py --job <json>", file=sys.stderr)
        return BAD_JOB_EXIT
    try:
        job = read_job(args[1])
    except JobError as exc:
        print(f"mpi_launch: {exc}", file=sys.stderr)
        return BAD_JOB_EXIT
    node_dir = job["contexts"][0]["node_dir"]
    program, kind = find_mpirun()
    if program is None:
        print("mpi_launch: launch: mpi needs mpirun (Open MPI) or mpiexec (MPICH) on node 0's PATH; found neither "
              "(Debian/Ubuntu: apt-get install openmpi-bin)", file=sys.stderr, flush=True)
        return NOT_FOUND_EXIT
    if job.get("shell_config") is not None:
        if any(c.isspace() for c in node_dir):
            print(f"mpi_launch: the node directory {node_dir!r} holds white space: mpirun's ssh options cannot "
                  f"name a file there", file=sys.stderr, flush=True)
            return BAD_JOB_EXIT
        write_private(os.path.join(node_dir, SSH_CONFIG), job["shell_config"])
        write_private(os.path.join(node_dir, SSH_SCRIPT),
                      "#!/bin/sh\nexec ssh -F '%s' \"$@\"\n" % os.path.join(node_dir, SSH_CONFIG), 0o700)
    run = mpirun_argv(job, program, kind, node_dir, os.environ, os.geteuid() == 0)
    print("flagperf mpi (%s): %s" % (kind, json.dumps(run)), flush=True)
    try:
        os.execv(program, run)
    except OSError as exc:
        print(f"mpi_launch: cannot run {program}: {exc}", file=sys.stderr, flush=True)
        return NOT_FOUND_EXIT


if __name__ == "__main__":
    sys.exit(main())
