/* The decoder of kproto's codec engine in C (optional; the generated Python decoders are the
 * reference and run when this module is not built).
 *
 * kproto.codecs.generator turns one (message, version) into a program: nested tuples saying, for
 * each struct, which class to build, which slots get defaults, and which field ops read the bytes.
 * Program() compiles that into C arrays once; Program.decode(buf, pos) then walks the bytes.
 *
 * The fast path does not explain failures: on malformed input it raises ValueError and the codec
 * re-runs the checked Python decoder, which says what was wrong, in which field, at which offset.
 * Every read is bounds-checked, and no length or count makes us allocate more than the bytes left.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

enum {
    OP_BOOL = 1, OP_INT8, OP_INT16, OP_UINT16, OP_INT32, OP_UINT32, OP_INT64, OP_FLOAT64,
    OP_UUID, OP_STRING, OP_BYTES, OP_STRUCT, OP_ARRAY
};
enum { F_COMPACT = 1, F_NULLABLE = 2, F_VIEW = 4, F_TAGGED = 8 };
enum { D_CONST = 0, D_LIST = 1, D_STRUCT = 2 };

typedef struct Prog Prog;

typedef struct Op {
    int code;
    int flags;
    Py_ssize_t offset;      /* slot offset in the object; -1 for array elements */
    struct Op *elem;        /* OP_ARRAY: the element */
    Prog *sub;              /* OP_STRUCT, or an array of structs' element */
} Op;

typedef struct {
    Py_ssize_t offset;
    int kind;
    PyObject *value;        /* D_CONST (borrowed from the spec, which the Program keeps) */
    Prog *sub;              /* D_STRUCT: the struct's default program */
} Dflt;

struct Prog {
    PyTypeObject *type;     /* borrowed from the spec */
    Py_ssize_t unknown_offset;
    int flexible;
    Py_ssize_t ndflt, nops, ntags;
    Dflt *dflt;
    Op *ops;
    int64_t *tag_ids;
    Op *tag_ops;
};

typedef struct {
    PyObject_HEAD
    PyObject *spec;         /* keeps every borrowed class and constant alive */
    Prog *root;
    void **blocks;          /* everything allocated for the program, freed together */
    Py_ssize_t nblocks, cap;
} ProgramObject;

typedef struct {
    const uint8_t *p;
    Py_ssize_t len;
    Py_ssize_t pos;
    PyObject *src;          /* the caller's buffer object */
    PyObject *view;         /* memoryview over src, made on first zero-copy field */
} Reader;

static PyObject *uuid_new;  /* callable(bytes16) -> Uuid */

/* -- compiling a spec ------------------------------------------------------------------------- */

static void *arena(ProgramObject *self, size_t size) {
    if (self->nblocks == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 16;
        void **b = PyMem_Realloc(self->blocks, cap * sizeof(void *));
        if (!b) { PyErr_NoMemory(); return NULL; }
        self->blocks = b;
        self->cap = cap;
    }
    void *m = PyMem_Calloc(1, size ? size : 1);
    if (!m) { PyErr_NoMemory(); return NULL; }
    self->blocks[self->nblocks++] = m;
    return m;
}

static Prog *compile_struct(ProgramObject *self, PyObject *spec);
static Prog *compile_default(ProgramObject *self, PyObject *spec);

static int compile_op(ProgramObject *self, PyObject *spec, Op *op) {
    /* (code, offset, flags, sub): sub is an element op for arrays, a struct spec for structs */
    PyObject *sub;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "iniO", &op->code, &op->offset, &op->flags, &sub)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad op spec");
        return -1;
    }
    if (op->code == OP_ARRAY) {
        op->elem = arena(self, sizeof(Op));
        if (!op->elem || compile_op(self, sub, op->elem) < 0) return -1;
    } else if (op->code == OP_STRUCT) {
        op->sub = compile_struct(self, sub);
        if (!op->sub) return -1;
    } else if (op->code < OP_BOOL || op->code > OP_ARRAY) {
        PyErr_Format(PyExc_ValueError, "unknown op code %d", op->code);
        return -1;
    }
    return 0;
}

static int compile_defaults(ProgramObject *self, PyObject *seq, Prog *pg) {
    /* ((offset, kind, value), ...): value is a constant, unused, or a default-struct spec */
    if (!PyTuple_Check(seq)) { PyErr_SetString(PyExc_TypeError, "defaults must be a tuple"); return -1; }
    pg->ndflt = PyTuple_GET_SIZE(seq);
    pg->dflt = arena(self, sizeof(Dflt) * pg->ndflt);
    if (!pg->dflt) return -1;
    for (Py_ssize_t i = 0; i < pg->ndflt; i++) {
        Dflt *d = &pg->dflt[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, i), "niO", &d->offset, &d->kind, &d->value)) return -1;
        if (d->kind == D_STRUCT) {
            d->sub = compile_default(self, d->value);
            if (!d->sub) return -1;
        }
    }
    return 0;
}

static int set_type(Prog *pg, PyObject *cls) {
    if (!PyType_Check(cls)) { PyErr_SetString(PyExc_TypeError, "expected a class"); return -1; }
    pg->type = (PyTypeObject *)cls;
    return 0;
}

static Prog *compile_default(ProgramObject *self, PyObject *spec) {
    /* (cls, unknown_offset, defaults) */
    PyObject *cls, *defaults;
    Prog *pg = arena(self, sizeof(Prog));
    if (!pg) return NULL;
    if (!PyArg_ParseTuple(spec, "OnO", &cls, &pg->unknown_offset, &defaults)) return NULL;
    if (set_type(pg, cls) < 0 || compile_defaults(self, defaults, pg) < 0) return NULL;
    return pg;
}

static Prog *compile_struct(ProgramObject *self, PyObject *spec) {
    /* (cls, unknown_offset, flexible, defaults, ops, ((tag, op), ...)) */
    PyObject *cls, *defaults, *ops, *tags;
    Prog *pg = arena(self, sizeof(Prog));
    if (!pg) return NULL;
    if (!PyArg_ParseTuple(spec, "OnpOOO", &cls, &pg->unknown_offset, &pg->flexible, &defaults, &ops, &tags))
        return NULL;
    if (set_type(pg, cls) < 0 || compile_defaults(self, defaults, pg) < 0) return NULL;
    if (!PyTuple_Check(ops) || !PyTuple_Check(tags)) {
        PyErr_SetString(PyExc_TypeError, "ops and tags must be tuples");
        return NULL;
    }
    pg->nops = PyTuple_GET_SIZE(ops);
    pg->ops = arena(self, sizeof(Op) * pg->nops);
    if (!pg->ops) return NULL;
    for (Py_ssize_t i = 0; i < pg->nops; i++)
        if (compile_op(self, PyTuple_GET_ITEM(ops, i), &pg->ops[i]) < 0) return NULL;
    pg->ntags = PyTuple_GET_SIZE(tags);
    pg->tag_ids = arena(self, sizeof(int64_t) * pg->ntags);
    pg->tag_ops = arena(self, sizeof(Op) * pg->ntags);
    if (!pg->tag_ids || !pg->tag_ops) return NULL;
    for (Py_ssize_t i = 0; i < pg->ntags; i++) {
        PyObject *op;
        long long tag;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(tags, i), "LO", &tag, &op)) return NULL;
        pg->tag_ids[i] = tag;
        if (compile_op(self, op, &pg->tag_ops[i]) < 0) return NULL;
    }
    return pg;
}

/* -- reading ---------------------------------------------------------------------------------- */

static PyObject *fail(const char *why) {
    PyErr_SetString(PyExc_ValueError, why);
    return NULL;
}

#define NEED(r, n) ((r)->len - (r)->pos >= (Py_ssize_t)(n))
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

static inline void set_slot(PyObject *o, Py_ssize_t off, PyObject *v) {
    PyObject *old = SLOT(o, off);
    SLOT(o, off) = v;
    Py_XDECREF(old);
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* An unsigned varint of at most 5 bytes, as kproto.codecs.primitives.read_uvarint reads it. */
static int read_uvarint(Reader *r, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (r->pos >= r->len) { fail("varint runs past the end"); return -1; }
        uint8_t b = r->p[r->pos++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) { *out = (int64_t)v; return 0; }
    }
    fail("varint longer than 5 bytes");
    return -1;
}

/* A length or count: compact (uvarint - 1) or fixed int16/int32; -1 and below mean null. */
static int read_len(Reader *r, int flags, int is_string, int64_t *out) {
    if (flags & F_COMPACT) {
        if (read_uvarint(r, out) < 0) return -1;
        *out -= 1;
        return 0;
    }
    if (is_string) {
        if (!NEED(r, 2)) { fail("truncated"); return -1; }
        *out = (int16_t)be16(r->p + r->pos);
        r->pos += 2;
    } else {
        if (!NEED(r, 4)) { fail("truncated"); return -1; }
        *out = (int32_t)be32(r->p + r->pos);
        r->pos += 4;
    }
    return 0;
}

/* mv[at:at + n] for a flat byte view: a new view of the same exporter, narrowed in place, which
 * is what slicing does minus the slice object (a third of the cost of a ProduceRequest). */
static PyObject *view_slice(PyObject *mv, Py_ssize_t at, Py_ssize_t n) {
    Py_buffer *b = PyMemoryView_GET_BUFFER(mv);
    if (b->ndim != 1 || b->itemsize != 1 || (b->strides && b->strides[0] != 1) || !b->shape)
        return PySequence_GetSlice(mv, at, at + n);
    PyObject *sub = PyMemoryView_FromObject(mv);
    if (!sub) return NULL;
    Py_buffer *v = PyMemoryView_GET_BUFFER(sub);
    v->buf = (char *)v->buf + at;
    v->len = n;
    v->shape[0] = n;
    return sub;
}

static PyObject *decode_struct(Reader *r, Prog *pg);
static PyObject *make_default(Prog *pg);

static inline int64_t fixed_width(int code) {
    switch (code) {
    case OP_INT16: case OP_UINT16: return 2;
    case OP_INT32: case OP_UINT32: return 4;
    case OP_INT64: case OP_FLOAT64: return 8;
    case OP_UUID: return 16;
    default: return 1;
    }
}

static int fill_defaults(PyObject *o, Prog *pg) {
    for (Py_ssize_t i = 0; i < pg->ndflt; i++) {
        Dflt *d = &pg->dflt[i];
        PyObject *v;
        if (d->kind == D_CONST) {
            v = Py_NewRef(d->value);
        } else if (d->kind == D_LIST) {
            v = PyList_New(0);
        } else {
            v = make_default(d->sub);
        }
        if (!v) return -1;
        set_slot(o, d->offset, v);
    }
    return 0;
}

static PyObject *make_default(Prog *pg) {
    PyObject *o = pg->type->tp_alloc(pg->type, 0);
    if (!o) return NULL;
    if (fill_defaults(o, pg) < 0) { Py_DECREF(o); return NULL; }
    set_slot(o, pg->unknown_offset, Py_NewRef(Py_None));
    return o;
}

static PyObject *decode_value(Reader *r, Op *op) {
    const uint8_t *p;
    switch (op->code) {
    case OP_BOOL:
        if (!NEED(r, 1)) return fail("truncated");
        return PyBool_FromLong(r->p[r->pos++] != 0);
    case OP_INT8:
        if (!NEED(r, 1)) return fail("truncated");
        return PyLong_FromLong((int8_t)r->p[r->pos++]);
    case OP_INT16:
        if (!NEED(r, 2)) return fail("truncated");
        p = r->p + r->pos; r->pos += 2;
        return PyLong_FromLong((int16_t)be16(p));
    case OP_UINT16:
        if (!NEED(r, 2)) return fail("truncated");
        p = r->p + r->pos; r->pos += 2;
        return PyLong_FromLong(be16(p));
    case OP_INT32:
        if (!NEED(r, 4)) return fail("truncated");
        p = r->p + r->pos; r->pos += 4;
        return PyLong_FromLong((int32_t)be32(p));
    case OP_UINT32:
        if (!NEED(r, 4)) return fail("truncated");
        p = r->p + r->pos; r->pos += 4;
        return PyLong_FromUnsignedLong(be32(p));
    case OP_INT64:
        if (!NEED(r, 8)) return fail("truncated");
        p = r->p + r->pos; r->pos += 8;
        return PyLong_FromLongLong((int64_t)be64(p));
    case OP_FLOAT64: {
        if (!NEED(r, 8)) return fail("truncated");
        uint64_t bits = be64(r->p + r->pos);
        double d;
        memcpy(&d, &bits, 8);
        r->pos += 8;
        return PyFloat_FromDouble(d);
    }
    case OP_UUID: {
        if (!NEED(r, 16)) return fail("truncated");
        PyObject *b = PyBytes_FromStringAndSize((const char *)r->p + r->pos, 16);
        r->pos += 16;
        if (!b) return NULL;
        PyObject *u = PyObject_CallOneArg(uuid_new, b);
        Py_DECREF(b);
        return u;
    }
    case OP_STRING:
    case OP_BYTES: {
        int64_t n;
        if (read_len(r, op->flags, op->code == OP_STRING, &n) < 0) return NULL;
        if (n < 0) {
            if (op->flags & F_NULLABLE) Py_RETURN_NONE;
            return fail("null in a non-nullable field");
        }
        if (op->code == OP_STRING && n > 32767) return fail("string too long");
        if (n > r->len - r->pos) return fail("length beyond the data");
        Py_ssize_t at = r->pos;
        r->pos += (Py_ssize_t)n;
        if (op->code == OP_STRING)
            return PyUnicode_DecodeUTF8((const char *)r->p + at, (Py_ssize_t)n, NULL);
        if (op->flags & F_VIEW) {   /* Kafka's zeroCopy: a slice of the caller's buffer */
            if (!r->view) {
                r->view = PyMemoryView_Check(r->src) ? Py_NewRef(r->src) : PyMemoryView_FromObject(r->src);
                if (!r->view) return NULL;
            }
            return view_slice(r->view, at, (Py_ssize_t)n);
        }
        return PyBytes_FromStringAndSize((const char *)r->p + at, (Py_ssize_t)n);
    }
    case OP_STRUCT:
        if (op->flags & F_NULLABLE) {
            if (!NEED(r, 1)) return fail("truncated");
            /* Kafka writes a null tagged struct as the byte 0, a regular one as -1 */
            int8_t marker = (int8_t)r->p[r->pos++];
            if (marker < 0 || (marker == 0 && (op->flags & F_TAGGED))) Py_RETURN_NONE;
        }
        return decode_struct(r, op->sub);
    case OP_ARRAY: {
        int64_t n;
        if (read_len(r, op->flags, 0, &n) < 0) return NULL;
        if (n < 0) {
            if (op->flags & F_NULLABLE) Py_RETURN_NONE;
            return fail("null in a non-nullable array");
        }
        /* every element takes at least one byte (fixed-width ones their width): no list is
         * sized beyond the data left */
        if (n * fixed_width(op->elem->code) > r->len - r->pos) return fail("count beyond the data");
        PyObject *list = PyList_New((Py_ssize_t)n);
        if (!list) return NULL;
        for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
            PyObject *v = decode_value(r, op->elem);
            if (!v) { Py_DECREF(list); return NULL; }
            PyList_SET_ITEM(list, i, v);
        }
        return list;
    }
    }
    return fail("bad op");
}

static int decode_tags(Reader *r, Prog *pg, PyObject *o) {
    int64_t count;
    PyObject *unknown = NULL;
    if (read_uvarint(r, &count) < 0) return -1;
    for (int64_t k = 0; k < count; k++) {
        int64_t tag, size;
        if (read_uvarint(r, &tag) < 0 || read_uvarint(r, &size) < 0) goto error;
        if (size > r->len - r->pos) { fail("tagged field beyond the data"); goto error; }
        Py_ssize_t end = r->pos + (Py_ssize_t)size;
        Py_ssize_t i;
        for (i = 0; i < pg->ntags; i++)
            if (pg->tag_ids[i] == tag) break;
        if (i < pg->ntags) {
            PyObject *v = decode_value(r, &pg->tag_ops[i]);
            if (!v) goto error;
            set_slot(o, pg->tag_ops[i].offset, v);
            if (r->pos != end) { fail("tagged field size mismatch"); goto error; }
        } else {
            if (!unknown && !(unknown = PyList_New(0))) goto error;
            PyObject *item = Py_BuildValue("(Ly#)", (long long)tag, (const char *)r->p + r->pos,
                                           (Py_ssize_t)size);
            if (!item) goto error;
            int rc = PyList_Append(unknown, item);
            Py_DECREF(item);
            if (rc < 0) goto error;
            r->pos = end;
        }
    }
    set_slot(o, pg->unknown_offset, unknown ? unknown : Py_NewRef(Py_None));
    return 0;
error:
    Py_XDECREF(unknown);
    return -1;
}

static PyObject *decode_struct(Reader *r, Prog *pg) {
    PyObject *o = pg->type->tp_alloc(pg->type, 0);
    if (!o) return NULL;
    if (fill_defaults(o, pg) < 0) goto error;
    for (Py_ssize_t i = 0; i < pg->nops; i++) {
        Op *op = &pg->ops[i];
        PyObject *v = decode_value(r, op);
        if (!v) goto error;
        set_slot(o, op->offset, v);
    }
    if (pg->flexible) {
        if (decode_tags(r, pg, o) < 0) goto error;
    } else {
        set_slot(o, pg->unknown_offset, Py_NewRef(Py_None));
    }
    return o;
error:
    Py_DECREF(o);
    return NULL;
}

/* -- the Program type ------------------------------------------------------------------------- */

static PyObject *Program_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *spec;
    static char *kwlist[] = {"spec", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Program", kwlist, &spec)) return NULL;
    ProgramObject *self = (ProgramObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->spec = Py_NewRef(spec);
    self->root = compile_struct(self, spec);
    if (!self->root) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}

static void Program_dealloc(ProgramObject *self) {
    for (Py_ssize_t i = 0; i < self->nblocks; i++) PyMem_Free(self->blocks[i]);
    PyMem_Free(self->blocks);
    Py_XDECREF(self->spec);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(decode_doc, "decode(buf, pos) -> (object, new pos); ValueError on malformed input.");

static PyObject *Program_decode(ProgramObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "decode() takes 2 arguments (%zd given)", nargs);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Reader r = {(const uint8_t *)view.buf, view.len, pos, args[0], NULL};
    PyObject *result = NULL;
    if (pos < 0 || pos > view.len) {
        fail("position outside the data");
    } else {
        PyObject *o = decode_struct(&r, self->root);
        if (o) {
            result = Py_BuildValue("(Nn)", o, r.pos);
        }
    }
    Py_XDECREF(r.view);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef Program_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))Program_decode, METH_FASTCALL, decode_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproto.codecs._decoder.Program",
    .tp_basicsize = sizeof(ProgramObject),
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("A compiled decoder program for one (message, version)."),
    .tp_methods = Program_methods,
    .tp_new = Program_new,
};

/* The offset of a __slots__ member descriptor, so the program can fill slots directly. */
static PyObject *slot_offset(PyObject *mod, PyObject *descr) {
    if (!PyObject_TypeCheck(descr, &PyMemberDescr_Type))
        return PyErr_Format(PyExc_TypeError, "expected a slot member descriptor, got %.100s",
                            Py_TYPE(descr)->tp_name);
    PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
    if (m->type != T_OBJECT_EX) return PyErr_Format(PyExc_TypeError, "not an object slot");
    return PyLong_FromSsize_t(m->offset);
}

static PyObject *set_uuid_factory(PyObject *mod, PyObject *fn) {
    Py_XSETREF(uuid_new, Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"slot_offset", slot_offset, METH_O, "Byte offset of a __slots__ member descriptor."},
    {"set_uuid_factory", set_uuid_factory, METH_O, "Set the callable turning 16 bytes into a Uuid."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_decoder", "Compiled decoder programs for kproto's codec.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__decoder(void) {
    if (PyType_Ready(&ProgramType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddObject(m, "Program", Py_NewRef((PyObject *)&ProgramType)) < 0) {
        Py_DECREF(&ProgramType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
