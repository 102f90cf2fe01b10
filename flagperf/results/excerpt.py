"""The excerpt of a failed round: the error line that says why, and the lines that show it (docs/results.md,
"Failure excerpts").

The end of a log is often not the error: torchrun ends with its own ``ChildFailedError`` traceback and a
``====`` block naming the rank that failed first ("Root Cause"), FlagPerf's pytorch launcher with its own
exception, a deepspeed launcher with ``CalledProcessError``. :func:`error_excerpt` picks the error of the rank
that failed: torchrun's root cause rank's traceback (its ``[default<L>]:`` or ``[rank<R>]:`` lines, the
traceback its error file recorded, or the first worker traceback printed before the footer), else the last
traceback that is neither a launcher's nor one a rank raised because another one failed (its peer closed the
connection, its communicator was aborted), else the last line that reads as an error. Pure;
:func:`read_excerpt` and :func:`with_excerpt` read the logs, a bounded window of each.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

from flagperf.records import Failure
from flagperf.results.flagperf_lines import flagperf_node_files, plain_line
from flagperf.results.interpret import Status, Verdict, describe_exit
from flagperf.results.perflog import read_lines

EXCERPT_BYTES = 1024 ** 2       # read from the end of each log
EXCERPT_MAX_LINES = 20_000      # lines of that window looked at
EXCERPT_LINES = 12              # lines of the excerpt (the traceback's end, its error line last)
ERROR_MAX_CHARS = 300           # of the error line in a failure's reason
TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_STREAM = re.compile(r"^\[(?P<role>[A-Za-z_]{0,16}?)(?P<n>\d{1,7})\]:")
# An exception line: ``ZeroDivisionError: division by zero``, ``torch.OutOfMemoryError: ...``, ``KeyboardInterrupt``
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*)(?P<colon>:(?:\s.*)?)?$")
_EXCEPTION_NAME = re.compile(r"(Error|Exception|Interrupt|Exit|Iteration|Warning|Failure|Fault)$")
# The exception a launcher raises when a worker failed: its traceback is the launcher's, not the error.
_WRAPPER = re.compile(r"ChildFailedError|CalledProcessError|returncode != 0|SignalException|"
                      r"torch\.distributed\.elastic|^SystemExit\b")
# What a rank raises because another one failed: its peer closed the connection, the communicator was aborted.
_SECONDARY = re.compile(r"(?i)connection (closed|reset) by peer|remote worker crash|broken pipe|"
                        r"communicator was aborted|watchdog caught collective operation timeout|"
                        r"remote process exited|DistNetworkError|\bTCPStore\b|recvValue|sendBytes|recvBytes")
_BORDER = re.compile(r"^\s*(=){3,}\s*$")
_FIELD = re.compile(r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<value>.*)$")
_ROOT_RANK = re.compile(r"^(?P<rank>-?\d+) \(local_rank: (?P<local>-?\d+)\)")
_ROOT_EXIT = re.compile(r"^(?P<code>-?\d+)\b")
_ERROR_WORDS = re.compile(r"(?i)(?<![\w-])(error|exception|fatal|failed|failure|killed|segmentation fault|"
                          r"core dumped|aborted|out of memory|no such file|permission denied|not found)(?![\w-])")
_NOT_ERRORS = re.compile(r"(?i)\b(no|0) errors?\b|\berrors?: 0\b|\bINFO\b")


@dataclass(frozen=True)
class Excerpt:
    error: str                      # the error line
    lines: tuple                    # the lines that show it, the error line last
    log: str = ""                   # the file it came from
    rank: int | None = None         # torchrun's root cause: the rank that failed first
    exit_code: int | None = None    # ... and its exit code


@dataclass
class _Traceback:
    lines: list                     # header to exception line
    error: str
    wrapper: bool
    stream: tuple | None            # (role, number) of a torchrun stream prefix, None without one
    start: int                      # index of its header among the log's lines

    @property
    def secondary(self) -> bool:
        """Raised because another rank failed (a peer closed its connection, an aborted communicator)."""
        return bool(_SECONDARY.search(self.error))


@dataclass(frozen=True)
class RootCause:
    rank: int
    local_rank: int
    exit_code: int | None
    message: tuple                  # the ``traceback :`` field and its continuation lines, dedented
    start: int                      # index of the footer's first line (its ChildFailedError traceback)


def _split(line: str) -> tuple:
    """(stream, text) of a cleaned line: torchrun's ``[default1]:`` prefix as (role, number), or None."""
    m = _STREAM.match(line)
    if m:
        return (m.group("role"), int(m.group("n"))), line[m.end():]
    return None, line


def _is_exception(text: str, own_stream: bool) -> bool:
    """Whether the first unindented line after a traceback's frames is its exception line. In a stream of its
    own it is; in output that processes share, a line that does not look like one is another's."""
    if own_stream:
        return True
    m = _EXCEPTION.match(text)
    return m is not None and (m.group("colon") is not None or bool(_EXCEPTION_NAME.search(m.group("name"))))


def tracebacks(lines) -> list:
    """Every Python traceback in ``lines`` (cleaned), a chained one ("During handling of the above exception")
    as one whose error is the last exception's. Lines of other torchrun streams between a traceback's lines
    are left out of it."""
    out: list = []
    open_: dict = {}        # stream -> [lines, start, the traceback it is chained to]
    chain: dict = {}        # stream -> [finished traceback, chain marker seen after it]
    pad: dict = {}          # stream -> the spaces its prefix puts before a line ("[rank1]: Traceback")
    for i, (stream, text) in enumerate(_split(x) for x in lines):
        if stream is not None:
            if text.lstrip().startswith(TRACEBACK):
                pad[stream] = len(text) - len(text.lstrip())
            n = pad.get(stream, 0)
            text = text[n:] if text[:n].isspace() else text.lstrip() if n else text
        tb = open_.get(stream)
        if text.startswith(TRACEBACK):
            prev = chain.pop(stream, None)
            open_[stream] = [[text], i, prev[0] if prev and prev[1] else None]
            continue
        if tb is None:
            if stream in chain and text.strip():
                if text.startswith(_CHAINED):
                    chain[stream][1] = True
                else:
                    del chain[stream]
            continue
        if not text.strip() or text[:1].isspace():
            tb[0].append(text)
            continue
        if len(tb[0]) > 1 and _is_exception(text.strip(), stream is not None):
            body, start, prev = tb
            body = body + [text]
            if prev is not None and any(t is prev for t in out):
                out = [t for t in out if t is not prev]
                body, start = prev.lines + ["", "(chained)", ""] + body, prev.start
            done = _Traceback(body, text.strip(), bool(_WRAPPER.search(text)) or _launcher_frames(body), stream,
                              start)
            out.append(done)
            chain[stream] = [done, False]
            del open_[stream]
        # any other line: another process's output, interleaved where no stream prefix tells them apart
    return out


def _launcher_frames(body) -> bool:
    frames = "\n".join(body)
    return "torch/distributed/run.py" in frames or "torch/distributed/launch.py" in frames or \
        "deepspeed/launcher/" in frames


def root_cause(lines) -> RootCause | None:
    """torchrun's "Root Cause (first observed failure)" of ``lines`` (cleaned), the last one printed."""
    idx = None
    for i in range(len(lines) - 1, -1, -1):
        if _split(lines[i])[1].strip() == "Root Cause (first observed failure):":
            idx = i
            break
    if idx is None:
        return None
    fields: dict = {}
    message: list = []
    key = None
    for line in lines[idx + 1:idx + 400]:
        text = _split(line)[1]
        if _BORDER.match(text):
            break
        m = _FIELD.match(text)
        if m and key != "traceback":
            key = m.group("key")
            fields[key] = m.group("value").strip()
            if key == "traceback":
                message.append(m.group("value").rstrip())
        elif key == "traceback":
            message.append(text[2:].rstrip() if text.startswith("  ") else text.rstrip())
    m = _ROOT_RANK.match(fields.get("rank", ""))
    if m is None:
        return None
    code = _ROOT_EXIT.match(fields.get("exitcode", ""))
    start = idx     # the footer's start: torchrun's own traceback, above its ChildFailedError line
    for i in range(idx - 1, max(-1, idx - 2000), -1):
        if "ChildFailedError" in lines[i]:
            start = i
            for j in range(i - 1, max(-1, i - 400), -1):
                if _split(lines[j])[1].startswith(TRACEBACK):
                    start = j
                    break
            break
    while message and not message[-1].strip():
        message.pop()
    return RootCause(int(m.group("rank")), int(m.group("local")), int(code.group("code")) if code else None,
                     tuple(message), start)


def _stream_of(root: RootCause, stream) -> bool:
    if stream is None:
        return False
    role, n = stream
    return n == root.rank if role == "rank" else n == root.local_rank


def _last_error_line(lines) -> tuple | None:
    """(index, line) of the last line that reads as an error, outside torchrun's footer blocks."""
    for i in range(len(lines) - 1, -1, -1):
        text = _split(lines[i])[1].strip()
        if text and not _BORDER.match(text) and _ERROR_WORDS.search(text) and not _NOT_ERRORS.search(text) \
                and not text.startswith(("Root Cause", "Failures:", "error_file:")):
            return i, text
    return None


def _excerpt_of(tb: _Traceback, log: str, root: RootCause | None = None) -> Excerpt:
    body = tb.lines if len(tb.lines) <= EXCERPT_LINES else [tb.lines[0], *tb.lines[-(EXCERPT_LINES - 1):]]
    return Excerpt(tb.error, tuple(body), log, root.rank if root else None, root.exit_code if root else None)


def error_excerpt(raw_lines, log: str = "") -> Excerpt | None:
    """The error of a log's lines (see the module's docstring), or None when no line reads as an error."""
    lines = [plain_line(x) for x in raw_lines]
    root = root_cause(lines)
    tbs = tracebacks(lines)
    if root is not None:
        if root.message and root.message[0].startswith(TRACEBACK):     # recorded by the worker (@record)
            inner = [t for t in tracebacks(list(root.message)) if not t.wrapper] or tracebacks(list(root.message))
            if inner:
                return _excerpt_of(inner[-1], log, root)
        before = [t for t in tbs if t.start < root.start and not t.wrapper]
        own = [t for t in before if _stream_of(root, t.stream)]
        if own:
            return _excerpt_of(own[-1], log, root)
        msg = root.message[0].strip() if root.message else ""
        if msg.startswith("Signal "):       # killed: no traceback of its own (another rank's may follow)
            return Excerpt(msg, (msg,), log, root.rank, root.exit_code)
        plain = [t for t in before if t.stream is None]
        plain = [t for t in plain if not t.secondary] or plain
        if plain:
            return _excerpt_of(plain[0], log, root)     # the first worker traceback printed: the first failure
        found = _last_error_line(lines[:root.start])
        if found is not None:
            return Excerpt(found[1], (found[1],), log, root.rank, root.exit_code)
        return Excerpt("", (), log, root.rank, root.exit_code)
    own = [t for t in tbs if not t.wrapper]
    primary = [t for t in own if not t.secondary]
    if primary:                 # the last error that no other rank's failure caused
        return _excerpt_of(primary[-1], log)
    if own:                     # only errors caused by another rank's failure: the first of them
        return _excerpt_of(own[0], log)
    if tbs:
        return _excerpt_of(tbs[-1], log)
    found = _last_error_line(lines)
    if found is None:
        return None
    i, text = found
    context = [_split(x)[1] for x in lines[max(0, i - EXCERPT_LINES + 1):i + 1]]
    return Excerpt(text, tuple(context), log)


def read_tail_lines(path) -> list:
    """The lines of the last EXCERPT_BYTES of a regular file (at most EXCERPT_MAX_LINES of them)."""
    return list(deque(read_lines(path, EXCERPT_BYTES), maxlen=EXCERPT_MAX_LINES))


def read_excerpt(paths) -> Excerpt | None:
    """The excerpt of the first of ``paths`` that has one. Where that is torchrun's root cause without the
    rank's traceback, the rank's own log among ``paths`` (``rank<R>.out.log``, FlagPerf's launchers'
    ``rank<R>.log.txt``) is read first, then the others; what they show is that rank's error."""
    paths = list(dict.fromkeys(Path(p) for p in paths if p))
    root = None
    for path in paths:
        ex = error_excerpt(read_tail_lines(path), str(path))
        if ex is None or (root is not None and ex.rank is not None):
            continue
        if root is None and ex.rank is not None and not _is_traceback(ex):
            root = ex
            own = [p for p in paths if p.name in (f"rank{ex.rank}.out.log", f"rank{ex.rank}.log.txt")]
            for other in own:
                found = error_excerpt(read_tail_lines(other), str(other))
                if found is not None and found.error and found.rank is None:
                    return replace(found, rank=ex.rank, exit_code=ex.exit_code)
            if ex.error:
                return ex
            continue
        if root is not None:
            ex = replace(ex, rank=root.rank, exit_code=root.exit_code)
        if ex.error:
            return ex
    return root


def _is_traceback(ex: Excerpt) -> bool:
    return bool(ex.lines) and ex.lines[0].startswith(TRACEBACK)


def reason_with(reason: str, ex: Excerpt) -> str:
    """A failure's reason with its excerpt's error line (and torchrun's first failed rank) after it."""
    error = ex.error if len(ex.error) <= ERROR_MAX_CHARS else ex.error[:ERROR_MAX_CHARS] + "..."
    if ex.rank is not None:
        first = f"rank {ex.rank} failed first ({describe_exit(ex.exit_code)})"
        return f"{reason}; {first}: {error}" if error else f"{reason}; {first}"
    return f"{reason}; last error: {error}"


def with_excerpt(failure: Failure | None, nodes=()) -> Failure | None:
    """``failure`` with the error of its log in its reason, and that error's lines as its ``last_lines`` (and
    ``log`` the file they came from): its own log first, then the files FlagPerf's launchers wrote in its
    node's directory (flagperf_lines.flagperf_node_files of the planned node ``nodes`` names). Unchanged when no
    line of them reads as an error."""
    if failure is None or not failure.log:
        return failure
    node = next((n for n in nodes if n.label == failure.node), None)
    paths = [failure.log] + ([p for p, _ in flagperf_node_files(node)] if node is not None else [])
    ex = read_excerpt(paths)
    if ex is None:
        return failure
    return replace(failure, reason=reason_with(failure.reason, ex), log=ex.log or failure.log,
                   last_lines=ex.lines or failure.last_lines)


def verdict_with_excerpt(verdict: Verdict, nodes=()) -> Verdict:
    """A failed, timed-out or errored round's verdict with its failure's excerpt (with_excerpt); any other as
    it is."""
    if verdict.status not in (Status.FAILED, Status.TIMEOUT, Status.ERROR) or verdict.failure is None:
        return verdict
    return replace(verdict, failure=with_excerpt(verdict.failure, nodes))
