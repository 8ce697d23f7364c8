/* The dispatcher's call-cache hit in C (``anydevice.engine._hit``): optional, the dispatcher
 * runs the same logic in Python without it (dispatch.py says what each piece does there).
 *
 * - ``Runner``: the hit of one cached call whose kernel is native, returning and needs no casts
 *   (dispatch._runner_factory's closure): ``run(args, key)`` reads the input tensors' buffers,
 *   hands the call to ``slow`` when one of them has a graph node and grad mode is on, calls the
 *   kernel with the entry's attributes as keywords and wraps the result in a new Tensor.
 * - ``lookup(op, args, kwargs)``: an op function's cache hit: the call's key built as
 *   dispatch._call_key (and op_function) build it, the op's call cache read, the entry run; MISS
 *   when the call is not one this can key, is not cached, or anything (an observer, a tracer, an
 *   autocast region, an element-wise fast path) asks for the Python path.
 *
 * - ``binary(op, a, b)`` and ``getitem(op, x, key)``: the Tensor operators' hits (methods.py).
 *
 * ``configure()`` hands over the Python objects this needs once, at import. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>

static PyTypeObject *Tensor;          /* anydevice.engine.tensor.Tensor */
static Py_ssize_t off_buf, off_shape, off_dtype, off_device, off_node, off_ctx;  /* slot offsets */
static PyTypeObject *DeviceType;      /* has the _ctx slot */
static PyObject *globals;             /* the dispatch module's namespace: _observers, _tracer */
static PyObject *regions;             /* autocast.regions: [open regions] */
static PyObject *INTS;                /* dispatch._INTS: the tag of (x, tuple of ints) keys */
static PyObject *keyable;             /* dispatch._KEYABLE (a frozenset of types) */
static PyObject *seq_plain;           /* dispatch._SEQ_PLAIN */
static PyObject *MISS;
static PyObject *grad_enabled;        /* graph.is_grad_enabled */
static PyObject *s_observers, *s_tracer, *s_fast, *s_plans, *s_run, *s_s, *s_t;

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))
#define MAX_INPUTS 8
#define MAX_KW 8

/* --- Runner ---------------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *slow, *fn, *ctx, *device, *shape, *dtype, *grad_on, *oom, *kwnames, *kwvalues;
    Py_ssize_t n;  /* inputs; -1: one list input */
} Runner;

static PyTypeObject RunnerType;

static PyObject *call_slow(Runner *r, PyObject *args, PyObject *key) {
    return PyObject_CallFunctionObjArgs(r->slow, args, key, NULL);
}

/* 1: grad mode is on; 0: off; -1: error */
static int grad_on(Runner *r) {
    PyObject *g = PyObject_CallNoArgs(r->grad_on);
    if (g == NULL)
        return -1;
    int on = PyObject_IsTrue(g);
    Py_DECREF(g);
    return on;
}

/* the kernel's MemoryError as the runner's Python form raises it: ``raise oom(err)`` */
static void raise_oom(Runner *r) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *exc = PyObject_CallOneArg(r->oom, value ? value : Py_None);
    if (exc == NULL) {
        Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
        return;
    }
    if (exc == value) {  /* anydevice's own: re-raised as it is */
        Py_DECREF(exc);
        PyErr_Restore(type, value, tb);
        return;
    }
    Py_XDECREF(type); Py_XDECREF(tb);
    PyException_SetContext(exc, value);  /* steals value */
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

static PyObject *new_tensor(Runner *r, PyObject *buf) {
    PyObject *t = Tensor->tp_alloc(Tensor, 0);
    if (t == NULL) {
        Py_DECREF(buf);
        return NULL;
    }
    SLOT(t, off_buf) = buf;  /* a fresh object: its slots are NULL */
    Py_INCREF(r->shape); SLOT(t, off_shape) = r->shape;
    Py_INCREF(r->dtype); SLOT(t, off_dtype) = r->dtype;
    Py_INCREF(r->device); SLOT(t, off_device) = r->device;
    Py_INCREF(Py_None); SLOT(t, off_node) = Py_None;
    return t;
}

static PyObject *runner_run(Runner *r, PyObject *args, PyObject *key) {
    PyObject *stack[1 + MAX_INPUTS + MAX_KW];
    Py_ssize_t nkw = PyTuple_GET_SIZE(r->kwvalues), npos;
    PyObject *list = NULL, *out;
    if (!PyTuple_CheckExact(args))
        return call_slow(r, args, key);
    stack[0] = r->ctx;
    if (r->n >= 0) {
        Py_ssize_t n = r->n;
        int grad = 0;
        if (PyTuple_GET_SIZE(args) < n)
            return call_slow(r, args, key);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PyTuple_GET_ITEM(args, i);
            if (Py_TYPE(x) != Tensor || SLOT(x, off_buf) == NULL || SLOT(x, off_node) == NULL)
                return call_slow(r, args, key);
            grad |= SLOT(x, off_node) != Py_None;
            stack[1 + i] = SLOT(x, off_buf);
        }
        if (grad) {
            int on = grad_on(r);
            if (on < 0)
                return NULL;
            if (on)
                return call_slow(r, args, key);
        }
        npos = 1 + n;
    } else {
        PyObject *ts = PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, 0) : NULL;
        if (ts == NULL || !(PyList_CheckExact(ts) || PyTuple_CheckExact(ts)))
            return call_slow(r, args, key);
        Py_ssize_t m = PySequence_Fast_GET_SIZE(ts);
        PyObject **items = PySequence_Fast_ITEMS(ts);
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject *x = items[i];
            if (Py_TYPE(x) != Tensor || SLOT(x, off_buf) == NULL || SLOT(x, off_node) == NULL)
                return call_slow(r, args, key);
            if (SLOT(x, off_node) != Py_None) {
                int on = grad_on(r);
                if (on < 0)
                    return NULL;
                if (on)
                    return call_slow(r, args, key);
            }
        }
        list = PyList_New(m);
        if (list == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject *b = SLOT(items[i], off_buf);
            Py_INCREF(b);
            PyList_SET_ITEM(list, i, b);
        }
        stack[1] = list;
        npos = 2;
    }
    for (Py_ssize_t i = 0; i < nkw; i++)
        stack[npos + i] = PyTuple_GET_ITEM(r->kwvalues, i);
    out = PyObject_Vectorcall(r->fn, stack, npos, nkw ? r->kwnames : NULL);
    Py_XDECREF(list);
    if (out == NULL) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError))
            raise_oom(r);
        return NULL;
    }
    return new_tensor(r, out);
}

static PyObject *runner_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "run(args, key): two positional arguments");
        return NULL;
    }
    return runner_run((Runner *)self, args[0], args[1]);
}

static PyObject *runner_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *slow, *fn, *ctx, *device, *shape, *dtype, *grad_on_, *oom, *kwnames, *kwvalues;
    Py_ssize_t n;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Runner() takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOOOOOOO!O!n:Runner", &slow, &fn, &ctx, &device, &shape, &dtype, &grad_on_,
                          &oom, &PyTuple_Type, &kwnames, &PyTuple_Type, &kwvalues, &n))
        return NULL;
    if (PyTuple_GET_SIZE(kwnames) != PyTuple_GET_SIZE(kwvalues) || PyTuple_GET_SIZE(kwnames) > MAX_KW
            || n > MAX_INPUTS || n < -1) {
        PyErr_SetString(PyExc_ValueError, "Runner(): too many inputs or keywords for the C hit");
        return NULL;
    }
    Runner *r = (Runner *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->vectorcall = runner_vectorcall;
    PyObject **fields[] = {&r->slow, &r->fn, &r->ctx, &r->device, &r->shape, &r->dtype, &r->grad_on, &r->oom,
                           &r->kwnames, &r->kwvalues};
    PyObject *values[] = {slow, fn, ctx, device, shape, dtype, grad_on_, oom, kwnames, kwvalues};
    for (int i = 0; i < 10; i++) {
        Py_INCREF(values[i]);
        *fields[i] = values[i];
    }
    r->n = n;
    return (PyObject *)r;
}

static int runner_traverse(Runner *r, visitproc visit, void *arg) {
    Py_VISIT(r->slow); Py_VISIT(r->fn); Py_VISIT(r->ctx); Py_VISIT(r->device); Py_VISIT(r->shape);
    Py_VISIT(r->dtype); Py_VISIT(r->grad_on); Py_VISIT(r->oom); Py_VISIT(r->kwnames); Py_VISIT(r->kwvalues);
    return 0;
}

static int runner_clear(Runner *r) {
    Py_CLEAR(r->slow); Py_CLEAR(r->fn); Py_CLEAR(r->ctx); Py_CLEAR(r->device); Py_CLEAR(r->shape);
    Py_CLEAR(r->dtype); Py_CLEAR(r->grad_on); Py_CLEAR(r->oom); Py_CLEAR(r->kwnames); Py_CLEAR(r->kwvalues);
    return 0;
}

static void runner_dealloc(Runner *r) {
    PyObject_GC_UnTrack(r);
    runner_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *runner_call(PyObject *self, PyObject *args, PyObject *kwds) {
    PyObject *a, *k;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "run(args, key): two positional arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OO:run", &a, &k))
        return NULL;
    return runner_run((Runner *)self, a, k);
}

static PyMemberDef runner_members[] = {
    {"slow", T_OBJECT, offsetof(Runner, slow), READONLY, "the Python path of the hit"},
    {"fn", T_OBJECT, offsetof(Runner, fn), READONLY, "the kernel"},
    {NULL}
};

static PyTypeObject RunnerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "anydevice.engine._hit.Runner",
    .tp_basicsize = sizeof(Runner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Runner(slow, fn, ctx, device, shape, dtype, grad_on, oom, kwnames, kwvalues, n): "
              "the C form of one cached call's hit; run(args, key)",
    .tp_new = runner_new,
    .tp_dealloc = (destructor)runner_dealloc,
    .tp_traverse = (traverseproc)runner_traverse,
    .tp_clear = (inquiry)runner_clear,
    .tp_call = runner_call,
    .tp_vectorcall_offset = offsetof(Runner, vectorcall),
    .tp_members = runner_members,
};

/* --- keys -------------------------------------------------------------------------------------- */
/* A key under construction: owned references, made a tuple at the end. */
#define KEY_MAX 48
typedef struct {
    PyObject *items[KEY_MAX];
    Py_ssize_t n;
} Key;

static int put(Key *k, PyObject *o) {  /* steals o; 1: added, 0: the key is too long, -1: error */
    if (o == NULL)
        return -1;
    if (k->n == KEY_MAX) {
        Py_DECREF(o);
        return 0;
    }
    k->items[k->n++] = o;
    return 1;
}

static void key_clear(Key *k) {
    for (Py_ssize_t i = 0; i < k->n; i++)
        Py_DECREF(k->items[i]);
    k->n = 0;
}

/* Append one tensor's descriptors (device context, dtype, shape); 0: not a plain Tensor. */
static int add_tensor(Key *k, PyObject *x) {
    PyObject *dev = SLOT(x, off_device), *dt = SLOT(x, off_dtype), *shape = SLOT(x, off_shape);
    if (dev == NULL || dt == NULL || shape == NULL || Py_TYPE(dev) != DeviceType || SLOT(dev, off_ctx) == NULL
            || k->n + 3 > KEY_MAX)
        return 0;
    put(k, Py_NewRef(SLOT(dev, off_ctx)));
    put(k, Py_NewRef(dt));
    return put(k, Py_NewRef(shape));
}

/* the element types of tuple ``a`` when all are plain (``_SEQ_PLAIN``), else NULL (no error) */
static PyObject *plain_types(PyObject *a) {
    Py_ssize_t m = PyTuple_GET_SIZE(a);
    PyObject *ts = PyTuple_New(m);
    if (ts == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *t = (PyObject *)Py_TYPE(PyTuple_GET_ITEM(a, i));
        int in = PySet_Contains(seq_plain, t);
        if (in != 1) {
            Py_DECREF(ts);
            return NULL;
        }
        PyTuple_SET_ITEM(ts, i, Py_NewRef(t));
    }
    return ts;
}

/* Append the key of one value as dispatch._call_key does; 1: done, 0: not keyable here, -1: error.
 * ``tensors``: a Tensor is keyable (positional arguments; keywords holding tensors are not). */
static int add_value(Key *k, PyObject *a, int tensors) {
    PyTypeObject *t = Py_TYPE(a);
    if (t == Tensor)
        return tensors ? add_tensor(k, a) : 0;
    if (k->n + 3 > KEY_MAX)
        return 0;
    int in = PySet_Contains(keyable, (PyObject *)t);
    if (in < 0)
        return -1;
    if (in) {
        put(k, Py_NewRef((PyObject *)t));
        return put(k, Py_NewRef(a));
    }
    if (t == &PyFloat_Type) {
        put(k, Py_NewRef((PyObject *)t));
        put(k, Py_NewRef(a));
        return put(k, PyFloat_FromDouble(copysign(1.0, PyFloat_AS_DOUBLE(a))));
    }
    if (t == &PyTuple_Type) {
        PyObject *ts = plain_types(a);
        if (ts != NULL) {
            put(k, Py_NewRef((PyObject *)t));
            put(k, Py_NewRef(a));
            return put(k, ts);
        }
        if (PyErr_Occurred())
            return -1;
    }
    if ((t == &PyTuple_Type || t == &PyList_Type) && tensors) {  /* a list input: its tensors */
        Py_ssize_t m = PySequence_Fast_GET_SIZE(a);
        PyObject **items = PySequence_Fast_ITEMS(a);
        if (m == 0 || Py_TYPE(items[0]) != Tensor)
            return 0;
        put(k, Py_NewRef((PyObject *)t));
        int ok = put(k, PyLong_FromSsize_t(m));
        for (Py_ssize_t i = 0; ok == 1 && i < m; i++)
            ok = Py_TYPE(items[i]) == Tensor ? add_tensor(k, items[i]) : 0;
        return ok;
    }
    return 0;
}

/* The call's key (a new reference), Py_None when this does not key such calls, NULL on error. */
static PyObject *build_key(PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_GET_SIZE(args), nk = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
    if (n == 2 && nk == 0 && Py_TYPE(PyTuple_GET_ITEM(args, 0)) == Tensor
            && PyTuple_CheckExact(PyTuple_GET_ITEM(args, 1))) {  /* (x, tuple of ints): op_function's own form */
        PyObject *b = PyTuple_GET_ITEM(args, 1);
        int ints = 1;
        for (Py_ssize_t i = 0; ints && i < PyTuple_GET_SIZE(b); i++)
            ints = PyLong_CheckExact(PyTuple_GET_ITEM(b, i));
        if (ints) {
            PyObject *x = PyTuple_GET_ITEM(args, 0), *dev = SLOT(x, off_device);
            if (dev == NULL || Py_TYPE(dev) != DeviceType || SLOT(dev, off_ctx) == NULL || SLOT(x, off_dtype) == NULL
                    || SLOT(x, off_shape) == NULL)
                Py_RETURN_NONE;
            return PyTuple_Pack(5, SLOT(dev, off_ctx), SLOT(x, off_dtype), SLOT(x, off_shape), INTS, b);
        }
    }
    Key k;
    k.n = 0;
    int ok = 1;
    for (Py_ssize_t i = 0; ok == 1 && i < n; i++)
        ok = add_value(&k, PyTuple_GET_ITEM(args, i), 1);
    if (ok == 1 && nk) {
        PyObject *name, *v;
        Py_ssize_t pos = 0;
        while (ok == 1 && PyDict_Next(kwargs, &pos, &name, &v))
            ok = k.n < KEY_MAX ? (put(&k, Py_NewRef(name)), add_value(&k, v, 0)) : 0;
    }
    if (ok != 1) {
        key_clear(&k);
        if (ok < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *key = PyTuple_New(k.n);
    if (key == NULL) {
        key_clear(&k);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < k.n; i++)
        PyTuple_SET_ITEM(key, i, k.items[i]);
    return key;
}

/* 1: the Python path must run (an observer, a tracer, an autocast region); -1: error */
static int python_path(void) {
    PyObject *obs = PyDict_GetItemWithError(globals, s_observers);
    if (obs == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (!PyList_CheckExact(obs) || PyList_GET_SIZE(obs))
        return 1;
    PyObject *tr = PyDict_GetItemWithError(globals, s_tracer);
    if (tr != Py_None)
        return tr == NULL && PyErr_Occurred() ? -1 : 1;
    if (!PyList_CheckExact(regions) || PyList_GET_SIZE(regions) < 1)
        return 1;
    int open = PyObject_IsTrue(PyList_GET_ITEM(regions, 0));
    return open < 0 ? -1 : open;
}

static PyObject *run_entry(PyObject *e, PyObject *args, PyObject *key) {
    PyObject *run = PyObject_GetAttr(e, s_run), *out;
    if (run == NULL)
        return NULL;
    if (Py_TYPE(run) == &RunnerType)
        out = runner_run((Runner *)run, args, key);
    else
        out = PyObject_CallFunctionObjArgs(run, args, key, NULL);
    Py_DECREF(run);
    return out;
}

static PyObject *cached(PyObject *op, PyObject *key) {  /* the entry (borrowed) or NULL (maybe an error) */
    PyObject *plans = PyObject_GetAttr(op, s_plans);
    if (plans == NULL)
        return NULL;
    PyObject *e = NULL;
    if (PyDict_Check(plans)) {
        PyObject *calls = PyDict_GetItemWithError(plans, Py_None);
        if (calls != NULL && PyDict_Check(calls))
            e = PyDict_GetItemWithError(calls, key);
    }
    Py_DECREF(plans);  /* the entry stays alive: the op's cache holds it until the hit is done */
    return e;
}

/* the cached call of ``op`` under ``key`` run on ``args``, or MISS */
static PyObject *run_cached(PyObject *op, PyObject *args, PyObject *key) {
    PyObject *e = cached(op, key), *out;
    if (e == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(MISS);
    Py_INCREF(e);
    out = run_entry(e, args, key);
    Py_DECREF(e);
    return out;
}

static PyObject *lookup(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_CheckExact(a[1]) || !(a[2] == Py_None || PyDict_CheckExact(a[2]))) {
        PyErr_SetString(PyExc_TypeError, "lookup(op, args: tuple, kwargs: dict | None)");
        return NULL;
    }
    PyObject *op = a[0], *args = a[1], *kwargs = a[2] == Py_None ? NULL : a[2];
    int py = python_path();
    if (py)
        return py < 0 ? NULL : Py_NewRef(MISS);
    PyObject *fast = PyObject_GetAttr(op, s_fast);
    if (fast == NULL)
        return NULL;
    int has_fast = PyObject_IsTrue(fast);
    Py_DECREF(fast);
    if (has_fast)
        return has_fast < 0 ? NULL : Py_NewRef(MISS);
    PyObject *key = build_key(args, kwargs);
    if (key == NULL)
        return NULL;
    if (key == Py_None) {
        Py_DECREF(key);
        return Py_NewRef(MISS);
    }
    PyObject *out = run_cached(op, args, key);
    Py_DECREF(key);
    return out;
}

static PyObject *run_keyed(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_CheckExact(a[1])) {
        PyErr_SetString(PyExc_TypeError, "run_keyed(op, args: tuple, key)");
        return NULL;
    }
    int py = python_path();
    if (py)
        return py < 0 ? NULL : Py_NewRef(MISS);
    return run_cached(a[0], a[1], a[2]);
}

/* 1: the caller's Python path must run for the element-wise fast path (an observer); -1: error */
static int observed(void) {
    PyObject *obs = PyDict_GetItemWithError(globals, s_observers);
    if (obs == NULL)
        return PyErr_Occurred() ? -1 : 1;
    return !PyList_CheckExact(obs) || PyList_GET_SIZE(obs);
}

static int tensor_ok(PyObject *x) {  /* a plain Tensor with its slots set, on a plain Device */
    PyObject *dev = SLOT(x, off_device);
    return Py_TYPE(x) == Tensor && SLOT(x, off_buf) && SLOT(x, off_shape) && SLOT(x, off_dtype) && SLOT(x, off_node)
        && dev && Py_TYPE(dev) == DeviceType && SLOT(dev, off_ctx);
}

/* binary(op, a, b): ``a <op> b`` for two tensors as methods._binop's operator runs it: the op's
 * element-wise fast plan for same-dtype, same-device, same-shape inputs without a graph to record,
 * else the call cache under call_inputs' key; MISS for anything else (the operator's Python path). */
static PyObject *binary(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "binary(op, a, b)");
        return NULL;
    }
    PyObject *op = a[0], *x = a[1], *y = a[2];
    if (!tensor_ok(x) || !tensor_ok(y))
        return Py_NewRef(MISS);
    int obs = observed();
    if (obs)
        return obs < 0 ? NULL : Py_NewRef(MISS);
    PyObject *ctx = SLOT(SLOT(x, off_device), off_ctx), *dt = SLOT(x, off_dtype);
    PyObject *fast = PyObject_GetAttr(op, s_fast);
    if (fast == NULL)
        return NULL;
    PyObject *plan = NULL;
    if (PyDict_CheckExact(fast) && PyDict_GET_SIZE(fast)) {
        PyObject *fk = PyTuple_Pack(2, ctx, dt);
        if (fk == NULL) {
            Py_DECREF(fast);
            return NULL;
        }
        plan = PyDict_GetItemWithError(fast, fk);
        Py_DECREF(fk);
        if (plan == NULL && PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
        Py_XINCREF(plan);
    }
    Py_DECREF(fast);
    if (plan != NULL) {
        int same = SLOT(y, off_dtype) == dt && SLOT(y, off_device) == SLOT(x, off_device)
            && PyTuple_CheckExact(plan) && PyTuple_GET_SIZE(plan) == 2;
        if (same) {
            same = PyObject_RichCompareBool(SLOT(x, off_shape), SLOT(y, off_shape), Py_EQ);
            if (same < 0) {
                Py_DECREF(plan);
                return NULL;
            }
        }
        if (same && (SLOT(x, off_node) != Py_None || SLOT(y, off_node) != Py_None)) {
            PyObject *g = PyObject_CallNoArgs(grad_enabled);
            int on = g == NULL ? -1 : PyObject_IsTrue(g);
            Py_XDECREF(g);
            if (on < 0) {
                Py_DECREF(plan);
                return NULL;
            }
            same = !on;
        }
        if (same) {
            PyObject *stack[3] = {ctx, SLOT(x, off_buf), SLOT(y, off_buf)};
            PyObject *buf = PyObject_Vectorcall(PyTuple_GET_ITEM(plan, 0), stack, 3, NULL);
            PyObject *t = buf == NULL ? NULL : Tensor->tp_alloc(Tensor, 0);
            if (t == NULL) {
                Py_XDECREF(buf);
                Py_DECREF(plan);
                return NULL;
            }
            SLOT(t, off_buf) = buf;
            SLOT(t, off_shape) = Py_NewRef(SLOT(x, off_shape));
            SLOT(t, off_dtype) = Py_NewRef(PyTuple_GET_ITEM(plan, 1));
            SLOT(t, off_device) = Py_NewRef(SLOT(x, off_device));
            SLOT(t, off_node) = Py_NewRef(Py_None);
            Py_DECREF(plan);
            return t;
        }
        Py_DECREF(plan);
    }
    int py = python_path();
    if (py)
        return py < 0 ? NULL : Py_NewRef(MISS);
    PyObject *key = PyTuple_Pack(6, ctx, dt, SLOT(x, off_shape), SLOT(SLOT(y, off_device), off_ctx), SLOT(y, off_dtype),
                                 SLOT(y, off_shape));
    if (key == NULL)
        return NULL;
    PyObject *args = PyTuple_Pack(2, x, y), *out = args == NULL ? NULL : run_cached(op, args, key);
    Py_XDECREF(args);
    Py_DECREF(key);
    return out;
}

/* methods._index_id in C: a hashable standing for a basic index, Py_None for any other key */
static int index_part(PyObject *v) {  /* an int (not a bool) or None */
    return v == Py_None || PyLong_CheckExact(v);
}

static PyObject *slice_id(PyObject *k) {
    PySliceObject *sl = (PySliceObject *)k;
    if (!index_part(sl->start) || !index_part(sl->stop) || !index_part(sl->step))
        Py_RETURN_NONE;
    return PyTuple_Pack(4, s_s, sl->start, sl->stop, sl->step);
}

static PyObject *index_id(PyObject *k) {
    if (PyLong_CheckExact(k))
        return Py_NewRef(k);
    if (PySlice_Check(k))
        return slice_id(k);
    if (!PyTuple_CheckExact(k))
        Py_RETURN_NONE;
    Py_ssize_t m = PyTuple_GET_SIZE(k);
    PyObject *out = PyTuple_New(m + 1);
    if (out == NULL)
        return NULL;
    PyTuple_SET_ITEM(out, 0, Py_NewRef(s_t));
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *v = PyTuple_GET_ITEM(k, i), *part;
        if (PyLong_CheckExact(v) || v == Py_None || v == Py_Ellipsis) {
            PyTuple_SET_ITEM(out, i + 1, Py_NewRef(v));
            continue;
        }
        part = PySlice_Check(v) ? slice_id(v) : NULL;  /* NULL: not a basic index */
        if (part == NULL || part == Py_None) {
            Py_XDECREF(part);
            Py_DECREF(out);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        PyTuple_SET_ITEM(out, i + 1, part);
    }
    return out;
}

/* getitem(op, x, key): ``x[key]`` for a basic key whose call is cached under methods.getitem's key
 * (x's descriptors, the op, the key's index id); MISS otherwise. */
static PyObject *getitem(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "getitem(op, x, key)");
        return NULL;
    }
    PyObject *op = a[0], *x = a[1];
    if (!tensor_ok(x))
        return Py_NewRef(MISS);
    int py = python_path();
    if (py)
        return py < 0 ? NULL : Py_NewRef(MISS);
    PyObject *kid = index_id(a[2]);
    if (kid == NULL)
        return NULL;
    if (kid == Py_None) {
        Py_DECREF(kid);
        return Py_NewRef(MISS);
    }
    PyObject *key = PyTuple_Pack(5, SLOT(SLOT(x, off_device), off_ctx), SLOT(x, off_dtype), SLOT(x, off_shape), op, kid);
    Py_DECREF(kid);
    if (key == NULL)
        return NULL;
    PyObject *args = PyTuple_Pack(1, x), *out = args == NULL ? NULL : run_cached(op, args, key);
    Py_XDECREF(args);
    Py_DECREF(key);
    return out;
}

static PyObject *py_index_id(PyObject *self, PyObject *k) {
    return index_id(k);
}

static PyObject *key(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_CheckExact(a[0]) || !(a[1] == Py_None || PyDict_CheckExact(a[1]))) {
        PyErr_SetString(PyExc_TypeError, "key(args: tuple, kwargs: dict | None)");
        return NULL;
    }
    return build_key(a[0], a[1] == Py_None ? NULL : a[1]);
}

static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *off) {
    PyObject *d = PyDict_GetItemString(type->tp_dict, name);
    if (d == NULL || !PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "configure(): %s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "configure(): %s.%s is not a writable object slot", type->tp_name, name);
        return -1;
    }
    *off = m->offset;
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *tensor, *device, *g, *reg, *ints, *kset, *pset, *grad;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!O!O:configure", &PyType_Type, &tensor, &PyType_Type, &device,
                          &PyDict_Type, &g, &PyList_Type, &reg, &ints, &PyFrozenSet_Type, &kset,
                          &PyFrozenSet_Type, &pset, &grad))
        return NULL;
    if (!PyCallable_Check(grad)) {
        PyErr_SetString(PyExc_TypeError, "configure(): is_grad_enabled must be callable");
        return NULL;
    }
    PyTypeObject *tt = (PyTypeObject *)tensor, *dt = (PyTypeObject *)device;
    if (slot_offset(tt, "_buf", &off_buf) || slot_offset(tt, "shape", &off_shape) || slot_offset(tt, "dtype", &off_dtype)
            || slot_offset(tt, "device", &off_device) || slot_offset(tt, "_node", &off_node)
            || slot_offset(dt, "_ctx", &off_ctx))
        return NULL;
    PyObject *olds[] = {(PyObject *)Tensor, (PyObject *)DeviceType, globals, regions, INTS, keyable, seq_plain,
                        grad_enabled};
    Tensor = (PyTypeObject *)Py_NewRef(tensor);
    DeviceType = (PyTypeObject *)Py_NewRef(device);
    globals = Py_NewRef(g);
    regions = Py_NewRef(reg);
    INTS = Py_NewRef(ints);
    keyable = Py_NewRef(kset);
    seq_plain = Py_NewRef(pset);
    grad_enabled = Py_NewRef(grad);
    for (int i = 0; i < 8; i++)
        Py_XDECREF(olds[i]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(Tensor, Device, dispatch globals, autocast regions, _INTS, _KEYABLE, _SEQ_PLAIN, is_grad_enabled)"},
    {"binary", (PyCFunction)(void (*)(void))binary, METH_FASTCALL,
     "binary(op, a, b): a binary operator on two tensors (fast plan or call cache), or MISS"},
    {"getitem", (PyCFunction)(void (*)(void))getitem, METH_FASTCALL,
     "getitem(op, x, key): x[key] for a basic key from the call cache, or MISS"},
    {"index_id", (PyCFunction)py_index_id, METH_O, "index_id(key): methods._index_id in C"},
    {"lookup", (PyCFunction)(void (*)(void))lookup, METH_FASTCALL,
     "lookup(op, args, kwargs): an op function's cache hit, or MISS"},
    {"run_keyed", (PyCFunction)(void (*)(void))run_keyed, METH_FASTCALL,
     "run_keyed(op, args, key): the cached call under key run, or MISS"},
    {"key", (PyCFunction)(void (*)(void))key, METH_FASTCALL,
     "key(args, kwargs): the call's cache key as lookup() builds it, or None"},
    {NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hit", "The dispatcher's call-cache hit in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__hit(void) {
    if (PyType_Ready(&RunnerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    MISS = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    s_observers = PyUnicode_InternFromString("_observers");
    s_tracer = PyUnicode_InternFromString("_tracer");
    s_fast = PyUnicode_InternFromString("fast");
    s_plans = PyUnicode_InternFromString("plans");
    s_run = PyUnicode_InternFromString("run");
    s_s = PyUnicode_InternFromString("s");
    s_t = PyUnicode_InternFromString("t");
    if (s_s == NULL || s_t == NULL || MISS == NULL || s_observers == NULL || s_tracer == NULL || s_fast == NULL || s_plans == NULL || s_run == NULL
            || PyModule_AddObjectRef(m, "MISS", MISS) < 0
            || PyModule_AddObjectRef(m, "Runner", (PyObject *)&RunnerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
