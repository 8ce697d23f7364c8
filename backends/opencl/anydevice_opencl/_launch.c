/* The OpenCL backend's element-wise launch in C: ``Launch.arrays`` is ``Launcher.arrays``
 * (runtime.py) without the interpreter and without pyopencl's per-call wrapping.
 *
 * It calls the OpenCL loader that pyopencl itself uses: runtime.py passes the addresses of
 * ``clSetKernelArg`` and ``clEnqueueNDRangeKernel`` to ``configure``, and the raw handles come
 * from pyopencl objects' ``int_ptr``. So no OpenCL header or library is needed to build this.
 * The launch asks for no event (pyopencl makes one for every launch, which the backend never
 * used): the queues are in order and markers order the streams.
 *
 * Only changed arguments are set, as in the Python path. Which path set a kernel's arguments
 * last is the Launcher's ``owner``: this object while it did, so a launch through pyopencl in
 * between (a compiled graph's replay, a generic call) makes it set every argument again.
 * Anything this path does not handle goes to the Python path (``fallback``) with the same
 * arguments: a claim being recorded, more than MAX_ARRAYS arrays, and any OpenCL error, which
 * pyopencl then raises as it always did (nothing was queued when a call fails).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef cl_int (*set_arg_fn)(void *kernel, cl_uint index, size_t size, const void *value);
typedef cl_int (*enqueue_fn)(void *queue, void *kernel, cl_uint dims, const size_t *offset, const size_t *gsize,
                             const size_t *lsize, cl_uint nwait, const void *wait, void *event);

#define MAX_ARRAYS 8

static set_arg_fn set_arg = NULL;
static enqueue_fn enqueue = NULL;
static PyObject *recording = NULL;  /* runtime._recording: [None] unless a claim is recorded */
static unsigned long long launches = 0;  /* kernels this path has queued */
static PyObject *s_block, *s_handle, *s_offset, *s_dtype, *s_itemsize, *s_int_ptr, *s_owner;

typedef struct {
    PyObject_HEAD
    PyObject *launcher;  /* the Python Launcher: its ``owner`` says who set the arguments last */
    PyObject *fallback;  /* the Python path, Launcher._arrays_py */
    void *kernel;        /* the cl_kernel */
    Py_ssize_t nset;     /* arguments this object set that still stand (0: none) */
    PyObject *queue;     /* the queue of the last launch, and its handle */
    void *queue_ptr;
    PyObject *handles[MAX_ARRAYS];  /* each array argument's last buffer (held: as the Python path's list) */
    long long offsets[MAX_ARRAYS];
    long long n;
    PyObject *dtype;     /* the dtype seen last and its item size */
    long long itemsize;
} Launch;

static PyTypeObject LaunchType;

static void *handle_ptr(PyObject *obj) {
    PyObject *p = PyObject_GetAttr(obj, s_int_ptr);
    if (p == NULL) return NULL;
    void *v = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    return v;
}

static int sizes(PyObject *t, size_t *out, cl_uint *dims) {
    if (!PyTuple_Check(t)) return -1;
    Py_ssize_t k = PyTuple_GET_SIZE(t);
    if (k < 1 || k > 3) return -1;
    for (Py_ssize_t i = 0; i < k; i++) {
        size_t v = PyLong_AsSize_t(PyTuple_GET_ITEM(t, i));
        if (v == (size_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        out[i] = v;
    }
    *dims = (cl_uint)k;
    return 0;
}

/* The array's element offset, or -1 (with no error set) when it is not one this path knows. */
static long long element_offset(Launch *self, PyObject *a, PyObject **block_out) {
    PyObject *block = PyObject_GetAttr(a, s_block);
    if (block == NULL) return -1;
    PyObject *bo = PyObject_GetAttr(block, s_offset), *ao = PyObject_GetAttr(a, s_offset);
    PyObject *dt = PyObject_GetAttr(a, s_dtype);
    long long off = -1;
    if (bo != NULL && ao != NULL && dt != NULL) {
        if (dt != self->dtype) {
            PyObject *sz = PyObject_GetAttr(dt, s_itemsize);
            long long v = sz != NULL ? PyLong_AsLongLong(sz) : -1;
            Py_XDECREF(sz);
            if (v > 0) {
                Py_INCREF(dt);
                Py_XSETREF(self->dtype, dt);
                self->itemsize = v;
            }
        }
        if (dt == self->dtype) {
            long long b = PyLong_AsLongLong(bo), o = PyLong_AsLongLong(ao);
            if (b >= 0 && o >= 0) off = (b + o) / self->itemsize;
        }
    }
    Py_XDECREF(bo);
    Py_XDECREF(ao);
    Py_XDECREF(dt);
    if (off < 0) {
        PyErr_Clear();
        Py_DECREF(block);
        return -1;
    }
    *block_out = block;
    return off;
}

/* The Python path with the same arguments (``arrays`` as a tuple); it sets every argument. */
static PyObject *to_python(Launch *self, PyObject *queue, PyObject *gsize, PyObject *lsize, PyObject *const *arrs,
                           Py_ssize_t na, PyObject *tuple, long long n) {
    self->nset = 0;
    PyObject *t = tuple;
    if (t == NULL) {
        t = PyTuple_New(na);
        if (t == NULL) return NULL;
        for (Py_ssize_t i = 0; i < na; i++) {
            Py_INCREF(arrs[i]);
            PyTuple_SET_ITEM(t, i, arrs[i]);
        }
    } else {
        Py_INCREF(t);
    }
    PyObject *nobj = PyLong_FromLongLong(n);
    PyObject *res = nobj == NULL ? NULL : PyObject_CallFunctionObjArgs(self->fallback, queue, gsize, lsize, t, nobj, NULL);
    Py_XDECREF(nobj);
    Py_DECREF(t);
    return res;
}

/* Launch with arguments: each of ``arrs`` as its buffer and element offset, then n. New reference
 * to None, or NULL with an exception (only the Python path's). */
static PyObject *launch(Launch *self, PyObject *queue, PyObject *gs, PyObject *ls, PyObject *const *arrs,
                        Py_ssize_t na, PyObject *tuple, long long n) {
    size_t gsize[3], lsize[3];
    cl_uint dims, ldims = 0;
    if (PyList_GET_ITEM(recording, 0) != Py_None || na > MAX_ARRAYS || sizes(gs, gsize, &dims) < 0
        || (ls != Py_None && (sizes(ls, lsize, &ldims) < 0 || ldims != dims)))
        return to_python(self, queue, gs, ls, arrs, na, tuple, n);
    PyObject *owner = PyObject_GetAttr(self->launcher, s_owner);
    if (owner == NULL) return NULL;
    Py_DECREF(owner);
    if (owner != (PyObject *)self || self->nset != 2 * na + 1) {  /* someone else set arguments since */
        for (Py_ssize_t i = 0; i < MAX_ARRAYS; i++) Py_CLEAR(self->handles[i]);
        self->nset = 0;
        if (PyObject_SetAttr(self->launcher, s_owner, (PyObject *)self) < 0) return NULL;
    }
    int fresh = self->nset == 0;
    if (queue != self->queue) {
        void *q = handle_ptr(queue);
        if (q == NULL) {
            PyErr_Clear();
            return to_python(self, queue, gs, ls, arrs, na, tuple, n);
        }
        Py_INCREF(queue);
        Py_XSETREF(self->queue, queue);
        self->queue_ptr = q;
    }
    void *kernel = self->kernel;
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *block = NULL;
        long long off = element_offset(self, arrs[i], &block);
        if (off < 0) return to_python(self, queue, gs, ls, arrs, na, tuple, n);
        PyObject *h = PyObject_GetAttr(block, s_handle);
        Py_DECREF(block);
        if (h == NULL) {
            PyErr_Clear();
            return to_python(self, queue, gs, ls, arrs, na, tuple, n);
        }
        if (fresh || h != self->handles[i]) {
            void *mem = handle_ptr(h);
            if (mem == NULL || set_arg(kernel, (cl_uint)(2 * i), sizeof(void *), &mem) != 0) {
                Py_DECREF(h);
                PyErr_Clear();
                return to_python(self, queue, gs, ls, arrs, na, tuple, n);
            }
            Py_XSETREF(self->handles[i], h);
        } else {
            Py_DECREF(h);
        }
        if (fresh || off != self->offsets[i]) {
            int64_t v = off;
            if (set_arg(kernel, (cl_uint)(2 * i + 1), sizeof v, &v) != 0)
                return to_python(self, queue, gs, ls, arrs, na, tuple, n);
            self->offsets[i] = off;
        }
    }
    if (fresh || n != self->n) {
        int64_t v = n;
        if (set_arg(kernel, (cl_uint)(2 * na), sizeof v, &v) != 0) return to_python(self, queue, gs, ls, arrs, na, tuple, n);
        self->n = n;
    }
    self->nset = 2 * na + 1;
    if (enqueue(self->queue_ptr, kernel, dims, NULL, gsize, ldims ? lsize : NULL, 0, NULL, NULL) != 0)
        return to_python(self, queue, gs, ls, arrs, na, tuple, n);
    launches++;
    Py_RETURN_NONE;
}

static PyObject *launch_arrays(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "Launch.arrays(queue, gsize, lsize, arrays, n)");
        return NULL;
    }
    Launch *self = (Launch *)op;
    long long n = PyLong_AsLongLong(args[4]);
    if (!PyTuple_Check(args[3]) || (n == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        self->nset = 0;
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    }
    return launch(self, args[0], args[1], args[2], &PyTuple_GET_ITEM(args[3], 0), PyTuple_GET_SIZE(args[3]),
                  args[3], n);
}

static PyObject *launch_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *launcher, *kernel, *fallback;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Launch() takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOO:Launch", &launcher, &kernel, &fallback)) return NULL;
    if (set_arg == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Launch(): configure() has not been called");
        return NULL;
    }
    void *k = handle_ptr(kernel);
    if (k == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Launch(): the kernel has a null handle");
        return NULL;
    }
    Launch *self = (Launch *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(launcher);
    Py_INCREF(fallback);
    self->launcher = launcher;
    self->fallback = fallback;
    self->kernel = k;
    return (PyObject *)self;
}

static int launch_traverse(Launch *self, visitproc visit, void *arg) {
    Py_VISIT(self->launcher);
    Py_VISIT(self->fallback);
    Py_VISIT(self->queue);
    Py_VISIT(self->dtype);
    for (Py_ssize_t i = 0; i < MAX_ARRAYS; i++) Py_VISIT(self->handles[i]);
    return 0;
}

static int launch_clear(Launch *self) {
    Py_CLEAR(self->launcher);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->dtype);
    for (Py_ssize_t i = 0; i < MAX_ARRAYS; i++) Py_CLEAR(self->handles[i]);
    self->nset = 0;
    return 0;
}

static void launch_dealloc(Launch *self) {
    PyObject_GC_UnTrack(self);
    launch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef launch_methods[] = {
    {"arrays", (PyCFunction)(void (*)(void))launch_arrays, METH_FASTCALL,
     "arrays(queue, gsize, lsize, arrays, n): launch with each array's buffer and element offset, then n"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "anydevice_opencl._launch.Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Launch(launcher, kernel, fallback): a kernel's element-wise launch in C",
    .tp_new = launch_new,
    .tp_traverse = (traverseproc)launch_traverse,
    .tp_clear = (inquiry)launch_clear,
    .tp_dealloc = (destructor)launch_dealloc,
    .tp_methods = launch_methods,
};

/* --- Elementwise ----------------------------------------------------------------------------- */
/* An element-wise op's kernel (kernels.py's ``unary``/``binary``) with its hot path in C: inputs
 * of one shape whose signature has a specialized launch (``add`` registers it) get their result
 * from ``ctx.empty`` and one launch; any other call goes to the Python kernel (``fallback``). */
#define MAX_PLANS 16

typedef struct {
    PyObject *ctx, *d0, *d1;  /* the key: context and input dtypes (compared by identity) */
    PyObject *out_dt, *lsize, *grids, *queue;  /* result dtype, work-group size, {n: gsize}, default queue */
    Launch *launch;
} Plan;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;
    int arity;
    int nplans;
    Plan plans[MAX_PLANS];
} Elementwise;

static PyObject *s_shape, *s_stream, *s_empty, *s_name;

static PyObject *ew_fallback(Elementwise *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *ew_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Elementwise *self = (Elementwise *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != self->arity + 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return ew_fallback(self, args, nargsf, kwnames);
    PyObject *ctx = args[0], *x = args[1], *y = self->arity == 2 ? args[2] : args[1];
    PyObject *dx = PyObject_GetAttr(x, s_dtype);
    if (dx == NULL) {
        PyErr_Clear();
        return ew_fallback(self, args, nargsf, kwnames);
    }
    Py_DECREF(dx);  /* the arrays hold their dtypes; only identity is used */
    PyObject *dy = dx;
    if (y != x) {
        dy = PyObject_GetAttr(y, s_dtype);
        if (dy == NULL) {
            PyErr_Clear();
            return ew_fallback(self, args, nargsf, kwnames);
        }
        Py_DECREF(dy);
    }
    Plan *p = NULL;
    for (int i = 0; i < self->nplans; i++) {
        Plan *q = &self->plans[i];
        if (q->ctx == ctx && q->d0 == dx && q->d1 == dy) {
            p = q;
            break;
        }
    }
    if (p == NULL) return ew_fallback(self, args, nargsf, kwnames);
    PyObject *shape = PyObject_GetAttr(x, s_shape);
    if (shape == NULL || !PyTuple_CheckExact(shape)) {
        Py_XDECREF(shape);
        PyErr_Clear();
        return ew_fallback(self, args, nargsf, kwnames);
    }
    if (y != x) {
        PyObject *sy = PyObject_GetAttr(y, s_shape);
        int same = sy == NULL ? -1 : (sy == shape ? 1 : PyObject_RichCompareBool(sy, shape, Py_EQ));
        Py_XDECREF(sy);
        if (same != 1) {
            Py_DECREF(shape);
            PyErr_Clear();
            return ew_fallback(self, args, nargsf, kwnames);
        }
    }
    long long n = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (d < 0 || (d > 0 && n > (1LL << 62) / d)) {
            Py_DECREF(shape);
            PyErr_Clear();
            return ew_fallback(self, args, nargsf, kwnames);
        }
        n *= d;
    }
    PyObject *gsize = NULL;
    if (n) {
        PyObject *nobj = PyLong_FromLongLong(n);
        gsize = nobj == NULL ? NULL : PyDict_GetItemWithError(p->grids, nobj);  /* borrowed */
        Py_XDECREF(nobj);
        if (gsize == NULL) {  /* a size not seen yet: the Python kernel works out its grid */
            Py_DECREF(shape);
            if (PyErr_Occurred()) return NULL;
            return ew_fallback(self, args, nargsf, kwnames);
        }
        Py_INCREF(gsize);  /* the dict may change while ctx.empty runs Python code */
    }
    PyObject *stream = PyObject_GetAttr(ctx, s_stream);
    PyObject *empty = stream == NULL ? NULL : PyObject_GetAttr(ctx, s_empty);
    PyObject *out = NULL;
    if (empty != NULL) {
        PyObject *eargs[2] = {shape, p->out_dt};
        out = PyObject_Vectorcall(empty, eargs, 2, NULL);
    }
    Py_XDECREF(empty);
    Py_DECREF(shape);
    if (out != NULL && n) {
        PyObject *queue = stream == Py_None ? p->queue : stream;
        PyObject *arrs[3] = {out, x, y};
        PyObject *r = launch(p->launch, queue, gsize, p->lsize, arrs, self->arity + 1, NULL, n);
        if (r == NULL) Py_CLEAR(out);
        Py_XDECREF(r);
    }
    Py_XDECREF(gsize);
    Py_XDECREF(stream);
    return out;
}

static PyObject *ew_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *fallback;
    int arity;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Elementwise() takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "Oi:Elementwise", &fallback, &arity)) return NULL;
    if (arity != 1 && arity != 2) {
        PyErr_SetString(PyExc_ValueError, "Elementwise(): arity must be 1 or 2");
        return NULL;
    }
    Elementwise *self = (Elementwise *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->arity = arity;
    self->vectorcall = ew_call;
    return (PyObject *)self;
}

static PyObject *ew_add(PyObject *op, PyObject *args) {
    Elementwise *self = (Elementwise *)op;
    PyObject *ctx, *d0, *d1, *out_dt, *lsize, *grids, *queue, *launch_obj;
    if (!PyArg_ParseTuple(args, "OOOOO!O!OO!:add", &ctx, &d0, &d1, &out_dt, &PyTuple_Type, &lsize, &PyDict_Type,
                          &grids, &queue, &LaunchType, &launch_obj))
        return NULL;
    for (int i = 0; i < self->nplans; i++)
        if (self->plans[i].ctx == ctx && self->plans[i].d0 == d0 && self->plans[i].d1 == d1) Py_RETURN_FALSE;
    if (self->nplans == MAX_PLANS) Py_RETURN_FALSE;  /* the Python kernel runs the others */
    Plan *p = &self->plans[self->nplans++];
    PyObject *objs[] = {ctx, d0, d1, out_dt, lsize, grids, queue, launch_obj};
    for (int i = 0; i < 8; i++) Py_INCREF(objs[i]);
    p->ctx = ctx;
    p->d0 = d0;
    p->d1 = d1;
    p->out_dt = out_dt;
    p->lsize = lsize;
    p->grids = grids;
    p->queue = queue;
    p->launch = (Launch *)launch_obj;
    Py_RETURN_TRUE;
}

static int ew_traverse(Elementwise *self, visitproc visit, void *arg) {
    Py_VISIT(self->fallback);
    for (int i = 0; i < self->nplans; i++) {
        Plan *p = &self->plans[i];
        Py_VISIT(p->ctx);
        Py_VISIT(p->d0);
        Py_VISIT(p->d1);
        Py_VISIT(p->out_dt);
        Py_VISIT(p->lsize);
        Py_VISIT(p->grids);
        Py_VISIT(p->queue);
        Py_VISIT(p->launch);
    }
    return 0;
}

static int ew_clear(Elementwise *self) {
    Py_CLEAR(self->fallback);
    for (int i = 0; i < self->nplans; i++) {
        Plan *p = &self->plans[i];
        Py_CLEAR(p->ctx);
        Py_CLEAR(p->d0);
        Py_CLEAR(p->d1);
        Py_CLEAR(p->out_dt);
        Py_CLEAR(p->lsize);
        Py_CLEAR(p->grids);
        Py_CLEAR(p->queue);
        Py_CLEAR(p->launch);
    }
    self->nplans = 0;
    return 0;
}

static void ew_dealloc(Elementwise *self) {
    PyObject_GC_UnTrack(self);
    ew_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ew_get_name(Elementwise *self, void *closure) {
    return PyObject_GetAttr(self->fallback, s_name);
}

static PyObject *ew_get_plans(Elementwise *self, void *closure) {
    return PyLong_FromLong(self->nplans);
}

static PyMethodDef ew_methods[] = {
    {"add", ew_add, METH_VARARGS,
     "add(ctx, dtype0, dtype1, out_dtype, lsize, grids, default queue, launch): a specialized launch for the hot path;"
     " False when it holds one already, or MAX_PLANS"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ew_members[] = {
    {"fallback", T_OBJECT, offsetof(Elementwise, fallback), READONLY, "the Python kernel"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef ew_getset[] = {
    {"__name__", (getter)ew_get_name, NULL, "the Python kernel's name", NULL},
    {"plans", (getter)ew_get_plans, NULL, "how many launches the hot path holds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *ew_vcall_tp(PyObject *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call(self, args, kwargs);
}

static PyTypeObject ElementwiseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "anydevice_opencl._launch.Elementwise",
    .tp_basicsize = sizeof(Elementwise),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Elementwise(kernel, arity): an element-wise kernel with its same-shape hot path in C",
    .tp_new = ew_new,
    .tp_call = ew_vcall_tp,
    .tp_vectorcall_offset = offsetof(Elementwise, vectorcall),
    .tp_traverse = (traverseproc)ew_traverse,
    .tp_clear = (inquiry)ew_clear,
    .tp_dealloc = (destructor)ew_dealloc,
    .tp_methods = ew_methods,
    .tp_members = ew_members,
    .tp_getset = ew_getset,
};

static PyObject *configure(PyObject *mod, PyObject *args) {
    PyObject *sa, *en, *rec;
    if (!PyArg_ParseTuple(args, "OOO!:configure", &sa, &en, &PyList_Type, &rec)) return NULL;
    void *a = PyLong_AsVoidPtr(sa), *b = PyLong_AsVoidPtr(en);
    if (PyErr_Occurred()) return NULL;
    if (a == NULL || b == NULL || PyList_GET_SIZE(rec) != 1) {
        PyErr_SetString(PyExc_ValueError, "configure(): null function address or a recording list not of one item");
        return NULL;
    }
    set_arg = (set_arg_fn)a;
    enqueue = (enqueue_fn)b;
    Py_INCREF(rec);
    Py_XSETREF(recording, rec);
    Py_RETURN_NONE;
}

static PyObject *count(PyObject *mod, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(launches);
}

static PyMethodDef module_methods[] = {
    {"launches", count, METH_NOARGS, "launches(): how many kernels this module has queued"},
    {"configure", configure, METH_VARARGS,
     "configure(clSetKernelArg address, clEnqueueNDRangeKernel address, recording list)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_launch", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__launch(void) {
    if (PyType_Ready(&LaunchType) < 0 || PyType_Ready(&ElementwiseType) < 0) return NULL;
    if (!(s_shape = PyUnicode_InternFromString("shape")) || !(s_stream = PyUnicode_InternFromString("stream"))
        || !(s_empty = PyUnicode_InternFromString("empty")) || !(s_name = PyUnicode_InternFromString("__name__")))
        return NULL;
    if (!(s_block = PyUnicode_InternFromString("block")) || !(s_handle = PyUnicode_InternFromString("handle"))
        || !(s_offset = PyUnicode_InternFromString("offset")) || !(s_dtype = PyUnicode_InternFromString("dtype"))
        || !(s_itemsize = PyUnicode_InternFromString("itemsize"))
        || !(s_int_ptr = PyUnicode_InternFromString("int_ptr")) || !(s_owner = PyUnicode_InternFromString("owner")))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&LaunchType);
    if (PyModule_AddObject(m, "Launch", (PyObject *)&LaunchType) < 0) {
        Py_DECREF(&LaunchType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ElementwiseType);
    if (PyModule_AddObject(m, "Elementwise", (PyObject *)&ElementwiseType) < 0) {
        Py_DECREF(&ElementwiseType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
