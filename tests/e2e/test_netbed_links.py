"""A bad link planted with real kernel networking and found by flagperf: four sshd hosts, each in its own network
namespace, joined by veth pairs to a bridge (testbed/netbed.py). Every link is shaped with tc to a line rate, as
a NIC's speed (unshaped veths are CPU-bound on this machine and swing by a factor of three, see the module's
docstring); one host's link is held to 60% of it. The ``pairs`` mode runs p2p between every pair of hosts, and
the pair findings name that host, and no other."""

import json
import os
import statistics
import subprocess
import sys

import pytest
import yaml

from flagperf.results.pairs import pair_findings, pair_matrix
from flagperf.results.summary import Summary
from testbed import netbed

from testbed.realparts import unavailable

from .conftest import only_run_dir, run_cli, write_conf

LINE_RATE = "2gbit"         # every link: about 235 MB/s of TCP payload here
BAD_RATE = "1200mbit"       # the planted bad link: 60% of the line rate
BAD = 1                     # the host whose link is slowed (neither the first host, node 0 of most jobs, nor the last)


def _p2p_override(home, hw):
    """p2p between the two hosts of a job (one rank each), one direction, 4 MiB messages: long enough that the
    shaped link, not the CPU, sets the time."""
    folder = home / "vendors" / "cpu" / "p2p"
    folder.mkdir(exist_ok=True)
    (folder / f"config_{hw}.yaml").write_text('pairs: [[0, 1]]\nmodes: [uni]\nsizes: ["4M"]\ntime_budget_s: 1\n')


def _names(bed):
    spaces = set(netbed._netns_names())
    links = set(netbed._link_names())
    own = {bed.bridge} | {bed.veth(i) for i in range(bed.n)} | {bed.netns(i) for i in range(bed.n)}
    return own & (spaces | links)


def test_the_limited_link_measures_60_percent_and_the_bed_cleans_up(net_bed_factory, record_property):
    bed = net_bed_factory(4, line_rate=LINE_RATE)
    assert "tbf" in bed.qdiscs(0) and "rate 2Gbit" in bed.qdiscs(0), bed.qdiscs(0)
    bed.limit(BAD, BAD_RATE)
    assert "rate 1200Mbit" in bed.qdiscs(BAD), bed.qdiscs(BAD)
    others = [bed.measure(0, 2, 32 << 20)["mb_s"] for _ in range(3)] + \
             [bed.measure(3, 2, 32 << 20)["mb_s"] for _ in range(3)]
    slow = [bed.measure(0, BAD, 32 << 20)["mb_s"] for _ in range(3)] + \
           [bed.measure(BAD, 3, 32 << 20)["mb_s"] for _ in range(3)]      # both directions of the slow link
    ratio = statistics.median(slow) / statistics.median(others)
    print(f"TCP stream: pairs without host {BAD}: {[round(v) for v in others]} MB/s; with host {BAD}: "
          f"{[round(v) for v in slow]} MB/s; ratio {ratio:.0%}")
    record_property("stream_ratio", round(ratio, 3))
    assert 0.45 <= ratio <= 0.75, (others, slow)
    assert max(others) < 300 and max(slow) < 200, (others, slow)         # the shaping holds: 250 MB/s, 150 MB/s
    # htb, the other shaper, gives the same link
    bed.limit(BAD, BAD_RATE, kind="htb")
    assert "htb" in bed.qdiscs(BAD)
    htb = statistics.median(bed.measure(0, BAD, 32 << 20)["mb_s"] for _ in range(3))
    assert 0.45 <= htb / statistics.median(others) <= 0.75, (htb, others)
    bed.unlimit(BAD)
    assert "rate 2Gbit" in bed.qdiscs(BAD)
    names = _names(bed)
    assert len(names) == 9, names                                        # bridge, 4 veths, 4 namespaces
    bed.stop()
    leftovers = [n for n in netbed._netns_names() + netbed._link_names() if n in names]
    assert leftovers == [], leftovers


def test_a_start_removes_what_a_killed_bed_of_its_slot_left(tmp_path, net_bed_factory):
    # a bed started by a process that is then SIGKILLed: its namespaces, veths and bridge stay behind
    script = (f"import sys, time; sys.path.insert(0, {str(netbed.__file__.rsplit('/testbed/', 1)[0])!r})\n"
              f"from testbed.netbed import NetBed\n"
              f"bed = NetBed({str(tmp_path / 'killed')!r}, 2).start()\n"
              f"print(bed.slot, flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.isdigit(), line
        slot = int(line)
        # while its owner lives, the slot is taken: another bed gets another slot
        other = net_bed_factory(2)
        assert other.slot != slot
    finally:
        proc.kill()
        proc.wait()
    prefix = f"{netbed.NAME_STEM}{slot}"
    stale = [n for n in netbed._netns_names() + netbed._link_names() if n.startswith(prefix)]
    assert f"{prefix}br" in stale and f"{prefix}h0" in stale, stale
    other_names = _names(other)
    bed = net_bed_factory(2, slot=slot)
    assert sorted(bed.leftovers_removed) == sorted(f"{'netns' if 'h' in n[len(prefix):] else 'link'} {n}"
                                                   for n in stale), bed.leftovers_removed
    assert _names(other) == other_names                  # the other bed's names are untouched
    bed.self_check(repeat=1)


def test_a_failed_start_leaves_nothing(tmp_path, monkeypatch):
    why = netbed.unavailable_reason()
    if why:
        unavailable(f"network test bed unavailable: {why}")
    seen = {}

    def broken(self, indices):
        seen.update(prefix=self.prefix, names=_names(self), pids=[p.pid for p in self._procs.values()])
        raise netbed.NetBedError("planted: a host did not come up")

    monkeypatch.setattr(netbed.NetBed, "_wait_up", broken)
    bed = netbed.NetBed(tmp_path / "bed", 3, line_rate=LINE_RATE)
    with pytest.raises(netbed.NetBedError, match="planted"):
        bed.start()
    assert len(seen["names"]) == 7 and len(seen["pids"]) == 3, seen       # it had got that far
    assert bed.slot is None and not bed._procs
    left = [n for n in netbed._netns_names() + netbed._link_names() if n.startswith(seen["prefix"])]
    assert left == [], left
    alive = [pid for pid in seen["pids"] if os.path.exists(f"/proc/{pid}") and
             open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    assert alive == [], alive


def _run_pair(tmp_path, home, bed, order, name):
    """flagperf run of one 2-node p2p case over bed hosts ``order``; the headline (GB/s)."""
    cluster = tmp_path / f"cluster_{name}.yaml"
    bed.write_cluster_yaml(cluster)
    data = yaml.safe_load(cluster.read_text())
    data["HOSTS"] = [data["HOSTS"][i] for i in order]
    cluster.write_text(yaml.safe_dump(data, sort_keys=False))
    result = tmp_path / f"result_{name}"
    conf = write_conf(tmp_path, {"p2p:pytorch:netbed:2:1:1": "null"}, CLUSTER=cluster.name,
                      FLAGPERF_LOG_PATH=result)
    code, out, err = run_cli(["run", "--config", conf], home=home, timeout=300)
    assert code == 0, out + err
    summary = json.loads((only_run_dir(result) / "summary.json").read_text())
    (case,) = summary["cases"]
    (rnd,) = case["rounds"]
    assert rnd["metrics"]["bw_uni_0_1_4M"]["unit"] == "GB/s"
    return rnd["metrics"]["bw_uni_0_1_4M"]["value"]


def test_two_node_p2p_measures_less_over_the_limited_link(tmp_path, net_bed_factory, flagperf_home, record_property):
    bed = net_bed_factory(4, line_rate=LINE_RATE)
    bed.limit(BAD, BAD_RATE)
    _p2p_override(flagperf_home, "netbed")
    fast = _run_pair(tmp_path, flagperf_home, bed, (0, 2), "fast")
    slow = _run_pair(tmp_path, flagperf_home, bed, (0, BAD), "slow")
    print(f"flagperf p2p, 2 nodes, 4 MiB: {bed.addresses[0]} -> {bed.addresses[2]}: {fast:.3f} GB/s; "
          f"{bed.addresses[0]} -> {bed.addresses[BAD]} (limited): {slow:.3f} GB/s; ratio {slow / fast:.0%}")
    record_property("p2p_ratio", round(slow / fast, 3))
    assert 0.45 <= slow / fast <= 0.75, (fast, slow)


def test_pairs_mode_names_the_host_with_the_slow_link(tmp_path, net_bed_factory, flagperf_home, record_property):
    bed = net_bed_factory(4, line_rate=LINE_RATE)
    bed.limit(BAD, BAD_RATE)
    bad = bed.addresses[BAD]
    _p2p_override(flagperf_home, "netbed")
    bed.write_cluster_yaml(tmp_path / "cluster.yaml")
    conf = write_conf(tmp_path, {"p2p:pytorch:netbed:pairs:1:1": "null"}, CLUSTER="cluster.yaml")
    code, out, err = run_cli(["run", "--config", conf], home=flagperf_home, timeout=600)
    run = only_run_dir(tmp_path / "result")
    summary = Summary.load(run / "summary.json")
    pairs = pair_matrix(summary)
    table = "\n".join(f"{p.a} <-> {p.b}: {p.value} {p.unit} (median {p.median}, slow {p.slow}, host {p.host})"
                      for p in pairs)
    print(table)
    assert len(pairs) == 6, table + out + err                            # every pair of 4 hosts ran
    assert all(p.value is not None and p.failed == 0 for p in pairs), table + out + err
    findings = pair_findings(summary)
    assert [f.subject for f in findings] == [f"host {bad} (all its pairs)"], (findings, table, out)
    (finding,) = findings
    assert finding.source == "link" and finding.severity in ("degraded", "reject")
    assert bad in finding.detail and finding.remedy
    mine = [p for p in pairs if bad in (p.a, p.b)]
    rest = [p for p in pairs if bad not in (p.a, p.b)]
    assert len(mine) == 3 and len(rest) == 3
    assert all(p.slow and p.host == bad for p in mine), table
    assert not any(p.slow or p.host for p in rest), table
    # the healthy pairs agree with each other; the bad host's pairs sit at 45-75% of them
    healthy = statistics.median(p.value for p in rest)
    assert all(abs(p.value - healthy) <= 0.2 * healthy for p in rest), table
    ratios = [p.value / healthy for p in mine]
    record_property("pair_ratios", [round(r, 3) for r in ratios])
    assert all(0.45 <= r <= 0.75 for r in ratios), (ratios, table)
    assert code in (0, 1), out + err                  # 1: a finding (or an outlier), never an error


@pytest.mark.parametrize("rate", ["fast", "1x"])
def test_bad_rates_are_refused(rate, tmp_path):
    bed = netbed.NetBed(tmp_path, 2)
    with pytest.raises(ValueError, match="not a tc rate"):
        bed.limit(0, rate)
    with pytest.raises(ValueError, match="not a tc rate"):
        netbed.NetBed(tmp_path, 2, line_rate=rate)
