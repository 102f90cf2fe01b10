"""The ``slurm`` backend: every case round is one Slurm job (an ``each`` case: one job per node, pinned to it).

Why sbatch and not salloc + srun from the driver: the job is whole in itself. Its batch script starts the node
launcher once per node and the monitor beside it (``srun`` steps, flagperf_script.batch_script), so a job never
depends on the driver's terminal, a login node's process limits, or one ``srun`` per node on the driver; the
driver submits, then polls ``squeue`` (one call for all its jobs, every POLL_S, each call with a deadline) and
reads what the nodes wrote. A driver that dies leaves a job that ends by itself (its steps, or ``--time``).

Node names are known only when the job starts. The plan names nodes ``{slurm-node<k>}``; the driver writes one
spec per node of the job with those placeholders, and ``launcher/slurm_node.py`` fills them in on the node from
``scontrol show hostnames $SLURM_JOB_NODELIST`` (and MASTER_PORT from the job id when it is derived). Once
the job runs, the driver fills the same placeholders into its own copy of the plan (:meth:`start_round`), so
that every node directory is ``<case>/round<k>/<node>_noderank<i>`` as over SSH.

Exit codes: a node's launcher status is what ``slurm_node.py`` records in the node directory (shared results),
or the batch script's record in the job's comment (node-local results); rank exit codes always come from
``ranks.json``, never from ``srun``.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path, PurePosixPath

from flagperf.backends.base import Backend, BackendError
from flagperf.options.base import LOCALHOST, HostSpec
from flagperf.options.slurm import (CONTAINER_RUNTIMES, TOKEN, SlurmOptions, derived_port, parse_time,
                                            token_hosts)
from flagperf.backends.slurm_script import (COMMENT_DONE, COMMENT_LAUNCHERS, SQUEUE_FORMAT, STEP_LAUNCHER,
                                            STEP_MONITOR, JobInfo, batch_script, ch_run_argv, gres_gpus,
                                            parse_partitions, parse_sbatch, parse_sinfo_nodes, parse_squeue,
                                            output_option, parse_steps, pyxis_options, sbatch_argv, scheduler_end,
                                            specs_document, specs_json, substitute, time_limit_seconds, usable_state)
from flagperf.caselaunch import needs_deploy
from flagperf.checks import HostCheck
from flagperf.deploy import case_trees, deploy_host, local_manifest
from flagperf.hosts.fanout import fan_out
from flagperf.hosts.local import LocalTransport
from flagperf.hosts.treesync import (COLLECT_LISTING_MAX_BYTES, FetchResult, parse_listing, plan_fetch, report_fetch,
                                     safe_extract)
from flagperf.plan import build_plan
from flagperf_contract import LAUNCHER_LOG, MONITOR_OUTPUT, LaunchSpec

POLL_S = 0.5                # how often squeue is asked about the running jobs
CMD_TIMEOUT_S = 30.0        # every slurm command (a controller that does not answer fails the step)
CANCEL_WAIT_S = 8.0         # after scancel: how long to wait for a job to leave squeue's active states
HOLD_S = 1800               # node-local results: the allocation is kept this long for the copy back
MISSING_POLLS = 6           # a job that squeue no longer lists this many times in a row is over
EXIT_FILE = "slurm_exit.json"   # the node launcher's exit status, written by slurm_node.py (shared results)
SPECS_FILE = "nodes.json"
SCRIPT_FILE = "job.sh"
WRAPPER = "launcher/slurm_node.py"
NODE_OUTPUT = "launcher.out.log"
MAX_EXIT_FILE_BYTES = 64 * 1024
DRAIN_REASON_MAX_CHARS = 256   # the Reason of a drained node (scontrol update ... Reason=...)
DRAIN_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")     # one node, never a host list expression
DRAIN_REMEDY = ("draining needs Slurm operator rights (root, SlurmUser, or AdminLevel=Operator in sacctmgr); "
                "drain it by hand: scontrol update NodeName=<node> State=DRAIN Reason=...")
REMEDIES = {
    "slurm_unavailable": "install the Slurm client commands (sbatch, squeue, scontrol) on this machine, check "
                         "that slurmctld answers (scontrol ping), or set SLURM_CONF",
    "partition_missing": "set SLURM_PARTITION to a partition of `sinfo -s`",
    "partition_down": "ask the administrators to bring the partition up (scontrol update PartitionName=<p> "
                      "State=UP) or use another SLURM_PARTITION",
    "time_too_long": "lower SLURM_TIME (or CASE_TIMEOUT, from which it is derived) below the partition's MaxTime",
    "too_few_nodes": "use a partition with more usable nodes, lower nnodes, or resume the drained/down nodes",
    "too_few_accelerators": "lower nproc or SLURM_GPUS_PER_NODE, or use a partition whose nodes have more GPUs "
                            "(gres)",
    "account_refused": "use an account you have on this partition (sacctmgr show assoc user=$USER) or remove "
                       "SLURM_ACCOUNT",
    "qos_refused": "use a QOS your account may use here (sacctmgr show assoc user=$USER format=qos) or remove "
                   "SLURM_QOS",
    "container_unusable": "install the container runtime on every node, fix SLURM_CONTAINER_IMAGE, or create what "
                          "the message names",
}


def _check(name: str, outcome: str, detail: str, info=None) -> HostCheck:
    return HostCheck(name, outcome, detail, "" if outcome == "ok" else REMEDIES.get(outcome, "see the message"),
                     info)


@dataclasses.dataclass
class _Job:
    """One submitted job and what the poller knows of it."""

    job_id: int
    nodes: list                 # the NodePlans of its nodes (placeholders until it starts, then bound)
    job_dir: Path
    submitted: float
    info: JobInfo | None = None
    hosts: tuple = ()           # the allocation's host names, in SLURM_NODEID order
    codes: dict = dataclasses.field(default_factory=dict)   # node label -> the launcher's exit status
    missing: int = 0
    gone: bool = False          # squeue no longer knows it
    urgs: int = 0               # stop requests sent to its launcher step
    monitor_stopped: bool = False
    cancelled: bool = False     # cancelled by flagperf
    failed: str | None = None   # it never started: why (pending timeout, sbatch refused)

    @property
    def ended(self) -> bool:
        return self.gone or (self.info is not None and self.info.ended)

    @property
    def started(self) -> bool:
        return self.info is not None and not self.info.waiting


class SlurmBackend(Backend):
    name = "slurm"
    node_output = NODE_OUTPUT

    def __init__(self, config, log, *, accept_new_host_keys: bool = False):
        super().__init__(config, log, accept_new_host_keys=accept_new_host_keys)
        opts = config.cluster.options
        if not isinstance(opts, SlurmOptions):
            raise BackendError(f"SCHEDULER slurm: the cluster config's options are {type(opts).__name__}, not "
                               f"SlurmOptions")
        self.opts: SlurmOptions = opts
        self.env = dict(os.environ)
        if not self.env.get("USER"):        # ch-run needs it, and so do some job prologs
            self.env["USER"] = getpass.getuser()
        if self.opts.conf:
            self.env["SLURM_CONF"] = self.opts.conf
        self.partition: dict | None = None
        self.nodes: list = []               # [(name, state, gres)] of the partition
        self.connect_problem: HostCheck | None = None
        self.each_nodes: tuple = ()         # the nodes `each` cases run on, in the plan's order
        self.cond = threading.Condition()
        self.jobs: dict = {}                # job id -> _Job, while flagperf may still act on it
        self.job_of: dict = {}              # node label -> _Job
        self.round_jobs: list = []
        self.failed_nodes: dict = {}        # node label -> why its job could not start (each cases)
        self.unschedulable: dict = {}       # case name -> why its jobs cannot start
        self.poller: threading.Thread | None = None
        self.closed = False

    @classmethod
    def collector(cls, record: dict, log, *, accept_new_host_keys: bool = False) -> Backend:
        raise BackendError(f"a SCHEDULER {cls.name} run: its nodes can be reached only inside its jobs, which copied "
                           f"the node directories back while it ran (docs/slurm.md)")

    # -- slurm commands ---------------------------------------------------------------------------------------
    def _run(self, argv, timeout: float = CMD_TIMEOUT_S, *, quiet: bool = False,
             stdin: bytes | None = None) -> subprocess.CompletedProcess:
        if not quiet:
            self.log.info(f"slurm: $ {shlex.join(argv)}")
        try:
            return subprocess.run(argv, env=self.env, capture_output=True, timeout=timeout, check=False,
                                  input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
        except FileNotFoundError:
            raise BackendError(f"slurm: {argv[0]} not found on this machine (PATH); is the Slurm client "
                               f"installed?") from None
        except subprocess.TimeoutExpired:
            raise BackendError(f"slurm: `{shlex.join(argv[:4])} ...` did not answer within {timeout:g} s "
                               f"(slurmctld busy or unreachable?)") from None

    @staticmethod
    def _text(cp) -> tuple:
        return cp.stdout.decode(errors="replace"), cp.stderr.decode(errors="replace").strip()

    def _hostnames(self, nodelist: str) -> tuple:
        cp = self._run(["scontrol", "show", "hostnames", nodelist], quiet=True)
        out, err = self._text(cp)
        names = tuple(line.strip() for line in out.splitlines() if line.strip())
        if cp.returncode != 0 or not names:
            raise BackendError(f"slurm: cannot expand the node list {nodelist!r}: {err or 'no names'}")
        return names

    # -- hosts: the partition -----------------------------------------------------------------------------------
    def connect(self, hosts) -> list:
        try:
            cp = self._run(["scontrol", "show", "partition", "-o"] + ([self.opts.partition] if self.opts.partition
                                                                      else []))
            out, err = self._text(cp)
        except BackendError as exc:
            self.connect_problem = _check("slurm", "slurm_unavailable", str(exc))
            return [self.connect_problem]
        parts = parse_partitions(out)
        if cp.returncode != 0 or not parts:
            outcome = "partition_missing" if "not found" in err + out or (cp.returncode == 0 and not parts) else \
                "slurm_unavailable"
            what = f"partition {self.opts.partition}" if self.opts.partition else "the partitions"
            self.connect_problem = _check("slurm", outcome, f"scontrol show partition: {what}: "
                                                            f"{err or out.strip() or 'none'}")
            return [self.connect_problem]
        if self.opts.partition:
            self.partition = parts[0]
        else:
            self.partition = next((p for p in parts if p.get("Default") == "YES"), None)
            if self.partition is None:
                self.connect_problem = _check("slurm", "partition_missing",
                                              "no SLURM_PARTITION and the cluster has no default partition")
                return [self.connect_problem]
        try:
            cp = self._run(["sinfo", "-h", "-N", "-p", self.partition["PartitionName"], "-o", "%N|%T|%G"])
            out, err = self._text(cp)
        except BackendError as exc:
            self.connect_problem = _check("slurm", "slurm_unavailable", str(exc))
            return [self.connect_problem]
        self.nodes = parse_sinfo_nodes(out) if cp.returncode == 0 else []
        return []

    def deploy(self, hosts) -> list:
        """FLAGPERF_PATH must be a folder every node sees: the tree is synced there from this machine (nothing to
        do when it is the driver's own tree)."""
        if self.connect_problem is not None:
            return []
        root = self.config.source_root
        here = HostSpec(LOCALHOST, None, None, None, self.opts.python, self.config.test.flagperf_path)
        anywhere = needs_deploy(here, root)
        manifest = local_manifest(root) if anywhere else {}
        cases = case_trees(self.config) if anywhere else ()
        return fan_out([here], lambda h: deploy_host(LocalTransport(h), root, manifest, cases), deadline_s=3600)

    def probe(self, hosts, need: dict) -> list:
        """One line each: the partition, its nodes, their GPUs, the account and the QOS."""
        if self.connect_problem is not None or self.partition is None:
            return []
        p = self.partition
        name = p.get("PartitionName", "?")
        checks = []
        state = p.get("State", "?")
        limit = time_limit_seconds(p.get("MaxTime", ""))
        ours = parse_time(self.opts.sbatch_time(self.config.test.case_timeout)) or 0
        detail = (f"{name}: State={state}, {p.get('TotalNodes', '?')} node(s) {p.get('Nodes', '')}, "
                  f"MaxTime={p.get('MaxTime', '?')}, MaxNodes={p.get('MaxNodes', '?')}; jobs ask --time="
                  f"{self.opts.sbatch_time(self.config.test.case_timeout)}")
        if state != "UP":
            checks.append(_check("partition", "partition_down", detail + " (jobs would wait: only UP partitions "
                                                                         "start jobs)"))
        elif limit is not None and ours > limit:
            checks.append(_check("partition", "time_too_long", detail))
        else:
            checks.append(_check("partition", "ok", detail))
        usable = [n for n in self.nodes if usable_state(n[1])]
        idle = [n for n in usable if n[1].rstrip("*~#!%$@^-+") == "idle"]
        want = self._nodes_needed()
        detail = (f"{len(usable)} of {len(self.nodes)} node(s) usable ({len(idle)} idle, {len(usable) - len(idle)} "
                  f"in use; unusable: {', '.join(f'{n} {s}' for n, s, _ in self.nodes if not usable_state(s)) or '-'}"
                  f"); the cases need up to {want}")
        checks.append(_check("nodes", "ok" if len(usable) >= want else "too_few_nodes", detail,
                             {"nodes": [n for n, _, _ in usable]}))
        checks.append(self._gpu_check(usable, max(need.values(), default=0)))
        checks += self._submission_checks(name)
        if self.config.test.runtime in CONTAINER_RUNTIMES:
            checks.append(self._container_check())
        return checks

    def _container_check(self) -> HostCheck:
        """The container runtime, as far as this machine can tell (the nodes are expected to have the same)."""
        runtime, image = self.config.test.runtime, str(self.opts.container_image)
        if runtime == "pyxis":
            try:
                cp = self._run(["srun", "--help"], quiet=True)
            except BackendError as exc:
                return _check("container", "container_unusable", str(exc))
            if b"--container-image" not in cp.stdout + cp.stderr:
                return _check("container", "container_unusable", "srun has no --container-image option: the pyxis "
                                                                 "plug-in is not loaded (plugstack.conf)")
            return _check("container", "ok", f"pyxis: srun takes --container-image; image {image}")
        try:
            cp = self._run(["ch-run", "--version"], quiet=True)
            version = (cp.stdout + cp.stderr).decode(errors="replace").strip().splitlines()[-1:]
        except BackendError as exc:
            return _check("container", "container_unusable", f"ch-run: {exc}")
        problems = []
        py = self.opts.container_python
        where = [py] if py.startswith("/") else [f"{d}/{py}" for d in ("/usr/local/bin", "/usr/bin", "/bin")]
        if not any(os.path.exists(image + p) for p in where):
            problems.append(f"no {py} in the image ({', '.join(image + p for p in where)})")
        if not os.path.isfile(f"{image}/etc/hosts"):
            problems.append(f"no file /etc/hosts in the image, so node names do not resolve there (ch-run binds the "
                            f"host's over an existing one: touch {shlex.quote(image + '/etc/hosts')})")
        fake = self._template_probe()
        for _src, dst in (self._mounts(fake) if fake is not None else []):
            if not dst.startswith("/tmp/") and not os.path.isdir(image + dst):
                problems.append(f"no mount point {dst} in the image (mkdir -p {shlex.quote(image + dst)})")
        detail = f"charliecloud {' '.join(version) or '?'}: image {image}"
        return _check("container", "container_unusable" if problems else "ok",
                      detail + ("; " + "; ".join(problems) if problems else ""))

    def _template_probe(self):
        """A node of the first case's first round, for the paths a container binds (None: no case)."""
        try:
            plan = build_plan(self.config, "run-check")
        except Exception:  # noqa: BLE001 - a plan that cannot be built is reported by `run`
            return None
        for case in plan.cases:
            for rnd in case.rounds:
                for node in rnd.nodes:
                    return node
        return None

    def _nodes_needed(self) -> int:
        cases = self.config.test.cases
        return max([c.nnodes for c in cases if not c.each] + [1 if any(c.each for c in cases) else 0])

    def _gpu_check(self, usable, need: int) -> HostCheck:
        counts = [gres_gpus(g) for _, _, g in usable]
        known = [c for c in counts if c is not None]
        fewest = min(known) if known and len(known) == len(counts) else None
        gres = ", ".join(sorted({g for _, _, g in usable})) or "-"
        vendor = self.config.vendor
        info = {"accelerators": {"source": "gres", "count": fewest}} if fewest is not None else None
        asked = self.opts.gpus_per_node
        if vendor.device == "cpu" and not asked:
            return _check("gpus", "ok", f"VENDOR {vendor.name} needs no GPU; gres per node: {gres}", info)
        if fewest is None:
            detail = (f"no GPU gres on every usable node (gres: {gres}); "
                      + ("SLURM_GPUS_PER_NODE cannot be granted" if asked else
                         "GPUs are not requested; ranks see what the nodes give a job"))
            return _check("gpus", "too_few_accelerators" if asked else "ok", detail, info)
        wanted = max(need if vendor.device != "cpu" else 0, asked or 0)
        detail = f"{fewest} GPU(s) per node (gres: {gres}); the cases need {wanted}"
        return _check("gpus", "ok" if fewest >= wanted else "too_few_accelerators", detail, info)

    def _submission_checks(self, partition: str) -> list:
        """Whether sbatch accepts the account and the QOS: a held job that never runs, cancelled at once (sbatch
        --test-only does not apply every policy)."""
        out = []
        for key, flag, value, outcome in (("account", "--account", self.opts.account, "account_refused"),
                                          ("qos", "--qos", self.opts.qos, "qos_refused")):
            if not value:
                out.append(_check(key, "ok", f"SLURM_{key.upper()} not set: jobs use the default {key}"))
                continue
            argv = ["sbatch", "--hold", "--parsable", f"--partition={partition}", f"{flag}={value}", "--nodes=1",
                    "--time=1", "--job-name=flagperf-check", "--output=/dev/null", "--chdir=/", *self.opts.args]
            if key == "qos" and self.opts.account:
                argv.insert(4, f"--account={self.opts.account}")
            argv.append("--wrap=true")
            try:
                cp = self._run(argv)
            except BackendError as exc:
                out.append(_check(key, "slurm_unavailable", str(exc)))
                continue
            text, err = self._text(cp)
            if cp.returncode != 0:
                with_account = f" (with SLURM_ACCOUNT {self.opts.account})" if key == "qos" and self.opts.account \
                    else ""
                out.append(_check(key, outcome, f"{key} {value}{with_account} on partition {partition}: sbatch "
                                                f"refused a test job: {err or text.strip()}"))
                continue
            try:
                jid = parse_sbatch(text)
            except ValueError as exc:
                out.append(_check(key, "slurm_unavailable", str(exc)))
                continue
            self._scancel([str(jid)])
            out.append(_check(key, "ok", f"{key} {value} accepted on partition {partition} (held test job {jid}, "
                                         f"cancelled)"))
        return out

    # -- the plan ----------------------------------------------------------------------------------------------
    def planning(self, config, accelerators: dict) -> tuple:
        """The partition's usable nodes become the hosts of `each` cases; GPUs per node (gres, or
        SLURM_GPUS_PER_NODE) count for nproc auto."""
        usable = tuple(n for n, s, _ in self.nodes if usable_state(s))
        cases = config.test.cases
        count = max([c.nnodes for c in cases if not c.each] + [1])
        if any(c.each for c in cases) and usable:
            self.each_nodes = usable
            count = max(count, len(usable))
        hosts = token_hosts(count, self.opts.python, config.test.flagperf_path)
        if hosts != config.cluster.hosts:
            config = dataclasses.replace(config, cluster=dataclasses.replace(config.cluster, hosts=hosts))
        gpus = self.opts.gpus_per_node
        if gpus is None:
            counts = [gres_gpus(g) for n, s, g in self.nodes if usable_state(s)]
            known = [c for c in counts if c is not None]
            gpus = min(known) if known and len(known) == len(counts) else None
        if gpus is not None and config.vendor.device != "cpu":
            accelerators = dict(accelerators, **{h.address: gpus for h in hosts})
        return config, accelerators

    # -- a round: submit, wait for the start, bind ------------------------------------------------------------
    def start_round(self, case, rnd) -> tuple:
        """Submit the round's job (an each case: one job per node, pinned to it), wait until it runs (at most
        SLURM_PENDING_TIMEOUT), and return the round's nodes on the hosts Slurm gave."""
        if case.name in self.unschedulable:
            raise BackendError(f"not submitted: {self.unschedulable[case.name]}")
        with self.cond:
            self.round_jobs = []
            self.failed_nodes.clear()
        nodes = list(rnd.nodes)
        if not case.case.each:
            job = self._submit(case, rnd, [self._template(n) for n in nodes], None, None)
            self.round_jobs.append(job)
            self._await_start(case, each=False)
            return tuple(job.nodes)
        if len(self.each_nodes) < len(nodes):
            raise BackendError(f"nnodes each: {len(nodes)} job(s) planned, but the partition has "
                               f"{len(self.each_nodes)} usable node(s)")
        slots: list = []
        for i, n in enumerate(nodes):       # node i of an each round runs on the partition's usable node i
            node = self._bind(self._template(n), {n.host.address: self.each_nodes[i]}, None)
            try:
                job = self._submit(case, rnd, [node], self.each_nodes[i], i)
            except BackendError as exc:
                self.log.error(f"slurm: {node.label}: {exc}")
                self._fail_nodes([node], str(exc))
                slots.append(node)
                continue
            self.round_jobs.append(job)
            slots.append(job)
        self._await_start(case, each=True)
        return tuple(s.nodes[0] if isinstance(s, _Job) else s for s in slots)

    def _fail_nodes(self, nodes, why: str):
        with self.cond:
            for n in nodes:
                self.failed_nodes[n.label] = why

    def _template(self, node):
        """The node as the job's specs hold it: its node directory where the nodes write it (the driver's own run
        directory when results are shared), the node launcher and the ranks in the image (RUNTIME charliecloud or
        pyxis), host names still placeholders."""
        if self.opts.shared_fs and node.node_dir != str(node.local_dir):
            node = _replace_strings(node, {node.node_dir: str(node.local_dir)}, None)
        runtime = self.config.test.runtime
        if runtime not in CONTAINER_RUNTIMES:
            return node
        inside, here = self.opts.container_python, node.host.python
        launch = node.launch.to_dict()
        if launch["argv"] and launch["argv"][0] == here:
            launch["argv"] = [inside, *launch["argv"][1:]]
        argv = list(node.launcher_argv)
        if argv and argv[0] == here:
            argv[0] = inside
        if runtime == "charliecloud":       # slurm_node.py stays on the node; ch-run starts the node launcher
            try:
                argv = ch_run_argv(str(self.opts.container_image), self._mounts(node),
                                   self.config.test.flagperf_path) + argv
            except ValueError as exc:
                raise BackendError(f"RUNTIME charliecloud: {exc}") from None
        return dataclasses.replace(node, launch=LaunchSpec.from_dict(launch), launcher_argv=tuple(argv))

    def _mounts(self, node) -> list:
        """What a container needs at the same paths: FLAGPERF_PATH, the result root, the case's data, and
        SLURM_CONTAINER_MOUNTS."""
        fp = self.config.test.flagperf_path
        root = str(PurePosixPath(node.node_dir).parents[3])     # <root>/<run>/<case>/round<k>/<node>
        wanted = [(fp, fp), (root, root)]
        if node.launch.data_dir:
            wanted.append((node.launch.data_dir, node.launch.data_dir))
        wanted += list(self.opts.container_mounts)
        out: list = []
        for m in wanted:
            if m not in out:
                out.append(m)
        return out

    def _bind(self, node, table: dict, port: tuple | None):
        return _replace_strings(node, table, port)

    def _submit(self, case, rnd, nodes, pin: str | None, index: int | None) -> _Job:
        """Write the node specs and the batch script, sbatch it; the _Job."""
        job_dir = rnd.local_dir / ("slurm" if index is None else f"slurm-{index}")
        tokens = {} if pin is not None else {n.host.address: i for i, n in enumerate(nodes)}
        port = nodes[0].master_port if self.opts.derived_port else None
        doc = specs_document([_node_spec(n) for n in nodes], tokens, port_placeholder=port, exit_file=EXIT_FILE,
                             out_file=NODE_OUTPUT, monitor_out_file=MONITOR_OUTPUT)
        script, argv = self._job_files(case.name, rnd.index, nodes, job_dir, doc, pin, case.timeout_s)
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            if self.opts.shared_fs:
                (job_dir / SPECS_FILE).write_text(specs_json(doc), encoding="utf-8")
            (job_dir / SCRIPT_FILE).write_text(script, encoding="utf-8")
        except OSError as exc:
            raise BackendError(f"cannot write the job's files in {job_dir}: {exc}") from None
        cp = self._run(argv)
        out, err = self._text(cp)
        if cp.returncode != 0:
            raise BackendError(f"sbatch refused the job: {err or out.strip() or f'exit {cp.returncode}'}")
        try:
            jid = parse_sbatch(out)
        except ValueError as exc:
            raise BackendError(str(exc)) from None
        self.log.info(f"slurm: job {jid} submitted for {case.name} round {rnd.index}"
                      + (f" on {pin}" if pin else f" ({len(nodes)} node(s))")
                      + f"; batch script {job_dir / SCRIPT_FILE}")
        job = _Job(jid, list(nodes), job_dir, time.monotonic())
        with self.cond:
            self.jobs[jid] = job
            for n in job.nodes:
                self.job_of[n.label] = job
            self.cond.notify_all()
        self._ensure_poller()
        return job

    def _job_files(self, case_name: str, round_index: int, nodes, job_dir: Path, doc: dict, pin,
                   timeout_s: float) -> tuple:
        """(batch script, sbatch argv) of one job; ``timeout_s``: the case's CASE_TIMEOUT."""
        fp = PurePosixPath(self.config.test.flagperf_path)
        run_id = nodes[0].launch.env.get("FLAGPERF_RUN_ID", "")
        title = f"flagperf {run_id} {case_name} round {round_index}" + (f", node {pin}" if pin else "")
        runtime = self.config.test.runtime
        extra: dict = {"set_user": runtime == "charliecloud"}
        if runtime == "pyxis":      # every task of the launcher step runs in the image
            try:
                options = pyxis_options(str(self.opts.container_image), self._mounts(nodes[0]), str(fp))
            except ValueError as exc:
                raise BackendError(f"RUNTIME pyxis: {exc}") from None
            extra.update(launch_python=self.opts.container_python, launch_options=options)
        if self.opts.shared_fs:
            script = batch_script(title=title, python=self.opts.python, wrapper=str(fp / WRAPPER),
                                  specs=str(job_dir / SPECS_FILE), **extra)
            output = output_option(str(job_dir))[0]
        else:
            specs = str(PurePosixPath(nodes[0].node_dir).parent / job_dir.name / SPECS_FILE)
            script = batch_script(title=title, python=self.opts.python, wrapper=str(fp / WRAPPER), specs=specs,
                                  inline_specs=specs_json(doc), hold_s=HOLD_S, **extra)
            output = "/dev/null"
        argv = sbatch_argv(self.opts, nnodes=len(nodes), job_name=job_name(run_id, case_name, round_index),
                           time=self.opts.sbatch_time(timeout_s), output=output, chdir=str(fp),
                           script=str(job_dir / SCRIPT_FILE), nodelist=pin)
        return script, argv

    def _await_start(self, case, each: bool):
        """Wait until every job of the round runs (or already ended); a job still pending after
        SLURM_PENDING_TIMEOUT is cancelled and fails its nodes (the round, unless each). Then bind."""
        limit = self.opts.pending_timeout
        while True:
            with self.cond:
                waiting = [j for j in self.round_jobs if not j.started and not j.ended and j.failed is None]
                late = [j for j in waiting if time.monotonic() - j.submitted > limit]
                if not waiting:
                    break
                if not late:
                    self.cond.wait(POLL_S)
                    continue
            for job in late:
                reason = job.info.reason if job.info is not None else ""
                why = (f"Slurm job {job.job_id} was still pending after SLURM_PENDING_TIMEOUT {limit:g} s "
                       f"(squeue reason: {reason or 'none given'}); cancelled")
                self.log.error(f"slurm: {why}")
                self._cancel(job)
                job.failed = why
                if not each:
                    self.unschedulable[case.name] = f"an earlier round of this case could not start: {why}"
                    raise BackendError(why)
                self._fail_nodes(job.nodes, why)
        for job in self.round_jobs:
            if job.failed is not None:
                continue
            info = job.info
            if info is None or not info.nodelist:
                state = f"{info.state}, reason {info.reason or '-'}" if info is not None else "unknown"
                why = f"Slurm job {job.job_id} ended before it started (JobState {state})"
                job.failed = why
                if not each:
                    raise BackendError(why)
                self._fail_nodes(job.nodes, why)
                continue
            hosts = self._hostnames(info.nodelist)
            if len(hosts) != len(job.nodes):
                raise BackendError(f"Slurm job {job.job_id} got {len(hosts)} node(s) ({info.nodelist}), "
                                   f"{len(job.nodes)} were asked for")
            table = {n.host.address: hosts[i] for i, n in enumerate(job.nodes) if n.host.address.startswith("{")}
            port = (str(job.nodes[0].master_port), str(derived_port(job.job_id))) if self.opts.derived_port else None
            bound = [self._bind(n, table, port) for n in job.nodes]
            with self.cond:
                job.hosts = hosts
                job.nodes = bound
                for n in bound:
                    self.job_of[n.label] = job
                self.cond.notify_all()
            self.log.info(f"slurm: job {job.job_id} runs on {', '.join(hosts)}")

    # -- the nodes of a running job -----------------------------------------------------------------------------
    def prepare_node(self, node) -> None:
        """Nothing to write: the job's specs hold the node's files, and slurm_node.py writes them on the node."""
        why = self.failed_nodes.get(node.label)
        if why:
            raise BackendError(why)
        if node.label not in self.job_of:
            raise BackendError(f"{node.label}: no Slurm job runs this node")

    def spawn_monitor(self, node):
        return _Step(self, self._job(node), node, "monitor")

    def spawn_launcher(self, node):
        return _Step(self, self._job(node), node, "launcher")

    def _job(self, node) -> _Job:
        job = self.job_of.get(node.label)
        if job is None:
            raise BackendError(f"{node.label}: no Slurm job runs this node")
        return job

    def collect(self, node) -> tuple:
        """Shared results: the nodes wrote into the run directory itself. Node-local results: copied back with
        two steps in the job (a listing, then one tar stream, unpacked by the safe extractor)."""
        if self.opts.shared_fs:
            return FetchResult(0, 0)
        job = self.job_of.get(node.label)
        if job is None or not job.started:
            return FetchResult(0, 0)
        if job.ended:
            raise BackendError(f"{node.label}: Slurm job {job.job_id} is over ({job.info.state if job.info else '?'})"
                               f"; the node directory stays on {node.host.address}: {node.node_dir}")
        return self._fetch(job, node)

    def _fetch(self, job: _Job, node):
        limit = self.config.test.collect_max_bytes
        base = ["srun", f"--jobid={job.job_id}", "--overlap", "--nodes=1", "--ntasks=1",
                f"--nodelist={node.host.address}", "--job-name=flagperf-collect", "--quiet"]
        listing_argv = base + ["sh", "-c", '[ -d "$1" ] || { echo "$1 does not exist" >&2; exit 3; }; '
                                           'cd "$1" && find . -type f -printf "%s %P\\0"', "list", node.node_dir]
        cp = self._run(listing_argv, timeout=120)
        if cp.returncode != 0:
            raise BackendError(f"{node.label}: cannot list {node.node_dir}: {self._text(cp)[1]}")
        if len(cp.stdout) > COLLECT_LISTING_MAX_BYTES:
            raise BackendError(f"{node.label}: the listing of {node.node_dir} is larger than "
                               f"{COLLECT_LISTING_MAX_BYTES} bytes")
        listing, skipped = parse_listing(cp.stdout)
        want, left, budget = plan_fetch(listing, node.local_dir, limit)
        if not want:
            result = FetchResult(0, 0, left, skipped)
            report_fetch(result, f"{node.label}: {node.node_dir}", node.local_dir)
            return result
        argv = base + ["tar", "-C", node.node_dir, "--null", "-T", "-", "-cf", "-"]
        self.log.info(f"slurm: $ {shlex.join(argv)}")
        proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        names = "\0".join(want).encode(errors="surrogateescape") + b"\0"

        def feed():
            try:
                assert proc.stdin is not None
                proc.stdin.write(names)
                proc.stdin.close()
            except OSError:
                pass

        threading.Thread(target=feed, daemon=True).start()
        wanted = sum(listing[w] for w in want)
        stream = _Bounded(proc.stdout, min(budget, wanted + wanted // 4) + 4096 * (len(want) + 16) + (1 << 20))
        try:
            result = safe_extract(stream, node.local_dir, {w: listing[w] for w in want}, budget)
        except Exception as exc:  # noqa: BLE001 - a broken stream, a step that died
            proc.kill()
            raise BackendError(f"{node.label}: copying {node.node_dir} back failed: {exc}") from None
        finally:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        err = proc.stderr.read(64 * 1024).decode(errors="replace").strip() if proc.stderr else ""
        if proc.returncode != 0:
            raise BackendError(f"{node.label}: copying {node.node_dir} back failed (exit {proc.returncode}): {err}")
        result.left.update(left)
        result.skipped.update(skipped)
        report_fetch(result, f"{node.label}: {node.node_dir}", node.local_dir)
        return result

    def end_round(self, nodes) -> None:
        """After the copy back: every job of the round is over (a job still running is cancelled) and gone from
        squeue's active states, at most CANCEL_WAIT_S after its cancel."""
        jobs = list(self.round_jobs)
        with self.cond:
            deadline = time.monotonic() + CANCEL_WAIT_S
            while any(not j.ended and j.info is not None and j.info.phase(COMMENT_DONE) is not None and
                      self.opts.shared_fs for j in jobs) and time.monotonic() < deadline:
                self.cond.wait(POLL_S)      # shared results: the batch script is about to end by itself
        for job in jobs:
            if not job.ended:
                self._cancel(job)
        with self.cond:
            deadline = time.monotonic() + CANCEL_WAIT_S
            while any(not j.ended for j in jobs) and time.monotonic() < deadline:
                self.cond.wait(POLL_S)
            for job in jobs:
                info = job.info
                self.log.info(f"slurm: job {job.job_id}: {info.state if info else 'unknown'}"
                              + (f" ({info.reason})" if info and info.reason else "")
                              + ("" if job.ended else f"; still not over {CANCEL_WAIT_S:g} s after scancel"))
                self.jobs.pop(job.job_id, None)
                for n in job.nodes:
                    self.job_of.pop(n.label, None)
            self.round_jobs = []

    # -- stopping ----------------------------------------------------------------------------------------------
    def _scancel(self, args) -> bool:
        try:
            cp = self._run(["scancel", *args])
        except BackendError as exc:
            self.log.error(str(exc))
            return False
        if cp.returncode != 0:
            self.log.warning(f"slurm: scancel {' '.join(args)}: {self._text(cp)[1]}")
        return cp.returncode == 0

    def _cancel(self, job: _Job):
        job.cancelled = True
        self._scancel([str(job.job_id)])

    def _signal_step(self, job: _Job, step_name: str, sig: str) -> bool:
        """Send a signal to one step of the job (every process of it, on every node); False: no such step."""
        for _attempt in range(4):       # the batch script may be about to start it
            try:
                cp = self._run(["squeue", "-h", "-s", "-j", str(job.job_id), "-o", "%i|%j"], quiet=True)
            except BackendError as exc:
                self.log.error(str(exc))
                return False
            step = parse_steps(self._text(cp)[0]).get(step_name)
            if step:
                return self._scancel([f"--signal={sig}", step])
            if job.ended:
                return False
            time.sleep(0.25)
        return False

    # -- the poller ----------------------------------------------------------------------------------------------
    def _ensure_poller(self):
        with self.cond:
            if self.poller is None or not self.poller.is_alive():
                self.poller = threading.Thread(target=self._poll_loop, name="flagperf-slurm-poll", daemon=True)
                self.poller.start()

    def _poll_loop(self):
        while True:
            with self.cond:
                if self.closed:
                    return
                active = [j for j in self.jobs.values() if not j.ended]
                if not active:
                    self.cond.wait(2.0)
                    continue
            self._poll(active)
            time.sleep(POLL_S)

    def _poll(self, jobs):
        """One squeue call for the jobs; then the exit records of their nodes (shared results)."""
        ids = ",".join(str(j.job_id) for j in jobs)
        try:
            cp = self._run(["squeue", "-h", "--states=all", "-j", ids, "-o", SQUEUE_FORMAT], quiet=True)
        except BackendError as exc:
            self.log.warning(f"{exc}; asking again")
            return
        out, err = self._text(cp)
        if cp.returncode != 0 and "Invalid job id" not in err:
            self.log.warning(f"slurm: squeue failed (exit {cp.returncode}): {err}; asking again")
            return
        infos = parse_squeue(out)
        codes = {}
        if self.opts.shared_fs:
            for job in jobs:
                info = infos.get(job.job_id)
                if job.hosts and info is not None:
                    for n in job.nodes:
                        if n.label not in job.codes:
                            code = _read_exit(Path(n.local_dir) / EXIT_FILE)
                            if code is not None:
                                codes[(job.job_id, n.label)] = code
        with self.cond:
            for job in jobs:
                info = infos.get(job.job_id)
                if info is None:
                    job.missing += 1
                    job.gone = job.missing >= MISSING_POLLS
                else:
                    job.missing = 0
                    job.info = info
            for (jid, label), code in codes.items():
                self.jobs[jid].codes[label] = code
            self.cond.notify_all()

    def refresh(self, job: _Job):
        self._poll([job])

    # -- housekeeping --------------------------------------------------------------------------------------------
    def clean(self, hosts, run_id=None) -> dict:
        """`flagperf clean`: cancel this user's flagperf jobs (of one run with --run) still in the queue."""
        try:
            cp = self._run(["squeue", "-h", "-u", getpass.getuser(), "-o", "%i|%j"])
        except BackendError as exc:
            return {"slurm": str(exc)}
        out, err = self._text(cp)
        if cp.returncode != 0:
            return {"slurm": f"squeue failed: {err}"}
        prefix = f"flagperf-{run_id}-" if run_id else "flagperf-"
        found = [line.split("|", 1) for line in out.splitlines() if "|" in line]
        mine = [(jid, name) for jid, name in found if name.startswith(prefix)]
        if mine and not self._scancel([jid for jid, _ in mine]):
            return {"slurm": "scancel failed (see the log)"}
        return {"slurm": [f"job {jid} {name}" for jid, name in mine]}

    def describe(self, node) -> list:
        """--dry-run: the sbatch line, the batch script and where the node's spec goes."""
        each = bool(node.case_config.get("each"))
        if node.node_rank != 0 and not each:
            return [f"slurm: a task of the round's job (node 0's): srun runs it on the job's node {node.node_rank} "
                    f"(SLURM_NODEID {node.node_rank}); its name replaces {node.host.address}"]
        index = None
        if each:
            digits = "".join(c for c in node.host.address if c.isdigit())
            index = int(digits) if digits else 0
        nodes = [node]
        if not each and node.launch.nnodes > 1:
            nodes = [node] + [_replace_strings(node, {node.host.address: TOKEN % i}, None)
                              for i in range(1, node.launch.nnodes)]
        job_dir = node.local_dir.parent / ("slurm" if index is None else f"slurm-{index}")
        tokens = {} if each else {n.host.address: i for i, n in enumerate(nodes)}
        port = node.master_port if self.opts.derived_port else None
        pin = f"<usable node {index} of the partition>" if each else None
        try:
            doc = specs_document([_node_spec(self._template(n)) for n in nodes], tokens, port_placeholder=port,
                                 exit_file=EXIT_FILE, out_file=NODE_OUTPUT, monitor_out_file=MONITOR_OUTPUT)
            script, argv = self._job_files(node.launch.case_name, node.launch.round, nodes, job_dir, doc, pin,
                                           self.config.test.case_timeout)
        except BackendError as exc:
            return [f"slurm: the job cannot be written: {exc}"]
        lines = [f"slurm: one job {'for this node' if each else 'for the round'}, submitted when the round starts "
                 f"(host names in {{slurm-node<k>}} are filled in when it runs"
                 + (f"; MASTER_PORT {port} becomes {derived_port(0)} + job id % 10000" if port else "") + "):",
                 f"  $ {shlex.join(argv)}", f"  batch script {job_dir / SCRIPT_FILE}:"]
        lines += [f"  | {line}" for line in script.rstrip("\n").splitlines()
                  if len(line) < 400 or not line.startswith("{")]
        if self.opts.shared_fs:
            lines.append(f"  node specs: {job_dir / SPECS_FILE} (node dir, launch.json, case_config.json, the "
                         f"commands above)")
        if self.config.test.runtime in CONTAINER_RUNTIMES:
            inside = self._template(node)
            lines.append(f"  in the image ({self.config.test.runtime}), slurm_node.py starts: "
                         f"$ {shlex.join(inside.launcher_argv)}")
            lines.append(f"  and the ranks: {shlex.join(inside.launch.argv)}")
        return lines

    def close(self) -> None:
        with self.cond:
            left = [j for j in self.jobs.values() if not j.ended]
        for job in left:
            self.log.warning(f"slurm: job {job.job_id} still active at the end of the run: cancelled")
            self._cancel(job)
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    # -- after the run: SLURM_DRAIN_REJECTED ------------------------------------------------------------------------
    def act_on_verdicts(self, verdicts, run_id: str) -> list:
        """SLURM_DRAIN_REJECTED: drain every node judged ``reject`` with the run id and its first reason
        (``scontrol update NodeName=<node> State=DRAIN Reason=...``, an argv list), so that Slurm schedules no
        new job there until someone resumes it. Only a node of the run's partition, named as one node, is drained."""
        if not self.opts.drain_rejected:
            return []
        known = {name for name, _state, _gres in self.nodes}
        where = f"partition {self.partition.get('PartitionName', '?')}" if self.partition else "the partition"
        out = []
        for v in verdicts:
            if v.verdict != "reject":
                continue
            host = v.host
            if not DRAIN_NODE_NAME.fullmatch(host) or host not in known:
                out.append((False, f"slurm: not draining {host}: not a node of {where} (sinfo)"))
                continue
            reason = drain_reason(run_id, v)
            try:
                cp = self._run(["scontrol", "update", f"NodeName={host}", "State=DRAIN", f"Reason={reason}"])
                _out, err = self._text(cp)
            except BackendError as exc:
                out.append((False, f"slurm: cannot drain {host}: {exc}"))
                continue
            if cp.returncode != 0:
                out.append((False, f"slurm: cannot drain {host}: scontrol exited {cp.returncode}: "
                                   f"{err[:300] or 'no message'}; {DRAIN_REMEDY}"))
                continue
            out.append((True, f"slurm: drained {host} (Reason={reason}); when it is fixed: scontrol update "
                              f"NodeName={host} State=RESUME"))
        return out


def drain_reason(run_id: str, verdict) -> str:
    """``flagperf <run id>: <what> : <why>`` of a rejected node's first reject reason: one line, control and
    format characters as spaces, no double quote (scontrol strips one at either end), at most
    DRAIN_REASON_MAX_CHARS characters."""
    first = next((r for r in verdict.reasons if r.severity == "reject"), None)
    if first is None:
        why = "rejected"
    elif first.subject and first.subject != "node":
        why = f"{first.subject}: {first.detail}"
    else:
        why = first.detail or "rejected"
    text = f"flagperf {run_id}: {why}"
    text = " ".join("".join(c if c.isprintable() else " " for c in text).replace('"', "'").split())
    if len(text) > DRAIN_REASON_MAX_CHARS:
        text = text[:DRAIN_REASON_MAX_CHARS - 3] + "..."
    return text


class _Step:
    """A node's launcher or monitor in a running job: NodeProcess over what the poller sees."""

    def __init__(self, backend: SlurmBackend, job: _Job, node, kind: str):
        self.backend, self.job, self.node, self.kind = backend, job, node, kind
        self.terms = 0
        self.scheduler_end: tuple | None = None     # (WaitEnd value, why) when Slurm ended the job itself
        self.explained = False
        self.no_record = False      # the launcher step ended and left no slurm_exit.json (shared results)

    @property
    def pid(self) -> int:
        return self.job.job_id

    def _status(self) -> int | None:
        job = self.job
        if self.kind == "monitor":
            done = job.info is not None and job.info.phase(COMMENT_DONE) is not None
            return 0 if done or job.ended else None
        code = job.codes.get(self.node.label)
        if code is not None:
            return code
        launchers = job.info.phase(COMMENT_LAUNCHERS) if job.info is not None else None
        if launchers is not None and not self.backend.opts.shared_fs:
            return 0 if launchers == 0 else 1       # per node: ranks.json, once copied back
        if launchers is not None or job.ended:
            self.no_record = self.backend.opts.shared_fs
            return NO_RECORD_EXIT
        return None

    def wait(self, timeout: float | None = None) -> int | None:
        cond = self.backend.cond
        deadline = None if timeout is None else time.monotonic() + timeout
        with cond:
            while True:
                code = self._status()
                if code is not None:
                    break
                left = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
                if left <= 0:
                    return None
                cond.wait(left)
        if code != 0 and self.kind == "launcher" and not self.explained:
            self.explained = True
            self.backend.refresh(self.job)
            end = scheduler_end(self.job.info)
            if end is None and self.job.info is not None and self.job.info.state == "CANCELLED" and \
                    not self.job.cancelled:
                end = ("error", f"Slurm job {self.job.job_id} was cancelled outside flagperf (scancel?)")
            if end is None and self.no_record:
                end = ("error", f"{self.node.label}: its node launcher step ended without recording an exit status "
                                f"(Slurm job {self.job.job_id}: {self._job_output_tail()})")
            self.scheduler_end = end
        return code

    def _job_output_tail(self) -> str:
        """The last lines of the batch job's output file (srun's and slurm_node.py's own errors)."""
        path = self.job.job_dir / output_option(str(self.job.job_dir))[1].replace("%j", str(self.job.job_id))
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip()]
        except OSError:
            return f"no output in {path}"
        return f"{path}: " + " | ".join(lines[-3:]) if lines else f"{path} is empty"

    def signal(self, sig: int) -> None:
        b, job = self.backend, self.job
        if job.ended or self.wait(0) is not None:
            return
        if sig == signal.SIGKILL or not job.started:
            b._cancel(job)
            return
        if self.kind == "monitor":
            if not job.monitor_stopped:
                job.monitor_stopped = True
                b._signal_step(job, STEP_MONITOR, "TERM")
            return
        self.terms += 1
        # SIGURG: ranks ignore it; slurm_node.py turns it into SIGTERM for its node launcher (a second: SIGTERM
        # again, which makes the launcher SIGKILL its ranks at once).
        if (self.terms == 1 and job.urgs == 0) or (self.terms >= 2 and job.urgs == 1):
            job.urgs += 1
            if not b._signal_step(job, STEP_LAUNCHER, "URG"):
                b._cancel(job)


NO_RECORD_EXIT = 1      # a node launcher step that ended without leaving its exit status


class _Bounded:
    """A read(n)-only view of a pipe that refuses to give more than ``limit`` bytes."""

    def __init__(self, raw, limit: int):
        self.raw, self.left = raw, limit

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            raise OSError("the node sent more than was listed")
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.raw.read(n)
        self.left -= len(data)
        return data


def job_name(run_id: str, case_name: str, round_index: int) -> str:
    return f"flagperf-{run_id}-{case_name}-r{round_index}"[:200]


def _node_spec(node) -> dict:
    """One node's entry in the job's specs (launcher/slurm_node.py)."""
    return {"node_rank": node.node_rank, "node_dir": node.node_dir, "files": node.files,
            "launcher_argv": list(node.launcher_argv), "monitor_argv": list(node.monitor_argv),
            "launcher_log": LAUNCHER_LOG}


def _replace_strings(node, table: dict, port: tuple | None):
    """The NodePlan with the placeholders of ``table`` (and the port) replaced in every string it holds."""
    def sub(v):
        return substitute(v, table, port)
    return dataclasses.replace(
        node, host=dataclasses.replace(node.host, address=sub(node.host.address)), node_dir=sub(node.node_dir),
        local_dir=Path(sub(str(node.local_dir))), master_addr=sub(node.master_addr),
        launcher_argv=tuple(sub(list(node.launcher_argv))), monitor_argv=tuple(sub(list(node.monitor_argv))),
        launch=LaunchSpec.from_dict(sub(node.launch.to_dict())), case_config=sub(node.case_config))


def _read_exit(path: Path) -> int | None:
    """The exit status slurm_node.py recorded (None: not yet, or not a record of ours). Never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_EXIT_FILE_BYTES)
    finally:
        os.close(fd)
    try:
        code = json.loads(data).get("exit_code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, int) and not isinstance(code, bool) else None
