/* The caching allocator's hot path in C: ``Allocate(allocator, fallback, block type)`` is
 * ``CachingAllocator.allocate`` (allocator.py) for the request an eager program makes most: the
 * size of the chunk freed last, on its stream. That chunk is taken back from the allocator's
 * ``_pending`` deque as it is (it never stopped counting as allocated; ``_reused`` counts it) and
 * wrapped in a new block, whose slots are written through their member offsets. Every other
 * request, and anything unexpected, goes to ``fallback`` (the Python method) unchanged.
 *
 * ``Empty`` is a context's ``empty(shape, dtype)`` on top of it (see below).
 *
 * The GIL makes the pop-compare-push atomic, as deque.pop is for the Python path; freeing never
 * takes the allocator's lock (blocks append their chunk to ``_pending``), so neither does this.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyObject *s_pop, *s_append, *s_size, *s_seg, *s_stream, *s_handle, *s_offset;
/* the block slots this path writes, in order: handle, offset, size, index, stream, owner, chunk */
static const char *SLOTS[] = {"handle", "offset", "size", "index", "stream", "owner", "chunk"};
#define NSLOTS 7

static int slot_offsets(PyObject *type, const char **names, int k, Py_ssize_t *out);

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *owner, *fallback, *pending, *reused, *index;
    PyTypeObject *block;
    Py_ssize_t gran;
    Py_ssize_t slot[NSLOTS];  /* byte offsets of the block's slots */
} Allocate;

static PyObject *fallback(Allocate *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* The chunk freed last when it has ``size`` bytes on ``stream`` (a new reference), else NULL
 * with the deque as it was and no error set. */
static PyObject *take_last(Allocate *self, Py_ssize_t size, PyObject *stream) {
    if (PyObject_Length(self->pending) <= 0) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *chunk = PyObject_CallMethodNoArgs(self->pending, s_pop);
    if (chunk == NULL) {  /* another thread took it */
        PyErr_Clear();
        return NULL;
    }
    PyObject *csize = PyObject_GetAttr(chunk, s_size), *seg = PyObject_GetAttr(chunk, s_seg);
    PyObject *cstream = seg != NULL ? PyObject_GetAttr(seg, s_stream) : NULL;
    Py_ssize_t have = csize != NULL ? PyLong_AsSsize_t(csize) : -1;
    int match = cstream != NULL && have == size && cstream == stream;
    Py_XDECREF(csize);
    Py_XDECREF(cstream);
    Py_XDECREF(seg);
    PyErr_Clear();
    if (match) return chunk;
    PyObject *r = PyObject_CallMethodOneArg(self->pending, s_append, chunk);  /* put it back */
    Py_XDECREF(r);
    Py_DECREF(chunk);
    PyErr_Clear();
    return NULL;
}

static PyObject *allocate_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Allocate *self = (Allocate *)op;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n < 1 || n > 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || !PyLong_CheckExact(args[0]))
        return fallback(self, args, nargsf, kwnames);
    Py_ssize_t nbytes = PyLong_AsSsize_t(args[0]), g = self->gran;
    if (nbytes < 0) {
        PyErr_Clear();
        return fallback(self, args, nargsf, kwnames);
    }
    PyObject *stream = n == 2 ? args[1] : Py_None;
    Py_ssize_t size = nbytes > g ? (nbytes + g - 1) / g * g : g;
    PyObject *chunk = take_last(self, size, stream);
    if (chunk == NULL) return fallback(self, args, nargsf, kwnames);
    PyObject *seg = PyObject_GetAttr(chunk, s_seg);
    PyObject *handle = seg != NULL ? PyObject_GetAttr(seg, s_handle) : NULL;
    PyObject *offset = PyObject_GetAttr(chunk, s_offset);
    PyObject *counted = PyIter_Next(self->reused);
    PyObject *block = NULL;
    if (handle != NULL && offset != NULL && counted != NULL) block = self->block->tp_alloc(self->block, 0);
    if (block != NULL) {
        PyObject *values[NSLOTS] = {handle, offset, args[0], self->index, stream, self->owner, chunk};
        for (int i = 0; i < NSLOTS; i++) {
            Py_INCREF(values[i]);
            *(PyObject **)((char *)block + self->slot[i]) = values[i];
        }
    } else {  /* nothing is lost: the chunk goes back for the Python path to take */
        PyObject *r = PyObject_CallMethodOneArg(self->pending, s_append, chunk);
        Py_XDECREF(r);
    }
    Py_XDECREF(counted);
    Py_XDECREF(offset);
    Py_XDECREF(handle);
    Py_XDECREF(seg);
    Py_DECREF(chunk);
    if (block == NULL) {
        PyErr_Clear();
        return fallback(self, args, nargsf, kwnames);
    }
    return block;
}

static PyObject *allocate_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *owner, *fb, *block;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Allocate() takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOO!:Allocate", &owner, &fb, &PyType_Type, &block)) return NULL;
    Py_ssize_t slot[NSLOTS];
    if (slot_offsets(block, SLOTS, NSLOTS, slot) < 0) return NULL;
    PyObject *pending = PyObject_GetAttrString(owner, "_pending");
    PyObject *reused = pending != NULL ? PyObject_GetAttrString(owner, "_reused") : NULL;
    PyObject *gran = reused != NULL ? PyObject_GetAttrString(owner, "_gran") : NULL;
    PyObject *index = gran != NULL ? PyObject_GetAttrString(owner, "index") : NULL;
    Py_ssize_t g = gran != NULL ? PyLong_AsSsize_t(gran) : -1;
    Py_XDECREF(gran);
    if (index == NULL || g <= 0 || !PyIter_Check(reused)) {
        Py_XDECREF(pending);
        Py_XDECREF(reused);
        Py_XDECREF(index);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Allocate(): not a caching allocator");
        return NULL;
    }
    Allocate *self = (Allocate *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(pending);
        Py_DECREF(reused);
        Py_DECREF(index);
        return NULL;
    }
    Py_INCREF(owner);
    Py_INCREF(fb);
    Py_INCREF(block);
    self->owner = owner;
    self->fallback = fb;
    self->block = (PyTypeObject *)block;
    self->pending = pending;
    self->reused = reused;
    self->index = index;
    self->gran = g;
    memcpy(self->slot, slot, sizeof slot);
    self->vectorcall = allocate_call;
    return (PyObject *)self;
}

static int allocate_traverse(Allocate *self, visitproc visit, void *arg) {
    Py_VISIT(self->owner);
    Py_VISIT(self->fallback);
    Py_VISIT(self->pending);
    Py_VISIT(self->reused);
    Py_VISIT(self->index);
    Py_VISIT(self->block);
    return 0;
}

static int allocate_clear(Allocate *self) {
    Py_CLEAR(self->owner);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->reused);
    Py_CLEAR(self->index);
    Py_CLEAR(self->block);
    return 0;
}

static void allocate_dealloc(Allocate *self) {
    PyObject_GC_UnTrack(self);
    allocate_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef allocate_members[] = {
    {"fallback", T_OBJECT, offsetof(Allocate, fallback), READONLY, "the Python allocate"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject AllocateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "anydevice.runtime._alloc.Allocate",
    .tp_basicsize = sizeof(Allocate),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Allocate(allocator, fallback, block type): allocate(nbytes, stream=None) with its reuse hit in C",
    .tp_new = allocate_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Allocate, vectorcall),
    .tp_traverse = (traverseproc)allocate_traverse,
    .tp_clear = (inquiry)allocate_clear,
    .tp_dealloc = (destructor)allocate_dealloc,
    .tp_members = allocate_members,
};

/* --- Empty ------------------------------------------------------------------------------------
 * ``Empty(allocate, ctx, array type, fallback)`` is a context's ``empty(shape, dtype)``
 * (``Backend._allocating`` in devices.py): a block of ``dtype.itemsize * prod(shape)`` bytes (at
 * least 1) from ``allocate`` on ``ctx.stream``, as a new DeviceArray at offset 0, its slots written
 * through their offsets. A shape that is not a tuple of ints goes to ``fallback``. */
static const char *ARRAY_SLOTS[] = {"block", "offset", "shape", "dtype"};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *allocate, *ctx, *fallback, *zero, *dtype;  /* dtype: the one seen last, of item size ``itemsize`` */
    PyTypeObject *array;
    Py_ssize_t itemsize;
    Py_ssize_t slot[4];
} Empty;

static PyObject *s_itemsize, *s_ctx_stream;

static PyObject *empty_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Empty *self = (Empty *)op;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) || !PyTuple_CheckExact(args[0]))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *shape = args[0], *dtype = args[1];
    if (dtype != self->dtype) {
        PyObject *sz = PyObject_GetAttr(dtype, s_itemsize);
        Py_ssize_t v = sz != NULL ? PyLong_AsSsize_t(sz) : -1;
        Py_XDECREF(sz);
        if (v <= 0) {
            PyErr_Clear();
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        }
        Py_INCREF(dtype);
        Py_XSETREF(self->dtype, dtype);
        self->itemsize = v;
    }
    Py_ssize_t nbytes = self->itemsize;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        PyObject *d = PyTuple_GET_ITEM(shape, i);
        Py_ssize_t v = PyLong_CheckExact(d) ? PyLong_AsSsize_t(d) : -1;
        if (v < 0 || (v > 0 && nbytes > PY_SSIZE_T_MAX / v)) {  /* not an int, negative or too large: Python */
            PyErr_Clear();
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        }
        nbytes *= v;
    }
    PyObject *stream = PyObject_GetAttr(self->ctx, s_ctx_stream);
    if (stream == NULL) return NULL;
    PyObject *size = PyLong_FromSsize_t(nbytes ? nbytes : 1);
    PyObject *block = NULL;
    if (size != NULL) {
        PyObject *a2[2] = {size, stream};
        block = PyObject_Vectorcall(self->allocate, a2, 2, NULL);
    }
    Py_XDECREF(size);
    Py_DECREF(stream);
    if (block == NULL) return NULL;  /* the allocator's error (OutOfMemoryError) */
    PyObject *a = self->array->tp_alloc(self->array, 0);
    if (a == NULL) {
        Py_DECREF(block);
        return NULL;
    }
    PyObject *values[4] = {block, self->zero, shape, dtype};
    for (int i = 0; i < 4; i++) {
        if (i) Py_INCREF(values[i]);  /* the block's reference is handed over */
        *(PyObject **)((char *)a + self->slot[i]) = values[i];
    }
    return a;
}

static int slot_offsets(PyObject *type, const char **names, int k, Py_ssize_t *out) {
    for (int i = 0; i < k; i++) {
        PyObject *d = PyObject_GetAttrString(type, names[i]);
        if (d == NULL) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        out[i] = ok ? ((PyMemberDescrObject *)d)->d_member->offset : 0;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s is not a slot of %R", names[i], type);
            return -1;
        }
    }
    return 0;
}

static PyObject *empty_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *allocate, *ctx, *array, *fb;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Empty() takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOO!O:Empty", &allocate, &ctx, &PyType_Type, &array, &fb)) return NULL;
    Py_ssize_t slot[4];
    if (slot_offsets(array, ARRAY_SLOTS, 4, slot) < 0) return NULL;
    Empty *self = (Empty *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->zero = PyLong_FromLong(0);
    if (self->zero == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    PyObject *objs[] = {allocate, ctx, array, fb};
    for (int i = 0; i < 4; i++) Py_INCREF(objs[i]);
    self->allocate = allocate;
    self->ctx = ctx;
    self->array = (PyTypeObject *)array;
    self->fallback = fb;
    memcpy(self->slot, slot, sizeof slot);
    self->vectorcall = empty_call;
    return (PyObject *)self;
}

static int empty_traverse(Empty *self, visitproc visit, void *arg) {
    Py_VISIT(self->allocate);
    Py_VISIT(self->ctx);
    Py_VISIT(self->fallback);
    Py_VISIT(self->dtype);
    Py_VISIT(self->array);
    return 0;
}

static int empty_clear(Empty *self) {
    Py_CLEAR(self->allocate);
    Py_CLEAR(self->ctx);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->dtype);
    Py_CLEAR(self->zero);
    Py_CLEAR(self->array);
    return 0;
}

static void empty_dealloc(Empty *self) {
    PyObject_GC_UnTrack(self);
    empty_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef empty_members[] = {
    {"fallback", T_OBJECT, offsetof(Empty, fallback), READONLY, "the Python empty"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject EmptyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "anydevice.runtime._alloc.Empty",
    .tp_basicsize = sizeof(Empty),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Empty(allocate, ctx, array type, fallback): a context's empty(shape, dtype) in C",
    .tp_new = empty_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Empty, vectorcall),
    .tp_traverse = (traverseproc)empty_traverse,
    .tp_clear = (inquiry)empty_clear,
    .tp_dealloc = (destructor)empty_dealloc,
    .tp_members = empty_members,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_alloc", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__alloc(void) {
    if (PyType_Ready(&AllocateType) < 0 || PyType_Ready(&EmptyType) < 0) return NULL;
    if (!(s_itemsize = PyUnicode_InternFromString("itemsize")) || !(s_ctx_stream = PyUnicode_InternFromString("stream")))
        return NULL;
    if (!(s_pop = PyUnicode_InternFromString("pop")) || !(s_append = PyUnicode_InternFromString("append"))
        || !(s_size = PyUnicode_InternFromString("size")) || !(s_seg = PyUnicode_InternFromString("seg"))
        || !(s_stream = PyUnicode_InternFromString("stream")) || !(s_handle = PyUnicode_InternFromString("handle"))
        || !(s_offset = PyUnicode_InternFromString("offset")))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&AllocateType);
    if (PyModule_AddObject(m, "Allocate", (PyObject *)&AllocateType) < 0) {
        Py_DECREF(&AllocateType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EmptyType);
    if (PyModule_AddObject(m, "Empty", (PyObject *)&EmptyType) < 0) {
        Py_DECREF(&EmptyType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
