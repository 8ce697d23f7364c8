/* The caching allocator's hot path in C: ``Allocate(allocator, fallback, block type)`` is
 * ``CachingAllocator.allocate`` (allocator.py) for the request an eager program makes most: the
 * size of the chunk freed last, on its stream. That chunk is taken back from the allocator's
 * ``_pending`` deque as it is (it never stopped counting as allocated; ``_reused`` counts it) and
 * wrapped in a new block, whose slots are written through their member offsets. Every other
 * request, and anything unexpected, goes to ``fallback`` (the Python method) unchanged.
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
    for (int i = 0; i < NSLOTS; i++) {
        PyObject *d = PyObject_GetAttrString(block, SLOTS[i]);
        if (d == NULL) return NULL;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        slot[i] = ok ? ((PyMemberDescrObject *)d)->d_member->offset : 0;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "Allocate(): the block type's %s is not a slot", SLOTS[i]);
            return NULL;
        }
    }
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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_alloc", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__alloc(void) {
    if (PyType_Ready(&AllocateType) < 0) return NULL;
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
    return m;
}
