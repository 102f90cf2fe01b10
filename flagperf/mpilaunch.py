"""Launch mode mpi (docs/benchmarks.md, "launch: mpi"): node 0's node command, one mpirun over the job's nodes.

Pure: it builds the argv of ``launcher/mpi_launch.py`` (which runs on node 0, finds Open MPI or MPICH there and
execs mpirun) from every node's context: its address, its ranks, its case folder, its node directory and its rank
command. The other nodes' launchers start nothing (flagperf_contract: launch mode "mpi"); the plan gives them
their rank command for the record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath

from flagperf.catalog import BENCHMARK_FILE, LAUNCH_MPI, CaseSource, substitute
from flagperf.errors import ConfigError

MPI_STARTER = "launcher/mpi_launch.py"     # node 0's node command in launch mode mpi, under FLAGPERF_PATH
# Not exported from node 0 to every rank: the ranks' wrapper sets them per rank and node
MPI_RANK_VARS = ("RANK", "LOCAL_RANK", "NODE_RANK")


@dataclass(frozen=True)
class MpiContext:
    """One node of an MPI job: its address, node rank, ranks per node, and its rank command."""

    host: str
    node_rank: int
    slots: int
    cwd: str
    node_dir: str
    argv: tuple


def mpi_problem(config, src: CaseSource) -> str | None:
    """Why a launch: mpi case cannot run under this config (None: it can)."""
    if src.mode != LAUNCH_MPI:
        return None
    where = src.root / BENCHMARK_FILE
    if config.test.runtime in config.cluster.options.container_runtimes:
        return (f"{where}: launch: mpi runs mpirun on the hosts themselves: needs RUNTIME bare, "
                f"got {config.test.runtime}")
    if config.cluster.options.mpi_shell_config(()) is None:
        return (f"{where}: launch: mpi needs SCHEDULER ssh (a host list that node 0's mpirun reaches over ssh), "
                f"got SCHEDULER {config.cluster.scheduler}")
    return None


def mpi_starter_argv(config, src: CaseSource, python: str, flagperf_path: str, contexts, env_names, hosts,
                     values: dict) -> list:
    """``<python> <FLAGPERF_PATH>/launcher/mpi_launch.py --job <json>``: every node's context (node 0 first), the
    names of the variables node 0's mpirun exports to every rank, the ssh_config with which it reaches ``hosts``
    (the job's other hosts) and the benchmark's ``mpi_args`` (placeholders filled from ``values``, node 0's).
    ConfigError when the case cannot run so."""
    problem = mpi_problem(config, src)
    if problem:
        raise ConfigError(problem)
    try:
        shell = config.cluster.options.mpi_shell_config(list(hosts))
    except ValueError as exc:
        raise ConfigError(f"{config.cluster.path or 'the cluster config'}: launch: mpi: {exc}") from None
    job = {"contexts": [{"host": c.host, "node_rank": c.node_rank, "slots": c.slots, "cwd": c.cwd,
                         "node_dir": c.node_dir, "argv": list(c.argv)} for c in contexts],
           "env": [n for n in dict.fromkeys(env_names) if n not in MPI_RANK_VARS],
           "shell_config": shell or None, "mpi_args": substitute(src.mpi_args, values)}
    return [python, str(PurePosixPath(flagperf_path) / MPI_STARTER), "--job", json.dumps(job)]


def mpi_job_lines(argv) -> list:
    """--dry-run: what node 0's mpirun will start, one line per node (from the starter's argv)."""
    try:
        job = json.loads(argv[argv.index("--job") + 1])
        contexts = job["contexts"]
    except (ValueError, IndexError, KeyError, TypeError):
        return []
    out = [f"mpirun on node 0 (Open MPI or MPICH, found there), {len(contexts)} node(s); exported to every rank: "
           f"{', '.join(job.get('env', [])) or 'nothing'}; mpi_args: {' '.join(job.get('mpi_args', [])) or '-'}"]
    for c in contexts:
        out.append(f"  node {c['node_rank']} on {c['host']}: {c['slots']} rank(s) in {c['cwd']}: "
                   f"{' '.join(c['argv'])}")
    return out
