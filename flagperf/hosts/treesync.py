"""Helpers shared by transports for moving trees: hashing, tar streams, safe extraction. Stdlib only."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

# Sent to the host as `python -c HASH_SCRIPT ROOT [SUBDIR ...]`: prints {relpath: sha256} of every file under
# ROOT (or under its given subfolders), relative to ROOT.
HASH_SCRIPT = r"""
import hashlib, json, os, sys
root = sys.argv[1]
out = {}
for top in [os.path.join(root, s) for s in sys.argv[2:]] or [root]:
  if os.path.isfile(top):
    h = hashlib.sha256()
    with open(top, "rb") as fh:
        h.update(fh.read())
    out[os.path.relpath(top, root)] = h.hexdigest()
    continue
  for d, dirs, files in os.walk(top):
    dirs[:] = [x for x in dirs if x != "__pycache__"]
    for f in files:
        p = os.path.join(d, f)
        if not os.path.isfile(p):
            continue
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        out[os.path.relpath(p, root)] = h.hexdigest()
print(json.dumps(out))
"""


def local_hashes(root, subdirs=()) -> dict:
    """{relpath: sha256} under root (or its subfolders and single files), following symlinks, skipping
    __pycache__."""
    root = Path(root)
    out = {}
    for top in [root / s for s in subdirs] or [root]:
        if top.is_file():
            out[os.path.relpath(top, root)] = sha256_file(top)
            continue
        if not top.is_dir():
            continue
        for d, dirs, files in os.walk(top, followlinks=True):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in files:
                p = Path(d) / f
                if p.is_file():
                    out[os.path.relpath(p, root)] = sha256_file(p)
    return out


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_tar(fileobj, local_root, relpaths) -> int:
    """Stream the files (following symlinks) into an uncompressed tar on fileobj; returns payload bytes."""
    total = 0
    with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT, dereference=True) as tar:
        for rel in relpaths:
            path = Path(local_root) / rel
            tar.add(str(path), arcname=rel, recursive=False)
            total += path.stat().st_size
    return total


def missing_locally(remote_listing: dict, local_dir) -> list:
    """Names from {relpath: size} that are absent under local_dir or have another size there."""
    want = []
    for rel, size in remote_listing.items():
        p = Path(local_dir) / rel
        try:
            if p.stat().st_size == size:
                continue
        except OSError:
            pass
        want.append(rel)
    return sorted(want)
