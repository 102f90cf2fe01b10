"""A TF32 case that measured FP32: FlagPerf base's ``computation-TF32`` turns TF32 on through its drivers'
``unset_ieee_float32(vendor)``, which for NVIDIA compares the ``--vendor`` argument with ``"nvidia"``; FlagPerf
passes ``--vendor=<vendor>/<chip>`` (``nvidia/A100``), which never equals it, so the case multiplies FP32 matrices
with TF32 off and reports FP32's figure under TF32's name.

:func:`tf32_findings` is the check (docs/results.md, "A TF32 figure that is FP32's"): when a run has a TF32 case
and the FP32 case of the same name (``TF32`` -> ``FP32``) and chip, both with a measured figure, on a device whose
TF32 peak is at least PEAK_RATIO_MIN times its FP32 peak (the vendor's peak table, ``peaks`` of vendor.yaml), a
TF32 figure within SAME_WITHIN of the FP32 one is flagged: a :class:`~flagperf.records.ReferenceVerdict` with
result ``suspect`` (ok: the case does not fail) and a one-line note, for the TF32 case. Pure.
"""

from __future__ import annotations

import re

from flagperf.records import SUSPECT, ReferenceVerdict
from flagperf.references import any_device_name

PEAK_RATIO_MIN = 6.0        # TF32 peak / FP32 peak of the device: about 8 (A100 8.0, H100 7.4)
SAME_WITHIN = 0.10          # a TF32 figure within 10% of the FP32 one is FP32's
_TF32 = re.compile("tf32", re.IGNORECASE)


def fp32_name(model: str) -> str | None:
    """The FP32 case that goes with a TF32 case (``computation-TF32`` -> ``computation-FP32``); None for a case
    whose name has no TF32."""
    if not _TF32.search(model):
        return None
    return _TF32.sub(lambda m: "FP32" if m.group(0).isupper() else "fp32", model)


def _peak(entry, key) -> float | None:
    v = entry.get(key) if isinstance(entry, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def _matches(entry) -> list:
    m = entry.get("match") if isinstance(entry, dict) else None
    return [s for s in (m if isinstance(m, list) else [m]) if isinstance(s, str) and s]


def peak_entries(peaks, device: str | None, chip: str | None) -> list:
    """[(name, entry)] of a peak table (vendor.yaml's ``peaks``) that can be the case's device: with a device name,
    the entry whose ``match`` string it contains (the longest match wins, as the peak table says); else every
    entry whose name or a ``match`` string contains the chip of the case key (``A100``), ignoring case."""
    if not isinstance(peaks, dict):
        return []
    entries = [(str(n), e) for n, e in peaks.items() if isinstance(e, dict)]
    if device:
        best = max(((max((len(s) for s in _matches(e) if s in device), default=0), n, e) for n, e in entries),
                   default=(0, "", None), key=lambda t: t[0])
        return [(best[1], best[2])] if best[0] > 0 else []
    if not chip:
        return []
    chip = chip.lower()
    return [(n, e) for n, e in entries if chip in n.lower() or any(chip in s.lower() for s in _matches(e))]


def peak_ratio(entries) -> tuple:
    """(the smallest TF32 / FP32 peak ratio of the entries, that entry's name, TF32 peak, FP32 peak); (None, ...)
    when any entry lacks either peak."""
    best: tuple = (None, "", None, None)
    for name, e in entries:
        tf32, fp32 = _peak(e, "tf32_tflops"), _peak(e, "fp32_tflops")
        if tf32 is None or fp32 is None:
            return (None, "", None, None)
        if best[0] is None or tf32 / fp32 < best[0]:
            best = (tf32 / fp32, name, tf32, fp32)
    return best


def _median(case) -> tuple:
    s = (case.stats or {}).get("value") or {}
    v = s.get("median")
    return (float(v), int(s.get("n") or 0)) if isinstance(v, (int, float)) and not isinstance(v, bool) else (None, 0)


def tf32_findings(cases, peaks, peaks_file: str = "", vendor: str = "") -> list:
    """[(the TF32 case, its suspect ReferenceVerdict)] of a run's cases (CaseSummary) against the vendor's peak
    table (its parsed YAML; None: no check)."""
    out = []
    for case in cases:
        partner = fp32_name(case.model or "")
        if partner is None:
            continue
        fp32_case = next((c for c in cases if c.model == partner and c.hw == case.hw), None)
        if fp32_case is None:
            continue
        tf32, rounds = _median(case)
        fp32, _ = _median(fp32_case)
        if tf32 is None or fp32 is None or fp32 <= 0 or (case.unit or "") != (fp32_case.unit or ""):
            continue
        ratio, entry, tf32_peak, fp32_peak = peak_ratio(peak_entries(peaks, any_device_name(case), case.hw))
        if ratio is None or ratio < PEAK_RATIO_MIN or abs(tf32 / fp32 - 1) > SAME_WITHIN:
            continue
        expected = fp32 * ratio
        note = (f"TF32 measured FP32: {tf32:.4g} is {tf32 / fp32:.2f}x {fp32_case.key}'s {fp32:.4g} {case.unit or ''}"
                f" where the TF32 peak is {ratio:.1f}x FP32's; FlagPerf's TF32 case turns TF32 on only for --vendor "
                f"equal to 'nvidia', and FlagPerf passes --vendor={vendor or '<vendor>'}/{case.hw}")
        out.append((case, ReferenceVerdict(
            case.metric or case.model, tf32, rounds, case.unit or "", round(expected, 6), SAME_WITHIN,
            source=f"{entry}: TF32 {tf32_peak:g} / FP32 {fp32_peak:g} TFLOPS (peak table)",
            reference=str(peaks_file), deviation=tf32 / expected - 1, result=SUSPECT, ok=True, note=note)))
    return out
