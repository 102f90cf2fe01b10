"""YAML loading that remembers the line of every mapping key, for error messages.

Config files come from users: loading is bounded (file size, node count with aliases expanded, nesting
depth, integer size) and every malformed input becomes one problem line naming the file (and line), never an
exception or a traceback. Safe loading only: no Python tags.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

MAX_FILE_BYTES = 1024 * 1024    # a config file larger than this is refused unread
MAX_NODES = 100_000             # YAML nodes in a document, counting each alias as the nodes it expands to
MAX_DEPTH = 64                  # nesting of sequences and mappings, aliases expanded
MAX_INT = 2 ** 63               # |integer| must stay below this


class LineMap(dict):
    """A dict that also knows the 1-based line of each of its keys in the source file."""

    lines: dict

    def line(self, key):
        return getattr(self, "lines", {}).get(key)


class _Loader(yaml.SafeLoader):
    """SafeLoader with limits on the composed document (before anything is constructed)."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._depth = 0                 # open collections
        self._nodes = 0                 # nodes so far, aliases expanded
        self._open_anchors: list = []   # anchors of the collections being composed (an alias to one recurses)
        self._sizes: dict = {}          # id(node) -> (nodes, height) of a finished node, aliases expanded

    def _limit(self, mark, problem):
        raise yaml.composer.ComposerError(None, None, problem, mark)

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                self._limit(event.start_mark, f"alias *{event.anchor} refers to a node that contains it "
                                              f"(recursive alias)")
            target = self.anchors.get(event.anchor)
            if target is not None:
                nodes, height = self._size(target)
                self._count(nodes, event.start_mark)
                if self._depth + height > MAX_DEPTH:
                    self._limit(event.start_mark, f"nesting deeper than {MAX_DEPTH} levels (with alias "
                                                  f"*{event.anchor} expanded)")
            return super().compose_node(parent, index)
        self._count(1, event.start_mark)
        if isinstance(event, yaml.ScalarEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            self._limit(event.start_mark, f"nesting deeper than {MAX_DEPTH} levels")
        self._open_anchors.append(getattr(event, "anchor", None))
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.pop()

    def compose_scalar_node(self, anchor):
        node = super().compose_scalar_node(anchor)
        bad = _bad_char(node.value)
        if bad:
            self._limit(node.start_mark, f"a string holds {bad}, which a config value may not hold")
        return node

    def _count(self, nodes, mark):
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            self._limit(mark, f"the document has more than {MAX_NODES} nodes with aliases expanded "
                              f"(an alias bomb?)")

    def _size(self, node) -> tuple:
        """(nodes, height) of a composed node, aliases expanded; memoised, so shared nodes cost once."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.ScalarNode):
            result = (1, 0)
        else:
            children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) \
                else list(node.value)
            sizes = [self._size(c) for c in children]
            result = (1 + sum(n for n, _ in sizes), 1 + max((h for _, h in sizes), default=0))
        self._sizes[id(node)] = result
        return result

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError) as exc:
            # PyYAML's own constructors fail this way on bad values of explicit tags (!!int "x",
            # !!timestamp x, !!bool maybe, ...).
            value = node.value if isinstance(node, yaml.ScalarNode) else "..."
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {_short(value)!r} as {node.tag.rpartition(':')[2]} "
                            f"({type(exc).__name__})", node.start_mark) from None


def _short(value: str, n: int = 60) -> str:
    return value if len(value) <= n else value[:n] + "..."


def _bad_char(text: str) -> str | None:
    """What in ``text`` cannot be a config value: a NUL, or a lone surrogate (not encodable as UTF-8)."""
    if "\x00" in text:
        return "a NUL character (\\0)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (\\u{ord(text[exc.start]):04x})"
    return None


def _construct_int(loader, node):
    value = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
    if abs(value) >= MAX_INT:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer {_short(str(node.value))} is too large (at most {MAX_INT - 1})", node.start_mark)
    return value


def _checked_int(loader, node):
    # int() refuses a long decimal string (sys.int_info digit limit); catch the size before converting.
    text = str(node.value).replace("_", "")
    if len(text) > 40:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer {_short(text)} is too large (at most {MAX_INT - 1})", node.start_mark)
    return _construct_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _checked_int)


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    result = LineMap()
    result.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable key", key_node.start_mark) from None
        if key in result:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_file(path: Path):
    """Return (data, problems); problems are one-line messages naming the file (and line)."""
    path = Path(path)
    text, problem = read_text(path)
    if problem:
        return None, [one_line(f"{path}: {problem}")]
    try:
        return yaml.load(text, Loader=_Loader), []
    except yaml.MarkedYAMLError as exc:
        # "while scanning a simple key" errors point past the faulty line; their context is the line itself.
        mark = exc.context_mark if exc.context_mark is not None and exc.problem and "expected ':'" in exc.problem \
            else (exc.problem_mark or exc.context_mark)
        where = f":{mark.line + 1}" if mark is not None else ""
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        return None, [one_line(f"{path}{where}: YAML syntax error: {what}")]
    except yaml.reader.ReaderError as exc:     # a character YAML does not allow (a NUL, a control character)
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        char = f"{exc.character!r}" if isinstance(exc.character, str) else f"#x{exc.character:04x}"
        return None, [f"{path}{f':{line}' if line else ''}: YAML syntax error: unacceptable character {char} "
                      f"({exc.reason})"]
    except yaml.YAMLError as exc:
        return None, [one_line(f"{path}: YAML syntax error: {(str(exc).splitlines() or [''])[0]}")]
    except RecursionError:
        return None, [f"{path}: YAML syntax error: nesting too deep"]


def read_text(path: Path, kind: str = "YAML") -> tuple:
    """(text, None) or (None, what is wrong): a regular file of at most MAX_FILE_BYTES, in UTF-8; ``kind`` names
    the file's language in the messages. The file is opened without blocking and checked again once open, so that
    a pipe or device put in its place after the first look is refused, not read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, "file not found"
    except (OSError, ValueError) as exc:
        return None, f"cannot read: {_os_reason(exc)}"
    if stat.S_ISDIR(st.st_mode):
        return None, f"expected a {kind} file, found a directory"
    not_regular = f"expected a regular {kind} file (not a device, pipe or socket)"
    if not stat.S_ISREG(st.st_mode):
        return None, not_regular
    if st.st_size > MAX_FILE_BYTES:
        return None, f"the file has {st.st_size} bytes; a config file may have at most {MAX_FILE_BYTES}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        return None, f"cannot read: {_os_reason(exc)}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, not_regular
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return None, f"cannot read: {_os_reason(exc)}"
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > MAX_FILE_BYTES:
        return None, f"the file has more than {MAX_FILE_BYTES} bytes, the most a config file may have"
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        return None, f"line {line}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}: {exc.reason})"


def _os_reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


MAX_MESSAGE = 1000      # characters of a problem line; the rest of a huge value is left out


def one_line(message: str) -> str:
    """``message`` as one printable line: line breaks, control characters and lone surrogates escaped, and cut
    to MAX_MESSAGE characters."""
    if not message.isprintable():
        message = "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                          for c in message)
    if len(message) > MAX_MESSAGE:
        message = f"{message[:MAX_MESSAGE]}... ({len(message) - MAX_MESSAGE} more characters)"
    return message


def where(path, mapping, key) -> str:
    """``file:line`` for a key of a LineMap, or just ``file``."""
    line = mapping.line(key) if isinstance(mapping, LineMap) else None
    return f"{path}:{line}" if line else f"{path}"
