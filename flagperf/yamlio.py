"""YAML loading that remembers the line of every mapping key, for error messages."""

from __future__ import annotations

from pathlib import Path

import yaml


class LineMap(dict):
    """A dict that also knows the 1-based line of each of its keys in the source file."""

    lines: dict

    def line(self, key):
        return getattr(self, "lines", {}).get(key)


class _Loader(yaml.SafeLoader):
    pass


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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [f"{path}: file not found"]
    except IsADirectoryError:
        return None, [f"{path}: expected a YAML file, found a directory"]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"{path}: cannot read: {exc}"]
    try:
        return yaml.load(text, Loader=_Loader), []
    except yaml.MarkedYAMLError as exc:
        # "while scanning a simple key" errors point past the faulty line; their context is the line itself.
        mark = exc.context_mark if exc.context_mark is not None and exc.problem and "expected ':'" in exc.problem \
            else (exc.problem_mark or exc.context_mark)
        where = f":{mark.line + 1}" if mark is not None else ""
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        return None, [f"{path}{where}: YAML syntax error: {what}"]
    except yaml.YAMLError as exc:
        return None, [f"{path}: YAML syntax error: {str(exc).splitlines()[0]}"]


def where(path, mapping, key) -> str:
    """``file:line`` for a key of a LineMap, or just ``file``."""
    line = mapping.line(key) if isinstance(mapping, LineMap) else None
    return f"{path}:{line}" if line else f"{path}"
