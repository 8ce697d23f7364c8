"""Bad input to the collectives: each must raise a clear anydevice error on every rank.

Usage: ``mpiexec -n 2 python errors.py TYPE,TYPE,... OUT_DIR``; each rank writes
``OUT_DIR/rank{r}.json``: for each case (per device type), the exception type and message (or "no error").
"""
import json
import sys
from pathlib import Path

import numpy as np

import anydevice as ad
import anydevice.distributed as dist

devs, out = sys.argv[1].split(","), Path(sys.argv[2])
dev = f"{devs[0]}:0"
cases = {}


def case(name, fn):
    try:
        fn()
        cases[name] = ["no error", ""]
    except Exception as e:  # noqa: BLE001 - reported to the test
        cases[name] = [type(e).__name__, str(e)]


t = ad.asarray([1.0, 2.0], device=dev)
case("uninitialized", lambda: dist.all_reduce(t))
case("uninitialized_rank", lambda: dist.get_rank())
case("bad_timeout", lambda: dist.init_process_group(timeout=-1))
case("bad_backend", lambda: dist.init_process_group("gloo", timeout=20))
cases["initialized_after_bad_backend"] = dist.is_initialized()
dist.init_process_group(timeout=20)
rank = dist.get_rank()
case("init_twice", lambda: dist.init_process_group())


def per_device(dev):
    t = ad.asarray([1.0, 2.0], device=dev)
    case("gather_list_length", lambda: dist.all_gather([ad.zeros(2, device=dev)], t))
    case("gather_list_shape", lambda: dist.all_gather([ad.zeros(2, device=dev), ad.zeros(3, device=dev)], t))
    case("gather_list_dtype", lambda: dist.all_gather([ad.zeros(2, device=dev), ad.zeros(2, dtype=ad.int32, device=dev)], t))
    case("into_tensor_dtype", lambda: dist.all_gather_into_tensor(ad.zeros((2, 2), dtype=ad.int32, device=dev), t))
    case("into_tensor_shape", lambda: dist.all_gather_into_tensor(ad.zeros((3, 2), device=dev), t))
    case("src_out_of_range", lambda: dist.broadcast(t, src=2))
    case("src_negative", lambda: dist.broadcast(t, src=-1))
    case("src_not_int", lambda: dist.broadcast(t, src="0"))
    case("dst_out_of_range", lambda: dist.reduce(t, dst=5))
    case("bool_sum", lambda: dist.all_reduce(ad.asarray([True, False], device=dev)))
    case("int_avg", lambda: dist.all_reduce(ad.asarray([1, 2], dtype=ad.int32, device=dev), op=dist.ReduceOp.AVG))
    case("unknown_op", lambda: dist.all_reduce(t, op="median"))
    case("not_a_tensor", lambda: dist.all_reduce(np.ones(2)))
    case("scatter_list", lambda: dist.scatter(t, [t], src=0))  # rank 0: too short; rank 1: not the source
    case("send_to_self", lambda: dist.send(t, rank))
    case("tag_range", lambda: dist.send(t, 1 - rank, tag=10**6))
    case("split_sizes", lambda: dist.all_to_all_single(ad.zeros(4, device=dev), ad.zeros(4, device=dev),
                                                       input_split_sizes=[1, 3]))
    case("new_group_ranks", lambda: dist.new_group([0, 5]))
    w = ad.asarray([1.0, 2.0], device=dev)
    w.requires_grad_()
    case("grad_leaf", lambda: dist.all_reduce(w))
    with ad.no_grad():
        dist.all_reduce(w)
    cases["grad_leaf_no_grad"] = w.tolist()
    g = dist.new_group([0])
    case("non_member", lambda: dist.all_reduce(t, group=g))
    dist.barrier()
    # ranks that disagree: another dtype, then another shape (each in a group of its own: it may break)
    g1 = dist.new_group([0, 1], timeout=3)
    case("cross_rank_dtype", lambda: dist.all_reduce(ad.zeros(2, dtype=ad.float32 if rank == 0 else ad.int32,
                                                               device=dev), group=g1))
    g2 = dist.new_group([0, 1], timeout=3)
    case("cross_rank_shape", lambda: dist.all_reduce(ad.zeros(2 + rank, device=dev), group=g2))


report = {"rank": rank, "common": cases, "devices": {}}
for d in devs:
    cases = {}
    per_device(f"{d}:0")
    report["devices"][d] = cases
(out / f"rank{rank}.json").write_text(json.dumps(report))
