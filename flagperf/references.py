"""Reference figures and verdicts: what a device is expected to measure, and whether a case did.

A reference file (``vendors/<vendor>/references/<name>.yaml``, or the test config's ``REFERENCES``) names the
devices it is for (``match``: substrings of the device name that rank 0 reported in its FINISHED ``env``), and
per benchmark a list of entries: optional qualifiers (``world_size``, ``nnodes``, ``nproc``, ``hw``, ``preset``,
``nvlink_multicast``, ``config``) and the expected figure of each metric with its tolerance, unit and source; and,
optionally, the thresholds of the node verdicts (``verdicts``: how far below a reference rejects a node, which
ranking outliers do), keyed by GPUs per node and NVLink-multicast state, each with its source.
docs/references.md describes the format.

Loading is strict: every problem is a one-line message naming the file, the line and the key, and the caller
(``flagperf.config``) reports them as config errors (exit 2). :func:`judge_case` is pure: from a case's summary
and its merged case configuration to a list of :class:`~flagperf.records.ReferenceVerdict` (stored in
summary.json); :func:`thresholds_for` is pure too (the node verdicts' thresholds of a case).
:func:`flagperf.results.interpret.case_status` turns a failed verdict into the status ``below_reference``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flagperf.records import ABOVE, BELOW, NOT_MEASURED, SUSPECT, UNIT_MISMATCH, WITHIN, ReferenceVerdict
from flagperf.yamlio import LineMap, load_yaml_file, one_line, where

FILE_KEYS = ("match", "description", "benchmarks", "verdicts")
QUALIFIERS = ("world_size", "nnodes", "nproc", "hw", "preset", "nvlink_multicast", "config")
ENTRY_KEYS = QUALIFIERS + ("note", "metrics")
METRIC_KEYS = ("expected", "tolerance", "better_tolerance", "higher_is_better", "unit", "source", "note")
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
# Verdict results (flagperf.records): WITHIN, BELOW, ABOVE, NOT_MEASURED, UNIT_MISMATCH


@dataclass(frozen=True)
class MetricRef:
    name: str
    expected: float
    tolerance: float                    # relative shortfall allowed (0.05: 5% worse than expected)
    unit: str
    source: str                         # docs/results/... for a measured run, or a URL for a public figure
    better_tolerance: float | None = None   # relative excess allowed; None: a better figure never fails
    higher_is_better: bool | None = None    # None: the payload's direction for the headline, else higher
    note: str = ""


@dataclass(frozen=True)
class RefEntry:
    benchmark: str
    index: int
    qualifiers: tuple = ()      # ((name, value), ...) of world_size, nnodes, nproc, hw, preset, nvlink_multicast
    config: tuple = ()                  # ((case-config key, value), ...)
    metrics: tuple = ()                 # (MetricRef, ...)
    note: str = ""

    @property
    def specificity(self) -> int:
        return len(self.qualifiers) + len(self.config)

    def fits(self, facts: dict, case_config: dict) -> bool:
        if any(not _same(facts.get(k), v) for k, v in self.qualifiers):
            return False
        return all(k in case_config and _same(case_config[k], v) for k, v in self.config)


# -- the node verdicts' thresholds (docs/references.md, "Node verdict thresholds") ----------------------------------

THRESHOLD_QUALIFIERS = ("gpus", "nvlink_multicast")
# {key: (built-in default, lowest allowed, highest allowed or None, what it is)}
THRESHOLDS = {
    "reference_reject_margin": (0.05, 0.0, 1.0, "a relative margin from 0 to 1 beyond a metric's own tolerance "
                                                "(0.05: 5 more points)"),
    "ranking_reject_shortfall": (0.15, 0.0, 1.0, "a relative shortfall from 0 to 1 below the ranking's median "
                                                 "(0.15: 15%)"),
    "ranking_reject_score": (7.0, 0.0, None, "a robust score >= 0 (the rankings' outlier limit is 3.5)"),
}
THRESHOLD_KEYS = THRESHOLD_QUALIFIERS + tuple(THRESHOLDS) + ("source", "note")
DEFAULT_THRESHOLD_SOURCE = "flagperf's default (docs/references.md)"


@dataclass(frozen=True)
class ThresholdEntry:
    """One entry of a reference file's ``verdicts`` list: qualifiers, the thresholds it sets, its source."""

    index: int
    qualifiers: tuple = ()              # ((name, value), ...) of gpus, nvlink_multicast
    values: tuple = ()                  # ((threshold key, value), ...)
    source: str = ""
    note: str = ""

    def fits(self, facts: dict) -> bool:
        return all(_same(facts.get(k), v) for k, v in self.qualifiers)


@dataclass(frozen=True)
class Threshold:
    """One threshold in force: its value, where it is from (the entry's ``source``) and the file (empty: the
    built-in default)."""

    value: float
    source: str = DEFAULT_THRESHOLD_SOURCE
    reference: str = ""

    def cite(self) -> str:
        return f"{self.source} ({self.reference})" if self.reference else self.source


@dataclass(frozen=True)
class VerdictThresholds:
    """The node verdicts' thresholds for one case: every key of :data:`THRESHOLDS` (a :class:`Threshold`)."""

    reference_reject_margin: Threshold = Threshold(THRESHOLDS["reference_reject_margin"][0])
    ranking_reject_shortfall: Threshold = Threshold(THRESHOLDS["ranking_reject_shortfall"][0])
    ranking_reject_score: Threshold = Threshold(THRESHOLDS["ranking_reject_score"][0])


DEFAULT_THRESHOLDS = VerdictThresholds()


@dataclass(frozen=True)
class ReferenceFile:
    path: str
    match: tuple = ()                   # empty: any device (only in a REFERENCES file)
    description: str = ""
    entries: tuple = ()                 # (RefEntry, ...)
    thresholds: tuple = ()              # (ThresholdEntry, ...): the optional ``verdicts`` section

    def match_length(self, device_name) -> int | None:
        """The length of the longest ``match`` string found in ``device_name`` (case-insensitive); 0 for a file
        without ``match``; None when it does not fit."""
        if not self.match:
            return 0
        name = str(device_name or "").lower()
        found = [len(m) for m in self.match if m.lower() in name]
        return max(found) if found else None


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


# -- loading --------------------------------------------------------------------------------------------------------

class _Problems:
    def __init__(self, path: Path):
        self.path = path
        self.lines: list = []

    def add(self, mapping, key, label, message):
        self.lines.append(one_line(f"{where(self.path, mapping, key)}: {label}: {message}"))

    def unknown(self, mapping, known, prefix):
        for key in mapping:
            if key not in known:
                self.add(mapping, key, f"{prefix}{key}", f"unknown key; expected one of: {', '.join(known)}")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _scalar(value) -> bool:
    return isinstance(value, (str, bool)) or _number(value)


def load_reference_file(path, benchmarks=None, *, need_match: bool = True) -> tuple:
    """(ReferenceFile or None, problems). ``benchmarks``: the known benchmark names (None: not checked);
    ``need_match``: ``match`` is required (files of a vendor's references folder)."""
    path = Path(path)
    data, problems = load_yaml_file(path)
    if problems:
        return None, problems
    p = _Problems(path)
    if not isinstance(data, LineMap):
        return None, [f"{path}: expected a mapping with match, description and benchmarks (docs/references.md)"]
    p.unknown(data, FILE_KEYS, "")
    match: list = []
    if "match" not in data or data["match"] is None:
        if need_match:
            p.lines.append(f"{path}: match: required key is missing; expected a list of device-name substrings, "
                           f"e.g. [\"H100 80GB HBM3\"]")
    elif not isinstance(data["match"], list) or not data["match"] or \
            not all(isinstance(m, str) and m.strip() for m in data["match"]):
        p.add(data, "match", "match", f"expected a non-empty list of non-empty device-name substrings, got "
                                      f"{data['match']!r}")
    else:
        match = [m.strip() for m in data["match"]]
    description = data.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        p.add(data, "description", "description", f"expected a string, got {description!r}")
        description = ""
    entries: list = []
    bench_map = data.get("benchmarks")
    if "benchmarks" not in data:
        if "verdicts" not in data:      # a file of verdict thresholds alone needs no figures
            p.lines.append(f"{path}: benchmarks: required key is missing; expected a mapping of benchmark names "
                           f"(gemm, devmem, ...) to lists of entries")
    elif not isinstance(bench_map, LineMap) or not bench_map:
        p.add(data, "benchmarks", "benchmarks", f"expected a non-empty mapping of benchmark names to lists of "
                                                f"entries, got {bench_map!r}")
    else:
        for bench, raw in bench_map.items():
            label = f"benchmarks.{bench}"
            if not isinstance(bench, str) or (benchmarks is not None and bench not in benchmarks):
                known = f"; known: {', '.join(benchmarks)}" if benchmarks is not None else ""
                p.add(bench_map, bench, label, f"no benchmark {bench!r}{known}")
                continue
            items = [raw] if isinstance(raw, LineMap) else raw
            if not isinstance(items, list) or not items:
                p.add(bench_map, bench, label, f"expected a list of entries (each with metrics), got {raw!r}")
                continue
            seen: dict = {}
            for i, item in enumerate(items):
                entry = _entry(p, bench_map, bench, f"{label}[{i}]", item, i)
                if entry is None:
                    continue
                key = (entry.qualifiers, entry.config)
                for m in entry.metrics:
                    if (key, m.name) in seen:
                        p.add(item, "metrics", f"{label}[{i}].metrics.{m.name}",
                              f"also given by {label}[{seen[(key, m.name)]}] with the same qualifiers")
                    seen.setdefault((key, m.name), i)
                entries.append(entry)
    thresholds = _thresholds(p, data) if "verdicts" in data else []
    if p.lines:
        return None, p.lines
    return ReferenceFile(str(path), tuple(match), description, tuple(entries), tuple(thresholds)), []


def _thresholds(p: _Problems, data) -> list:
    """The ``verdicts`` section: a list of entries, each with optional qualifiers (gpus, nvlink_multicast), one or
    more thresholds and the source they come from."""
    raw = data["verdicts"]
    items = [raw] if isinstance(raw, LineMap) else raw
    if not isinstance(items, list) or not items:
        p.add(data, "verdicts", "verdicts", f"expected a list of entries (each with source and one or more of "
                                            f"{', '.join(THRESHOLDS)}), got {raw!r:.60}")
        return []
    out: list = []
    seen: dict = {}
    for i, item in enumerate(items):
        label = f"verdicts[{i}]"
        if not isinstance(item, LineMap):
            p.add(data, "verdicts", label, f"expected a mapping with source and one or more of "
                                           f"{', '.join(THRESHOLDS)}, got {item!r:.60}")
            continue
        before = len(p.lines)
        p.unknown(item, THRESHOLD_KEYS, f"{label}.")
        qualifiers: list = []
        if "gpus" in item:
            v = item["gpus"]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                p.add(item, "gpus", f"{label}.gpus", f"expected a positive integer (GPUs per node), got {v!r:.60}")
            else:
                qualifiers.append(("gpus", v))
        if "nvlink_multicast" in item:
            v = item["nvlink_multicast"]
            if not isinstance(v, bool):
                p.add(item, "nvlink_multicast", f"{label}.nvlink_multicast", f"expected true or false, got {v!r:.60}")
            else:
                qualifiers.append(("nvlink_multicast", v))
        values: list = []
        for key, (_default, low, high, what) in THRESHOLDS.items():
            if key not in item:
                continue
            v = item[key]
            if not (_number(v) and v >= low and (high is None or v <= high)):
                p.add(item, key, f"{label}.{key}", f"expected {what}, got {v!r:.60}")
            else:
                values.append((key, float(v)))
        if not values and len(p.lines) == before:
            p.add(data, "verdicts", label, f"expected one or more of {', '.join(THRESHOLDS)}")
        source = item.get("source")
        if not (isinstance(source, str) and source.strip()):
            p.add(item if "source" in item else data, "source" if "source" in item else "verdicts",
                  f"{label}.source", f"expected a path under docs/results/ or a URL, got {source!r:.60}")
        note = item.get("note") or ""
        if not isinstance(note, str):
            p.add(item, "note", f"{label}.note", f"expected a string, got {note!r:.60}")
        where = tuple(sorted(qualifiers))
        for name, _v in values:
            if (where, name) in seen:
                p.add(item, name, f"{label}.{name}", f"also given by verdicts[{seen[(where, name)]}] with the same "
                                                     f"qualifiers")
            seen.setdefault((where, name), i)
        if len(p.lines) == before:
            out.append(ThresholdEntry(i, tuple(qualifiers), tuple(values), str(source).strip(), note))
    return out


def _entry(p: _Problems, parent, parent_key, label, item, index) -> RefEntry | None:
    if not isinstance(item, LineMap):
        p.add(parent, parent_key, label, f"expected a mapping with metrics (and optional {', '.join(QUALIFIERS)}), "
                                         f"got {item!r}")
        return None
    before = len(p.lines)
    p.unknown(item, ENTRY_KEYS, f"{label}.")
    qualifiers: list = []
    for key in ("world_size", "nnodes", "nproc"):
        if key in item:
            v = item[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                p.add(item, key, f"{label}.{key}", f"expected a positive integer, got {v!r}")
            else:
                qualifiers.append((key, v))
    for key in ("hw", "preset"):
        if key in item:
            v = item[key]
            if not isinstance(v, str) or not _NAME.fullmatch(v):
                p.add(item, key, f"{label}.{key}", f"expected a name (letters, digits, _ . + -), got {v!r}")
            else:
                qualifiers.append((key, v))
    if "nvlink_multicast" in item:
        v = item["nvlink_multicast"]
        if not isinstance(v, bool):
            p.add(item, "nvlink_multicast", f"{label}.nvlink_multicast", f"expected true or false, got {v!r}")
        else:
            qualifiers.append(("nvlink_multicast", v))
    config = []
    if "config" in item:
        cfg = item["config"]
        if not isinstance(cfg, LineMap) or not cfg:
            p.add(item, "config", f"{label}.config", f"expected a non-empty mapping of case-config keys to values, "
                                                     f"got {cfg!r}")
        else:
            for k, v in cfg.items():
                ok = isinstance(k, str) and (_scalar(v) or (isinstance(v, list) and all(_scalar(x) for x in v)))
                if not ok:
                    p.add(cfg, k, f"{label}.config.{k}", f"expected a string, number, true/false or a list of them, "
                                                         f"got {v!r}")
                else:
                    config.append((k, v))
    note = item.get("note") or ""
    if not isinstance(note, str):
        p.add(item, "note", f"{label}.note", f"expected a string, got {note!r}")
        note = ""
    metrics = []
    raw = item.get("metrics")
    if "metrics" not in item:
        p.add(parent, parent_key, label, "metrics: required key is missing; expected a mapping of metric names to "
                                         "{expected, tolerance, unit, source}")
    elif not isinstance(raw, LineMap) or not raw:
        p.add(item, "metrics", f"{label}.metrics", f"expected a non-empty mapping of metric names to "
                                                   f"{{expected, tolerance, unit, source}}, got {raw!r}")
    else:
        for name, spec in raw.items():
            m = _metric(p, raw, name, f"{label}.metrics.{name}", spec)
            if m is not None:
                metrics.append(m)
    if len(p.lines) > before:
        return None
    return RefEntry(str(parent_key), index, tuple(qualifiers), tuple(config), tuple(metrics), note)


def _metric(p: _Problems, parent, name, label, spec) -> MetricRef | None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        p.add(parent, name, label, "expected a metric name (letters, digits, _ . + -)")
        return None
    if not isinstance(spec, LineMap):
        p.add(parent, name, label, f"expected a mapping {{expected, tolerance, unit, source}}, got {spec!r}")
        return None
    before = len(p.lines)
    p.unknown(spec, METRIC_KEYS, f"{label}.")
    for key in ("expected", "tolerance", "unit", "source"):
        if key not in spec:
            p.add(parent, name, f"{label}.{key}", "required key is missing")
    expected: Any = spec.get("expected")
    tolerance: Any = spec.get("tolerance")
    better: Any = spec.get("better_tolerance")
    if "expected" in spec and not (_number(expected) and expected > 0):
        p.add(spec, "expected", f"{label}.expected", f"expected a finite number > 0, got {expected!r}")
    if "tolerance" in spec and not (_number(tolerance) and 0 <= tolerance <= 1):
        p.add(spec, "tolerance", f"{label}.tolerance", f"expected a relative tolerance from 0 to 1 (0.05: 5%), "
                                                       f"got {tolerance!r}")
    if better is not None and not (_number(better) and better >= 0):
        p.add(spec, "better_tolerance", f"{label}.better_tolerance",
              f"expected a relative tolerance >= 0 (0.2: 20% better than expected still passes), got {better!r}")
    hib = spec.get("higher_is_better")
    if hib is not None and not isinstance(hib, bool):
        p.add(spec, "higher_is_better", f"{label}.higher_is_better", f"expected true or false, got {hib!r}")
    for key in ("unit", "source"):
        v = spec.get(key)
        if key in spec and not (isinstance(v, str) and v.strip()):
            what = "a unit as the benchmark reports it (TFLOP/s, GB/s, ...)" if key == "unit" else \
                "a path under docs/results/ or a URL"
            p.add(spec, key, f"{label}.{key}", f"expected {what}, got {v!r}")
    note = spec.get("note") or ""
    if not isinstance(note, str):
        p.add(spec, "note", f"{label}.note", f"expected a string, got {note!r}")
    if len(p.lines) > before:
        return None
    return MetricRef(name, float(expected), float(tolerance), spec["unit"].strip(), spec["source"].strip(),
                     None if better is None else float(better), hib, note)


def load_reference_dir(folder, benchmarks=None) -> tuple:
    """(files, problems) for every ``*.yaml`` of a vendor's references folder (none when it does not exist).
    Each file needs ``match``; two files may not claim the same device-name substring."""
    folder = Path(folder)
    if not folder.is_dir():
        return (), []
    files, problems = [], []
    claimed: dict = {}
    for path in sorted(folder.glob("*.yaml")):
        ref, errs = load_reference_file(path, benchmarks, need_match=True)
        problems.extend(errs)
        if ref is None:
            continue
        for m in ref.match:
            other = claimed.get(m.lower())
            if other is not None:
                problems.append(f"{path}: match: {m!r} is also claimed by {other}; a device name must select one file")
            claimed.setdefault(m.lower(), path)
        files.append(ref)
    return tuple(files), problems


def select_file(files, device_name) -> ReferenceFile | None:
    """The file whose ``match`` fits ``device_name`` best (the longest substring found), or None."""
    if not device_name:
        return None
    best, best_len = None, -1
    for f in files:
        n = f.match_length(device_name)
        if n is not None and n > best_len:
            best, best_len = f, n
    return best


# -- verdicts -------------------------------------------------------------------------------------------------------

def case_facts(case) -> dict:
    """The qualifier values of a case (a CaseSummary) and its merged case configuration."""
    nnodes, nproc = case.nnodes, case.nproc
    ws = nnodes * nproc if isinstance(nnodes, int) and isinstance(nproc, int) else None
    return {"world_size": ws, "nnodes": nnodes, "nproc": nproc, "hw": case.hw,
            "nvlink_multicast": nvlink_multicast(case)}


def _results(case):
    """Every FINISHED payload of a case: its rounds' (passed ones first), then its nodes' (each cases)."""
    passed = case.passed_rounds
    for r in passed + [r for r in case.rounds if all(r is not q for q in passed)]:
        yield r.finished or {}
    for r in case.rounds:
        for n in r.nodes:
            yield n.finished or {}


def nvlink_multicast(case) -> bool | None:
    """Whether the case's ranks ran with NCCL's NVLink multicast (NVLS) on: ``NCCL_NVLS_ENABLE`` as rank 0 reported
    it in its FINISHED ``env`` (``nccl_nvls_enable``): "0" off, any other number on; None when no rank said (a
    CPU run, a benchmark that does not report it)."""
    for f in _results(case):
        env = f.get("env")
        if isinstance(env, dict) and "nccl_nvls_enable" in env:
            value = str(env.get("nccl_nvls_enable") or "").strip()
            if value.lstrip("-").isdigit():
                return int(value) != 0
            return None
    return None


def any_device_name(case) -> str | None:
    """The device name of the case (:func:`device_name`), else the one any of its rounds or hosts reported (an each
    case whose every round had a host that failed)."""
    name = device_name(case)
    if name:
        return name
    for f in _results(case):
        env = f.get("env")
        if isinstance(env, dict) and isinstance(env.get("device_name"), str) and env["device_name"]:
            return env["device_name"]
    return None


def thresholds_for(files, case) -> VerdictThresholds:
    """The node verdicts' thresholds for a case (a CaseSummary): the built-in defaults, overridden by the entries of
    the ``verdicts`` section of the reference file that fits its device (:func:`select_file`; a case without a device
    name: a file without ``match``, as a ``REFERENCES`` file may be) whose qualifiers hold
    (``gpus``: the case's nproc; ``nvlink_multicast``: :func:`nvlink_multicast`), the less specific first, so that
    per threshold the entry with the most qualifiers wins (the earlier on a tie)."""
    name = any_device_name(case)
    ref = select_file(files or (), name) if name else next((f for f in files or () if not f.match), None)
    if ref is None or not ref.thresholds:
        return DEFAULT_THRESHOLDS
    facts = {"gpus": case.nproc, "nvlink_multicast": nvlink_multicast(case)}
    fitting = sorted((e for e in ref.thresholds if e.fits(facts)), key=lambda e: (len(e.qualifiers), -e.index))
    chosen: dict = {}
    for e in fitting:
        for key, value in e.values:
            chosen[key] = Threshold(value, e.source, ref.path)
    return replace(DEFAULT_THRESHOLDS, **chosen)


def device_name(case) -> str | None:
    """The device name rank 0 reported (FINISHED env.device_name) in the case's first passed round."""
    for r in case.passed_rounds:
        name = ((r.finished or {}).get("env") or {}).get("device_name")
        if isinstance(name, str) and name:
            return name
    return None


def references_for(ref: ReferenceFile, case, case_config: dict) -> dict:
    """{metric: (MetricRef, RefEntry)} that apply to the case: per metric, the fitting entry with the most
    qualifiers, the earlier one on a tie."""
    facts = case_facts(case)
    facts["preset"] = case_config.get("preset")
    chosen: dict = {}
    for entry in ref.entries:
        if entry.benchmark != case.model or not entry.fits(facts, case_config):
            continue
        for m in entry.metrics:
            old = chosen.get(m.name)
            if old is None or entry.specificity > old[1].specificity:
                chosen[m.name] = (m, entry)
    return chosen


def measured(case, name: str) -> tuple:
    """(median over the passed rounds, rounds, unit) of a metric; the headline metric is the payload's value."""
    st = case.stats
    if name == case.metric:
        s, unit = st.get("value"), case.unit
    else:
        s, unit = st.get(name), case.metric_units().get(name)
    if not s or not _number(s.get("median")):
        return None, 0, unit
    return s["median"], s["n"], unit


def verdict(m: MetricRef, value, rounds: int, unit, *, higher_is_better: bool = True,
            reference: str = "") -> ReferenceVerdict:
    """One metric's median against its reference, as stored in summary.json."""
    hib = m.higher_is_better if m.higher_is_better is not None else higher_is_better
    base = ReferenceVerdict(m.name, value, rounds, m.unit, m.expected, m.tolerance, m.better_tolerance, hib,
                            m.source, reference, note=m.note)
    if value is None:
        return replace(base, result=NOT_MEASURED)
    if unit is not None and unit != m.unit:
        return replace(base, result=UNIT_MISMATCH, ok=False, measured_unit=unit)
    dev = value / m.expected - 1.0
    gain = dev if hib else -dev             # > 0: better than expected
    if gain < -m.tolerance:
        return replace(base, deviation=dev, result=BELOW, ok=False)
    if m.better_tolerance is not None and gain > m.better_tolerance:
        return replace(base, deviation=dev, result=ABOVE, ok=False)
    if m.better_tolerance is None and gain > m.tolerance:
        return replace(base, deviation=dev, result=ABOVE)       # flagged only
    return replace(base, deviation=dev)


def judge_case(case, files, case_config: dict) -> tuple:
    """(verdicts, the file used or None, the device name) for a case after its rounds."""
    name = device_name(case)
    ref = select_file(files, name)
    if ref is None:
        return [], None, name
    hib_head = case.head.get("higher_is_better")
    out = []
    for metric, (m, _entry) in references_for(ref, case, case_config or {}).items():
        value, rounds, unit = measured(case, metric)
        hib = hib_head if metric == case.metric and isinstance(hib_head, bool) else True
        out.append(verdict(m, value, rounds, unit, higher_is_better=hib, reference=ref.path))
    return out, ref, name


# -- text -----------------------------------------------------------------------------------------------------------

def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _pct(x) -> str:
    return f"{100 * x:.3g}%"


def tolerance_text(v: ReferenceVerdict) -> str:
    """'-5%' for a higher-is-better metric, '+5%' for a lower-is-better one; with the better side when it fails."""
    worse = ("-" if v.higher_is_better else "+") + _pct(v.tolerance or 0)
    if v.better_tolerance is None:
        return worse
    return f"{worse}/{'+' if v.higher_is_better else '-'}{_pct(v.better_tolerance)}"


def describe(v: ReferenceVerdict) -> str:
    """One line naming metric, measured, expected, tolerance and the result."""
    unit = v.unit
    name, exp = v.metric, f"expected {_num(v.expected)} {unit}, tolerance {tolerance_text(v)}"
    result = v.result
    if result == NOT_MEASURED:
        return f"{name}: not measured by the passed rounds ({exp})"
    if result == UNIT_MISMATCH:
        return f"{name} = {_num(v.measured)} {v.measured_unit}: unit mismatch, the reference is in " \
               f"{unit} ({exp})"
    head = f"{name} = {_num(v.measured)} {unit}"
    if result == SUSPECT:
        return f"{head}: flagged (not failed): {v.note} ({exp})"
    dev = v.deviation
    off = f" ({'+' if (dev or 0) >= 0 else ''}{_pct(dev or 0)})"
    if result == BELOW:
        return f"{head}{off}: below reference: {exp}"
    if result == ABOVE and not v.ok:
        return f"{head}{off}: above reference beyond its better_tolerance: {exp}"
    if result == ABOVE:
        return f"{head}{off}: above reference (flagged, not failed): {exp}"
    return f"{head}{off}: within reference: {exp}"


def case_note(verdicts) -> str:
    """Short text for a table cell: the failing verdicts, or 'passed (within reference)'; then what is flagged
    as suspect, with why."""
    flagged = "; ".join(f"flagged: {v.metric}: {v.note}" for v in verdicts or () if v.result == SUSPECT)
    text = _reference_note([v for v in verdicts or () if v.result != SUSPECT])
    return "; ".join(x for x in (text, flagged) if x)


def _reference_note(verdicts) -> str:
    if not verdicts:
        return ""
    bad = [v for v in verdicts if not v.ok]
    if bad:
        return "below reference: " + "; ".join(
            f"{v.metric} {_num(v.measured)} vs {_num(v.expected)} {v.unit} "
            f"({tolerance_text(v)})" + (" unit mismatch" if v.result == UNIT_MISMATCH else "")
            for v in bad)
    above = [v for v in verdicts if v.result == ABOVE]
    if not any(v.result in (WITHIN, ABOVE) for v in verdicts):
        return "no referenced metric measured"
    text = "passed (within reference)"
    if above:
        text += "; above: " + ", ".join(f"{v.metric} {'+' if (v.deviation or 0) >= 0 else ''}"
                                         f"{_pct(v.deviation or 0)}" for v in above)
    return text


__all__ = ["ABOVE", "BELOW", "NOT_MEASURED", "UNIT_MISMATCH", "WITHIN", "MetricRef", "RefEntry", "ReferenceFile",
           "ReferenceVerdict", "Threshold", "VerdictThresholds", "case_note", "describe", "judge_case",
           "load_reference_dir", "load_reference_file", "nvlink_multicast", "select_file", "thresholds_for", "verdict"]
