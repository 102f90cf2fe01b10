"""Test-only benchmark: every rank logs a STEP event (step, loss, a throughput figure) every ``step_s`` seconds,
``steps`` times; the rank named by ``fail_rank`` exits with ``fail_code`` after ``fail_after_steps`` steps. Rank 0
prints a FINISHED line. Used by the live panel's end-to-end test: a round long enough for the panel to show its
ranks and STEP figures."""
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
t0 = time.time()
for step in range(1, int(cfg.get("steps", 8)) + 1):
    time.sleep(float(cfg.get("step_s", 0.5)))
    log.event("STEP", step=step, loss=round(1.0 / step, 6), samples_per_s=1234.5678 * step)
    if rank == cfg.get("fail_rank", -1) and step >= int(cfg.get("fail_after_steps", 1)):
        print(f"rank {rank}: failing on purpose with exit code {cfg.get('fail_code', 7)}", flush=True)
        sys.exit(cfg.get("fail_code", 7))
log.event("RUN_END")
if rank == 0:
    log.finished(benchmark="stepper", metric="samples_per_s", value=0.000123456789 * (time.time() - t0 + 1),
                 unit="samples/s", higher_is_better=True, metrics={}, checks={"passed": True, "details": {}},
                 env={"device": "cpu"})
