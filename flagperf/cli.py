"""The ``flagperf`` command: parse, call, print, exit code. Heavy modules load inside the commands."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from flagperf import __version__
from flagperf.errors import EXIT_CONFIG, EXIT_HOSTS, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, ConfigError
from flagperf.untrusted import for_rich, for_terminal

from flagperf.config import SOURCE_ROOT  # noqa: E402  (light: yaml and dataclasses only)

DEFAULT_CONFIG = SOURCE_ROOT / "configs" / "test_conf.yaml"
SCREEN_LINE_MAX_CHARS = 16384           # one printed line of a run or a plan, which may quote several config texts
MARKDOWN_MAX_CHARS = 64 * 1024 * 1024   # report.md printed whole (its own texts are capped already)

config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_CONFIG,
    show_default=True, help="Test config (YAML, or FlagPerf's test_conf.py or host.yaml): VENDOR, RUNTIME, CASES, ...")
accept_option = click.option(
    "--accept-new-host-keys", is_flag=True,
    help="Record the keys of SSH hosts missing from the cluster's known hosts file (a changed key is still "
         "refused).")
cluster_option = click.option(
    "--cluster", "cluster_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Cluster config (YAML, or FlagPerf's cluster_conf.py); overrides CLUSTER of the test config.")
junit_option = click.option(
    "--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Also write the node verdicts as JUnit XML to FILE (one test case per node and reason source).")
prometheus_option = click.option(
    "--prometheus", "prometheus_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Also write the node verdicts as Prometheus text exposition to FILE (for a node exporter's textfile "
         "collector: name it *.prom).")
EXPORT_PACKAGES = {"junit": "junitparser", "prometheus": "prometheus_client"}     # what each export needs


def _print_notes(summary) -> None:
    """What reading a summary.json left out (NaN, Infinity read as absent), one line each on stderr."""
    for note in summary.notes:
        click.echo(f"flagperf: note: {for_terminal(note)}", err=True)


def _console(stderr=False):
    from rich.console import Console
    console = Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)
    if not console.is_terminal:
        console.width = 160         # logs and pipes: do not squeeze tables into 80 columns
    return console


def _load(config_path, cluster_path):
    from flagperf.config import load_config
    try:
        cfg = load_config(config_path, cluster_path)
    except ConfigError as exc:
        _exit_config(exc)
    if cfg.warnings:        # FlagPerf keys accepted and ignored, or given another meaning: one line each
        err = _console(stderr=True)
        for warning in cfg.warnings:
            err.print(f"flagperf: warning: {for_terminal(warning)}", style="yellow", markup=False, highlight=False)
    return cfg


def _exit_config(exc: ConfigError, prefix="config error: "):
    """Every problem on its own line on stderr, then exit 2 (no traceback)."""
    err = _console(stderr=True)
    for problem in exc.problems:
        err.print(f"flagperf: {prefix}{for_terminal(problem)}", markup=False)
    sys.exit(EXIT_CONFIG)


def _check_exports(junit_path, prometheus_path) -> None:
    """--junit and --prometheus name files that can be written (their folder exists): checked before anything
    runs, so that a typo costs no run; exit 2 with one line per problem."""
    problems = []
    for option, path in (("--junit", junit_path), ("--prometheus", prometheus_path)):
        if path is None:
            continue
        if path.is_dir():
            problems.append(f"{option} {path}: is a directory; expected the file to write")
        elif not path.parent.is_dir():
            problems.append(f"{option} {path}: the folder {path.parent} does not exist")
    if problems:
        _exit_config(ConfigError(problems), prefix="")
    if prometheus_path is not None and prometheus_path.suffix != ".prom":
        click.echo(f"flagperf: warning: --prometheus {for_terminal(prometheus_path)}: a node exporter's textfile "
                   f"collector reads only files named *.prom", err=True)


def _write_exports(console, summary, junit_path, prometheus_path) -> bool:
    """Write the verdicts to the files --junit and --prometheus name (atomically: a reader sees the old file or
    the new one whole); one line each, the path or why it could not be written. False when one could not be."""
    from flagperf.reporters import reporter
    from flagperf_contract import write_atomic
    ok = True
    for name, path in (("junit", junit_path), ("prometheus", prometheus_path)):
        if path is None:
            continue
        try:
            write_atomic(path, reporter(name).render(summary))
        except ImportError:
            why = f"needs the Python package {EXPORT_PACKAGES[name]} (pip install {EXPORT_PACKAGES[name]})"
        except OSError as exc:
            why = f"cannot write {path}: {exc.strerror or exc}"
        else:
            console.print(f"report {name}: {for_terminal(path)}", markup=False)
            continue
        ok = False
        click.echo(f"flagperf: report {name}: {for_terminal(why)}", err=True)
    return ok


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="flagperf")
def main():
    """Benchmark AI accelerator clusters.

    Exit codes: 0 all cases passed, 1 a case failed (or an each case flagged a slow host or GPU),
    2 configuration error, 3 a host failed its check, 4 internal error, 130 interrupted.
    """


@main.command()
@config_option
@cluster_option
@accept_option
@click.option("--dry-run", is_flag=True, help="Print the plan (hosts, ranks, commands, paths) and touch nothing.")
@click.option("--case", "case_patterns", multiple=True, metavar="PATTERN",
              help="Run only the cases whose model or whole key matches this shell-style pattern (repeatable).")
@click.option("--repeat", "repeat", default=None, metavar="N", help="Rounds of every selected case.")
@click.option("--hosts", "hosts", default=None, metavar="A,B,...",
              help="The cluster's HOSTS, comma-separated (localhost allowed).")
@click.option("--log-path", "log_path", default=None, metavar="DIR",
              help="FLAGPERF_LOG_PATH: the folder of the run directories.")
@click.option("--master-port", "master_port", default=None, metavar="N", help="MASTER_PORT of the cluster.")
@junit_option
@prometheus_option
def run(config_path, cluster_path, accept_new_host_keys, dry_run, case_patterns, repeat, hosts, log_path,
        master_port, junit_path, prometheus_path):
    """Run every case of the test config (or those --case selects), collect the results and summarise them.
    --case, --repeat, --hosts, --log-path and --master-port override the files (effective_config.yaml records
    them)."""
    overrides = _overrides(case_patterns, repeat, hosts, log_path, master_port)
    cfg = _load(config_path, cluster_path)
    from flagperf.config import apply_overrides
    try:
        cfg = apply_overrides(cfg, overrides)
    except ConfigError as exc:
        _exit_config(exc, prefix="")
    _check_exports(junit_path, prometheus_path)
    from flagperf.plan import build_plan
    try:
        plan = build_plan(cfg)
    except ConfigError as exc:
        _exit_config(exc)
    console = _console()
    if dry_run:
        import logging

        from flagperf.backends import backend_class
        from flagperf.render import plan_lines
        backend = backend_class(cfg.cluster.scheduler)(cfg, logging.getLogger("flagperf.dry-run"))
        local = _local_accelerators(cfg)
        if local is not None:
            plan = build_plan(cfg, plan.run_id, {"localhost": local})
        for line in plan_lines(plan, backend):
            console.print(for_terminal(line, limit=SCREEN_LINE_MAX_CHARS), markup=False)
        sys.exit(EXIT_OK)
    from flagperf.pipeline import Run
    from flagperf.reporters import reporter

    def say(msg):
        from datetime import datetime

        from rich.text import Text
        console.print(Text(f"{datetime.now():%H:%M:%S} ", style="dim") + for_rich(msg, newlines=True,
                                                                               limit=SCREEN_LINE_MAX_CHARS),
                      highlight=False, soft_wrap=not console.is_terminal)   # a terminal: wrapped to its width

    from flagperf.errors import Interrupted
    import logging
    logging.raiseExceptions = False     # a full disk under the run log must not print tracebacks on stderr
    from flagperf.progress import for_console
    progress = for_console(console)
    try:
        runner = Run(plan, say=say, accept_new_host_keys=accept_new_host_keys, progress=progress)
        try:
            code = runner.execute()
        finally:
            progress.close()
    except (KeyboardInterrupt, Interrupted):
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback in the run log
        import logging
        import traceback
        logging.getLogger(f"flagperf.run.{plan.run_id}").error(traceback.format_exc())
        _console(stderr=True).print(f"flagperf: internal error: {type(exc).__name__}: {for_terminal(exc)}",
                                    markup=False)
        sys.exit(EXIT_INTERNAL)
    console.print(reporter("terminal").render(runner.summary))
    _print_rankings(console, runner.summary)
    if not _write_exports(console, runner.summary, junit_path, prometheus_path) and code == EXIT_OK:
        code = 1            # like a summary.json that could not be written
    console.print(f"results: {for_terminal(plan.run_dir)}", markup=False)
    sys.exit(code)


def _overrides(case_patterns, repeat, hosts, log_path, master_port):
    """The options of ``flagperf run`` that override the files, their form checked (their values are checked
    against the loaded config by config.apply_overrides); exit 2 with one line per bad option."""
    from flagperf.config import Overrides
    problems = []

    def number(option, text, what):
        if text is None:
            return None
        if not text.strip().isdigit() or len(text.strip()) > 6:
            problems.append(f"{option}: expected {what}, got {text!r}")
            return None
        return int(text.strip())

    patterns = tuple(case_patterns)
    if any(not p.strip() for p in patterns):
        problems.append("--case: expected a model name or a key pattern (shell-style: *, ?, [...]), got ''")
    addresses = ()
    if hosts is not None:
        addresses = tuple(a.strip() for a in hosts.split(","))
        if not all(addresses):
            problems.append(f"--hosts: expected comma-separated host names or addresses, got {hosts!r}")
    if log_path is not None and not log_path.strip():
        problems.append("--log-path: expected a folder, got ''")
    ov = Overrides(cases=patterns, repeat=number("--repeat", repeat, "a number of rounds >= 1"), hosts=addresses,
                   log_path=log_path, master_port=number("--master-port", master_port, "a TCP port 1-65535"))
    if problems:
        _exit_config(ConfigError(problems), prefix="")
    return ov


def _print_rankings(console, summary):
    """each cases: the hosts (and GPUs) ranked; nccl-tests' tables of the collectives and p2p cases; then every
    outlier on a line of its own; then the node verdicts."""
    from flagperf.reporters import reporter
    terminal = reporter("terminal")
    for table in terminal.rankings(summary):
        console.print(table)
    for table in terminal.nccl_tables(summary):
        console.print(table)
    for line in terminal.outlier_lines(summary):
        console.print(line, style="bold red", markup=False, highlight=False)
    for line, style in terminal.node_figure_lines(summary):       # per node: aggregate, devices, spread
        console.print(line, style=style, markup=False, highlight=False)
    verdicts = terminal.verdicts(summary)
    if verdicts is not None:
        console.print(verdicts)


@main.command()
@config_option
@cluster_option
@accept_option
def check(config_path, cluster_path, accept_new_host_keys):
    """Check every host in parallel: SSH, host key, Python, deploy path, torch, disk, vendor, accelerators."""
    cfg = _load(config_path, cluster_path)
    from flagperf.checks import core_warnings, needed_accelerators, ranks_per_host
    from flagperf.pipeline import check_hosts
    from flagperf.plan import build_plan
    from flagperf.render import check_table
    backend = _backend(cfg, accept_new_host_keys)
    try:
        results = check_hosts(backend, cfg.cluster.hosts, needed_accelerators(cfg), deploy=False)
    finally:
        backend.close()
    _console().print(check_table(results))
    counted = {r.host: r.accelerators for r in results if r.ok and r.accelerators is not None}
    for line in core_warnings(cfg.vendor, results, ranks_per_host(build_plan(cfg, "check", counted))):
        click.echo(f"flagperf: warning: {for_terminal(line)}", err=True)
    sys.exit(EXIT_OK if all(r.ok for r in results) else EXIT_HOSTS)


def _local_accelerators(cfg):
    """This machine's NVIDIA GPUs for a dry run of nproc auto on localhost (None: not applicable or unknown)."""
    if cfg.vendor.device != "cuda" or not any(h.is_local for h in cfg.cluster.hosts) or \
            all(c.nproc is not None for c in cfg.test.cases):
        return None
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML here: the plan says what it assumed
        return None


def _backend(cfg, accept_new_host_keys):
    import logging

    from flagperf.backends import open_backend
    return open_backend(cfg, logging.getLogger("flagperf.cli"), accept_new_host_keys=accept_new_host_keys)


@main.command()
@config_option
@cluster_option
@accept_option
def deploy(config_path, cluster_path, accept_new_host_keys):
    """Sync benchmarks/, vendors/, launcher/, monitors/ and the contract module to every host's FLAGPERF_PATH
    (only what differs)."""
    cfg = _load(config_path, cluster_path)
    from rich.table import Table

    from flagperf.checks import unique_hosts
    hosts = unique_hosts(cfg.cluster.hosts)
    backend = _backend(cfg, accept_new_host_keys)
    try:
        failures = backend.connect(hosts)
        outcomes = backend.deploy(hosts)
    finally:
        backend.close()
    total = next((o.value.files_total for o in outcomes if o.ok), 0)
    table = Table(title=f"deploy ({total} files)")
    for col in ("host", "path", "result"):
        table.add_column(col)
    for f in failures:
        table.add_row(for_rich(f.host), "", for_rich(f"{f.outcome}: {f.detail}", "red"))
    for o in outcomes:
        if o.ok:
            d = o.value
            what = "is the driver's own tree" if d.same_tree else \
                f"{d.files_sent} of {d.files_total} file(s) sent, {d.bytes_sent} bytes{d.tree_note}"
            table.add_row(for_rich(d.host), for_rich(d.path), for_rich(what, "green"))
        else:
            table.add_row(for_rich(o.key.address), for_rich(o.key.flagperf_path), for_rich(o.error, "red"))
    _console().print(table)
    for o in outcomes:      # what a CASE_PATHS folder held that was not sent (symlinks out of it, special files)
        for note in o.value.notes if o.ok else ():
            click.echo(for_terminal(f"WARNING: deploy: host {o.value.host}: {note}"), err=True)
    sys.exit(EXIT_OK if not failures and all(o.ok for o in outcomes) else EXIT_HOSTS)


@main.command()
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@config_option
@accept_option
def collect(run_dir, config_path, accept_new_host_keys):
    """Fetch what is missing of a past run (default: the latest under FLAGPERF_LOG_PATH) from its hosts."""
    from rich.table import Table

    from flagperf.collect import collect_run, latest_run
    try:
        if run_dir is None:
            run_dir = latest_run(_load(config_path, None).test.log_path)
        results = collect_run(run_dir, accept_new_host_keys=accept_new_host_keys)
    except ConfigError as exc:
        _exit_config(exc, prefix="")
    table = Table(title=for_rich(f"collect {run_dir}"))
    for col in ("host", "nodes", "files", "bytes", "result"):
        table.add_column(col)
    for r in results:
        table.add_row(for_rich(r.host), str(r.nodes), str(r.files), str(r.bytes),
                      for_rich("ok", "green") if r.ok else for_rich(r.error, "red"))
    _console().print(table)
    sys.exit(EXIT_OK if all(r.ok for r in results) else EXIT_HOSTS)


@main.command()
@config_option
@cluster_option
@accept_option
@click.option("--run", "run_id", default=None, help="Only the containers of this run (e.g. run20261122002635).")
def clean(config_path, cluster_path, accept_new_host_keys, run_id):
    """Remove leftover flagperf containers (by label) on every host of the cluster."""
    cfg = _load(config_path, cluster_path)
    from rich.table import Table

    from flagperf.checks import unique_hosts
    hosts = unique_hosts(cfg.cluster.hosts)
    backend = _backend(cfg, accept_new_host_keys)
    try:
        failures = backend.connect(hosts)
        removed = backend.clean(hosts, run_id)
    finally:
        backend.close()
    table = Table(title=for_rich("clean" + (f" {run_id}" if run_id else "")))
    table.add_column("host")
    table.add_column("removed")
    ok = not failures
    for f in failures:
        table.add_row(for_rich(f.host), for_rich(f"{f.outcome}: {f.detail}", "red"))
    for host, names in removed.items():
        if isinstance(names, list):
            table.add_row(for_rich(host), for_rich(", ".join(names) or "nothing to remove"))
        else:
            ok = False
            table.add_row(for_rich(host), for_rich(names, "red"))
    _console().print(table)
    sys.exit(EXIT_OK if ok else EXIT_HOSTS)


@main.command()
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@config_option
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the Markdown report instead of the table.")
@click.option("--html", "as_html", is_flag=True,
              help="(Re)write report.html (charts, from summary.json and series.json); print its path.")
@click.option("--interactive", is_flag=True,
              help="--html, and also write report-interactive.html (the same charts as plotly figures, zoomable; "
                   "about 5 MB, needs a browser with scripts); print its path on the next line.")
@junit_option
@prometheus_option
def report(run_dir, config_path, as_markdown, as_html, interactive, junit_path, prometheus_path):
    """Show a run (default: the latest under FLAGPERF_LOG_PATH): the table and every failure; (re)writes its
    reports (report.md, report.html), and with --junit or --prometheus writes the node verdicts there."""
    from flagperf.collect import latest_run
    from flagperf.reporters import reporter, write_reports
    from flagperf.results.series import summarise_series
    from flagperf.results.summary import Summary, SummaryError
    try:
        if run_dir is None:
            run_dir = latest_run(_load(config_path, None).test.log_path)
        summary = Summary.load(Path(run_dir) / "summary.json")
    except ConfigError as exc:
        _exit_config(exc, prefix="")
    except SummaryError as exc:
        _exit_config(ConfigError(str(exc)), prefix="")
    _print_notes(summary)
    _check_exports(junit_path, prometheus_path)
    as_html = as_html or interactive
    if summary.series is None:      # a run summarised before series.json: its node directories, read once now
        try:
            summary.series = summarise_series(summary, run_dir)
        except OSError:             # a read-only run directory: report.html without monitor plots
            pass
    written = write_reports(summary, run_dir)
    console = _console()
    # --html and --markdown keep stdout for the path or the Markdown alone: the exports go on stderr
    exported = (_write_exports(_console(stderr=True), summary, junit_path, prometheus_path)
                if as_html or as_markdown else True)
    if as_html:
        html = next((o for o in written if o.name == "html"), None)
        if html is None or html.path is None:
            click.echo(f"flagperf: {for_terminal(html.error) if html else 'no html reporter registered'}", err=True)
            sys.exit(1)
        click.echo(for_terminal(html.path))
        if interactive:
            from flagperf.reporters.interactive import InteractiveReporter
            try:
                click.echo(for_terminal(InteractiveReporter().write(summary, run_dir)))
            except OSError as exc:      # ReportError too
                click.echo(f"flagperf: cannot write report-interactive.html: {for_terminal(exc)}", err=True)
                sys.exit(1)
        sys.exit(EXIT_OK if exported else 1)
    if as_markdown:
        console.print(for_terminal(reporter("markdown").render(summary), newlines=True, limit=MARKDOWN_MAX_CHARS),
                      markup=False)
        sys.exit(EXIT_OK if exported else 1)
    terminal = reporter("terminal")
    console.print(terminal.render(summary))
    _print_rankings(console, summary)
    for line in terminal.failure_lines(summary):
        console.print(line, markup=False)
    for o in written:
        console.print(f"report {o.name}: {for_terminal(o.path if o.path is not None else o.error)}", markup=False)
    if not _write_exports(console, summary, junit_path, prometheus_path):
        sys.exit(1)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Folder for test_conf.yaml and cluster.yaml.")
@click.option("--force", is_flag=True, help="Overwrite test_conf.yaml and cluster.yaml there.")
def convert(files, out_dir, force):
    """Write FlagPerf's config files (test_conf.py with cluster_conf.py, or a base, inference or operation
    host.yaml) as flagperf YAML, with a comment on every key that changed or was dropped
    (docs/migrating-from-flagperf.md)."""
    from flagperf.convert import TEST_FILE, convert as convert_files
    left_out: list = []
    try:
        written = convert_files(files, out_dir, force=force, left_out=left_out)
    except ConfigError as exc:
        _exit_config(exc)
    except OSError as exc:
        _exit_config(ConfigError(f"{out_dir}: --out: cannot write: {exc.strerror or exc}"))
    for line in left_out:
        click.echo(line, err=True)
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"check it with: flagperf run --config {Path(out_dir) / TEST_FILE} --dry-run")


INIT_CASES = ("gemm", "devmem", "collectives")     # quick cases of this tree that run on a GPU and on the CPU
INIT_HW = "quick"       # the embedded default's hw label: short budgets (vendors/<vendor>/<model>/config_quick.yaml)
INIT_TEST = """\
# flagperf test config, written by `flagperf init` for this machine. Relative paths are relative to this
# file's folder. Check it with: flagperf run --config {test} --dry-run
# Every key: docs/configuration.md. The command line overrides some without editing this file:
#   flagperf run --config {test} --case gemm --repeat 3 --hosts localhost --log-path DIR --master-port N

# The vendor profile (vendors/<name>/), detected on this machine: {why}.
# `VENDOR: auto` would detect it at every run instead.
VENDOR: {vendor}
# bare: the ranks run as plain processes with the PYTHON of the cluster config (no container)
RUNTIME: bare
# Where each run's directory (logs, results, report.md, report.html) is written
FLAGPERF_LOG_PATH: result
FLAGPERF_LOG_LEVEL: info
# Seconds between two monitor samples; seconds a case may run before it is stopped
MONITOR_INTERVAL: 1
CASE_TIMEOUT: 600
# The hosts: this machine alone
CLUSTER: cluster.yaml

# "model:framework:hw:nnodes:nproc:repeat": data directory (null: the benchmark makes its own data).
# nproc auto: one rank per accelerator of the host (2 ranks on a CPU-only machine); repeat: rounds of the case.
# hw "quick": short time budgets (vendors/<vendor>/<model>/config_quick.yaml where it exists, else the vendor's
# and the benchmark's defaults); "local" or another label picks that label's file. `flagperf list` shows every
# benchmark of this tree.
CASES:
{cases}"""
INIT_CLUSTER = """\
# flagperf cluster config, written by `flagperf init`: the hosts a run uses (docs/configuration.md).
# "localhost" is this machine, reached without SSH; other hosts are reached over SSH (docs/configuration.md
# lists the keys that say how).
HOSTS:
  - localhost
# The port rank 0 listens on (a busy one is replaced by a free one on a single-host run)
MASTER_PORT: 29501
"""


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Folder for test_conf.yaml and cluster.yaml (created if missing).")
@click.option("--force", is_flag=True, help="Overwrite test_conf.yaml and cluster.yaml there.")
def init(out_dir, force):
    """Write a commented starter test_conf.yaml and cluster.yaml for this machine (its vendor, localhost, no
    container, a few quick cases); check them with `flagperf run --config DIR/test_conf.yaml --dry-run`."""
    from flagperf.catalog import benchmark_names
    from flagperf.vendors import detect_vendor
    test_file, cluster_file = out_dir / "test_conf.yaml", out_dir / "cluster.yaml"
    existing = [str(p) for p in (test_file, cluster_file) if p.exists() or p.is_symlink()]
    if existing and not force:
        _exit_config(ConfigError(f"{', '.join(existing)}: already exist(s); pass --force to overwrite, or choose "
                                 f"another --out"), prefix="init: ")
    vendor, why = detect_vendor()
    why = "".join(ch if ch.isprintable() else "?" for ch in why)
    known = benchmark_names(SOURCE_ROOT)
    cases = "".join(f'  "{m}:pytorch:{INIT_HW}:1:auto:1": null\n' for m in INIT_CASES if m in known) or \
        "".join(f'  "{m}:pytorch:{INIT_HW}:1:auto:1": null\n' for m in known[:1])
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        shown = "".join(ch if ch.isprintable() else "?" for ch in str(test_file))     # in comments
        for path, text in ((test_file, INIT_TEST.format(test=shown, why=why, vendor=vendor, cases=cases)),
                           (cluster_file, INIT_CLUSTER)):
            if path.is_symlink():
                path.unlink()           # a link is replaced, never written through
            path.write_text(text, encoding="utf-8")
            click.echo(f"wrote {for_terminal(path)}")
    except OSError as exc:
        _exit_config(ConfigError(f"{out_dir}: --out: cannot write: {exc.strerror or exc}"), prefix="init: ")
    click.echo(f"check it with: flagperf run --config {for_terminal(test_file)} --dry-run")


@main.command("list")
def list_cmd():
    """List the benchmarks and vendors this tree provides."""
    from rich.table import Table

    from flagperf.catalog import benchmark_description, benchmark_names
    from flagperf.vendors import load_vendor, vendor_names
    console = _console()
    table = Table(title=f"benchmarks ({SOURCE_ROOT / 'benchmarks'})")
    table.add_column("model")
    table.add_column("description")
    for name in benchmark_names(SOURCE_ROOT):
        table.add_row(name, benchmark_description(SOURCE_ROOT, name))
    console.print(table)
    table = Table(title="vendors")
    for col in ("vendor", "frameworks", "device", "backend", "tested", "description"):
        table.add_column(col)
    for name in vendor_names(SOURCE_ROOT):
        profile, problems = load_vendor(SOURCE_ROOT, name)
        if profile is None:
            table.add_row(for_rich(name), "-", "-", "-", "-", for_rich(f"invalid: {problems[0]}", "red"))
        else:
            table.add_row(for_rich(name), for_rich(", ".join(profile.frameworks)),
                          for_rich(profile.torch_device or profile.device), for_rich(profile.dist_backend),
                          "yes" if profile.tested else "no", for_rich(profile.description))
    console.print(table)


@main.command()
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option("--threshold", "threshold_pct", type=float, default=5.0, show_default=True,
              help="A change counts only when larger than this many percent.")
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Significance level of the Mann-Whitney U test (4 or more passed rounds on each side at 0.05).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (flagperf.compare/2).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder for the HTML form, compare-<A>-<B>.html (default: run B's directory).")
def compare(run_a, run_b, threshold_pct, alpha, as_json, out_dir):
    """Compare run B against run A (run directories or summary.json files): per case and metric, the medians,
    the change, the evidence (rounds, spread, test) and the outcome (docs/compare.md). The HTML form,
    compare-<A>-<B>.html, goes into run B's directory (or --out); the last line says where.

    Exit codes: 0 no regression (also "insufficient evidence"), 1 a regression, 2 bad arguments or an
    unreadable summary.json.
    """
    import json
    import math

    from flagperf.results.compare import compare_summaries
    from flagperf.results.summary import Summary, SummaryError
    problems = []
    if not (math.isfinite(threshold_pct) and threshold_pct >= 0):
        problems.append(f"--threshold must be a number >= 0 (percent), got {threshold_pct}")
    if not 0 < alpha < 1:
        problems.append(f"--alpha must be between 0 and 1, got {alpha}")
    if problems:
        _exit_config(ConfigError(problems), prefix="")
    try:
        a, b = (Summary.load(p if p.is_file() else p / "summary.json") for p in (run_a, run_b))
    except SummaryError as exc:
        _exit_config(ConfigError(str(exc)), prefix="")
    _print_notes(a)
    _print_notes(b)
    result = compare_summaries(a, b, threshold_pct=threshold_pct, alpha=alpha)
    from flagperf.reporters.compare import comparison_html, comparison_lines, comparison_table, html_file_name
    from flagperf_contract import write_atomic
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n")
    else:
        console = _console()
        console.print(comparison_table(result))
        for line in comparison_lines(result):
            console.print(line, markup=False)
    folder = out_dir if out_dir is not None else (run_b.parent if run_b.is_file() else run_b)
    page = folder / html_file_name(result)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(page, comparison_html(result))
        where = f"comparison page: {for_terminal(page)}"
    except OSError as exc:          # a read-only run directory: the text form stands alone
        where = f"comparison page not written: {for_terminal(page)}: {for_terminal(exc.strerror or exc)}"
    click.echo(where if not as_json else f"flagperf: {where}", err=as_json)
    sys.exit(1 if result.regressed else EXIT_OK)
