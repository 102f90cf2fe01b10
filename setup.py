"""Build hook: ship the host-side tree inside the package, as flagperf/_tree.

pyproject.toml holds the metadata. A built (non-editable) flagperf carries benchmarks/, vendors/, launcher/,
monitors/, configs/ and flagperf_contract.py in ``flagperf/_tree``, so an installed ``flagperf`` works from
any directory (flagperf/paths.py finds the tree). Editable installs use the checkout itself and copy nothing.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
TREE_DIRS = ("benchmarks", "vendors", "launcher", "monitors", "configs")
TREE_FILES = ("flagperf_contract.py", ".flagperf-tree")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


class build_py_with_tree(build_py):
    """build_py, then copy the host-side tree into <build_lib>/flagperf/_tree."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "flagperf" / "_tree"
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for name in TREE_DIRS:
            shutil.copytree(HERE / name, dest / name, ignore=SKIP)
        for name in TREE_FILES:
            shutil.copy2(HERE / name, dest / name)

    def get_outputs(self, include_bytecode=1):
        outputs = list(super().get_outputs(include_bytecode))
        dest = Path(self.build_lib) / "flagperf" / "_tree"
        if not getattr(self, "editable_mode", False) and dest.is_dir():
            outputs += [str(p) for p in sorted(dest.rglob("*")) if p.is_file()]
        return outputs


setup(cmdclass={"build_py": build_py_with_tree})
