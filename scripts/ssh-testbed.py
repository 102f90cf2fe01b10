#!/usr/bin/env python3
"""Run the SSH test bed by hand: N real sshd servers on 127.0.0.2, 127.0.0.3, ... (testbed/sshbed.py).

  python scripts/ssh-testbed.py start N [--root DIR] [--port P] [--master-port M]
      start the bed in the foreground, write DIR/cluster.yaml, print how to point flagperf at it; Ctrl-C stops
      every sshd of the bed.
  python scripts/ssh-testbed.py selfcheck N [--root DIR] [--port P]
      start the bed, connect to every host with paramiko (strict host-key checking), print timings, stop.

Without --root the bed lives in a fresh /tmp/sshbed-XXXX folder; without --port a port free on all addresses is
picked (the bed's own default is 2222).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _import_sshbed():
    sys.path.insert(0, str(REPO))
    from testbed import sshbed
    return sshbed


sshbed = _import_sshbed()


def make_bed(args):
    sshbed.ensure_openssh()
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="sshbed-", dir="/tmp"))
    port = args.port or sshbed.find_free_port(sshbed.bed_addresses(args.n, args.first_octet))
    return sshbed.SSHBed(root, args.n, port=port, first_octet=args.first_octet)


def describe(bed) -> None:
    h0, hl = bed.hosts[0], bed.hosts[-1]
    print(f"{bed.n} sshd on {h0['address']}..{hl['address']} port {bed.port} "
          f"(started in {bed.start_seconds:.2f} s; isolation: {bed.isolation}) {bed.isolation_note}".rstrip())
    print(f"  root        {bed.root}")
    print(f"  client key  {bed.client_key}")
    print(f"  known_hosts {bed.known_hosts}")
    print(f"  by hand     ssh -p {bed.port} -i {bed.client_key} -o UserKnownHostsFile={bed.known_hosts} "
          f"-o StrictHostKeyChecking=yes -o BatchMode=yes {h0['user']}@{h0['address']} hostname")


def cmd_start(args) -> int:
    bed = make_bed(args)
    stop_now = []

    def on_signal(signum, _frame):
        stop_now.append(signum)
    signal.signal(signal.SIGINT, signal.default_int_handler)    # also when started with SIGINT ignored (`&`)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        bed.start()
        cluster = bed.write_cluster_yaml(bed.root / "cluster.yaml", master_port=args.master_port)
        describe(bed)
        print(f"  cluster     {cluster}")
        print()
        print(f"  flagperf check --config {REPO / 'configs' / 'test_conf.yaml'} --cluster {cluster}")
        print()
        print("Ctrl-C stops the bed.", flush=True)
        while not stop_now:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        bed.stop()
        print("bed stopped (every sshd of it ended)", flush=True)
    return 0


def cmd_selfcheck(args) -> int:
    bed = make_bed(args)
    try:
        bed.start()
        describe(bed)
        runs = [("Nagle on (paramiko default)", bed.self_check(nodelay=False)),
                ("TCP_NODELAY", bed.self_check(nodelay=True))]
    finally:
        bed.stop()
    print(f"{'host':<12} {'bashrc':>6}  " + "  ".join(f"{'connect':>8} {'exec med':>8}" for _ in runs)
          + "   (ms; " + " | ".join(name for name, _ in runs) + ")")
    for k in range(bed.n):
        cols = "  ".join(f"{r[k]['connect_s'] * 1e3:8.1f} {r[k]['exec_median_s'] * 1e3:8.1f}" for _, r in runs)
        print(f"{runs[0][1][k]['address']:<12} {runs[0][1][k]['bashrc_bytes']:>6}  {cols}")
    for name, r in runs:
        med = sorted(x["exec_median_s"] for x in r)[len(r) // 2]
        con = sorted(x["connect_s"] for x in r)[len(r) // 2]
        print(f"median over hosts, {name}: connect {con * 1e3:.1f} ms, exec {med * 1e3:.1f} ms")
    print(f"self-check passed on all {bed.n} hosts; bed stopped")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "selfcheck"):
        p = sub.add_parser(name)
        p.add_argument("n", type=int, help="number of hosts (1..64)")
        p.add_argument("--root", help="folder for the bed's files (default: a new /tmp/sshbed-XXXX)")
        p.add_argument("--port", type=int, default=0, help="sshd port on every address (default: a free one)")
        p.add_argument("--first-octet", type=int, default=2, help="first address is 127.0.0.<this> (default 2)")
        if name == "start":
            p.add_argument("--master-port", type=int, default=29555, help="MASTER_PORT in cluster.yaml")
    args = parser.parse_args(argv)
    try:
        return cmd_start(args) if args.command == "start" else cmd_selfcheck(args)
    except sshbed.SSHBedError as exc:
        print(f"ssh-testbed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
