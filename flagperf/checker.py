"""Reading one configuration file: typed look-ups that collect every problem as ``file:line: KEY: expected``.

The config (:mod:`flagperf.config`) and every backend's options module (``flagperf/options/<name>.py``) read
their keys through a :class:`Checker`, so that a problem in a backend's own keys reads like a problem in any
other key. Light on purpose: the standard library and :mod:`flagperf.yamlio` only.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from flagperf.yamlio import where

CLOSE_RATIO = 0.8                           # a key is suggested only when at least this close (difflib ratio)
MAX_PATH_BYTES, MAX_NAME_BYTES = 4095, 255  # Linux PATH_MAX - 1 and NAME_MAX


class Checker:
    """Collects problems (and warnings) while reading one file."""

    def __init__(self, path: Path, problems: list, warnings: list | None = None):
        self.path = path
        self.problems = problems
        self.warnings = warnings if warnings is not None else []

    def add(self, mapping, key, message, label=None):
        self.problems.append(f"{where(self.path, mapping, key)}: {label or key}: {message}")

    def warn(self, mapping, key, message, label=None):
        self.warnings.append(f"{where(self.path, mapping, key)}: {label or key}: {message}")

    def unknown_keys(self, mapping, known, prefix="", *, ignored=None, elsewhere=None):
        """Report keys not in ``known``. A key of ``ignored`` ({key: why it is ignored}, FlagPerf's keys) is a
        warning; one of ``elsewhere`` ((keys, "the test config", "a cluster config")) is said to belong in that
        other file."""
        ignored = ignored or {}
        for i, key in enumerate(k for k in mapping if k not in known):
            if key in ignored:
                self.warn(mapping, key, f"accepted and ignored: {ignored[key]}", f"{prefix}{key}")
                continue
            if elsewhere is not None and key in elsewhere[0]:
                self.problems.append(f"{where(self.path, mapping, key)}: {prefix}{key}: unknown key in {elsewhere[2]}; "
                                     f"{key} belongs in {elsewhere[1]}")
                continue
            if "CASES" in known and looks_like_case_key(key):
                self.problems.append(f"{where(self.path, mapping, key)}: {prefix}{key}: unknown key; it has the shape "
                                     f"of a case key (model:framework:hw:nnodes:nproc:repeat); hint: indent it under "
                                     f"CASES, with spaces")
                continue
            # A suggestion for the first 100 only: comparing thousands of keys would take seconds.
            close = close_key(str(key)[:100].upper(), known) if i < 100 else None
            hint = f"; did you mean {close}?" if close else f"; known keys: {', '.join(known)}"
            self.problems.append(f"{where(self.path, mapping, key)}: {prefix}{key}: unknown key{hint}")

    def get(self, mapping, key, types, default, label=None):
        if key not in mapping or mapping[key] is None and type(None) not in _tuple(types):
            return default
        value = mapping[key]
        if isinstance(value, bool) and bool not in _tuple(types):
            self.add(mapping, key, f"expected {_describe(types)}, got {value!r}", label)
            return default
        if not isinstance(value, types):
            self.add(mapping, key, f"expected {_describe(types)}, got {type(value).__name__} {value!r}", label)
            return default
        return value

    def path_value(self, mapping, key, default=None, label=None):
        value = self.get(mapping, key, str, None, label)
        if value is None:
            return default
        try:
            return str(resolve(self.path, value))
        except ValueError as exc:
            self.add(mapping, key, str(exc), label)
            return default

    def port(self, mapping, key, default, label=None) -> int | None:
        """A TCP port: an integer, or a string of digits as FlagPerf writes them (SSH_PORT = "22")."""
        value = self.get(mapping, key, (int, str), default, label)
        if isinstance(value, str):
            if not re.fullmatch(r"[0-9]{1,5}", value.strip()):
                self.add(mapping, key, f"expected a TCP port 1-65535 (a number, or a string of digits), got "
                                       f"{value!r}", label)
                return default
            value = int(value.strip())
        if value is not None and not 1 <= value <= 65535:
            self.add(mapping, key, f"expected a TCP port 1-65535, got {value}", label)
            return default
        return value


def looks_like_case_key(key) -> bool:
    """A string of six or more ':'-separated fields whose nnodes field is a number, each or pairs: a case key
    written outside CASES (an indentation slip)."""
    parts = key.split(":") if isinstance(key, str) else []
    return len(parts) >= 6 and all(parts[:6]) and (parts[3].isdigit() or parts[3].lower() in ("each", "pairs"))


def close_key(word: str, known) -> str | None:
    """The known key ``word`` is a typo of, or None: only a really close one (difflib ratio >= 0.8, or at most
    two edits in a key of six or more characters), so that an unrelated key gets no misleading hint."""
    best, best_ratio = None, 0.0
    for key in known:
        ratio = difflib.SequenceMatcher(None, word, key).ratio()
        if ratio > best_ratio:
            best, best_ratio = key, ratio
    if best is not None and best_ratio >= CLOSE_RATIO:
        return best
    near = [k for k in known if len(word) >= 6 and _edits(word, k, 2) <= 2]
    return near[0] if near else None


def _edits(a: str, b: str, limit: int) -> int:
    """Levenshtein distance of ``a`` and ``b``, or ``limit + 1`` once it is known to be larger."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        if min(row) > limit:
            return limit + 1
    return row[-1]


def resolve(config_file: Path, value: str) -> Path:
    """Resolve a path from a config file: ``~`` expands, relative paths are relative to the file's folder.

    ValueError says why ``value`` cannot be a path: not a string, empty, a NUL, ``~user`` of no such user,
    too long, or a symlink loop."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty path, got {value!r}")
    if "\0" in value:
        raise ValueError(f"a path may not hold a NUL character, got {value!r}")
    try:
        p = Path(value).expanduser()
    except RuntimeError:        # ~user of no such user
        p = Path(value)
    if str(p).startswith("~"):
        raise ValueError(f"cannot expand {value!r}: no such user's home directory")
    check_length(value, str(p))
    try:
        resolved = p if p.is_absolute() else (Path(config_file).resolve().parent / p).resolve()
    except (OSError, RuntimeError, ValueError) as exc:       # symlink loop (RuntimeError in 3.11/3.12)
        raise ValueError(f"cannot resolve {value!r}: {reason(exc)}") from None
    check_length(value, str(resolved))
    return resolved


def check_length(value: str, path: str) -> None:
    """ValueError when ``path`` (given as ``value``) cannot be a Linux path: too long, or not encodable."""
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        raise ValueError(f"cannot encode {value!r} as a file name") from None
    if len(raw) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise ValueError(f"path too long ({len(raw)} bytes; at most {MAX_PATH_BYTES}, and {MAX_NAME_BYTES} per "
                         f"name): {value[:60]!r}{'...' if len(value) > 60 else ''}")


def reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def is_(test, path) -> bool:
    """``Path(path).is_dir()`` (or another test) that says False where the OS refuses to answer."""
    try:
        return bool(getattr(Path(path), test)())
    except (OSError, ValueError):
        return False


def _tuple(types):
    return types if isinstance(types, tuple) else (types,)


def _describe(types) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
             dict: "a mapping", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in _tuple(types) if not (t is int and float in _tuple(types)))
