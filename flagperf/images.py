"""Vendor images: ``vendors/<vendor>/<framework>/Dockerfile`` built into a tag that carries a content hash.

The tag is ``flagperf/<vendor>-<framework>:<hash>``. The hash covers every file of that folder, the build
arguments and the extra CA bundle. An edit gives a new tag, so the image is rebuilt; an unchanged folder
gives the same tag, and the image already on the host is reused.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import tarfile
from dataclasses import dataclass
from pathlib import Path

from flagperf.caselaunch import case_source

CA_FILE = "extra-ca.crt"
FLAGPERF_IMAGE_DIR = "/workspace/docker_image"      # where FlagPerf's image manager mounts the image folder


def is_timeout(exc: BaseException) -> bool:
    """True when ``exc``, or an error it wraps, is a timeout of the daemon connection (requests, urllib3, socket):
    told apart by type, wherever requests put the cause (``__cause__``, ``args``, a retry error's ``reason``)."""
    import requests
    import urllib3
    kinds = (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError, socket.timeout, TimeoutError)
    seen: set = set()
    todo: list = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kinds):
            return True
        todo += [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args]
    return False


class ImageError(Exception):
    def __init__(self, message, last_lines=()):
        super().__init__(message)
        self.last_lines = list(last_lines)


@dataclass(frozen=True)
class ImageSpec:
    vendor: str
    framework: str
    folder: Path
    build_args: tuple          # ((name, value), ...)
    ca_bundle: Path | None
    install_script: str | None = None   # FlagPerf's <framework>_install.sh: run in the image after its Dockerfile

    @property
    def repository(self) -> str:
        return f"flagperf/{_slug(self.vendor)}-{_slug(self.framework)}"

    @property
    def tag(self) -> str:
        return f"{self.repository}:{self.digest()[:16]}"

    def digest(self) -> str:
        h = hashlib.sha256()
        for rel, path in self._files():
            h.update(rel.encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
        h.update(json.dumps(sorted(self.build_args)).encode())
        h.update(f"install:{self.install_script}".encode() if self.install_script else b"")
        return h.hexdigest()

    def _files(self):
        files = sorted((str(p.relative_to(self.folder)), p) for p in self.folder.rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts)
        if self.ca_bundle is not None:
            files.append((CA_FILE, self.ca_bundle))
        return files

    def dockerfile(self) -> str:
        """The Dockerfile built. A FlagPerf framework image folder's ``<framework>_install.sh`` runs after the
        folder's own Dockerfile, with the folder at /workspace/docker_image, as FlagPerf's image manager runs it
        (there in a container that it commits; here as the build's last step)."""
        text = (self.folder / "Dockerfile").read_text(encoding="utf-8")
        if not self.install_script:
            return text
        return (text.rstrip("\n") + "\n# flagperf: FlagPerf's install step\n"
                f"COPY . {FLAGPERF_IMAGE_DIR}\n"
                f"RUN bash {FLAGPERF_IMAGE_DIR}/{self.install_script}\n")

    def context(self) -> io.BytesIO:
        """The build context as an uncompressed tar in memory (the folder is small)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for rel, path in self._files():
                if rel == "Dockerfile" and self.install_script:
                    data = self.dockerfile().encode()
                    info = tarfile.TarInfo(rel)
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
                    continue
                tar.add(str(path), arcname=rel, recursive=False)
            if self.ca_bundle is None:     # the Dockerfile may COPY it: give an empty one
                info = tarfile.TarInfo(CA_FILE)
                tar.addfile(info, io.BytesIO(b""))
        buf.seek(0)
        return buf


def image_spec(config, case) -> ImageSpec:
    """The image a case runs in: a FlagPerf training case's ``<vendor>/docker_image/<framework>/`` where its tree
    has one, else the vendor's ``vendors/<vendor>/<framework>/`` (a training framework the vendor has no folder
    for: the vendor's first framework's image)."""
    framework = case.framework
    training = case_source(config, case).training
    folder = config.source_root / "vendors" / config.vendor.name / framework
    if training is not None and training.image_folder is not None:
        folder, framework = training.image_folder, case.framework_full or case.framework
    elif training is not None and not (folder / "Dockerfile").is_file() and config.vendor.frameworks:
        framework = config.vendor.frameworks[0]
        folder = config.source_root / "vendors" / config.vendor.name / framework
    if not (folder / "Dockerfile").is_file():
        raise ImageError(f"no Dockerfile for vendor {config.vendor.name!r} and framework {framework!r} "
                         f"({folder / 'Dockerfile'})")
    t = config.test
    args = dict(t.docker_build_args)
    if t.pip_source:
        args.setdefault("PIP_INDEX_URL", t.pip_source)
    ca = Path(t.extra_ca_bundle) if t.extra_ca_bundle else None
    install = f"{framework}_install.sh" if training is not None and (folder / f"{framework}_install.sh").is_file() \
        else None
    return ImageSpec(config.vendor.name, framework, folder, tuple(sorted(args.items())), ca, install)


def ensure_image(client, spec: ImageSpec, log_path: Path, nocache: bool = False,
                 build_timeout: float | None = 1800) -> tuple:
    """Build the image on this daemon unless the tag is there. Returns (tag, built: bool).

    The look-up uses the client's own (short) timeout; the build may go ``build_timeout`` seconds without a line
    of output (None: forever). The build output goes to log_path; a failed or silent build raises ImageError
    with its last lines.
    """
    import docker
    import requests
    try:
        client.images.get(spec.tag)
        return spec.tag, False
    except docker.errors.ImageNotFound:
        pass
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: list = []
    error = None
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"# docker build -t {spec.tag} {spec.folder} (build args: {dict(spec.build_args)})\n")
        try:
            stream = client.api.build(fileobj=spec.context(), custom_context=True, tag=spec.tag, rm=True,
                                      nocache=nocache, forcerm=True, buildargs=dict(spec.build_args), decode=True,
                                      labels={"flagperf.image": spec.repository, "flagperf.digest": spec.digest()},
                                      network_mode="host", timeout=build_timeout)
            for chunk in stream:
                text = chunk.get("stream") or chunk.get("status") or ""
                if "error" in chunk:
                    error = chunk.get("error") or str(chunk.get("errorDetail"))
                    text = f"ERROR: {error}\n"
                if text:
                    log.write(text if text.endswith("\n") else text + "\n")
                    lines.extend(text.rstrip("\n").splitlines())
                    del lines[:-40]
        except docker.errors.APIError as exc:
            error = str(exc)
            log.write(f"ERROR: {error}\n")
        except (requests.exceptions.Timeout, requests.exceptions.ConnectionError) as exc:
            silent = is_timeout(exc)
            error = (f"no output from the daemon for {build_timeout:g} s" if silent and build_timeout
                     else f"the daemon connection failed: {exc}")
            log.write(f"ERROR: {error}\n")
    if error:
        raise ImageError(f"building {spec.tag} failed: {error.strip().splitlines()[-1] if error.strip() else error}",
                         lines[-12:])
    return spec.tag, True


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-.") or "x"

