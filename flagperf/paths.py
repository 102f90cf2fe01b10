"""Where flagperf's host-side tree is, and where results go by default.

The tree holds ``benchmarks/``, ``vendors/``, ``launcher/``, ``monitors/``, ``configs/`` and
``flagperf_contract.py``. It is, in this order:

- ``$FLAGPERF_HOME`` when set;
- ``<package>/_tree`` in an installed package (``pip install .`` copies the tree there);
- the checkout the package lives in (a source checkout, or an editable install of one).

Results (``FLAGPERF_LOG_PATH`` when a test config does not set it) go to ``<tree>/result`` for a checkout or
``$FLAGPERF_HOME``, and to ``./result`` (the current directory) for an installed package, which must not
write into its own installation.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGED_TREE = PACKAGE_DIR / "_tree"
CHECKOUT_ROOT = PACKAGE_DIR.parent

#: True when this package is an installed copy carrying its own tree (``flagperf/_tree``).
INSTALLED = PACKAGED_TREE.is_dir()

_home = os.environ.get("FLAGPERF_HOME")
#: The tree the driver reads benchmarks/, vendors/, launcher/, monitors/ and configs/ from.
SOURCE_ROOT = Path(_home).expanduser().resolve() if _home else (PACKAGED_TREE if INSTALLED else CHECKOUT_ROOT)


def default_log_path() -> Path:
    """The default FLAGPERF_LOG_PATH: ``SOURCE_ROOT/result``, or ``./result`` for an installed package."""
    if INSTALLED and not _home:
        return Path.cwd().resolve() / "result"
    return SOURCE_ROOT / "result"
