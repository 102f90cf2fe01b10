"""Deploy over real SSH (testbed/sshbed.py) sends what it hashed: a file of a case folder swapped for a symlink to a
secret outside, racing the deploys, never brings the secret to the host."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import flagperf.hosts.treesync as treesync
from flagperf.deploy import case_tree, deploy_host, local_manifest
from flagperf.hosts.ssh import SSHTransport
from flagperf.options.base import HostSpec
from tests.unit.test_deploy_race import SECRET, SWAPPED, Swapper, files_holding, make_case, make_secret

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kept", ["bytes", "descriptors"])
def test_swap_racing_ssh_deploys_never_sends_the_secret(tmp_path, ssh_bed, kept, monkeypatch):
    """``descriptors``: no file is kept as bytes; 8 are sent from the descriptor they were hashed from, the rest
    from the spool of what was read."""
    if kept == "descriptors":
        monkeypatch.setattr(treesync, "SNAPSHOT_KEEP_FILE_BYTES", 0)
        monkeypatch.setattr(treesync, "SNAPSHOT_MAX_FDS", 8)
    h = ssh_bed.hosts[0]
    fp = Path(h["flagperf_path"])
    host = HostSpec(h["address"], h["port"], h["user"], h["key"], sys.executable, str(fp))
    transport = SSHTransport(host, str(ssh_bed.known_hosts))
    case = make_case(tmp_path)
    secret = make_secret(tmp_path)
    manifest = local_manifest(REPO)
    sent_inside = 0
    try:
        with Swapper(case, SWAPPED, secret, tmp_path / "staging") as swapper:
            for i in range(30):
                shutil.rmtree(fp / "cases", ignore_errors=True)       # every deploy sends the case folder again
                result = deploy_host(transport, REPO, manifest, (case_tree(case, "cases/kit"),))
                assert files_holding(fp, SECRET) == [], f"deploy {i}: the secret reached the host"
                sent_inside += sum((fp / "cases/kit" / n).is_file() for n in SWAPPED)
                assert result.files_sent >= 150
                for rel in ("sub/f000.py", "sub/f149.py"):
                    assert (fp / "cases/kit" / rel).read_bytes() == (case / rel).read_bytes()
        assert swapper.swaps >= 10
        assert sent_inside > 0
        launcher = Path("launcher") / "node_launcher.py"
        assert (fp / launcher).read_bytes() == (REPO / launcher).read_bytes()
    finally:
        transport.close()
