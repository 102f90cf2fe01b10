"""What a flagperf tree provides: benchmark folders (``benchmarks/<model>/main.py``), found in one place."""

from __future__ import annotations

from pathlib import Path


def benchmark_names(root: Path, case_paths=()) -> list:
    """Benchmarks of the flagperf tree, then those of each CASE_PATHS folder (a folder per benchmark)."""
    names = {p.parent.name for p in (Path(root) / "benchmarks").glob("*/main.py")}
    for folder in case_paths:
        names.update(p.name for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith("."))
    return sorted(names)


def benchmark_description(root: Path, name: str) -> str:
    """The first comment line of the benchmark's case_config.yaml, or ''."""
    try:
        first = (Path(root) / "benchmarks" / name / "case_config.yaml").read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return ""
    return first.lstrip("#").strip() if first.startswith("#") else ""
