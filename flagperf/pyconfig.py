"""FlagPerf's Python config modules (``test_conf.py``, ``cluster_conf.py``) read without running them.

The file is parsed with :mod:`ast` and only plain data is evaluated: literals (strings, numbers, booleans,
None, lists, tuples, dicts), names assigned earlier in the same file, ``+`` of those (strings, lists, numbers),
unary minus on a number, simple f-strings and ``os.path.join(...)`` of strings. ``import os`` (and
``import os.path``) is allowed and ignored. Nothing is imported or executed: any other statement or expression
is a problem naming the file and line, and its name is left unassigned.

The result is the same :class:`flagperf.yamlio.LineMap` the YAML reader gives: each top-level key is a name
assigned in the file that has no lowercase letter and does not start with ``_`` (other names are helpers that
later assignments may use), with the line of its (last) assignment; dict literals carry the line of each key.

Every input ends in that mapping or in one-line problems, never in an exception: the file must be a regular file
of at most MAX_FILE_BYTES of UTF-8 without NUL bytes, opened without blocking; the values it builds are bounded
before they are built (MAX_STRING_CHARS per string, MAX_CHARS and MAX_NODES for the whole file with every name
it reuses expanded, MAX_DEPTH levels of nesting, names expanded too); nesting too deep for Python's own parser is
named by its line; at most MAX_PROBLEMS problems are listed, the rest counted.
"""

from __future__ import annotations

import ast
import io
import posixpath
import textwrap
import tokenize
import warnings
from pathlib import Path

from flagperf.yamlio import (MAX_DEPTH, MAX_FILE_BYTES, MAX_INT, MAX_NODES, LineMap, _bad_char, read_text,
                            load_yaml_file, one_line)

MAX_STRING_CHARS = MAX_FILE_BYTES       # one string, however it is made (a literal, +, an f-string, os.path.join)
MAX_CHARS = 16 * MAX_FILE_BYTES         # characters of all the strings the file makes, names it reuses expanded
MAX_PROBLEMS = 20                       # problems given one by one; the rest are counted in one more line
ALLOWED = ("a FlagPerf Python config may hold only NAME = value assignments of literals (strings, numbers, True, "
           "False, None, lists, tuples, dicts), names assigned above, + of those, simple f-strings and "
           "os.path.join(...), and 'import os'")


class _Refused(Exception):
    """A construct the reader does not evaluate, at ``line``."""

    def __init__(self, line: int | None, what: str):
        super().__init__(what)
        self.line = line
        self.what = what


class _Spent(_Refused):
    """The file has made as much as a config may (MAX_NODES, MAX_CHARS): the rest of it is not read."""


class _Unassigned(Exception):
    """A name whose assignment was refused above: the problem is already reported."""


def is_python_config(path) -> bool:
    return Path(path).suffix == ".py"


def load_python_file(path: Path) -> tuple:
    """(LineMap, problems), or (None, problems) when the file cannot be read or parsed. Problems are one-line
    messages ``<file>:<line>: ...``."""
    path = Path(path)
    text, problem = read_text(path, "Python")
    if problem:
        return None, [one_line(f"{path}: {problem}")]
    bad = _bad_char(text)
    if bad:
        line = text.count("\n", 0, text.index("\x00")) + 1 if "\x00" in text else None
        return None, [one_line(f"{path}{f':{line}' if line else ''}: the file holds {bad}, which a config may "
                               f"not hold")]
    try:
        with warnings.catch_warnings():         # invalid escapes and the like: not shown, the file is only read
            warnings.simplefilter("ignore")
            tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        where = f":{exc.lineno}" if exc.lineno else ""
        return None, [one_line(f"{path}{where}: Python syntax error: {exc.msg}")]
    except (RecursionError, MemoryError):
        line = _too_deep_line(text)
        return None, [f"{path}{f':{line}' if line else ''}: Python syntax error: nesting too deep for Python's "
                      f"parser"]
    except Exception as exc:  # noqa: BLE001 - ValueError and the like from the parser: still one line
        return None, [one_line(f"{path}: Python syntax error: {exc}")]
    return _Reader(path, text).module(tree)


def _too_deep_line(text: str) -> int | None:
    """The first line of the first statement of ``text`` that Python's parser cannot nest, found by parsing the
    statements one by one (the tokenizer does not recurse); None when they cannot be told apart."""
    lines = io.StringIO(text).readlines()      # the lines the tokenizer numbers
    skip = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    first = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if first is None and tok.type not in skip:
                first = tok.start[0]
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER) and first is not None:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ast.parse(textwrap.dedent("".join(lines[first - 1:tok.end[0]])))
                except (RecursionError, MemoryError):
                    return first
                except Exception:  # noqa: BLE001 - a statement cut out of a block may not parse on its own
                    pass
                first = None
    except Exception:  # noqa: BLE001 - the tokenizer's own errors: the line stays unknown
        return None
    return None


class _Reader:
    """The plain data of one parsed config module, statement by statement, within the bounds above."""

    def __init__(self, path: Path, text: str = ""):
        self.path = path
        self.lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")     # for messages only
        self.names: dict = {}       # name -> value
        self.weights: dict = {}     # name -> (values, characters, nesting) of its value, names expanded
        self.weighed: dict = {}     # id of a list or dict assigned to a name -> (it, its weight)
        self.refused: set = set()   # names whose assignment was refused
        self.nodes = 0              # values made so far, names expanded (as YAML counts aliases)
        self.chars = 0              # characters of the strings made so far, names expanded
        self.problems: list = []
        self.unlisted = 0           # problems past MAX_PROBLEMS

    def module(self, tree: ast.Module) -> tuple:
        data = LineMap()
        data.lines = {}
        for stmt in tree.body:
            try:
                target, value = self.statement(stmt)
            except _Spent as exc:
                self.problem(exc.line or stmt.lineno, f"{exc.what}; the rest of the file is not read")
                break
            except _Refused as exc:
                self.problem(exc.line or stmt.lineno, exc.what)
            except RecursionError:
                self.problem(stmt.lineno, f"nesting deeper than {MAX_DEPTH} levels")
            except MemoryError:
                self.problem(stmt.lineno, "the value is too large to build")
            except _Unassigned:
                pass
            except Exception as exc:  # noqa: BLE001 - a last guard: a config is never read to a traceback
                self.problem(stmt.lineno, f"cannot read this statement ({type(exc).__name__}: {exc})")
            else:
                if target is None:
                    continue
                self.weights[target] = self.weigh(value)
                self.names[target] = value
                self.refused.discard(target)
                if _is_key(target):
                    data.pop(target, None)      # a reassigned key moves to its last line
                    data[target] = value
                    data.lines[target] = stmt.lineno
                continue
            self.refused.update(_targets(stmt))
        if self.unlisted:
            self.problems.append(f"{self.path}: {self.unlisted} more problems like these, not listed")
        return data, self.problems

    def weigh(self, value) -> tuple:
        """(values, characters, nesting) of a value read from the file: what reusing its name makes again. A
        list or dict that is (or holds) the value of a name is not walked again: its weight is kept, and so is
        it, so that its id stays its own."""
        nodes = chars = height = 0
        stack = [(value, 0)]
        while stack:
            v, depth = stack.pop()
            if isinstance(v, str):
                nodes, chars = nodes + 1, chars + len(v)
            elif not isinstance(v, (list, dict)):
                nodes += 1
            elif id(v) in self.weighed:
                n, c, h = self.weighed[id(v)][1]
                nodes, chars, height = nodes + n, chars + c, max(height, depth + h)
            else:
                nodes, height = nodes + 1, max(height, depth + 1)
                items = [x for pair in v.items() for x in pair] if isinstance(v, dict) else v
                stack.extend((item, depth + 1) for item in items)
        weight = (nodes, chars, height)
        if isinstance(value, (list, dict)):
            self.weighed[id(value)] = (value, weight)
        return weight

    def short(self, node: ast.AST) -> str:
        return _short(node, self.lines)

    def problem(self, line: int, what: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(one_line(f"{self.path}:{line}: {what}"))
        else:
            self.unlisted += 1

    # -- statements -------------------------------------------------------------------------------------------
    def statement(self, stmt: ast.stmt) -> tuple:
        """(name, value) of an assignment; (None, None) for a statement that is allowed and ignored."""
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return None, None       # a docstring or a bare string used as a comment
        if isinstance(stmt, ast.Import):
            names = [a for a in stmt.names if a.name not in ("os", "os.path") or a.asname]
            if names:
                shown = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
                raise _Refused(stmt.lineno, f"import {shown}: nothing is imported from a config; only 'import os' "
                                            f"is allowed (and ignored)")
            return None, None
        if isinstance(stmt, ast.ImportFrom):
            raise _Refused(stmt.lineno, f"from {stmt.module or '.'} import ...: nothing is imported from a config; "
                                        f"only 'import os' is allowed (and ignored)")
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
                raise _Refused(stmt.lineno, f"'{self.short(stmt)}': expected NAME = value (one plain name); {ALLOWED}")
            return stmt.targets[0].id, self.value(stmt.value, 0)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            return stmt.target.id, self.value(stmt.value, 0)     # the annotation is not evaluated
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and isinstance(stmt.op, ast.Add):
            # NAME += value is NAME = NAME + value: NAME is expanded as any name is
            return stmt.target.id, self.add(self.value(stmt.target, 0), self.value(stmt.value, 0), stmt.lineno)
        raise _Refused(stmt.lineno, f"{_kind(stmt)} '{self.short(stmt)}' is not allowed; {ALLOWED}")

    # -- expressions ------------------------------------------------------------------------------------------
    def value(self, node: ast.expr, depth: int):
        if depth > MAX_DEPTH:
            raise _Refused(node.lineno, f"nesting deeper than {MAX_DEPTH} levels")
        self.count(1, node)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, str):
                self.string_length(len(v), node.lineno)
                if _bad_char(v):
                    raise _Refused(node.lineno, f"a string holds {_bad_char(v)}, which a config value may not hold")
                self.made(len(v), node.lineno)
                return v
            if v is None or isinstance(v, (bool, float)):
                return v
            if isinstance(v, int):
                if abs(v) >= MAX_INT:
                    raise _Refused(node.lineno, f"integer {_int_text(v)} is too large (at most {MAX_INT - 1})")
                return v
            raise _Refused(node.lineno, f"a {type(v).__name__} literal is not allowed; {ALLOWED}")
        if isinstance(node, (ast.List, ast.Tuple)):
            out = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    raise _Refused(elt.lineno, f"'*' unpacking is not allowed; {ALLOWED}")
                out.append(self.value(elt, depth + 1))
            return out
        if isinstance(node, ast.Dict):
            return self.mapping(node, depth)
        if isinstance(node, ast.Name):
            value = self.lookup(node.id, node.lineno)
            nodes, chars, height = self.weights[node.id]
            if depth + height > MAX_DEPTH:
                raise _Refused(node.lineno, f"nesting deeper than {MAX_DEPTH} levels (with {node.id!r} expanded)")
            self.count(nodes, node)
            self.made(chars, node.lineno)
            return value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.add(self.value(node.left, depth + 1), self.value(node.right, depth + 1), node.lineno)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self.value(node.operand, depth + 1)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _Refused(node.lineno, f"unary minus/plus of {type(v).__name__} is not allowed; expected a "
                                            f"number")
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.JoinedStr):
            return self.fstring(node, depth)
        if isinstance(node, ast.Call) and _is_os_path_join(node.func):
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args) or not node.args:
                raise _Refused(node.lineno, "os.path.join takes one or more strings here (no keywords, no '*')")
            parts = [self.value(a, depth + 1) for a in node.args]
            if not all(isinstance(p, str) for p in parts):
                raise _Refused(node.lineno, f"os.path.join of {', '.join(type(p).__name__ for p in parts)}: "
                                            f"expected strings")
            self.string_length(_joined_length(parts), node.lineno)
            return self.built(posixpath.join(*parts), node.lineno)
        raise _Refused(node.lineno, f"{_kind(node)} '{self.short(node)}' is not allowed; {ALLOWED}")

    def mapping(self, node: ast.Dict, depth: int) -> LineMap:
        out = LineMap()
        out.lines = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise _Refused(v.lineno, f"'**' unpacking is not allowed; {ALLOWED}")
            key = self.value(k, depth + 1)
            if isinstance(key, (list, dict)):
                raise _Refused(k.lineno, "a list, tuple or dict cannot be a dict key")
            if key in out:
                raise _Refused(k.lineno, f"duplicate key {key!r}")
            out[key] = self.value(v, depth + 1)
            out.lines[key] = k.lineno
        return out

    def fstring(self, node: ast.JoinedStr, depth: int) -> str:
        parts, length = [], 0
        for piece in node.values:
            if isinstance(piece, ast.Constant) and isinstance(piece.value, str):
                text = piece.value
                if _bad_char(text):
                    raise _Refused(node.lineno, f"a string holds {_bad_char(text)}, which a config value may not "
                                                f"hold")
            elif not isinstance(piece, ast.FormattedValue) or piece.conversion not in (-1, ord("s")) or \
                    piece.format_spec is not None:
                raise _Refused(node.lineno, "only simple f-strings are allowed: {NAME} of a string or number, no "
                                            "conversion or format spec")
            else:
                v = self.value(piece.value, depth + 1)
                if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                    raise _Refused(node.lineno, f"an f-string may hold strings and numbers, got {type(v).__name__}")
                text = str(v)
            length += len(text)
            self.string_length(length, node.lineno)
            parts.append(text)
        return self.built("".join(parts), node.lineno)

    def add(self, left, right, line: int):
        if isinstance(left, str) and isinstance(right, str):
            self.string_length(len(left) + len(right), line)
            return self.built(left + right, line)
        if isinstance(left, list) and isinstance(right, list):
            return left + right
        numbers = (int, float)
        if isinstance(left, numbers) and isinstance(right, numbers) and not isinstance(left, bool) and \
                not isinstance(right, bool):
            total = left + right
            if isinstance(total, int) and abs(total) >= MAX_INT:
                raise _Refused(line, f"integer {total} is too large (at most {MAX_INT - 1})")
            return total
        raise _Refused(line, f"{type(left).__name__} + {type(right).__name__} is not allowed; + joins two strings, "
                             f"two lists or two numbers")

    def lookup(self, name: str, line: int):
        if name in self.refused:
            raise _Unassigned()
        if name not in self.names:
            raise _Refused(line, f"name {name!r} is not assigned above; a config may use only names it assigned "
                                 f"earlier in the same file")
        return self.names[name]

    def string_length(self, length: int, line: int) -> None:
        """Refuse a string of ``length`` characters before it is built, when it would be too long."""
        if length > MAX_STRING_CHARS:
            raise _Refused(line, f"a string of {length} characters; at most {MAX_STRING_CHARS}")

    def built(self, text: str, line: int) -> str:
        """A string made by +, an f-string or os.path.join: its characters count as made."""
        self.made(len(text), line)
        return text

    def made(self, chars: int, line: int) -> None:
        self.chars += chars
        if self.chars > MAX_CHARS:
            raise _Spent(line, f"the file makes strings of more than {MAX_CHARS} characters in all, with the "
                                 f"names it reuses expanded")

    def count(self, nodes: int, node: ast.AST) -> None:
        self.nodes += nodes
        if self.nodes > MAX_NODES:
            raise _Spent(getattr(node, "lineno", None), f"the file makes more than {MAX_NODES} values with the "
                                                        f"names it reuses expanded")


def _joined_length(parts: list) -> int:
    """len(posixpath.join(*parts)), without joining them."""
    length, last = 0, ""
    for part in parts:
        if part.startswith("/"):
            length, last = len(part), part[-1]
        elif not length or last == "/":
            length += len(part)
            last = part[-1] if part else last
        else:
            length += 1 + len(part)
            last = part[-1] if part else "/"
    return length


def _int_text(value: int) -> str:
    """An integer for a message, however large (decimal text of a huge one is refused by Python)."""
    text = str(value) if value.bit_length() < 4000 else hex(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _is_key(name: str) -> bool:
    return not name.startswith("_") and name == name.upper()


def _targets(stmt: ast.stmt) -> list:
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _is_os_path_join(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "join" and isinstance(func.value, ast.Attribute) and \
        func.value.attr == "path" and isinstance(func.value.value, ast.Name) and func.value.value.id == "os"


_KINDS = {
    ast.Call: "a call", ast.Attribute: "attribute access", ast.Lambda: "a lambda", ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension", ast.DictComp: "a comprehension", ast.GeneratorExp: "a comprehension",
    ast.Subscript: "subscription", ast.Set: "a set", ast.IfExp: "a conditional expression",
    ast.Compare: "a comparison", ast.BoolOp: "a boolean operation", ast.BinOp: "this operator",
    ast.UnaryOp: "this operator",
    ast.FunctionDef: "a function definition", ast.ClassDef: "a class definition", ast.If: "an if statement",
    ast.For: "a loop", ast.While: "a loop", ast.With: "a with statement", ast.Try: "a try statement",
    ast.Expr: "an expression statement", ast.Delete: "del", ast.Global: "global", ast.Assert: "assert",
    ast.Await: "await", ast.Yield: "yield", ast.NamedExpr: "an assignment expression",
}


def _kind(node: ast.AST) -> str:
    return _KINDS.get(type(node), type(node).__name__)


def _short(node: ast.AST, lines: list, n: int = 60) -> str:
    """``node`` as Python text for a message, cut to ``n`` characters; a tree too deep to unparse is shown as
    the start of its line in the file."""
    try:
        text = " ".join(ast.unparse(node).split())
    except Exception:  # noqa: BLE001 - only for the message (RecursionError on a deep tree)
        lineno, col = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
        line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
        text = " ".join(line[:col + 4 * n].encode("utf-8")[col:].decode("utf-8", "replace").split())
        text = text or type(node).__name__
    return text if len(text) <= n else text[:n] + "..."


def load_config_file(path: Path) -> tuple:
    """(data, problems) of a test or cluster config: FlagPerf's Python module for a ``.py`` file, else YAML."""
    if is_python_config(path):
        return load_python_file(path)
    return load_yaml_file(path)
