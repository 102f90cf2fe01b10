"""Debian's Open MPI for the launch-mode-mpi tests: ``mpirun`` and ``mpicc``, installed with apt-get when missing.

:func:`ensure_openmpi` installs ``openmpi-bin`` and ``libopenmpi-dev`` (as root, refreshing the package lists
once when the first try fails, as :func:`testbed.sshbed.ensure_openssh` does for openssh-server) and returns the
paths of mpirun and mpicc. :func:`build` compiles one C file with mpicc. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PACKAGES = ("openmpi-bin", "libopenmpi-dev")


class OpenMPIError(RuntimeError):
    """Open MPI is missing and could not be installed, or a program did not compile; the message says why."""


def _tools() -> tuple:
    return shutil.which("mpirun"), shutil.which("mpicc")


def ensure_openmpi() -> tuple:
    """(mpirun, mpicc) paths; installs Debian's Open MPI with apt-get when either is missing."""
    if all(_tools()):
        return _tools()
    if os.geteuid() != 0:
        raise OpenMPIError(f"mpirun/mpicc missing and this is not root: apt-get install -y {' '.join(PACKAGES)}")
    if not shutil.which("apt-get"):
        raise OpenMPIError("mpirun/mpicc missing and apt-get is not available: install Open MPI")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    proc = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:        # stale package lists are the usual cause: refresh once and retry
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"], check=False, env=env,
                       stdin=subprocess.DEVNULL, capture_output=True)
        proc = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0 or not all(_tools()):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise OpenMPIError(f"could not install {' '.join(PACKAGES)} with apt-get (exit {proc.returncode}):\n{tail}")
    return _tools()


def build(source: Path, out: Path) -> Path:
    """Compile ``source`` (C) with mpicc into ``out``."""
    _mpirun, mpicc = ensure_openmpi()
    proc = subprocess.run([mpicc, "-O1", "-o", str(out), str(source)], check=False, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise OpenMPIError(f"mpicc {source} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return out
