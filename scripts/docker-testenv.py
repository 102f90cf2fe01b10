#!/usr/bin/env python3
"""Set up the Docker test environment by hand (testbed/dockerenv.py), the same way the ``docker_env`` fixture does.

  python scripts/docker-testenv.py [--rebuild] [--no-smoke] [--log PATH]

1. cold pass: apt-get install docker.io/debootstrap if missing, start dockerd if none answers (left running),
   build flagperf-test/debian-python:bookworm (debootstrap) and flagperf-test/torch-cpu:2.13.0 when not cached;
2. warm pass: the same again, everything cached (what every later test session pays);
3. smoke: ``import torch`` in a container, and a 2-rank gloo all_reduce in two containers (network host);
then a summary: timings, image sizes, storage driver, where the daemon's log is.

--rebuild removes both images first (``docker rmi``), so the first pass measures a build from scratch.
Needs root (apt-get, dockerd, debootstrap).  Runs from a fresh clone: ``.venv/bin/python scripts/...`` or plain
``python3``, which re-runs itself with .venv/bin/python when the docker SDK is only installed there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _reexec_in_venv() -> None:
    try:
        import docker  # noqa: F401
    except ImportError:
        venv_python = REPO / ".venv" / "bin" / "python"
        if venv_python.exists() and Path(sys.executable).resolve() != venv_python.resolve() \
                and not os.environ.get("FLAGPERF_DOCKERENV_REEXEC"):
            os.environ["FLAGPERF_DOCKERENV_REEXEC"] = "1"
            os.execv(str(venv_python), [str(venv_python), *sys.argv])
        sys.exit("docker-testenv: the docker SDK is not installed: run scripts/setup.sh --test "
                 "(or pip install 'docker>=6'), then .venv/bin/python scripts/docker-testenv.py")


_reexec_in_venv()
sys.path.insert(0, str(REPO))
from testbed import dockerenv  # noqa: E402  (after the re-exec and sys.path above)


def smoke(client, image: str) -> dict:
    out = {}
    t0 = time.monotonic()
    text = client.containers.run(image, ["python3", "-c", "import torch; print(torch.__version__)"],
                                 network_mode="host", remove=True, labels={dockerenv.RUN_LABEL: "testenv-smoke"})
    out["import torch in a container"] = (time.monotonic() - t0, text.decode().strip())
    t0 = time.monotonic()
    results = dockerenv.run_gloo_allreduce(client, image, world_size=2)
    ok = all(code == 0 and "ALLREDUCE" in log and " 3.0" in log for code, log in results)
    detail = "; ".join(log.strip().splitlines()[-1] if log.strip() else f"rc {code}" for code, log in results)
    out["gloo all_reduce, 2 containers"] = (time.monotonic() - t0, ("ok: " if ok else "FAILED: ") + detail)
    if not ok:
        for code, log in results:
            print(f"--- rank exit {code}\n{log}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rebuild", action="store_true", help="docker rmi both test images first (cold build)")
    ap.add_argument("--no-smoke", action="store_true", help="skip the container smoke tests")
    ap.add_argument("--log", default=dockerenv.DOCKERD_LOG, help="dockerd's log when it is started here")
    args = ap.parse_args()

    before = {}                  # --rebuild: installing and starting the daemon happen before the first pass
    if args.rebuild:
        t0 = time.monotonic()
        dockerenv.ensure_docker_installed()
        before["install"] = time.monotonic() - t0
        t0 = time.monotonic()
        client = dockerenv.ensure_dockerd(args.log)
        before["dockerd"] = time.monotonic() - t0
        for tag in (dockerenv.TORCH_TAG, dockerenv.BASE_TAG):
            try:
                client.images.remove(tag)
                print(f"removed image {tag}")
            except dockerenv.docker.errors.ImageNotFound:
                pass

    try:
        first = dockerenv.setup(args.log)
        second = dockerenv.setup(args.log)
    except dockerenv.DockerEnvError as exc:
        print(f"docker-testenv: FAILED: {exc}", file=sys.stderr)
        return 1
    for key, secs in before.items():
        first.timings[key] = first.timings.get(key, 0) + secs
        first.timings["total"] += secs
    client = second.client
    checks = {} if args.no_smoke else smoke(client, second.torch_image)

    info = client.info()
    print("\n== flagperf docker test environment ==")
    print(f"daemon       docker {info.get('ServerVersion')} on {dockerenv.DOCKER_SOCK}, storage driver "
          f"{info.get('Driver')}, root {info.get('DockerRootDir')}, log {args.log} (if started here)")
    print(f"containerd   {dockerenv.containerd_info()}")
    for tag in (second.base_image, second.torch_image):
        image = client.images.get(tag)
        print(f"image        {tag}  {image.short_id}  {image.attrs['Size'] / 1e6:.0f} MB")
    print(f"{'step':<14}{'first pass':>12}{'second (warm)':>15}")
    for key in ("install", "dockerd", "base_image", "torch_image", "total"):
        print(f"{key:<14}{first.timings.get(key, 0):>11.1f}s{second.timings.get(key, 0):>14.1f}s")
    for name, (secs, text) in checks.items():
        print(f"smoke        {name}: {secs:.1f} s -> {text}")
    failed = [name for name, (_, text) in checks.items() if text.startswith("FAILED")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
