"""Test-only benchmark: ranks sleep; the rank named by ``fail_rank`` exits with ``fail_code`` first.

Used by the end-to-end tests to make one rank fail (or to be killed from outside) while its siblings
are still running. It speaks the PerfLog contract so a passing round is a real, valid round.

Per-host fault injection (the host is read from the node directory's name, ``<host>_noderank<i>``):
``fail_hosts: [host, ...]`` limits ``fail_rank`` to those hosts; ``slow_hosts: {host: factor}`` multiplies
``sleep_s`` there, so that the host reports a longer ``slept_s`` (a slow node for the each-case rankings).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
from common import harness  # noqa: E402

log = harness.PerfLog()
log.event("INIT_START")
args, cfg = harness.parse_args()
rank = int(os.environ["RANK"])
log.event("RUN_START")
print(f"rank {rank} env " + json.dumps({k: os.environ.get(k) for k in (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES", "FLAGPERF_DEVICE", "OMP_NUM_THREADS")}), flush=True)
print(f"rank {rank} data_dir {json.dumps(args.data_dir)} exists={os.path.isdir(args.data_dir)}", flush=True)
t0 = time.time()
host = os.path.basename(os.path.normpath(args.result_dir)).rsplit("_noderank", 1)[0]
fail_hosts = cfg.get("fail_hosts")
if rank == cfg.get("fail_rank", -1) and (fail_hosts is None or host in fail_hosts):
    time.sleep(cfg.get("fail_after_s", 0.5))
    print(f"rank {rank}: failing on purpose with exit code {cfg.get('fail_code', 7)}", flush=True)
    sys.exit(cfg.get("fail_code", 7))
if cfg.get("ballast_mb"):      # a large (sparse) file in the node directory: collect has work to do
    with open(os.path.join(args.result_dir, f"ballast{rank}.bin"), "wb") as f:
        f.truncate(int(cfg["ballast_mb"]) * 1024 * 1024)
time.sleep(cfg.get("sleep_s", 1.0) * float((cfg.get("slow_hosts") or {}).get(host, 1.0)))
log.event("RUN_END")
if rank == 0:
    log.finished(benchmark="sleeper", metric="slept_s", value=time.time() - t0, unit="s", higher_is_better=False,
                 metrics={}, checks={"passed": True, "details": {}}, env={"device": "cpu"})
