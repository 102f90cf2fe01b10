"""Vendor profiles: ``vendors/<name>/vendor.yaml``, validated into frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from flagperf.yamlio import load_yaml_file

_KEYS = {
    "name": str,
    "description": str,
    "device": str,
    "dist_backend": str,
    "visible_devices_env": (str, type(None)),
    "gpu_monitor": str,
    "rank_env": dict,
    "frameworks": list,
}
_REQUIRED = ("device", "dist_backend", "frameworks")


@dataclass(frozen=True)
class VendorProfile:
    name: str
    path: Path
    description: str
    device: str
    dist_backend: str
    visible_devices_env: str | None
    gpu_monitor: str
    frameworks: tuple
    rank_env: tuple = field(default_factory=tuple)  # ((key, value), ...)


def vendor_names(root: Path) -> list[str]:
    d = root / "vendors"
    return sorted(p.name for p in d.iterdir() if (p / "vendor.yaml").is_file()) if d.is_dir() else []


def load_vendor(root: Path, name: str) -> tuple[VendorProfile | None, list[str]]:
    """Return (profile, problems). The profile is None when problems were found."""
    path = root / "vendors" / name / "vendor.yaml"
    data, problems = load_yaml_file(path)
    if problems:
        return None, problems
    if not isinstance(data, dict):
        return None, [f"{path}: expected a mapping of vendor keys"]
    for key, value in data.items():
        if key not in _KEYS:
            problems.append(f"{path}: {key}: unknown key (known: {', '.join(_KEYS)})")
        elif not isinstance(value, _KEYS[key]):
            problems.append(f"{path}: {key}: expected {_type_name(_KEYS[key])}, got {type(value).__name__}")
    for key in _REQUIRED:
        if key not in data:
            problems.append(f"{path}: {key}: required key is missing")
    if data.get("device") not in (None, "cpu", "cuda"):
        problems.append(f"{path}: device: expected 'cpu' or 'cuda', got {data.get('device')!r}")
    if data.get("gpu_monitor", "none") not in ("none", "nvml"):
        problems.append(f"{path}: gpu_monitor: expected 'none' or 'nvml', got {data.get('gpu_monitor')!r}")
    if problems:
        return None, problems
    return VendorProfile(
        name=name,
        path=path.parent,
        description=data.get("description", ""),
        device=data["device"],
        dist_backend=data["dist_backend"],
        visible_devices_env=data.get("visible_devices_env"),
        gpu_monitor=data.get("gpu_monitor", "none"),
        frameworks=tuple(str(f) for f in data["frameworks"]),
        rank_env=tuple((str(k), str(v)) for k, v in (data.get("rank_env") or {}).items()),
    ), []


def detect_vendor() -> tuple[str, str]:
    """The vendor for ``VENDOR: auto`` on this machine: nvidia when NVML sees a GPU, else cpu."""
    try:
        import pynvml
    except ImportError:
        return "cpu", "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return "cpu", f"NVML unavailable ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    if count > 0:
        return "nvidia", f"NVML sees {count} GPU(s)"
    return "cpu", "NVML sees no GPU"


def _type_name(t) -> str:
    if isinstance(t, tuple):
        return " or ".join("null" if x is type(None) else x.__name__ for x in t)
    return {"str": "a string", "list": "a list", "dict": "a mapping"}.get(t.__name__, t.__name__)
