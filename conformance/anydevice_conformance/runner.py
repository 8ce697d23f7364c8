"""Running the checks: one op on one device at one dtype, over the registry's sample inputs.

Checks (each a :class:`CaseResult` per op × device × dtype):

- ``dtype``: the result's dtype, as the tensor reports it and as the kernel's buffer holds it,
  equals the op's dtype rule;
- ``shape``: likewise for the shape rule;
- ``values``: the values equal ``op.reference`` (float64 / complex128 for floating inputs,
  the exact dtype otherwise, then cast to the result dtype) within the tolerances of
  :mod:`.tolerances`, and the Array API standard's special cases hold (:mod:`.special_cases`);
- ``grad``: for differentiable ops at float32 and float64, the device's ``backward()``
  equals central finite differences of the float64 reference;
- ``errors`` (dtype ``any``): invalid calls raise the exception type the registry expects,
  on the device and on the cpu alike.

The path the op took (native, decomposed, fallback) is recorded from
:func:`anydevice.dispatch.add_observer`.
"""
from __future__ import annotations

import inspect
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

from . import tolerances as _tol

FORWARD_CHECKS = ("dtype", "shape", "values")
CHECKS = FORWARD_CHECKS + ("grad", "errors")
PASS, FAIL, UNSUPPORTED, SKIPPED = "pass", "fail", "unsupported dtype", "skipped"
STATUSES = (PASS, FAIL, UNSUPPORTED, SKIPPED)
PATHS = ("native", "decomposed", "fallback")
GRAD_DTYPES = ("float32", "float64")
ANY_DTYPE = "any"


@dataclass
class SampleResult:
    """The outcome of one sample within a case."""

    desc: str
    input_shapes: list
    status: str
    message: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None


@dataclass
class CaseResult:
    """One op × device × dtype × check; the unit of the reports and of the pytest ids."""

    op: str
    device: str
    dtype: str
    check: str
    status: str
    path: str | None = None
    message: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    input_shapes: list | None = None
    samples: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def id(self) -> str:
        return case_id(self.device, self.op, self.dtype, self.check)

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_dict(self) -> dict:
        d = dict(vars(self), samples=[dict(vars(s)) for s in self.samples])
        d["id"] = self.id
        return d


def case_id(device: str, op: str, dtype: str, check: str) -> str:
    """The stable id of a case, also its pytest id: ``npu:0-add-float32-values``."""
    return f"{device}-{op}-{dtype}-{check}"


def planned_checks(op, dtype_name: str) -> tuple:
    """The checks run for ``op`` at a dtype (the same list with or without a device)."""
    checks = FORWARD_CHECKS
    if op.differentiable and op.inputs and dtype_name in GRAD_DTYPES:
        checks = checks + ("grad",)
    return checks


# --- helpers ----------------------------------------------------------------------------------
def _flat(inputs):
    out = []
    for x in inputs:
        out.extend(x if isinstance(x, list) else [x])
    return out


def _rebuild(template, flat):
    it = iter(flat)
    return [[next(it) for _ in x] if isinstance(x, list) else next(it) for x in template]


def _dtype_of(arr):
    from anydevice import dtypes as _dt

    return _dt.dtype(arr.dtype)


def _short(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {msg}"[:400]


def _fmt_shapes(shapes) -> str:
    return ", ".join(str(s) for s in shapes) if shapes else "no inputs"


class _PathRecorder:
    """Collects the path of top-level ops through ``dispatch.add_observer``."""

    def __init__(self):
        self.events = []

    def __call__(self, op, device, path, seconds, inputs, out):
        self.events.append((op.name, str(device), path))

    def path_of(self, opname: str, device: str):
        for name, dev, path in reversed(self.events):
            if name == opname and dev == device:
                return path
        return None


def _worst_path(paths):
    paths = [p for p in paths if p]
    for p in ("fallback", "decomposed", "native"):
        if p in paths:
            return p
    return None


# --- expected results -------------------------------------------------------------------------
class Expected:
    __slots__ = ("dtype", "shape", "attrs", "ref_inputs", "ref", "cattrs")


def expected(op, sample):
    """Dtype, shape and reference values of ``sample`` from the registry alone."""
    ex = Expected()
    arrays = _flat(sample.inputs)
    in_dtypes = [_dtype_of(a) for a in arrays]
    attrs = {**op.attrs, **sample.attrs}
    if op.has_device_attr:
        attrs["device"] = None
    compute, out = op.dtype_rule(in_dtypes, attrs)
    if op.has_device_attr and "dtype" in attrs:
        attrs["dtype"] = out
    cattrs = op.canon(sample.shapes, attrs) if op.canon is not None else attrs
    shape = op.shape_rule(sample.shapes, cattrs)
    shape = tuple(tuple(e) for e in shape) if op.outputs is not None else tuple(shape)
    ex.dtype, ex.shape, ex.cattrs = out, shape, cattrs
    per = compute if type(compute) is tuple else (compute,) * len(arrays)
    ref_in = []
    for a, c in zip(arrays, per):
        a = np.asarray(a)
        if c is not None and c.kind in ("int", "uint", "bool"):
            a = a.astype(c.numpy)
        elif a.dtype.kind == "c" or (c is not None and c.kind == "complex"):
            a = a.astype(np.complex128)
        elif a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            a = a.astype(np.float64)
        ref_in.append(a)
    ex.ref_inputs = ref_in
    ex.attrs = cattrs
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = op.reference(*_rebuild(sample.inputs, ref_in), **cattrs, **_out_dtype(op, out))
        if op.outputs is not None:
            ex.ref = tuple(np.asarray(r).astype(d.numpy) for r, d in zip(ref, out))
        else:
            ref = np.asarray(ref)
            ex.ref = ref.astype(out.numpy) if out is not None else ref
    if getattr(op, "data_shape", None) is not None:  # sizes that depend on the data: the reference's
        ex.shape = tuple(r.shape for r in ex.ref) if op.outputs is not None else ex.ref.shape
    return ex


def _out_dtype(op, out) -> dict:
    """``{"out_dtype": out}`` for a reference whose result depends on the dtype (nextafter: the
    neighbouring value of float32 is not that of float64), which takes it as a keyword."""
    wants = _WANTS_DTYPE.get(op.reference)
    if wants is None:
        try:
            wants = "out_dtype" in inspect.signature(op.reference).parameters
        except (TypeError, ValueError):  # numpy ufuncs have no signature
            wants = False
        _WANTS_DTYPE[op.reference] = wants
    return {"out_dtype": out} if wants else {}


_WANTS_DTYPE: dict = {}


def _outputs(op, out) -> tuple:
    """The results of a call as a tuple (one entry per output)."""
    return tuple(out) if op.outputs is not None else (out,)


def _per_output(op, ex) -> list:
    """(name, dtype, shape, reference) of each output of ``op`` for ``ex``."""
    if op.outputs is None:
        return [("", ex.dtype, ex.shape, ex.ref)]
    return list(zip(op.outputs, ex.dtype, ex.shape, ex.ref))


# --- running on a device ----------------------------------------------------------------------
def _to_device(sample_inputs, device, requires_grad=False):
    import anydevice as ad

    def one(a):
        t = ad.asarray(np.asarray(a), dtype=_dtype_of(np.asarray(a)), device=device)
        if requires_grad and t.dtype.kind == "float":
            t.requires_grad_(True)
        return t

    return [[one(a) for a in x] if isinstance(x, list) else one(x) for x in sample_inputs]


#: ``[True]`` while the suite runs in compile mode (``anydevice conformance --compile``)
COMPILE = [False]


def _call(op, tensors, attrs, device):
    """The op's public function on the sample; in compile mode through ``anydevice.jit.compile``
    (traced on a first call, the result taken from a replay of the graph). Ops whose result shape
    depends on the data cannot be captured and run eagerly."""
    if COMPILE[0] and op.data_shape is None and not any(getattr(t, "requires_grad", False) for t in _flat(tensors)):
        from anydevice import jit

        fn = jit.compile(lambda *ts: _call_eager(op, list(ts), attrs, device))
        fn(*tensors)
        return fn(*tensors)
    return _call_eager(op, tensors, attrs, device)


def _call_eager(op, tensors, attrs, device):
    import anydevice as ad

    # the public function, as users call it (an op without one, e.g. a test's: its op function)
    fn = getattr(getattr(ad, op.namespace) if op.namespace else ad, op.name, None)
    if fn is None:
        from anydevice.engine.dispatch import op_function

        fn = op_function(op)
    posonly = [k for k in list(op.schema)[:op.positions[0]]]  # positional-only attributes go by position
    last = max((j for j, k in enumerate(posonly) if k in attrs), default=-1)
    pos = [attrs.get(k, op.attrs[k]) for k in posonly[:last + 1]]
    attrs = {k: v for k, v in attrs.items() if k not in posonly[:last + 1]}
    if not op.inputs:
        return fn(*pos, **attrs, device=device)
    return fn(*tensors, *pos, **attrs)


def _buffer_meta(t):
    """(dtype, shape) the kernel actually produced, read from the buffer itself."""
    from anydevice import dtypes as _dt
    from anydevice.backend import DeviceArray

    buf = t._buf
    if isinstance(buf, DeviceArray):
        return buf.dtype, tuple(buf.shape)
    be = t.device._backend
    if be.own_storage:
        try:
            h = np.asarray(be.runtime.to_host(buf))
            return _dt.dtype(h.dtype), tuple(h.shape)
        except Exception:  # noqa: BLE001 - an opaque buffer: trust the tensor's metadata
            pass
    return t.dtype, tuple(t.shape)


def _unsupported(sample, ex, device_dtypes):
    ds = {_dtype_of(np.asarray(a)) for a in _flat(sample.inputs)}
    for d in (ex.dtype if isinstance(ex.dtype, tuple) else (ex.dtype,)):
        if d is not None:
            ds.add(d)
    missing = sorted(d.name for d in ds if d not in device_dtypes)
    return missing


def _forward_sample(op, device, sample, ex, recorder, tol):
    """Per-check SampleResults of one sample, and the path taken (a multi-output op: every output
    is checked; the first failing output gives the message)."""
    shapes = sample.shapes
    try:
        tensors = _to_device(sample.inputs, device)
        recorder.events.clear()
        outs = _outputs(op, _call(op, tensors, sample.attrs, device))
        path = recorder.path_of(op.name, str(device))
        metas = [_buffer_meta(o) for o in outs]
    except Exception as e:  # noqa: BLE001 - a device failure is a result, not a crash
        msg = f"raised {_short(e)}"
        return {c: SampleResult(sample.desc, shapes, FAIL, msg) for c in FORWARD_CHECKS}, None
    res = {"dtype": SampleResult(sample.desc, shapes, PASS), "shape": SampleResult(sample.desc, shapes, PASS)}
    per = _per_output(op, ex)
    for out, (bdtype, bshape), (name, xdtype, xshape, _) in zip(outs, metas, per):
        label = f"output {name}: " if name else ""
        if res["dtype"].status == PASS and (out.dtype is not xdtype or bdtype is not xdtype):
            got = bdtype.name if bdtype is not xdtype else out.dtype.name
            where = "the kernel's buffer" if bdtype is not xdtype else "the tensor"
            res["dtype"] = SampleResult(sample.desc, shapes, FAIL,
                                        f"{label}result dtype is {got} ({where}), expected {xdtype.name}")
        if res["shape"].status == PASS and (tuple(out.shape) != xshape or bshape != xshape):
            got = bshape if bshape != xshape else tuple(out.shape)
            res["shape"] = SampleResult(sample.desc, shapes, FAIL, f"{label}result shape is {got}, expected {xshape}")

    blocked = [c for c in ("dtype", "shape") if res[c].status == FAIL]
    if blocked:
        res["values"] = SampleResult(sample.desc, shapes, SKIPPED,
                                     f"not compared: the result {' and '.join(blocked)} is wrong")
        return res, path
    try:
        actuals = [o.numpy() for o in outs]
    except Exception as e:  # noqa: BLE001
        res["values"] = SampleResult(sample.desc, shapes, FAIL, f"reading the result raised {_short(e)}")
        return res, path
    refs = [r for _, _, _, r in per]
    if op.normalize is not None:  # results defined up to a choice (eigenvector signs): compare canonical forms
        actuals, refs = list(op.normalize(tuple(actuals))), list(op.normalize(tuple(refs)))
    worst_abs = worst_rel = None
    for actual, ref, (name, xdtype, _, _) in zip(actuals, refs, per):
        t = None if xdtype is not None and xdtype.kind in ("bool", "int", "uint") else tol
        ok, mabs, mrel, nbad, first = _tol.compare(actual, ref, t, _tol.signed_zeros(op, xdtype))
        if mabs is not None:
            worst_abs, worst_rel = max(worst_abs or 0.0, mabs), max(worst_rel or 0.0, mrel)
        if not ok:
            a, e = np.asarray(actual)[first], np.asarray(ref)[first]
            how = "exactly" if t is None else f"within rtol={t[0]:g}, atol={t[1]:g}"
            if t is not None and e == 0 and np.signbit(a) != np.signbit(e):
                how += " (the sign of zero differs)"
            label = f"output {name}: " if name else ""
            msg = (f"{label}{nbad} of {actual.size} values differ {how}; first at index {first}: got {a!r}, "
                   f"expected {e!r} (max abs err {mabs:.3g}, max rel err {mrel:.3g})")
            res["values"] = SampleResult(sample.desc, shapes, FAIL, msg, mabs, mrel)
            return res, path
    res["values"] = SampleResult(sample.desc, shapes, PASS, "", worst_abs, worst_rel)
    return res, path


def _fd_grads(op, sample, ex, g64, diff_idx):
    """Central finite differences of <g, reference(x)> in float64 for each input in ``diff_idx``."""
    base = [np.array(a, copy=True) for a in ex.ref_inputs]

    def f(arrs):
        with np.errstate(all="ignore"):
            r = op.reference(*_rebuild(sample.inputs, arrs), **ex.cattrs)
        if op.outputs is None:
            return float(np.sum(g64 * np.asarray(r, dtype=np.float64)))
        return float(sum(np.sum(gk * np.asarray(rk, dtype=np.float64)) for gk, rk in zip(g64, r) if gk is not None))

    grads = []
    for k in diff_idx:
        x = base[k]
        gk = np.zeros(x.shape, np.float64)
        for j in np.ndindex(x.shape):
            v = x[j]
            h = 1e-6 * max(1.0, abs(v))
            x[j] = v + h
            fp = f(base)
            x[j] = v - h
            fm = f(base)
            x[j] = v
            gk[j] = (fp - fm) / (2 * h)
        grads.append(gk)
    return grads


def _grad_sample(op, device, sample, ex, rng, dtype_name):
    import anydevice as ad

    shapes = sample.shapes
    arrays = _flat(sample.inputs)
    diff_idx = [k for k, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]
    try:
        with ad.enable_grad():
            tensors = _to_device(sample.inputs, device, requires_grad=True)
            out = _call(op, tensors, sample.attrs, device)
            if op.outputs is None:
                g = rng.uniform(-1.0, 1.0, size=out.shape).astype(out.dtype.numpy)
                out.backward(ad.asarray(g, dtype=out.dtype, device=device))
                g64 = g.astype(np.float64)
            else:  # one random cotangent per floating output: backward of sum_k <g_k, out_k>
                gs = [rng.uniform(-1.0, 1.0, size=o.shape).astype(o.dtype.numpy)
                      if o.dtype.kind in ("float", "complex") else None for o in out]
                total = None
                for o, gk in zip(out, gs):
                    if gk is not None:
                        term = ad.sum(o * ad.asarray(gk, dtype=o.dtype, device=device))
                        total = term if total is None else total + term
                total.backward()
                g64 = [None if gk is None else gk.astype(np.float64) for gk in gs]
        flat_t = _flat(tensors)
        got = [flat_t[k].grad.numpy() if flat_t[k].grad is not None else np.zeros(flat_t[k].shape) for k in diff_idx]
    except Exception as e:  # noqa: BLE001
        return SampleResult(sample.desc, shapes, FAIL, f"forward/backward raised {_short(e)}")
    want = _fd_grads(op, sample, ex, g64, diff_idx)
    tol = _tol.GRAD[dtype_name]
    worst_abs = worst_rel = 0.0
    for k, a, e in zip(diff_idx, got, want):
        if tuple(np.shape(a)) != e.shape:
            return SampleResult(sample.desc, shapes, FAIL,
                                f"gradient of input {k} has shape {np.shape(a)}, expected {e.shape}")
        ok, mabs, mrel, nbad, first = _tol.compare(np.asarray(a, np.float64), e, tol)
        worst_abs, worst_rel = max(worst_abs, mabs), max(worst_rel, mrel)
        if not ok:
            msg = (f"gradient of input {k}: {nbad} of {e.size} values differ from finite differences within "
                   f"rtol={tol[0]:g}, atol={tol[1]:g}; first at index {first}: got {np.asarray(a)[first]!r}, "
                   f"expected {e[first]!r} (max abs err {mabs:.3g})")
            return SampleResult(sample.desc, shapes, FAIL, msg, mabs, mrel)
    return SampleResult(sample.desc, shapes, PASS, "", worst_abs, worst_rel)


def _summarize(op, device, dtype_name, check, results, path, seconds):
    """Fold SampleResults into one CaseResult (the first failure gives the message)."""
    if not results:
        return CaseResult(op.name, device, dtype_name, check, SKIPPED, path, "no sample applies", seconds=seconds)
    fails = [r for r in results if r.status == FAIL]
    skips = [r for r in results if r.status == SKIPPED]
    unsup = [r for r in results if r.status == UNSUPPORTED]
    abs_e = [r.max_abs_err for r in results if r.max_abs_err is not None]
    rel_e = [r.max_rel_err for r in results if r.max_rel_err is not None]
    if fails:
        status, first = FAIL, fails[0]
        more = f" (+{len(fails) - 1} more failing sample(s))" if len(fails) > 1 else ""
        message = f"{first.desc}: {first.message}{more}"
    elif skips:
        status, first = SKIPPED, skips[0]
        message = f"{first.desc}: {first.message}"
    elif len(unsup) == len(results):
        status, first = UNSUPPORTED, unsup[0]
        message = first.message
    else:
        status, first, message = PASS, results[0], ""
    return CaseResult(op.name, device, dtype_name, check, status, path, message,
                      max(abs_e) if abs_e else None, max(rel_e) if rel_e else None,
                      [list(s) if isinstance(s, list) else list(s) for s in first.input_shapes],
                      results, seconds)


def _special_cases(op, dev, d) -> list:
    """The Array API standard's special cases of ``op`` at ``d`` as one more values sample (none
    for ops and dtypes it lists none for); see :mod:`.special_cases`."""
    from . import special_cases

    if d.kind not in ("float", "complex") or op.name not in special_cases.functions():
        return []
    n = len(special_cases.cases(op.name, d.kind == "complex"))
    if not n:
        return []
    desc, shapes = "the Array API standard's special cases", [(n,)] * len(op.inputs)
    try:
        bad = special_cases.check(op.name, dev, d)
    except Exception as e:  # noqa: BLE001 - a device failure is a result
        return [SampleResult(desc, shapes, FAIL, f"raised {_short(e)}")]
    if not bad:
        return [SampleResult(desc, shapes, PASS)]
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    return [SampleResult(desc, shapes, FAIL, f"{len(bad)} of {n} cases differ: {bad[0]}{more}")]


def run_op(op, device, dtype, checks=None) -> list:
    """Every planned check of ``op`` at ``dtype`` on ``device``; a list of CaseResult."""
    from anydevice import dispatch
    from anydevice import dtypes as _dt
    from anydevice.devices import as_device
    from anydevice.ops.samples import rng_for, samples

    dev = as_device(device)
    d = _dt.dtype(dtype)
    wanted = [c for c in planned_checks(op, d.name) if checks is None or c in checks]
    t0 = time.perf_counter()
    dev_dtypes = set(dev._backend.dtypes(dev.index))
    if d not in dev_dtypes:
        msg = f"{dev} does not support {d.name}"
        return [CaseResult(op.name, str(dev), d.name, c, UNSUPPORTED, None, msg) for c in wanted]

    per_check = {c: [] for c in wanted}
    paths = []
    recorder = _PathRecorder()
    rng = rng_for(op.name, d.name, "grad")
    dispatch.add_observer(recorder)
    try:
        for s in samples(op, d):
            try:
                ex = expected(op, s)
            except Exception as e:  # noqa: BLE001 - a broken reference is a core bug worth reporting
                r = SampleResult(s.desc, s.shapes, FAIL, f"the reference raised {_short(e)}")
                for c in wanted:
                    if c != "grad" or s.grad:
                        per_check[c].append(r)
                continue
            missing = _unsupported(s, ex, dev_dtypes)
            if missing:
                r = SampleResult(s.desc, s.shapes, UNSUPPORTED, f"{dev} does not support {', '.join(missing)}")
                for c in wanted:
                    if c != "grad" or s.grad:
                        per_check[c].append(r)
                continue
            rd = ex.dtype
            if isinstance(rd, tuple):  # a multi-output op: the tolerance of its first floating output
                rd = next((e for e in rd if e.kind in ("float", "complex")), rd[0])
            tol = _tol.for_op(op, d.name, rd.name if rd is not None else None)
            if rd is not None and rd.kind in ("bool", "int", "uint"):
                tol = None
            if any(c in per_check for c in FORWARD_CHECKS):
                res, path = _forward_sample(op, dev, s, ex, recorder, tol)
                paths.append(path)
                for c in FORWARD_CHECKS:
                    if c in per_check:
                        per_check[c].append(res[c])
            if s.grad and "grad" in per_check:
                per_check["grad"].append(_grad_sample(op, dev, s, ex, rng, d.name))
        if "values" in per_check and not any(r.status == SKIPPED for r in per_check["values"]):
            per_check["values"] += _special_cases(op, dev, d)  # (not when the result dtype or shape is wrong)
    finally:
        dispatch.remove_observer(recorder)
    path = _worst_path(paths)
    seconds = (time.perf_counter() - t0) / max(len(wanted), 1)
    return [_summarize(op, str(dev), d.name, c, per_check[c], path, seconds) for c in wanted]


def _raised(op, device, es):
    """The exception an error sample raised on ``device`` (None if it ran through)."""
    tensors = _to_device(es.inputs, device)
    try:
        out = _call(op, tensors, es.attrs, device)
        for o in _outputs(op, out):
            o.numpy()  # asynchronous devices report errors at synchronization
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _result_dtype(op, es) -> set:
    """The name of the result dtype an error sample's inputs promote to, when the dtype rule
    accepts them (a device without that dtype fails the call before its shapes are looked at)."""
    try:
        out = op.dtype_rule([_dtype_of(np.asarray(a)) for a in _flat(es.inputs)], {**op.attrs, **es.attrs})[1]
    except Exception:  # noqa: BLE001 - the dtype rule rejects the inputs: that is the error under test
        return set()
    return {d.name for d in (out if isinstance(out, tuple) else (out,)) if d is not None}  # one per output


def run_errors(op, device) -> CaseResult:
    """Error parity of ``op`` on ``device``: every error sample raises its expected type."""
    from anydevice.devices import as_device
    from anydevice.ops.samples import error_samples

    dev = as_device(device)
    cpu = as_device("cpu")
    dev_dtypes = set(dev._backend.dtypes(dev.index))
    t0 = time.perf_counter()
    results = []
    for es in error_samples(op):
        shapes = es.shapes
        missing = sorted(({_dtype_of(np.asarray(a)).name for a in _flat(es.inputs)} | _result_dtype(op, es)) -
                         {d.name for d in dev_dtypes})
        if missing:
            results.append(SampleResult(es.desc, shapes, UNSUPPORTED, f"{dev} does not support {', '.join(missing)}"))
            continue
        try:
            got = _raised(op, dev, es)
            ref = got if dev is cpu else _raised(op, cpu, es)
        except Exception as e:  # noqa: BLE001 - creating the inputs failed
            results.append(SampleResult(es.desc, shapes, FAIL, f"building the inputs raised {_short(e)}"))
            continue
        want = es.exc.__name__
        if not isinstance(ref, es.exc):
            msg = f"cpu raised {_short(ref) if ref else 'nothing'}, expected {want}"
            results.append(SampleResult(es.desc, shapes, FAIL, msg))
        elif got is None:
            results.append(SampleResult(es.desc, shapes, FAIL, f"{dev} raised nothing, expected {want} like cpu"))
        elif not isinstance(got, es.exc) or not isinstance(got, type(ref)):
            msg = f"{dev} raised {_short(got)}, expected {want} like cpu ({type(ref).__name__})"
            results.append(SampleResult(es.desc, shapes, FAIL, msg))
        else:
            results.append(SampleResult(es.desc, shapes, PASS, _short(got)))
    return _summarize(op, str(dev), ANY_DTYPE, "errors", results, None, time.perf_counter() - t0)


def op_dtypes(op, dtypes=None) -> list:
    """Names of the dtypes ``op`` is checked at (its supported dtypes, optionally filtered)."""
    names = [d.name for d in op.supported_dtypes]
    return [n for n in names if dtypes is None or n in dtypes]


def plan(ops, dtypes=None, checks=None) -> list:
    """(op, dtype_name, check) triples in a stable order, without running anything."""
    out = []
    for op in ops:
        for dn in op_dtypes(op, dtypes):
            out += [(op, dn, c) for c in planned_checks(op, dn) if checks is None or c in checks]
        if checks is None or "errors" in checks:
            out.append((op, ANY_DTYPE, "errors"))
    return out


def run_device_op(op, device, dtypes=None, checks=None) -> list:
    """Every case of ``op`` on ``device`` (all dtypes, then error parity)."""
    out = []
    for dn in op_dtypes(op, dtypes):
        try:
            out += run_op(op, device, dn, checks)
        except Exception as e:  # noqa: BLE001 - a harness error must not stop the run
            tb = traceback.format_exc(limit=3)
            for c in planned_checks(op, dn):
                if checks is None or c in checks:
                    out.append(CaseResult(op.name, str(device), dn, c, FAIL, None, f"harness error {_short(e)}\n{tb}"))
    if checks is None or "errors" in checks:
        try:
            out.append(run_errors(op, device))
        except Exception as e:  # noqa: BLE001
            out.append(CaseResult(op.name, str(device), ANY_DTYPE, "errors", FAIL, None, f"harness error {_short(e)}"))
    return out
