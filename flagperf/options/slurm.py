"""The ``slurm`` backend's cluster keys: validated at load, with the rest of the cluster config.

Light on purpose (dataclasses and regular expressions): ``flagperf.config`` calls :func:`load_options` through
the backend registry without importing the backend itself. Every problem is one line naming the file, the
line, the key and what was expected, like every other key.

The MASTER_PORT scheme of a job (:func:`derived_port`) is the contract's (``flagperf_contract``), which
``launcher/slurm_node.py`` uses on the nodes.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import ClassVar

from flagperf.options.base import BackendOptions, HostSpec
from flagperf.options.registry import register
from flagperf.checker import resolve
from flagperf_contract import SLURM_PORT_BASE, SLURM_PORT_SPAN, slurm_derived_port

SLURM_KEYS = ("SLURM_PARTITION", "SLURM_ACCOUNT", "SLURM_QOS", "SLURM_TIME", "SLURM_GPUS_PER_NODE",
              "SLURM_EXCLUSIVE", "SLURM_ARGS", "SLURM_CONF", "SLURM_PENDING_TIMEOUT", "SLURM_SHARED_FS",
              "SLURM_CONTAINER_IMAGE", "SLURM_CONTAINER_MOUNTS", "SLURM_CONTAINER_PYTHON", "SLURM_DRAIN_REJECTED")
CONTAINER_RUNTIMES = ("charliecloud", "pyxis")     # RUNTIME values that run the node launcher in an image

DEFAULT_PENDING_TIMEOUT_S = 3600.0
MAX_PENDING_TIMEOUT_S = 30 * 24 * 3600.0
TIME_MARGIN_S = 300.0           # SLURM_TIME unset: CASE_TIMEOUT plus this, for start-up and the copy back
# MASTER_PORT unset: the plan holds this placeholder until the job id is known; every node then uses
# PORT_BASE + job id % PORT_SPAN (launcher/slurm_node.py derives the same), below Linux's ephemeral ports.
PLACEHOLDER_PORT = 59301
PORT_BASE, PORT_SPAN = SLURM_PORT_BASE, SLURM_PORT_SPAN
TOKEN = "{slurm-node%d}"        # a node of the plan until Slurm allocates it (replaced by its host name)

# sbatch options flagperf sets itself (from the case or from another key): SLURM_ARGS may not hold them.
_OWN_OPTIONS = {
    "-N": "the case's nnodes", "--nodes": "the case's nnodes", "-n": "one task per node",
    "--ntasks": "one task per node", "--ntasks-per-node": "one task per node", "-o": "the job's output file",
    "--output": "the job's output file", "-e": "the job's output file", "--error": "the job's output file",
    "--parsable": "how flagperf reads the job id", "--wrap": "the batch script flagperf writes",
    "-H": "how flagperf submits", "--hold": "how flagperf submits", "-W": "how flagperf waits",
    "--wait": "how flagperf waits", "-p": "SLURM_PARTITION", "--partition": "SLURM_PARTITION",
    "-A": "SLURM_ACCOUNT", "--account": "SLURM_ACCOUNT", "-q": "SLURM_QOS", "--qos": "SLURM_QOS",
    "-t": "SLURM_TIME", "--time": "SLURM_TIME", "--gpus-per-node": "SLURM_GPUS_PER_NODE",
    "--exclusive": "SLURM_EXCLUSIVE", "-w": "nnodes each (one job per node)",
    "--nodelist": "nnodes each (one job per node)", "-D": "the job's working directory",
    "--chdir": "the job's working directory", "-J": "the job name flagperf gives",
    "--job-name": "the job name flagperf gives", "--tasks-per-node": "one task per node",
}
# sbatch options that make it print or test instead of submitting the job
_NO_SUBMIT = {"-h": "prints its help", "--help": "prints its help", "--usage": "prints its usage",
              "-V": "prints its version", "--version": "prints its version", "--test-only": "only tests the job"}

# sbatch's options as its getopt_long reads them (Slurm 22.05: every long option it accepts, as `sbatch --<letter>`
# lists them in its "ambiguous" error; the man page has all but cluster, context, ntasks-per-tres and
# tasks-per-node). A long option may be abbreviated to a unique prefix; one taking a value (REQUIRED) has it after
# '=' or as the next word, an OPTIONAL value only after '='. Short options may be grouped (-Qp gpu).
NONE, OPTIONAL, REQUIRED = 0, 1, 2
SBATCH_LONG = dict.fromkeys((
    "contiguous", "help", "hold", "ignore-pbs", "no-requeue", "overcommit", "oversubscribe", "parsable", "quiet",
    "reboot", "requeue", "spread-job", "test-only", "usage", "use-min-nodes", "verbose", "version", "wait"), NONE)
SBATCH_LONG.update(dict.fromkeys(("exclusive", "get-user-env", "nice", "no-kill", "propagate"), OPTIONAL))
SBATCH_LONG.update(dict.fromkeys((
    "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir", "cluster", "cluster-constraint",
    "clusters", "comment", "constraint", "container", "context", "core-spec", "cores-per-socket", "cpu-freq",
    "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot", "dependency", "distribution", "error", "exclude",
    "export", "export-file", "extra-node-info", "gid", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node",
    "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint", "input", "job-name", "kill-on-invalid-dep",
    "licenses", "mail-type", "mail-user", "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus",
    "network", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node",
    "ntasks-per-socket", "ntasks-per-tres", "open-mode", "output", "partition", "power", "prefer", "priority",
    "profile", "qos", "reservation", "signal", "sockets-per-node", "switches", "tasks-per-node", "thread-spec",
    "threads-per-core", "time", "time-min", "tmp", "uid", "wait-all-nodes", "wckey", "wrap"), REQUIRED))
SBATCH_SHORT = dict.fromkeys("abcdeimnopqtwxABCDFGJLMNS", REQUIRED)
SBATCH_SHORT.update(dict.fromkeys("hsvHOQVW", NONE), k=OPTIONAL)
_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")


@dataclass(frozen=True)
class SlurmOptions(BackendOptions):
    """The SLURM_* keys of a cluster config (docs/configuration.md, docs/slurm.md)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None             # as sbatch --time takes it; None: CASE_TIMEOUT + TIME_MARGIN_S
    gpus_per_node: int | None = None
    exclusive: bool = True
    args: tuple = ()
    conf: str | None = None             # SLURM_CONF for every slurm command
    pending_timeout: float = DEFAULT_PENDING_TIMEOUT_S
    shared_fs: bool = True
    python: str = "python3"             # PYTHON of the cluster config: the interpreter on the nodes
    derived_port: bool = False          # MASTER_PORT unset: derived from the job id
    container_image: str | None = None  # charliecloud: an image directory; pyxis: an image (docker://, a .sqsh)
    container_mounts: tuple = ()        # ((source, target), ...) besides FLAGPERF_PATH, the results and data
    container_python: str = "python3"   # the interpreter inside the image
    drain_rejected: bool = False        # after the run: scontrol update State=DRAIN each node judged reject

    placeholder_port: ClassVar[int] = PLACEHOLDER_PORT     # the plan's MASTER_PORT while derived_port

    def __post_init__(self):
        # SLURM_SHARED_FS: the nodes write the node directories straight into the driver's FLAGPERF_LOG_PATH
        object.__setattr__(self, "results_on_driver", self.shared_fs)

    def runtime_problem(self, runtime: str) -> str | None:
        """Why RUNTIME cannot be used with these keys (None: it can)."""
        if runtime in CONTAINER_RUNTIMES and not self.container_image:
            return (f"{runtime} runs the node launcher in a container image: set SLURM_CONTAINER_IMAGE in the "
                    f"cluster config" + (" (an image directory, e.g. from ch-convert)"
                                             if runtime == "charliecloud" else " (e.g. docker://nvcr.io#nvidia/"
                                                                               "pytorch:24.05-py3 or a .sqsh file)"))
        if runtime == "charliecloud" and self.container_image and not self.container_image.startswith("/"):
            return f"charliecloud needs SLURM_CONTAINER_IMAGE to be an image directory, got {self.container_image}"
        return None

    def placeholder_hosts(self, cases, flagperf_path: str) -> tuple:
        """The plan's nodes until Slurm allocates them: one per node of the largest case."""
        count = max([c.nnodes for c in cases if not c.each] + [1])
        return token_hosts(count, self.python, flagperf_path)

    def plan_master_port(self, port: int) -> int:
        return PLACEHOLDER_PORT if self.derived_port else port

    def plan_hosts(self, cases, flagperf_path: str) -> tuple:
        return self.placeholder_hosts(cases, flagperf_path)

    def master_address(self, host: HostSpec) -> str:
        return host.address         # a placeholder until the job runs; the node's host name then

    def sbatch_time(self, case_timeout: float) -> str:
        """--time of every job: SLURM_TIME, else CASE_TIMEOUT plus a margin, in whole minutes."""
        if self.time is not None:
            return self.time
        return str(int(math.ceil((case_timeout + TIME_MARGIN_S) / 60.0)))

    def to_dict(self) -> dict:
        return {"SLURM_PARTITION": self.partition, "SLURM_ACCOUNT": self.account, "SLURM_QOS": self.qos,
                "SLURM_TIME": self.time, "SLURM_GPUS_PER_NODE": self.gpus_per_node,
                "SLURM_EXCLUSIVE": self.exclusive, "SLURM_ARGS": list(self.args), "SLURM_CONF": self.conf,
                "SLURM_PENDING_TIMEOUT": self.pending_timeout, "SLURM_SHARED_FS": self.shared_fs,
                "PYTHON": self.python, "MASTER_PORT_FROM_JOB_ID": self.derived_port,
                "SLURM_CONTAINER_IMAGE": self.container_image,
                "SLURM_CONTAINER_MOUNTS": [f"{a}:{b}" for a, b in self.container_mounts],
                "SLURM_CONTAINER_PYTHON": self.container_python, "SLURM_DRAIN_REJECTED": self.drain_rejected}


def token_hosts(count: int, python: str, flagperf_path: str) -> tuple:
    return tuple(HostSpec(TOKEN % i, None, None, None, python, flagperf_path) for i in range(count))


derived_port = slurm_derived_port


def parse_time(value) -> int | None:
    """Seconds of an sbatch --time value (minutes; MM:SS; HH:MM:SS; D-HH[:MM[:SS]]), None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 60 if value > 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    m = re.fullmatch(r"(?:(\d{1,4})-)?(\d{1,6})(?::(\d{1,2}))?(?::(\d{1,2}))?", text)
    if not m:
        return None
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:        # D-HH, D-HH:MM, D-HH:MM:SS
        h, mi, s = (parts + [0, 0])[:3]
        seconds = int(days) * 86400 + h * 3600 + mi * 60 + s
        ok = h < 24 and mi < 60 and s < 60
    elif len(parts) == 1:       # minutes
        seconds, ok = parts[0] * 60, True
    elif len(parts) == 2:       # MM:SS
        seconds, ok = parts[0] * 60 + parts[1], parts[1] < 60
    else:                       # HH:MM:SS
        seconds, ok = parts[0] * 3600 + parts[1] * 60 + parts[2], parts[1] < 60 and parts[2] < 60
    return seconds if ok and seconds > 0 else None


def sbatch_args_problems(words) -> list:
    """[(index, why)] of the words of SLURM_ARGS that cannot follow flagperf's own sbatch options: read as sbatch
    reads its command line (abbreviations, '=' and separate values, grouped short options), an option flagperf
    sets itself or one that keeps sbatch from submitting, an unknown or ambiguous option, a missing or unwanted
    value, and a word that is no option (sbatch would take it as the batch script)."""
    out = []
    i = 0
    while i < len(words):
        word, at = words[i], i
        i += 1
        if word == "--":
            out.append((at, "ends sbatch's options, so that sbatch would take the next word as the batch script; "
                            "remove it"))
            continue
        if not word.startswith("-") or word == "-":
            out.append((at, "not an option: sbatch would take this word as the batch script in place of flagperf's "
                            "(give an option's value as --OPTION=VALUE, or as the word right after its option)"))
            continue
        if word.startswith("--"):
            name, eq, _value = word[2:].partition("=")
            full, why = _long_option(name)
            if full is None:
                out.append((at, why))
                continue
            kind = SBATCH_LONG[full]
            option = "--" + full
            if kind == REQUIRED and not eq:
                i += 1          # the next word is the value, whatever it looks like
            problem = _refused(option)
            if problem is None and kind == NONE and eq:
                problem = f"{option} takes no value"
            if problem is None and kind == REQUIRED and not eq and i > len(words):
                problem = f"{option} needs a value ({option}=VALUE): sbatch would take flagperf's batch script as it"
            if problem:
                out.append((at, problem))
            continue
        for k, letter in enumerate(word[1:], 1):     # grouped short options: -Qp gpu, -pgpu
            option = "-" + letter
            if letter not in SBATCH_SHORT:
                out.append((at, f"{option} is not an sbatch option"))
                break
            kind = SBATCH_SHORT[letter]
            missing = False
            if kind == REQUIRED and k == len(word) - 1:
                i += 1          # the next word is the value, whatever it looks like
                missing = i > len(words)
            problem = _refused(option)
            if problem is None and missing:
                problem = f"{option} needs a value: sbatch would take flagperf's batch script as it"
            if problem:
                out.append((at, problem))
                break
            if kind != NONE:
                break           # the rest of the word (or the next word) is the option's value
    return out


def _long_option(name: str) -> tuple:
    """(sbatch's long option that ``--name`` is, or None, and why not)."""
    if name in SBATCH_LONG:
        return name, ""
    matches = [o for o in SBATCH_LONG if o.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0], ""
    if matches:
        return None, (f"--{name} is ambiguous: sbatch reads it as one of " + ", ".join("--" + m for m in matches)
                      + "; write the option in full")
    return None, f"--{name} is not an sbatch option (sbatch --help lists them)"


def _refused(option: str) -> str | None:
    if option in _OWN_OPTIONS:
        return f"flagperf sets {option} itself (from {_OWN_OPTIONS[option]}); remove it"
    if option in _NO_SUBMIT:
        return f"with {option} sbatch {_NO_SUBMIT[option]} and submits nothing; remove it"
    return None


def load_options(ck, data) -> SlurmOptions:
    """Validate the SLURM_* keys (and PYTHON, MASTER_PORT as Slurm reads them) of one cluster config;
    problems go to ``ck`` (flagperf.checker.Checker)."""
    opts: dict = {}
    for key, attr in (("SLURM_PARTITION", "partition"), ("SLURM_ACCOUNT", "account"), ("SLURM_QOS", "qos")):
        value = ck.get(data, key, str, None)
        if value is not None and not _NAME.fullmatch(value):
            ck.add(data, key, f"expected a Slurm name (letters, digits, _ . + -), got {value!r}")
            value = None
        opts[attr] = value
    if data.get("SLURM_TIME") is not None:
        raw = data["SLURM_TIME"]
        if parse_time(raw) is None:
            ck.add(data, "SLURM_TIME", f"expected a time limit per round as sbatch --time takes it: minutes "
                                       f"(30), MM:SS, HH:MM:SS (00:30:00) or D-HH:MM:SS, got {raw!r}")
        else:
            opts["time"] = str(raw).strip()
    gpus = ck.get(data, "SLURM_GPUS_PER_NODE", int, None)
    if gpus is not None and not 1 <= gpus <= 1024:
        ck.add(data, "SLURM_GPUS_PER_NODE", f"expected a number of GPUs per node from 1 to 1024, got {gpus}")
        gpus = None
    opts["gpus_per_node"] = gpus
    opts["exclusive"] = ck.get(data, "SLURM_EXCLUSIVE", bool, True)
    opts["shared_fs"] = ck.get(data, "SLURM_SHARED_FS", bool, True)
    args = ck.get(data, "SLURM_ARGS", list, [])
    bad = set()
    for i, arg in enumerate(args):
        if not isinstance(arg, str) or not arg or "\0" in arg or "\n" in arg:
            ck.add(data, "SLURM_ARGS", f"expected a non-empty string (one sbatch argument), got {arg!r}",
                   f"SLURM_ARGS[{i}]")
            bad.add(i)
    words = [a if isinstance(a, str) else "" for a in args]
    for i, problem in sbatch_args_problems(words):
        if i not in bad:
            ck.add(data, "SLURM_ARGS", f"{words[i]!r}: {problem}", f"SLURM_ARGS[{i}]")
            bad.add(i)
    opts["args"] = tuple(a for i, a in enumerate(words) if i not in bad)
    conf = ck.get(data, "SLURM_CONF", str, None)
    if conf is not None:
        try:
            path = resolve(ck.path, conf)
        except ValueError as exc:
            ck.add(data, "SLURM_CONF", str(exc))
        else:
            if not path.is_file():
                ck.add(data, "SLURM_CONF", f"expected a slurm.conf file, {path} does not exist")
            opts["conf"] = str(path)
    pending = ck.get(data, "SLURM_PENDING_TIMEOUT", (int, float), DEFAULT_PENDING_TIMEOUT_S)
    if not (0 < pending <= MAX_PENDING_TIMEOUT_S and math.isfinite(pending)):
        ck.add(data, "SLURM_PENDING_TIMEOUT", f"expected a number of seconds > 0 and at most "
                                              f"{MAX_PENDING_TIMEOUT_S:.0f} (30 days), got {pending!r}")
        pending = DEFAULT_PENDING_TIMEOUT_S
    opts["pending_timeout"] = float(pending)
    python = data.get("PYTHON")     # its type is checked with the other cluster keys
    if isinstance(python, str) and python.startswith("-"):
        ck.add(data, "PYTHON", f"expected the interpreter on the nodes (a name or a path), got {python!r} (srun "
                               f"would read it as one of its options)")
        python = None
    opts["python"] = python if isinstance(python, str) and python else "python3"
    image = ck.get(data, "SLURM_CONTAINER_IMAGE", str, None)
    if image is not None and ("\0" in image or "," in image or not image.strip()):
        ck.add(data, "SLURM_CONTAINER_IMAGE", f"expected an image (a directory for charliecloud, an image name or "
                                              f".sqsh file for pyxis), without ',', got {image!r}")
        image = None
    elif image is not None and "://" not in image and "#" not in image and not image.startswith("/") and \
            ("/" in image or image.startswith(".")):
        try:        # a relative path: relative to the cluster config's folder
            image = str(resolve(ck.path, image))
        except ValueError as exc:
            ck.add(data, "SLURM_CONTAINER_IMAGE", str(exc))
            image = None
    if image is not None and image.startswith("/") and not (os.path.isdir(image) or os.path.isfile(image)):
        ck.add(data, "SLURM_CONTAINER_IMAGE", f"expected an image directory or file, {image} does not exist")
    opts["container_image"] = image
    mounts = []
    for i, item in enumerate(ck.get(data, "SLURM_CONTAINER_MOUNTS", list, [])):
        label = f"SLURM_CONTAINER_MOUNTS[{i}]"
        src, _, dst = item.partition(":") if isinstance(item, str) else ("", "", "")
        dst = dst or src
        if not src.startswith("/") or not dst.startswith("/") or ":" in dst or "," in item or "\0" in item:
            ck.add(data, "SLURM_CONTAINER_MOUNTS", f"expected 'SOURCE[:TARGET]' with absolute paths and no ',', got "
                                                   f"{item!r}", label)
            continue
        mounts.append((src, dst))
    opts["container_mounts"] = tuple(mounts)
    cpython = ck.get(data, "SLURM_CONTAINER_PYTHON", str, "python3")
    if not cpython.strip() or any(c.isspace() for c in cpython) or cpython.startswith("-"):
        ck.add(data, "SLURM_CONTAINER_PYTHON", f"expected the interpreter inside the image (a name or a path), got "
                                               f"{cpython!r}")
        cpython = "python3"
    opts["container_python"] = cpython
    opts["drain_rejected"] = ck.get(data, "SLURM_DRAIN_REJECTED", bool, False)
    opts["derived_port"] = data.get("MASTER_PORT") is None
    if "HOSTS" in data:
        ck.add(data, "HOSTS", "not used with SCHEDULER slurm (Slurm picks the nodes of every job); remove it, "
                              "or use SLURM_PARTITION and SLURM_ARGS (e.g. --constraint) to choose them")
    return SlurmOptions(**opts)


register("slurm", "flagperf.backends.slurm:SlurmBackend", runtimes=("bare",) + CONTAINER_RUNTIMES,
         description="a Slurm cluster: one sbatch job per case round; the node launcher runs once per node as an "
                     "srun step (bare, or in an image: charliecloud's ch-run, pyxis), the monitor as an overlapping "
                     "step (docs/slurm.md)",
         cluster_keys=SLURM_KEYS, options=load_options, host_list=False,
         refused=(("docker", "Docker's containers are started by dockerd, not as children of the job step, so "
                             "Slurm could neither confine nor stop them"),))
