"""The shape of the driver package, read with ``ast`` (nothing is imported): no import circle, imports at module top,
layers that import only downwards, and each backend's field names inside its own modules (docs/architecture.md,
"Layers").

Every detector is also run on a small made-up case that it must reject, so that a detector that stopped seeing
anything fails here instead of passing silently.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "flagperf"

# Function-level imports of flagperf modules that are allowed, each with why: (module, function) -> reason.
LAZY_IMPORTS = {
    ("flagperf.cli", "*"): "the CLI imports each verb's modules when that verb runs: `flagperf --help` and "
                           "`flagperf list` start fast",
    ("flagperf.hosts", "open_transport"): "a transport is imported when a host needs it: paramiko (SSH) takes a "
                                          "while to import, and a run on localhost alone never needs it",
}

# Bottom-up, each layer with the patterns (regular expressions, matched against the whole module name) of its
# modules. A module belongs to the lowest layer that names it, and may import only from its own layer or a lower
# one. A new module no pattern names makes the test fail: place it here (and in docs/architecture.md, "Layers").
# A backend's options module is ``flagperf/options/<name>.py``: importable without the backend.
LAYERS = (
    ("contract and records", (r"flagperf", r"flagperf\.(errors|paths|yamlio|records|checker|untrusted)")),
    ("options schemas", (r"flagperf\.options(\..+)?",)),
    ("config", (r"flagperf\.(config|pyconfig|vendors|catalog|container_opts|references|convert|suites)",)),
    ("plan", (r"flagperf\.(plan|caselaunch|mpilaunch|containers|images)",)),
    ("backends", (r"flagperf\.backends(\..+)?", r"flagperf\.(hosts|runtimes)(\..+)?",
                  r"flagperf\.(checks|deploy|ownership)")),
    ("results", (r"flagperf\.(results|reporters)(\..+)?", r"flagperf\.(render|progress)")),
    ("pipeline", (r"flagperf\.(pipeline|collect)", r"flagperf\.stages(\..+)?")),
    ("cli", (r"flagperf\.(cli|__main__)",)),
)

# Modules that may name a backend's fields: the backends, their options modules, and the transports and runtimes
# that only the host-list backend uses.
BACKEND_OWNED = ("flagperf.backends", "flagperf.options", "flagperf.hosts", "flagperf.runtimes")
FIELD_NAMES = re.compile(
    r"\b(ssh_(port|user|key|config)|known_hosts|paramiko|slurm_\w+|sbatch|srun|squeue|scancel|shared_fs|"
    r"results_shared)\b", re.IGNORECASE)
RUNTIME_NAMES = ("docker", "slurm", "ssh", "charliecloud", "pyxis")   # compared to as strings: the backend's to do


# -- reading the package ---------------------------------------------------------------------------------------------

def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_package(root: Path = PACKAGE) -> dict:
    """{module name: ast tree} of every module of the package."""
    return {module_name(p, root): ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted(root.rglob("*.py"))}


def imports(name: str, tree: ast.AST, modules) -> list:
    """[(imported flagperf module, the function it is imported in or None, line)] of one module."""
    out = []

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            targets = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:         # relative: from the importing module's package
                    pkg = name.split(".") if _is_package(name, modules) else name.split(".")[:-1]
                    base = ".".join(pkg[:len(pkg) - child.level + 1] + ([base] if base else []))
                # a name that is a module is that module; any other name comes from the module ``base``
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
            for t in targets:
                if t in modules and t != name:
                    out.append((t, func, child.lineno))
            visit(child, inner)

    visit(tree, None)
    return out


def _is_package(name: str, modules) -> bool:
    return any(m.startswith(name + ".") for m in modules)


def graph(trees: dict) -> dict:
    return {name: imports(name, tree, trees) for name, tree in trees.items()}


def cycles(edges: dict) -> list:
    """Every import circle (Tarjan's strongly connected components of more than one module), sorted."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    found = []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w, _func, _line in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(found)


def lazy_imports(edges: dict, allowed=LAZY_IMPORTS) -> list:
    """Function-level flagperf imports outside the allowlist: 'module:line: function imports target'."""
    return [f"{name}:{line}: {func}() imports {target}" for name, out in sorted(edges.items())
            for target, func, line in out
            if func is not None and (name, func) not in allowed and (name, "*") not in allowed]


def layer_of(name: str, layers=LAYERS) -> int | None:
    for i, (_title, patterns) in enumerate(layers):
        if any(re.fullmatch(p, name) for p in patterns):
            return i
    return None


def upward_imports(edges: dict, layers=LAYERS) -> list:
    """Imports of a higher layer from a lower one, and modules no layer names."""
    out = []
    for name, targets in sorted(edges.items()):
        mine = layer_of(name, layers)
        if mine is None:
            out.append(f"{name}: in no layer; add it to LAYERS (and to docs/architecture.md, 'Layers')")
            continue
        for target, _func, line in targets:
            theirs = layer_of(target, layers)
            hit = f"{name}:{line}: {layers[mine][0]} imports {target} ({layers[theirs][0]})" \
                if theirs is not None and theirs > mine else None
            if hit and hit not in out:
                out.append(hit)
    return out


def backend_names_used(name: str, tree: ast.AST) -> list:
    """Where a module names a backend's fields (an identifier or a string, docstrings aside) or compares a value with
    a runtime or scheduler name."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        words = []
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.arg):
            words = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            words = [node.arg]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words = [node.name]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words = [node.value]
        elif isinstance(node, ast.Compare):
            words = [f"compared with {c.value!r}" for c in [node.left, *node.comparators]
                     if isinstance(c, ast.Constant) and c.value in RUNTIME_NAMES]
            out += [f"{name}:{node.lineno}: {w}" for w in words]
            continue
        for w in words:
            m = FIELD_NAMES.search(w)
            if m:
                out.append(f"{name}:{getattr(node, 'lineno', '?')}: {m.group(0)}")
    return out


def field_names_outside_backends(trees: dict) -> list:
    return [hit for name, tree in sorted(trees.items())
            if not any(name == p or name.startswith(p + ".") for p in BACKEND_OWNED)
            for hit in backend_names_used(name, tree)]


# -- the package ----------------------------------------------------------------------------------------------------

TREES = read_package()
EDGES = graph(TREES)


def test_the_package_is_read():
    assert {"flagperf.config", "flagperf.plan", "flagperf.pipeline", "flagperf.backends.slurm"} <= set(TREES)
    assert ("flagperf.options", None) in {(t, f) for t, f, _ in EDGES["flagperf.config"]}


def test_no_import_circle():
    assert cycles(EDGES) == []


def test_flagperf_modules_are_imported_at_module_top():
    assert lazy_imports(EDGES) == []


def test_a_lower_layer_never_imports_a_higher_one():
    assert upward_imports(EDGES) == []


def test_backend_field_names_stay_in_the_backends():
    assert field_names_outside_backends(TREES) == []


def test_options_modules_import_no_backend():
    """The registry and every options module load without a backend, a transport or a runtime (config reads them
    at every start; paramiko and the docker SDK stay unloaded)."""
    seam = {m for m in TREES if layer_of(m) is not None and layer_of(m) <= 1}
    heavy = {"paramiko", "docker", "requests"}
    for name in seam:
        for node in ast.walk(TREES[name]):
            if isinstance(node, ast.Import) and node.col_offset == 0:
                assert not {a.name.split(".")[0] for a in node.names} & heavy, name
            if isinstance(node, ast.ImportFrom) and node.col_offset == 0:
                assert (node.module or "").split(".")[0] not in heavy, name


# -- each detector rejects what it is for ------------------------------------------------------------------------

def _trees(sources: dict) -> dict:
    return {name: ast.parse(src) for name, src in sources.items()}


def test_the_detectors_find_what_they_look_for():
    made_up = _trees({
        "flagperf": "",
        "flagperf.a": "from flagperf.b import x\n",
        "flagperf.b": "def f():\n    from flagperf import a\n",
        "flagperf.c": "import flagperf.a\n\nSSH = {'SSH_PORT': 22}\n\n"
                      "def g(runtime):\n    return runtime == 'docker'\n",
    })
    edges = graph(made_up)
    assert cycles(edges) == [["flagperf.a", "flagperf.b"]]
    assert lazy_imports(edges) == ["flagperf.b:2: f() imports flagperf.a"]
    layers = (("low", (r"flagperf", r"flagperf\.a")), ("high", (r"flagperf\.b",)))
    assert layer_of("flagperf.options.kube") == 1 and layer_of("flagperf.backends.kube") == 4
    assert upward_imports(edges, layers) == ["flagperf.a:1: low imports flagperf.b (high)",
                                             "flagperf.c: in no layer; add it to LAYERS (and to docs/architecture.md, "
                                             "'Layers')"]
    assert field_names_outside_backends(made_up) == ["flagperf.c:3: SSH_PORT", "flagperf.c:6: compared with 'docker'"]
    assert backend_names_used("flagperf.backends.x", made_up["flagperf.c"])    # found; allowed there
    assert field_names_outside_backends({"flagperf.backends.x": made_up["flagperf.c"]}) == []
