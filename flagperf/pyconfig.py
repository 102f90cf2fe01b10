"""FlagPerf's Python config modules (``test_conf.py``, ``cluster_conf.py``) read without running them.

The file is parsed with :mod:`ast` and only plain data is evaluated: literals (strings, numbers, booleans,
None, lists, tuples, dicts), names assigned earlier in the same file, ``+`` of those (strings, lists, numbers),
unary minus on a number, simple f-strings and ``os.path.join(...)`` of strings. ``import os`` (and
``import os.path``) is allowed and ignored. Nothing is imported or executed: any other statement or expression
is a problem naming the file and line, and its name is left unassigned.

The result is the same :class:`flagperf.yamlio.LineMap` the YAML reader gives: each top-level key is a name
assigned in the file that has no lowercase letter and does not start with ``_`` (other names are helpers that
later assignments may use), with the line of its (last) assignment; dict literals carry the line of each key.
"""

from __future__ import annotations

import ast
import posixpath
from pathlib import Path

from flagperf.yamlio import (MAX_DEPTH, MAX_FILE_BYTES, MAX_INT, MAX_NODES, LineMap, _bad_char, _read_text,
                            load_yaml_file, one_line)

MAX_STRING_CHARS = MAX_FILE_BYTES       # one string built by + , an f-string or os.path.join
MAX_BUILT_CHARS = 16 * MAX_FILE_BYTES   # all strings built so, together
ALLOWED = ("a FlagPerf Python config may hold only NAME = value assignments of literals (strings, numbers, True, "
           "False, None, lists, tuples, dicts), names assigned above, + of those, simple f-strings and "
           "os.path.join(...), and 'import os'")


class _Refused(Exception):
    """A construct the reader does not evaluate, at ``line``."""

    def __init__(self, line: int | None, what: str):
        super().__init__(what)
        self.line = line
        self.what = what


class _Unassigned(Exception):
    """A name whose assignment was refused above: the problem is already reported."""


def is_python_config(path) -> bool:
    return Path(path).suffix == ".py"


def load_python_file(path: Path) -> tuple:
    """(LineMap, problems), or (None, problems) when the file cannot be read or parsed. Problems are one-line
    messages ``<file>:<line>: ...``."""
    path = Path(path)
    text, problem = _read_text(path, kind="Python")
    if problem:
        return None, [one_line(f"{path}: {problem}")]
    bad = _bad_char(text)
    if bad:
        line = text.count("\n", 0, text.index("\x00")) + 1 if "\x00" in text else None
        return None, [one_line(f"{path}{f':{line}' if line else ''}: the file holds {bad}, which a config may "
                               f"not hold")]
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        where = f":{exc.lineno}" if exc.lineno else ""
        return None, [one_line(f"{path}{where}: Python syntax error: {exc.msg}")]
    except (RecursionError, MemoryError):
        return None, [f"{path}: Python syntax error: nesting too deep"]
    except ValueError as exc:
        return None, [one_line(f"{path}: Python syntax error: {exc}")]
    return _Reader(path).module(tree)


class _Reader:
    def __init__(self, path: Path):
        self.path = path
        self.names: dict = {}       # name -> value
        self.sizes: dict = {}       # name -> nodes in its value
        self.refused: set = set()   # names whose assignment was refused
        self.nodes = 0              # values made so far, names expanded (as YAML counts aliases)
        self.built = 0              # characters of the strings built so far
        self.problems: list = []

    def module(self, tree: ast.Module) -> tuple:
        data = LineMap()
        data.lines = {}
        for stmt in tree.body:
            before = self.nodes
            try:
                target, value = self.statement(stmt)
            except _Refused as exc:
                self.problems.append(one_line(f"{self.path}:{exc.line or stmt.lineno}: {exc.what}"))
                self.refused.update(_targets(stmt))
                continue
            except _Unassigned:
                self.refused.update(_targets(stmt))
                continue
            except RecursionError:
                self.problems.append(f"{self.path}:{stmt.lineno}: nesting deeper than {MAX_DEPTH} levels")
                self.refused.update(_targets(stmt))
                continue
            if target is None:
                continue
            grown = self.nodes - before      # a list or dict counts what it holds; a scalar is one value
            grown += self.sizes.get(target, 0) if isinstance(stmt, ast.AugAssign) else 0
            self.sizes[target] = max(1, grown) if isinstance(value, (list, dict)) else 1
            self.names[target] = value
            self.refused.discard(target)
            if _is_key(target):
                data.pop(target, None)      # a reassigned key moves to its last line
                data[target] = value
                data.lines[target] = stmt.lineno
        return data, self.problems

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
                raise _Refused(stmt.lineno, f"'{_short(stmt)}': expected NAME = value (one plain name); {ALLOWED}")
            return stmt.targets[0].id, self.value(stmt.value, 0)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            return stmt.target.id, self.value(stmt.value, 0)     # the annotation is not evaluated
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and isinstance(stmt.op, ast.Add):
            name = stmt.target.id
            left = self.lookup(name, stmt.lineno)
            return name, self.add(left, self.value(stmt.value, 0), stmt.lineno)
        raise _Refused(stmt.lineno, f"{_kind(stmt)} '{_short(stmt)}' is not allowed; {ALLOWED}")

    # -- expressions ------------------------------------------------------------------------------------------
    def value(self, node: ast.expr, depth: int):
        if depth > MAX_DEPTH:
            raise _Refused(node.lineno, f"nesting deeper than {MAX_DEPTH} levels")
        self.count(1, node)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, str) and _bad_char(v):
                raise _Refused(node.lineno, f"a string holds {_bad_char(v)}, which a config value may not hold")
            if v is None or isinstance(v, (bool, str, float)):
                return v
            if isinstance(v, int):
                if abs(v) >= MAX_INT:
                    raise _Refused(node.lineno, f"integer {str(v)[:40]} is too large (at most {MAX_INT - 1})")
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
            self.count(self.sizes.get(node.id, 1), node)
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
            return self.built_string(posixpath.join(*parts), node.lineno)
        raise _Refused(node.lineno, f"{_kind(node)} '{_short(node)}' is not allowed; {ALLOWED}")

    def mapping(self, node: ast.Dict, depth: int) -> LineMap:
        out = LineMap()
        out.lines = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise _Refused(v.lineno, f"'**' unpacking is not allowed; {ALLOWED}")
            key = self.value(k, depth + 1)
            if isinstance(key, list):
                raise _Refused(k.lineno, "a list or tuple cannot be a dict key")
            if key in out:
                raise _Refused(k.lineno, f"duplicate key {key!r}")
            out[key] = self.value(v, depth + 1)
            out.lines[key] = k.lineno
        return out

    def fstring(self, node: ast.JoinedStr, depth: int) -> str:
        parts = []
        for piece in node.values:
            if isinstance(piece, ast.Constant) and isinstance(piece.value, str):
                parts.append(piece.value)
                continue
            if not isinstance(piece, ast.FormattedValue) or piece.conversion not in (-1, ord("s")) or \
                    piece.format_spec is not None:
                raise _Refused(node.lineno, "only simple f-strings are allowed: {NAME} of a string or number, no "
                                            "conversion or format spec")
            v = self.value(piece.value, depth + 1)
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise _Refused(node.lineno, f"an f-string may hold strings and numbers, got {type(v).__name__}")
            parts.append(str(v))
        return self.built_string("".join(parts), node.lineno)

    def add(self, left, right, line: int):
        if isinstance(left, str) and isinstance(right, str):
            return self.built_string(left + right, line)
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

    def built_string(self, text: str, line: int) -> str:
        if len(text) > MAX_STRING_CHARS:
            raise _Refused(line, f"a string of {len(text)} characters; at most {MAX_STRING_CHARS}")
        self.built += len(text)
        if self.built > MAX_BUILT_CHARS:
            raise _Refused(line, f"the strings built by +, f-strings and os.path.join pass {MAX_BUILT_CHARS} "
                                 f"characters in all")
        return text

    def count(self, nodes: int, node: ast.AST) -> None:
        self.nodes += nodes
        if self.nodes > MAX_NODES:
            raise _Refused(getattr(node, "lineno", None), f"the file makes more than {MAX_NODES} values with the "
                                                          f"names it reuses expanded")


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
    ast.FunctionDef: "a function definition", ast.ClassDef: "a class definition", ast.If: "an if statement",
    ast.For: "a loop", ast.While: "a loop", ast.With: "a with statement", ast.Try: "a try statement",
    ast.Expr: "an expression statement", ast.Delete: "del", ast.Global: "global", ast.Assert: "assert",
    ast.Await: "await", ast.Yield: "yield", ast.NamedExpr: "an assignment expression",
}


def _kind(node: ast.AST) -> str:
    return _KINDS.get(type(node), type(node).__name__)


def _short(node: ast.AST, n: int = 60) -> str:
    try:
        text = " ".join(ast.unparse(node).split())
    except Exception:  # noqa: BLE001 - only for the message
        text = type(node).__name__
    return text if len(text) <= n else text[:n] + "..."


def load_config_file(path: Path) -> tuple:
    """(data, problems) of a test or cluster config: FlagPerf's Python module for a ``.py`` file, else YAML."""
    if is_python_config(path):
        return load_python_file(path)
    return load_yaml_file(path)
