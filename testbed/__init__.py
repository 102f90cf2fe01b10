"""Real test beds for flagperf's tests, its performance scripts (bench/) and its by-hand tools (scripts/).

Nothing here is mocked: each module sets up a real part on this machine.

* :mod:`testbed.sshbed` -- N real OpenSSH servers (``sshd``) on loopback addresses 127.0.0.2, 127.0.0.3, ...,
  with host keys, a client key and a ``known_hosts`` for strict host-key checking.
* :mod:`testbed.dockerenv` -- a real Docker engine (Debian's docker.io) and two test images built offline on
  this machine (a debootstrap Debian with python, and the same plus CPU torch).
* :mod:`testbed.slurmbed` -- a real Slurm cluster (Debian's slurm-wlm: munged, slurmctld, two slurmd as virtual
  nodes on 127.0.0.1) with its own SLURM_CONF and ports, and a Charliecloud image directory (debootstrap + CPU torch).
* :mod:`testbed.browser` -- a real headless browser (Debian's ``chromium``, installed with apt-get when missing)
  that renders a report file: its DOM after the scripts ran, its console messages, a screenshot.
* :mod:`testbed.openmpi` -- Debian's Open MPI (``mpirun``, ``mpicc``), installed with apt-get when missing, and
  a helper that compiles an MPI program.
* :mod:`testbed.proctable` -- a /proc scanner: which live processes match a command line, to prove that nothing
  was left running.
* :mod:`testbed.realparts` -- the rule for a missing real part (no sshd, no dockerd, no nvcc): under CI=true the
  test fails with the reason, elsewhere it skips.  It imports pytest; the other modules do not.

This package is not part of the installed ``flagperf`` distribution; import it from a checkout (the repository
root on ``sys.path``), as tests/, bench/ and scripts/ do.
"""
