"""The ``slurm`` backend's pure parts: the sbatch command line, the batch script, the node specs, and the reading
of what ``sbatch``, ``squeue``, ``sinfo`` and ``scontrol`` print. No I/O: unit-tested on their own.

One case round is one job (an ``each`` case: one job per node). The batch script runs two steps on every node
of the allocation, one task per node: the monitor (``srun --overlap``, in the background) and the node launcher
(``launcher/slurm_node.py``, which fills the node's spec in and starts ``launcher/node_launcher.py``). When the
launchers are done it stops the monitors, and with node-local result directories keeps the allocation until
the driver has copied them back (it cancels the job then). Its progress is in the job's comment
(``flagperf:launchers=<status>``, then ``flagperf:done=<status>``), which ``squeue`` shows the driver.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from flagperf.options.slurm import parse_time
from flagperf_contract import substitute_placeholders

SPECS_SCHEMA = "flagperf.slurm-nodes/1"
STEP_LAUNCHER = "flagperf-launcher"
STEP_MONITOR = "flagperf-monitor"
COMMENT_LAUNCHERS = "flagperf:launchers="
COMMENT_DONE = "flagperf:done="
SPECS_END = "FLAGPERF_SPECS_END"
SQUEUE_FORMAT = "%i|%T|%r|%N|%k"     # job id, state, reason, nodes, comment (last: it may hold anything)

# squeue's states of a job that is over (with --states=all, until MinJobAge purges it)
ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
         "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}
WAITING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
# sinfo node states that cannot run a job now or soon (a trailing * or ~ etc. is stripped first)
UNUSABLE = {"down", "drained", "draining", "drain", "fail", "failing", "future", "inval", "maint", "powered_down",
            "power_down", "powering_down", "unknown", "not_responding", "reboot_issued", "reboot_requested"}


@dataclass(frozen=True)
class JobInfo:
    job_id: int
    state: str
    reason: str
    nodelist: str
    comment: str

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    def phase(self, prefix: str) -> int | None:
        """The batch script's status recorded in the comment after ``prefix`` (None: not there yet)."""
        for part in self.comment.split(","):
            if part.startswith(prefix):
                try:
                    return int(part[len(prefix):])
                except ValueError:
                    return None
        return None


def sbatch_argv(opts, *, nnodes: int, job_name: str, time: str, output: str, chdir: str, script: str,
                nodelist: str | None = None) -> list:
    """The sbatch command line of one job (options from the cluster config, SLURM_ARGS last but the script)."""
    argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--nodes={nnodes}", "--ntasks-per-node=1",
            f"--time={time}", f"--output={output}", f"--chdir={chdir}"]
    if opts.partition:
        argv.append(f"--partition={opts.partition}")
    if opts.account:
        argv.append(f"--account={opts.account}")
    if opts.qos:
        argv.append(f"--qos={opts.qos}")
    if opts.gpus_per_node:
        argv.append(f"--gpus-per-node={opts.gpus_per_node}")
    if opts.exclusive:
        argv.append("--exclusive")
    if nodelist:
        argv.append(f"--nodelist={nodelist}")
    argv += list(opts.args)
    argv.append(script)
    return argv


class NodeWord(str):
    """A word of the batch script's own fixed text that the shell expands on the node (a ``${SLURM_...}``
    variable), written double-quoted as it is. Only this module makes them; every other word, config values
    included, is quoted once with shlex.quote, whatever it holds."""


JOB_NODES = NodeWord("--nodes=${SLURM_JOB_NUM_NODES}")     # every node of the job, as srun counts them


def step_argv(name: str, python: str, wrapper: str, mode: str, specs: str, options=()) -> list:
    """srun of one step: one task on every node of the job, beside the other steps (--overlap). ``options``: more
    srun options (a container plug-in's, e.g. pyxis --container-image)."""
    return ["srun", "--overlap", JOB_NODES, "--ntasks-per-node=1", f"--job-name={name}",
            "--kill-on-bad-exit=0", *options, python, wrapper, mode, specs]


def pyxis_options(image: str, mounts, workdir: str) -> list:
    """The launcher step's srun options for pyxis: every task (slurm_node.py, the node launcher, the ranks) runs in
    ``image``, with ``mounts`` ((source, target), ...) at the same paths. ValueError: a path pyxis cannot name
    (its mount list is split at ',' and ':')."""
    for a, b in mounts:
        if any(c in a + b for c in ",:"):
            bad = a if "," in a or ":" in a else b
            raise ValueError(f"srun --container-mounts cannot name a path holding ',' or ':': {bad}")
    return [f"--container-image={image}", "--container-mounts=" + ",".join(f"{a}:{b}" for a, b in mounts),
            f"--container-workdir={workdir}"]


def ch_run_argv(image: str, mounts, workdir: str) -> list:
    """The prefix that runs a command in a Charliecloud image directory with ``mounts`` bound. ValueError: a path
    ch-run -b cannot name (SOURCE:TARGET is split at ':')."""
    argv = ["ch-run"]
    for a, b in mounts:
        if ":" in a + b:
            raise ValueError(f"ch-run -b cannot name a path holding ':': {a if ':' in a else b}")
        argv += ["-b", a if a == b else f"{a}:{b}"]
    return argv + ["-c", workdir, image, "--"]


def output_option(folder: str) -> tuple:
    """(sbatch --output value, the output file's name in ``folder``, "%j" standing for the job id) of a job whose
    output goes to ``folder``. sbatch expands %-patterns in the value, so a '%' of the folder is written '%%'; a
    backslash anywhere in it turns every pattern off and escapes the next character, so then the folder's
    backslashes are doubled and the file is named without the job id."""
    if "\\" in folder:
        return folder.replace("\\", "\\\\") + "/job.out", "job.out"
    return folder.replace("%", "%%") + "/job-%j.out", "job-%j.out"


def _sh(argv) -> str:
    """A command line for the script: every word quoted once (shlex.quote), except the script's own NodeWords,
    which the shell on the node expands."""
    return " ".join(f'"{a}"' if type(a) is NodeWord else shlex.quote(a) for a in argv)


def _comment(text: str) -> str:
    """``text`` as one comment line of the script (a line break or another control character shown as '?')."""
    return "".join(c if c.isprintable() else "?" for c in text)


def batch_script(*, title: str, python: str, wrapper: str, specs: str, inline_specs: str | None = None,
                 hold_s: int = 0, launch_python: str | None = None, launch_options=(), set_user: bool = False) -> str:
    """The batch script of one job. ``inline_specs``: node-local result directories; the specs travel inside
    the script and sbcast copies them to every node (``specs`` is then the node-local path). ``hold_s``: keep
    the allocation that long after the launchers for the driver's copy back (it cancels the job when done).
    ``launch_python``/``launch_options``: the launcher step's interpreter and extra srun options (pyxis: both
    inside the image). ``set_user``: make sure $USER is set (ch-run needs it)."""
    lines = [
        "#!/bin/bash",
        f"# {_comment(title)}",
        "# Written by flagperf (docs/slurm.md); the sbatch options are on its command line (flagperf_run.log).",
        "set -u",
        "FLAGPERF_SLURM_HOSTS=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | paste -sd, -) || exit 3",
        "export FLAGPERF_SLURM_HOSTS",
    ]
    if set_user:
        lines.append("export USER=\"${USER:-$(id -un)}\"")
    if inline_specs is not None:
        if "\n" in inline_specs or "\r" in inline_specs or inline_specs.strip() == SPECS_END:
            raise ValueError("inline specs must be one line of JSON")
        folder = specs.rsplit("/", 1)[0] or "/"
        lines += [
            f"specs_here={shlex.quote(specs)}.$SLURM_JOB_ID",
            _sh(["srun", "--overlap", JOB_NODES, "--ntasks-per-node=1", "mkdir", "-p", "--", folder])
            + " || exit 3",
            f"cat > \"$specs_here\" <<'{SPECS_END}'",
            inline_specs,
            SPECS_END,
            f"sbcast --force \"$specs_here\" {shlex.quote(specs)} || exit 3",
        ]
    lines += [
        _sh(step_argv(STEP_MONITOR, python, wrapper, "monitor", specs)) + " &",
        "monitors=$!",
        _sh(step_argv(STEP_LAUNCHER, launch_python or python, wrapper, "launch", specs, launch_options)),
        "status=$?",
        f"scontrol update JobId=\"$SLURM_JOB_ID\" Comment=\"{COMMENT_LAUNCHERS}$status\"",
        "scancel --signal=TERM \"$SLURM_JOB_ID\"      # the monitors: the only steps left",
        "( sleep 30; kill \"$monitors\" 2>/dev/null ) &",
        "watchdog=$!",
        "wait \"$monitors\"",
        "kill \"$watchdog\" 2>/dev/null",
        f"scontrol update JobId=\"$SLURM_JOB_ID\" Comment=\"{COMMENT_LAUNCHERS}$status,{COMMENT_DONE}$status\"",
    ]
    if hold_s > 0:
        lines.append(f"sleep {int(hold_s)}       # the driver copies the node directories back, then cancels the job")
    lines.append("exit \"$status\"")
    return "\n".join(lines) + "\n"


def specs_document(nodes: list, tokens: dict, *, port_placeholder: int | None, exit_file: str, out_file: str,
                   monitor_out_file: str) -> dict:
    """What launcher/slurm_node.py reads: one entry per node of the job (in SLURM_NODEID order)."""
    return {"schema": SPECS_SCHEMA, "tokens": dict(tokens),
            "port_placeholder": str(port_placeholder) if port_placeholder else None,
            "exit_file": exit_file, "out_file": out_file, "monitor_out_file": monitor_out_file, "nodes": nodes}


def specs_json(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


substitute = substitute_placeholders     # the node (launcher/slurm_node.py) fills them in with the same


# -- what the commands print ---------------------------------------------------------------------------------------

def parse_sbatch(stdout: str) -> int:
    """The job id of ``sbatch --parsable`` ("123" or "123;cluster"); ValueError when there is none."""
    text = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    head = text.split(";", 1)[0].strip()
    if not head.isdigit():
        raise ValueError(f"sbatch printed no job id: {stdout.strip()[:200]!r}")
    return int(head)


def parse_squeue(stdout: str) -> dict:
    """``squeue -h -o SQUEUE_FORMAT`` -> {job id: JobInfo}; lines that are not a job (array tasks, noise) are
    skipped."""
    jobs = {}
    for line in stdout.splitlines():
        parts = line.split("|", 4)
        if len(parts) != 5 or not parts[0].strip().isdigit():
            continue
        jid, state, reason, nodes, comment = (p.strip() for p in parts)
        state = state.upper().split()[0] if state else "UNKNOWN"
        jobs[int(jid)] = JobInfo(int(jid), state, "" if reason in ("None", "(null)") else reason,
                                 "" if nodes in ("(null)", "None") else nodes,
                                 "" if comment in ("(null)", "None") else comment)
    return jobs


def parse_steps(stdout: str) -> dict:
    """``squeue -h -s -o "%i|%j"`` -> {step name: "job.step"} (the last step of a name wins)."""
    steps = {}
    for line in stdout.splitlines():
        step, _, name = line.strip().partition("|")
        if re.fullmatch(r"\d+\.\d+", step):
            steps[name.strip()] = step
    return steps


def parse_keyvalues(line: str) -> dict:
    """One record of ``scontrol show ... -o`` (``Key=Value Key=Value ...``) -> {Key: Value}."""
    out: dict = {}
    for m in re.finditer(r"(\w+)=(\S*)", line):
        out.setdefault(m.group(1), m.group(2))
    return out


def parse_partitions(stdout: str) -> list:
    """``scontrol show partition -o`` -> one {Key: Value} per partition."""
    return [parse_keyvalues(line) for line in stdout.splitlines() if line.startswith("PartitionName=")]


def parse_sinfo_nodes(stdout: str) -> list:
    """``sinfo -h -N -o "%N|%T|%G"`` -> [(node, state, gres)], each node once (a node in several partitions is
    listed once per partition)."""
    seen, out = set(), []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0] or parts[0] in seen:
            continue
        seen.add(parts[0])
        out.append((parts[0], parts[1].lower(), parts[2]))
    return out


def usable_state(state: str) -> bool:
    """A node in this sinfo state runs jobs now or once its current jobs end (idle, mixed, allocated, ...)."""
    base = state.rstrip("*~#!%$@^-+").lower()
    return bool(base) and base not in UNUSABLE and not any(base.startswith(u) for u in ("drain", "down", "fail"))


def gres_gpus(gres: str) -> int | None:
    """GPUs in a node's gres string ("gpu:8", "gpu:h100:8(S:0-1)", "gpu:a100:4,nic:1"); None: no GPU gres."""
    total = None
    for item in re.split(r",(?![^()]*\))", gres or ""):
        m = re.fullmatch(r"gpu(?::[^:(]+)?:(\d+)(?:\(.*\))?", item.strip())
        if m:
            total = (total or 0) + int(m.group(1))
    return total


def time_limit_seconds(value: str) -> int | None:
    """Seconds of a partition's MaxTime (UNLIMITED, INFINITE, D-HH:MM:SS, HH:MM:SS, minutes); None: no limit."""
    if not value or value.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    return parse_time(value)


def scheduler_end(info: JobInfo | None) -> tuple | None:
    """(how the round's wait ends, why) when Slurm itself ended the job (its time limit, a node failure,
    preemption, a cancel from outside); None when the job ended by its own steps or is still running."""
    if info is None:
        return None
    state, reason = info.state, info.reason
    jid = info.job_id
    if state == "TIMEOUT" or reason == "TimeLimit":
        return "timeout", f"Slurm job {jid} reached its time limit (JobState {state}, reason TimeLimit)"
    if state == "NODE_FAIL" or reason in ("NodeDown", "NodeFail"):
        return "host_lost", f"Slurm job {jid} lost a node (JobState {state}, reason {reason or '-'})"
    if state in ("PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"):
        return "error", f"Slurm ended job {jid}: JobState {state}" + (f", reason {reason}" if reason else "")
    return None
