"""all_reduce across the local GPUs through NCCL (``cupy.cuda.nccl``), when NCCL is installed.

Returns None whenever NCCL cannot do the job (not installed, a dtype NCCL lacks, two buffers
on one GPU) so the core stages the reduction through host memory instead.
"""
from __future__ import annotations

import warnings

# anydevice dtype name -> NCCL constant name
_NCCL_TYPES = {
    "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64", "bfloat16": "NCCL_BFLOAT16",
}
_NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}
_comms: dict = {}


def nccl_module():
    """``cupy.cuda.nccl`` if NCCL can be loaded, else None (without CuPy's import warning)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from cupy.cuda import nccl
    except Exception:  # noqa: BLE001 - ImportError, or a broken libnccl
        return None
    return nccl if getattr(nccl, "available", False) else None


def nccl_version() -> str | None:
    nccl = nccl_module()
    if nccl is None:
        return None
    try:
        v = int(nccl.get_version())
    except Exception:  # noqa: BLE001
        return "available"
    major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def nccl_dtype(nccl, dtype_name: str):
    name = _NCCL_TYPES.get(dtype_name)
    return None if name is None else getattr(nccl, name, None)


def all_reduce(cupy, buffers: list, op: str):
    """One reduced copy per input buffer, each on its input's GPU; None if NCCL cannot do it."""
    nccl = nccl_module()
    if nccl is None or len(buffers) < 2:
        return None
    from anydevice.base import dtypes as _dt

    devices = [int(b.device.id) for b in buffers]
    code = nccl_dtype(nccl, _dt.dtype(buffers[0].dtype).name)
    red = getattr(nccl, _NCCL_OPS.get(op, ""), None)
    if code is None or red is None or len(set(devices)) != len(devices):
        return None
    key = tuple(devices)
    comms = _comms.get(key)
    if comms is None:
        comms = _comms[key] = nccl.NcclCommunicator.initAll(list(devices))
    srcs, outs, streams = [], [], []
    for d, b in zip(devices, buffers):
        with cupy.cuda.Device(d):
            srcs.append(cupy.ascontiguousarray(b))
            outs.append(cupy.empty(b.shape, dtype=b.dtype))
            streams.append(cupy.cuda.get_current_stream())
    nccl.groupStart()
    try:
        for comm, d, src, out, s in zip(comms, devices, srcs, outs, streams):
            with cupy.cuda.Device(d):
                comm.allReduce(src.data.ptr, out.data.ptr, src.size, code, red, s.ptr)
    finally:
        nccl.groupEnd()
    return outs
