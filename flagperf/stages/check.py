"""The check stage: connect to every host, deploy the tree, probe; a host that fails stops the run before any
round."""

from __future__ import annotations

import logging
from dataclasses import replace

import yaml

from flagperf.backends import Backend
from flagperf.checks import core_warnings, failed, moved_port, needed_accelerators, port_note, ranks_per_host
from flagperf.plan import build_plan
from flagperf.stages.context import RunContext
from flagperf.stages.prepare import run_record
from flagperf_contract import write_json_atomic


def check_hosts(backend: Backend, hosts, need: dict, *, deploy: bool, say=None, phase=None) -> list:
    """Connect to every host, deploy the tree (when asked), probe; one HostCheck per host, in the hosts' order.
    ``phase`` (if given) hears each step: "connecting", "deploying", "probing"."""
    phase = phase or (lambda _step: None)
    order = []
    for h in hosts:
        if h.address not in order:
            order.append(h.address)
    phase("connecting")
    results = {c.host: c for c in backend.connect(hosts)}
    connected = [h for h in hosts if h.address not in results]
    if deploy and connected:
        phase("deploying")
        for o in backend.deploy(connected):
            if o.ok:
                d = o.value
                if say and not d.same_tree:
                    say(f"deploy: host {d.host}: {d.files_sent} of {d.files_total} file(s) differed, "
                        f"{d.bytes_sent} bytes sent to {d.path}{d.tree_note}")
                for note in d.notes if say else ():     # left out of a CASE_PATHS folder
                    say(f"deploy: host {d.host}: {note}")
            else:
                results[o.key.address] = failed(o.key.address, "deploy_failed",
                                                f"deploy to {o.key.flagperf_path} failed: {o.error}")
        connected = [h for h in connected if h.address not in results]
    phase("probing")
    for c in backend.probe(connected, need):
        results[c.host] = c
    # a scheduler's checks are not per host (its partition, nodes, account): they follow the hosts'
    return [results[a] for a in order if a in results] + [c for a, c in results.items() if a not in order]


def accelerators_of(checks) -> dict:
    return {c.host: c.accelerators for c in checks if c.ok and c.accelerators is not None}


def check(ctx: RunContext) -> tuple:
    """(every host passed, {address: accelerators}). Hosts that failed go into the summary's ``host_checks``,
    and every round is then marked not run, naming them."""
    out = ctx.console
    hosts = ctx.plan.hosts
    out.step(f"check: connecting to {len(hosts)} host(s)")
    checks = check_hosts(ctx.backend, hosts, needed_accelerators(ctx.config), deploy=True, say=out.detail,
                         phase=lambda step: out.stage(f"check: {step} {len(hosts)} host(s)"))
    for c in checks:
        if c.ok:
            out.detail(f"host {c.host}: ok: {c.detail}")
        else:
            out.step(f"host {c.host}: {c.outcome}: {c.detail}; {c.remedy}", logging.ERROR)
    for line in core_warnings(ctx.config.vendor, checks, ranks_per_host(ctx.plan)):
        out.step(f"warning: {line}", logging.WARNING)
    _move_master_port(ctx, checks)
    bad = [c for c in checks if not c.ok]
    if bad:
        ctx.summary.host_checks = [{"host": c.host, "outcome": c.outcome, "detail": c.detail, "remedy": c.remedy}
                                   for c in bad]
        ctx.mark_not_run(f"not run: {len(bad)} host(s) failed their check "
                         f"({', '.join(c.host + ': ' + c.outcome for c in bad)})")
    return not bad, accelerators_of(checks)


def _move_master_port(ctx: RunContext, checks) -> None:
    """A single-host run whose MASTER_PORT was taken: the plan, effective_config.yaml and run.json take the free
    port the probe found (the backend passes such a check only on a single-host run), with a note."""
    port = next((p for p in map(moved_port, checks) if p is not None), None)
    if port is None:
        return
    ctx.console.step(f"note: {port_note(next(c for c in checks if moved_port(c) is not None))}", logging.WARNING)
    config = replace(ctx.config, cluster=replace(ctx.config.cluster, master_port=port))
    ctx.plan = build_plan(config, ctx.plan.run_id)
    (ctx.plan.run_dir / "effective_config.yaml").write_text(
        yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")
    write_json_atomic(ctx.plan.run_dir / "run.json", run_record(ctx.plan, ctx.backend).to_dict())
