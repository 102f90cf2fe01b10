"""Whether deploy may write into a host's FLAGPERF_PATH: the driver's side of flagperf/hosts/treeclaim.py.

Deploy writes only into a directory flagperf owns: it creates FLAGPERF_PATH when it is missing and marks it
(``.flagperf-tree``), adopts an empty one (or the unmarked tree of an older flagperf), and refuses any other
directory, a symlink or a file, writing nothing there (docs/configuration.md, "Deploy").
"""

from __future__ import annotations

import json
from pathlib import Path

from flagperf import __version__
from flagperf.hosts import HostError, treeclaim

MARKER = treeclaim.MARKER
FIX = "point FLAGPERF_PATH at an empty or new directory"


class TreeNotOwned(HostError):
    """FLAGPERF_PATH on a host is not flagperf's to write into; nothing was written there."""


def refusal_message(answer: dict, dest: str, host: str) -> str:
    """The one line that says why FLAGPERF_PATH on a host was refused, and what to do."""
    why, detail = answer.get("why"), answer.get("detail") or ""
    where = f"FLAGPERF_PATH {dest} on host {host}"
    if why == "foreign":
        return f"{where} exists and was not created by flagperf (no {MARKER}); {FIX}"
    if why == "bad_marker":
        return f"{where} has a {MARKER} that flagperf did not write ({detail}); {FIX}"
    if why == "symlink":
        to = f" (to {detail})" if detail else ""
        return f"{where} is a symbolic link{to}; flagperf does not deploy through one: point FLAGPERF_PATH at " \
               f"the directory itself"
    if why == "not_dir":
        return f"{where} exists and is not a directory; {FIX}"
    return f"{where} cannot be used: {detail or why}"


def claim_tree(transport, dest: str) -> str:
    """Make ``dest`` on the transport's host flagperf's (create, adopt, or find it marked) and return how
    (``created``, ``adopted-empty``, ``adopted-older``, ``owned``); raise TreeNotOwned when it is refused, or
    HostError when the check itself fails. ``localhost`` is checked in this process, other hosts by running
    treeclaim.py with the host's PYTHON."""
    host = transport.host
    if host.is_local:
        answer = treeclaim.claim(dest, __version__)
    else:
        source = Path(treeclaim.__file__).read_text(encoding="utf-8")
        r = transport.run([host.python, "-c", source, dest, __version__], timeout=60)
        if not r.ok:
            raise HostError(f"{host.address}: cannot check FLAGPERF_PATH {dest}: "
                            f"{(r.stderr.strip() or r.stdout.strip())[-300:]}", "command_failed")
        try:
            answer = json.loads(r.stdout)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
            raise HostError(f"{host.address}: checking FLAGPERF_PATH {dest} gave no answer: "
                            f"{r.stdout.strip()[:200]!r}", "command_failed")
    if not answer["ok"]:
        raise TreeNotOwned(refusal_message(answer, dest, host.address), "command_failed")
    return str(answer.get("how") or "owned")


def tree_note(how: str) -> str:
    """What deploy did to the directory itself, for the terminal ("" when it was flagperf's already)."""
    return {"created": f" (created, marked {MARKER})",
            "adopted-empty": f" (an empty directory: adopted, marked {MARKER})",
            "adopted-older": f" (an older flagperf's unmarked tree: adopted, marked {MARKER})"}.get(how, "")
