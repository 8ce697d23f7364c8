"""A rank that exits early, hangs or crashes: the others must raise DistributedTimeoutError in time.

Usage: ``mpiexec -n N python faults.py MODE DEVICE_TYPE TIMEOUT OUT_DIR`` with MODE ``exit`` (the
last rank returns right after init), ``hang`` (it sleeps) or ``crash`` (it dies without MPI's
goodbye; run mpiexec with -disable-auto-cleanup so the others live on). Every other rank writes
``OUT_DIR/rank{r}.json`` (the error, its message, the seconds it took) and waits for the other
survivors' reports before leaving (mpiexec ends the job when the first survivor exits).
"""
import json
import os
import sys
import time
from pathlib import Path

import anydevice as ad
import anydevice.distributed as dist

mode, dev_type, timeout, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), Path(sys.argv[4])
dist.init_process_group(timeout=60, device_type=dev_type)  # a loaded machine may start ranks seconds apart
group = dist.new_group(timeout=timeout)                    # the short timeout under test
rank, n = dist.get_rank(), dist.get_world_size()
if rank == n - 1:
    if mode == "exit":
        sys.exit(0)
    if mode == "crash":
        os._exit(7)
    time.sleep(120)
t = ad.asarray([1.0, 2.0], device=f"{dev_type}:0")
report = {"rank": rank}
start = time.monotonic()
try:
    dist.all_reduce(t, group=group)
    report["error"] = None
except Exception as e:  # noqa: BLE001 - the test checks which error it is
    report.update(error=type(e).__name__, message=str(e), seconds=time.monotonic() - start)
try:  # the group is broken now: the next collective fails at once
    start = time.monotonic()
    dist.barrier(group)
except Exception as e:  # noqa: BLE001
    report.update(after=type(e).__name__, after_message=str(e), after_seconds=time.monotonic() - start)
(out / f"rank{rank}.tmp").write_text(json.dumps(report))
(out / f"rank{rank}.tmp").rename(out / f"rank{rank}.json")
deadline = time.monotonic() + 20
while len(list(out.glob("rank*.json"))) < n - 1 and time.monotonic() < deadline:
    time.sleep(0.05)
