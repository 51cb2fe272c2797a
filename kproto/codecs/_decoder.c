/* The decoder and encoder of kproto's codec engine in C (optional; the generated Python decoders
 * and encoders are the reference and run when this module is not built).
 *
 * kproto.codecs.program turns one (message, version) into a program: nested tuples saying, for
 * each struct, which class to build, which slots get defaults, and which field ops read the bytes.
 * Program() compiles that into C arrays once; Program.decode(buf, pos) then walks the bytes, and
 * Program.encode(obj) / Program.encode_parts(obj, parts) walk the same ops the other way, reading
 * the slots directly.
 *
 * The encoder accepts only what it can write exactly as the generated Python encoder would (the
 * generated classes, ints, floats, str, bytes-like, lists and tuples); on anything else it raises
 * and the codec re-runs the Python encoder, which either writes the value or says what is wrong.
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
enum { F_COMPACT = 1, F_NULLABLE = 2, F_VIEW = 4, F_TAGGED = 8, F_LAZY = 16, F_PEND = 32 };
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

typedef struct {
    int64_t tag;
    Op op;
    Dflt dflt;              /* the field's default: a tagged field is written only when not at it */
} Tag;

struct Prog {
    PyTypeObject *type;     /* borrowed from the spec */
    Py_ssize_t unknown_offset;
    int flexible;
    Py_ssize_t ndflt, nops, ntags, nguards;
    int has_const;          /* some default is a constant the decoder sets */
    int reuse;              /* a freed object of type can be decoded into again (every slot is an op's,
                             * a default's or the unknown fields') */
    int has_view;           /* a view of the buffer can be in this struct or one nested in it */
    Op **view_ops;          /* the ops (regular or tagged) whose values can be or hold views */
    Py_ssize_t nview_ops;
    Dflt *dflt;
    Op *ops;
    Tag *tags;
    Dflt *guards;           /* fields absent at this version: encoding needs them at their default */
};

typedef struct ProgramObject ProgramObject;

struct ProgramObject {
    PyObject_HEAD
    PyObject *spec;         /* keeps every borrowed class and constant alive */
    Prog *root;
    PyObject *kept;         /* the last message decoded, freed by its user: decoded into next time */
    ProgramObject *prev, *next;   /* every program (clear_pools frees what they keep) */
    Py_ssize_t last_size;   /* size of the last encoding: the next one's first buffer */
    Py_ssize_t parts_size;  /* encode_parts' buffer size last time (its largest part) */
    void **blocks;          /* everything allocated for the program, freed together */
    Py_ssize_t nblocks, cap;
};

/* The last message decoded whole of each program, by address (see keep_message). */
#define NOTED 64
typedef struct { PyObject *obj; ProgramObject *prog; } Noted;
static Noted noted[NOTED];
static ProgramObject *programs;   /* every program, linked */

static inline Noted *noted_entry(PyObject *o) {
    return &noted[(((uintptr_t)o >> 4) * 0x9E3779B97F4A7C15ULL) >> 58];   /* 6 bits: NOTED */
}

typedef struct Holder Holder;

typedef struct {
    const uint8_t *p;
    Py_ssize_t len;
    Py_ssize_t pos;
    PyObject *src;          /* the caller's buffer object */
    PyObject *view;         /* memoryview over src, made on first zero-copy field */
    ProgramObject *prog;    /* the program whose ops are walked (borrowed) */
    int lazy;               /* arrays of structs left pending (a read-only buffer) */
    Holder *holder;         /* what pending arrays keep (made on the first one) */
    int view_kind;          /* how view is sliced (VIEW_*), learnt on the first slice; 0 before */
} Reader;

static PyObject *uuid_new;       /* the Uuid class (a subclass of bytes) */
static PyTypeObject *uuid_type;  /* the same, when its instances are plain bytes objects */

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

static int compile_dflt(ProgramObject *self, PyObject *spec, Dflt *d) {
    /* (offset, kind, value): value is a constant, unused, or a default-struct spec */
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "niO", &d->offset, &d->kind, &d->value)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad default spec");
        return -1;
    }
    if (d->kind == D_STRUCT) {
        d->sub = compile_default(self, d->value);
        if (!d->sub) return -1;
    }
    return 0;
}

static int compile_dflt_list(ProgramObject *self, PyObject *seq, Dflt **out, Py_ssize_t *n) {
    if (!PyTuple_Check(seq)) { PyErr_SetString(PyExc_TypeError, "defaults must be a tuple"); return -1; }
    *n = PyTuple_GET_SIZE(seq);
    *out = arena(self, sizeof(Dflt) * *n);
    if (!*out) return -1;
    for (Py_ssize_t i = 0; i < *n; i++)
        if (compile_dflt(self, PyTuple_GET_ITEM(seq, i), &(*out)[i]) < 0) return -1;
    return 0;
}

static int compile_defaults(ProgramObject *self, PyObject *seq, Prog *pg) {
    if (compile_dflt_list(self, seq, &pg->dflt, &pg->ndflt) < 0) return -1;
    for (Py_ssize_t i = 0; i < pg->ndflt; i++)
        if (pg->dflt[i].kind == D_CONST) pg->has_const = 1;
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
    /* (cls, unknown_offset, flexible, defaults, ops, ((tag, op, default), ...), guards) */
    PyObject *cls, *defaults, *ops, *tags, *guards;
    Prog *pg = arena(self, sizeof(Prog));
    if (!pg) return NULL;
    if (!PyArg_ParseTuple(spec, "OnpOOOO", &cls, &pg->unknown_offset, &pg->flexible, &defaults, &ops, &tags,
                          &guards))
        return NULL;
    if (set_type(pg, cls) < 0 || compile_defaults(self, defaults, pg) < 0) return NULL;
    if (compile_dflt_list(self, guards, &pg->guards, &pg->nguards) < 0) return NULL;
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
    pg->tags = arena(self, sizeof(Tag) * pg->ntags);
    if (!pg->tags) return NULL;
    for (Py_ssize_t i = 0; i < pg->ntags; i++) {
        PyObject *op, *dflt;
        long long tag;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(tags, i), "LOO", &tag, &op, &dflt)) return NULL;
        pg->tags[i].tag = tag;
        if (compile_op(self, op, &pg->tags[i].op) < 0 || compile_dflt(self, dflt, &pg->tags[i].dflt) < 0)
            return NULL;
    }
    return pg;
}

/* -- recycled lists, ints and byte views -----------------------------------------------------
 *
 * A message's objects are freed together, and the next decode makes as many again. When a freed
 * message object holds the last reference to a list, an int or a byte view (in a slot, or as an
 * item of such a list), nobody else can reach it: instead of freeing it and allocating another on
 * the next decode, it is kept here for the decoder, as CPython keeps freed tuples and floats (its
 * own list free list keeps 80; a 2,000-partition MetadataResponse frees 6,000 lists). What is kept
 * is untracked by the garbage collector and holds no references. Ints and views are laid out as
 * CPython 3.10 and 3.11 lay them out; other versions only recycle lists. */

#define POOL_KEEP 4096
#define POOL_LIST_MAX_CAP 16
static PyObject *list_pool[POOL_LIST_MAX_CAP + 1][POOL_KEEP];
static int list_pool_n[POOL_LIST_MAX_CAP + 1];
static int release_depth;   /* nesting of recycling: deeper than this, CPython frees (its trashcan) */

#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030C0000
#define POOL_INTS_AND_VIEWS 1

/* Linking an object into the garbage collector's youngest generation, and out of whichever list
 * it is in, as CPython 3.10 and 3.11 do inside (pycore_object.h), without a call and a look-up
 * of the interpreter per object: a decode tracks and untracks each object it makes and frees. The
 * GC header is two words before the object; the low two bits of prev are flags. gen0 is learnt
 * from an object PyObject_GC_Track has just appended (its next is the list head), per
 * interpreter. */
typedef struct { uintptr_t next, prev; } GCLink;
#define GC_LINK(o) ((GCLink *)(o) - 1)
static GCLink *gen0;
static PyInterpreterState *gen0_interp;

static inline void gc_track(PyObject *o) {
    if (!gen0) {
        PyObject_GC_Track(o);
        gen0 = (GCLink *)GC_LINK(o)->next;
        return;
    }
    GCLink *g = GC_LINK(o), *last = (GCLink *)gen0->prev;
    last->next = (uintptr_t)g;
    g->prev = (g->prev & 3) | (uintptr_t)last;
    g->next = (uintptr_t)gen0;
    gen0->prev = (uintptr_t)g;
}

static inline void gc_untrack(PyObject *o) {
    GCLink *g = GC_LINK(o);
    if (!g->next) return;   /* not tracked */
    GCLink *prev = (GCLink *)(g->prev & ~(uintptr_t)3), *next = (GCLink *)g->next;
    prev->next = g->next;
    next->prev = (next->prev & 3) | (uintptr_t)prev;
    g->next = 0;
    g->prev &= 1;   /* the FINALIZED flag stays */
}

/* At the start of each decode: gen0 is the current interpreter's (learnt again on the first track). */
static inline void gc_enter(void) {
    PyInterpreterState *i = PyInterpreterState_Get();
    if (i != gen0_interp) { gen0_interp = i; gen0 = NULL; }
}
#else
#define gc_track PyObject_GC_Track
#define gc_untrack PyObject_GC_UnTrack
#define gc_enter() ((void)0)
#endif

#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030C0000
#define INT_MAX_DIGITS 3    /* 30-bit digits: every int64 */
static PyObject *int_pool[INT_MAX_DIGITS + 1][POOL_KEEP];
static int int_pool_n[INT_MAX_DIGITS + 1];
static PyObject *view_pool[POOL_KEEP];
static int view_pool_n;
#endif

static inline void release(PyObject *v);

static int recycle_list(PyObject *v) {
    PyListObject *l = (PyListObject *)v;
    Py_ssize_t cap = l->allocated;
    if (cap < 0 || cap > POOL_LIST_MAX_CAP || list_pool_n[cap] >= POOL_KEEP) return 0;
    gc_untrack(v);
    Py_ssize_t n = Py_SIZE(l);
    PyObject **items = l->ob_item;
    Py_SET_SIZE(l, 0);
    for (Py_ssize_t i = n; --i >= 0;) {   /* the items in list_dealloc's order */
        PyObject *x = items[i];
        items[i] = NULL;
        if (x) release(x);
    }
    if (list_pool_n[cap] >= POOL_KEEP) {   /* filled while the items were freed */
        Py_DECREF(v);
        return 1;
    }
    if (cap > n) memset(items + n, 0, (size_t)(cap - n) * sizeof(PyObject *));   /* new_list's promise */
    list_pool[cap][list_pool_n[cap]++] = v;
    return 1;
}

/* A list of n items, all NULL, to be filled before anyone else sees it. */
static PyObject *new_list(Py_ssize_t n) {
    if (n <= POOL_LIST_MAX_CAP && list_pool_n[n] > 0) {
        PyObject *l = list_pool[n][--list_pool_n[n]];
        Py_SET_SIZE(l, n);
        gc_track(l);
        return l;
    }
    return PyList_New(n);
}

#ifdef POOL_INTS_AND_VIEWS
static int recycle_int(PyObject *v) {
    Py_ssize_t k = Py_SIZE(v) < 0 ? -Py_SIZE(v) : Py_SIZE(v);
    if (k < 1 || k > INT_MAX_DIGITS || int_pool_n[k] >= POOL_KEEP) return 0;
    int_pool[k][int_pool_n[k]++] = v;
    return 1;
}

/* A view the decoder made gives its export of the buffer back and stays a released view of
 * nothing (its mbuf NULL), to be made a view again: when it has one dimension (room for its
 * shape, strides and suboffsets), was never exported, and another view keeps the buffer (the last
 * one is freed by CPython, which releases the exporter's buffer). */
static int detach_view(PyObject *v) {
    PyMemoryViewObject *mv = (PyMemoryViewObject *)v;
    if (Py_SIZE(v) != 3 || mv->view.ndim != 1 || mv->exports != 0 || mv->weakreflist != NULL ||
        (mv->flags & _Py_MEMORYVIEW_RELEASED) || !mv->mbuf || mv->mbuf->exports < 2)
        return 0;
    mv->mbuf->exports--;
    Py_CLEAR(mv->mbuf);
    mv->flags |= _Py_MEMORYVIEW_RELEASED;   /* anything reading it finds it released */
    return 1;
}

/* A detached view (a kept message's, see drop_views), or one that can be. */
static inline int detached_view(PyObject *v) {
    PyMemoryViewObject *mv = (PyMemoryViewObject *)v;
    return !mv->mbuf && Py_SIZE(v) == 3 && mv->exports == 0 && mv->weakreflist == NULL;
}

static int recycle_view(PyObject *v) {
    if (view_pool_n >= POOL_KEEP || !(detached_view(v) || detach_view(v))) return 0;
    gc_untrack(v);
    view_pool[view_pool_n++] = v;
    return 1;
}
#endif

static void release_last(PyObject *v);
static void message_dealloc(PyObject *self);
static void free_message(PyObject *self, PyTypeObject *tp, PyTypeObject *t);
static int dealloc_depth;   /* message objects being freed inside one another */

/* Drop a reference: the last one to a list, an int or a view keeps the object for the decoder. */
static inline void release(PyObject *v) {
    if (Py_REFCNT(v) != 1) Py_DECREF(v);   /* not the last reference: nothing is freed */
    else release_last(v);
}

/* The last reference to a message object of a generated class (a subclass's dealloc is CPython's),
 * or to a list: freed and kept as message_dealloc and recycle_list keep them, without the calls
 * through Py_DECREF and _Py_Dealloc. Out of line, so that release_last stays a leaf for the
 * views and ints most values are. */
static __attribute__((noinline)) void release_message(PyObject *v, PyTypeObject *t) {
    Py_SET_REFCNT(v, 0);
    gc_untrack(v);
    dealloc_depth++;
    free_message(v, t, t);
    dealloc_depth--;
}

static __attribute__((noinline)) void release_list(PyObject *v) {
    release_depth++;
    int done = recycle_list(v);
    release_depth--;
    if (!done) Py_DECREF(v);
}

static void release_last(PyObject *v) {
    PyTypeObject *t = Py_TYPE(v);
#ifdef POOL_INTS_AND_VIEWS
    if (t == &PyMemoryView_Type) {
        if (!recycle_view(v)) Py_DECREF(v);
        return;
    }
    if (t == &PyLong_Type) {
        if (!recycle_int(v)) Py_DECREF(v);
        return;
    }
#endif
    if (t->tp_dealloc == message_dealloc && dealloc_depth < 40) release_message(v, t);
    else if (t == &PyList_Type && release_depth < 32) release_list(v);   /* its items released in turn */
    else Py_DECREF(v);
}

/* CPython's small ints (-5 to 256), looked up without a call. */
#define SMALL_INT_MIN (-5)
#define SMALL_INT_MAX 256
static PyObject *small_ints[SMALL_INT_MAX - SMALL_INT_MIN + 1];

/* An int, small ones CPython's, others recycled where possible. */
static inline PyObject *new_int(int64_t x) {
    if (x >= SMALL_INT_MIN && x <= SMALL_INT_MAX) return Py_NewRef(small_ints[x - SMALL_INT_MIN]);
#ifdef POOL_INTS_AND_VIEWS
    uint64_t a = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    int k = a < ((uint64_t)1 << PyLong_SHIFT) ? 1 : a < ((uint64_t)1 << (2 * PyLong_SHIFT)) ? 2 : 3;
    if (int_pool_n[k] > 0) {
        PyLongObject *o = (PyLongObject *)int_pool[k][--int_pool_n[k]];
        for (int i = 0; i < k; i++) { o->ob_digit[i] = (digit)(a & PyLong_MASK); a >>= PyLong_SHIFT; }
        Py_SET_SIZE(o, x < 0 ? -k : k);
        return (PyObject *)o;
    }
#endif
    return PyLong_FromLongLong((long long)x);
}

/* Short strings and UUIDs recur (topic names, hosts, racks, client ids, topic ids, in message
 * after message): the last ones made are kept by a hash of their bytes and shared (str and Uuid
 * are immutable), which costs a hash and a compare where decoding costs an allocation and a copy.
 * Each hash picks a set of four entries, each with more bits of the hash as a tag, so a message's
 * few hundred names rarely outnumber a set's entries (which then evict one another on every
 * decode) and a miss seldom reads a cached object. */
#define CACHE_WAYS 4
#define STR_CACHE_SETS 512
#define STR_CACHE_MAX_LEN 64
#define UUID_CACHE_SETS 256
typedef struct {
    uint32_t tag[CACHE_WAYS];
    PyObject *obj[CACHE_WAYS];   /* newest first */
} CacheSet;
static CacheSet str_cache[STR_CACHE_SETS];     /* ASCII strings only */
static CacheSet uuid_cache[UUID_CACHE_SETS];

/* v as the newest entry of its set (the oldest goes). */
static inline void cache_put(CacheSet *set, uint32_t tag, PyObject *v) {
    Py_XDECREF(set->obj[CACHE_WAYS - 1]);
    memmove(set->obj + 1, set->obj, (CACHE_WAYS - 1) * sizeof(PyObject *));
    memmove(set->tag + 1, set->tag, (CACHE_WAYS - 1) * sizeof(uint32_t));
    set->obj[0] = Py_NewRef(v);
    set->tag[0] = tag;
}

static void cache_clear(CacheSet *sets, int n) {
    for (int i = 0; i < n; i++)
        for (int w = 0; w < CACHE_WAYS; w++) Py_CLEAR(sets[i].obj[w]);
}

static inline uint64_t bytes_hash(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, (size_t)n);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    /* a full final mix (MurmurHash3's): without it names a byte apart ("topic-0" .. "topic-9")
     * fell into a few sets */
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static PyObject *new_str(const uint8_t *p, Py_ssize_t n) {
    if (n == 0 || n > STR_CACHE_MAX_LEN) return PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    uint64_t h = bytes_hash(p, n);
    CacheSet *set = &str_cache[h & (STR_CACHE_SETS - 1)];
    uint32_t tag = (uint32_t)(h >> 32);
    for (int w = 0; w < CACHE_WAYS; w++) {
        PyObject *c = set->obj[w];
        if (set->tag[w] == tag && c && PyUnicode_GET_LENGTH(c) == n &&
            memcmp(PyUnicode_1BYTE_DATA(c), p, (size_t)n) == 0)
            return Py_NewRef(c);
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s && PyUnicode_IS_ASCII(s)) cache_put(set, tag, s);   /* its bytes are its UTF-8 */
    return s;
}

static PyObject *make_uuid(const uint8_t *p) {
#if PY_VERSION_HEX < 0x030C0000
    if (uuid_type) {   /* bytes.__new__(Uuid, b), without the argument parsing */
        PyObject *u = uuid_type->tp_alloc(uuid_type, 16);
        if (!u) return NULL;
        memcpy(PyBytes_AS_STRING(u), p, 16);
        PyBytes_AS_STRING(u)[16] = '\0';
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        ((PyBytesObject *)u)->ob_shash = -1;   /* hash not computed yet (tp_alloc zeroed it) */
#pragma GCC diagnostic pop
        return u;
    }
#endif
    PyObject *b = PyBytes_FromStringAndSize((const char *)p, 16);
    if (!b) return NULL;
    PyObject *args = PyTuple_Pack(1, b);
    Py_DECREF(b);
    if (!args) return NULL;
    PyObject *u = PyBytes_Type.tp_new((PyTypeObject *)uuid_new, args, NULL);   /* bytes.__new__(Uuid, b) */
    Py_DECREF(args);
    return u;
}

static PyObject *new_uuid(const uint8_t *p) {
    uint64_t h = bytes_hash(p, 16);
    CacheSet *set = &uuid_cache[h & (UUID_CACHE_SETS - 1)];
    uint32_t tag = (uint32_t)(h >> 32);
    for (int w = 0; w < CACHE_WAYS; w++)
        if (set->tag[w] == tag && set->obj[w] && memcmp(PyBytes_AS_STRING(set->obj[w]), p, 16) == 0)
            return Py_NewRef(set->obj[w]);
    PyObject *u = make_uuid(p);
    if (u) cache_put(set, tag, u);
    return u;
}

/* -- reading ---------------------------------------------------------------------------------- */

static PyObject *fail(const char *why) {
    PyErr_SetString(PyExc_ValueError, why);
    return NULL;
}

#define NEED(r, n) ((r)->len - (r)->pos >= (Py_ssize_t)(n))
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* *slot = v (a new reference), the old value released. */
static inline void put_slot(PyObject **slot, PyObject *v) {
    PyObject *old = *slot;
    *slot = v;
    if (old) release(old);
}

static inline void put_none(PyObject **slot) {
    if (*slot != Py_None) put_slot(slot, Py_NewRef(Py_None));
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* An unsigned varint of at most 5 bytes, as kproto.codecs.primitives.read_uvarint reads it. */
static inline int read_uvarint(Reader *r, int64_t *out) {
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
static inline int read_len(Reader *r, int flags, int is_string, int64_t *out) {
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

/* How a message's views of its buffer are made: by slicing (not a flat byte view), as a new view
 * narrowed in place, or that in a recycled view object. A reader learns it once: the buffer is
 * exported to the reader for the whole decode, so it can be neither released nor changed. */
enum { VIEW_SLICE = 1, VIEW_NARROW, VIEW_RECYCLE };

static int view_kind(PyObject *mv) {
    Py_buffer *b = PyMemoryView_GET_BUFFER(mv);
    if (b->ndim != 1 || b->itemsize != 1 || (b->strides && b->strides[0] != 1) || !b->shape)
        return VIEW_SLICE;
#ifdef POOL_INTS_AND_VIEWS
    if (b->strides && !b->suboffsets && !(((PyMemoryViewObject *)mv)->flags & _Py_MEMORYVIEW_RELEASED))
        return VIEW_RECYCLE;
#endif
    return VIEW_NARROW;
}

/* mv[at:at + n] for a view of the kind given: a new view of the same exporter, narrowed in place,
 * which is what slicing does minus the slice object (a third of the cost of a ProduceRequest). */
#ifdef POOL_INTS_AND_VIEWS
/* A detached view v made base[at:at + n]: what PyMemoryView_FromObject(base) makes (mbuf_add_view),
 * narrowed. */
static inline void fill_view(PyObject *v, PyObject *base, Py_ssize_t at, Py_ssize_t n) {
    PyMemoryViewObject *mv = (PyMemoryViewObject *)v, *b = (PyMemoryViewObject *)base;
    mv->mbuf = (_PyManagedBufferObject *)Py_NewRef(b->mbuf);
    b->mbuf->exports++;
    mv->hash = -1;
    mv->flags = b->flags;
    mv->exports = 0;
    mv->view = b->view;
    mv->view.shape = mv->ob_array;
    mv->view.strides = mv->ob_array + 1;
    mv->view.suboffsets = NULL;
    mv->view.buf = (char *)b->view.buf + at;
    mv->view.len = n;
    mv->ob_array[0] = n;
    mv->ob_array[1] = 1;
}
#endif

static PyObject *view_slice(PyObject *mv, int kind, Py_ssize_t at, Py_ssize_t n) {
    if (kind == VIEW_SLICE) return PySequence_GetSlice(mv, at, at + n);
#ifdef POOL_INTS_AND_VIEWS
    if (kind == VIEW_RECYCLE && view_pool_n > 0) {
        PyObject *v = view_pool[--view_pool_n];
        fill_view(v, mv, at, n);
        gc_track(v);
        return v;
    }
#endif
    PyObject *sub = PyMemoryView_FromObject(mv);
    if (!sub) return NULL;
    Py_buffer *v = PyMemoryView_GET_BUFFER(sub);
    v->buf = (char *)v->buf + at;
    v->len = n;
    v->shape[0] = n;
    return sub;
}

static PyObject *decode_struct(Reader *r, Prog *pg, PyObject *o);

static inline void put_slot(PyObject **slot, PyObject *v);
static inline void put_none(PyObject **slot);

/* A bytes field read as a slice of the caller's buffer (Kafka's zeroCopy: records) into *slot:
 * a detached view there (a kept message's) is made that slice. */
static inline int read_view_into(Reader *r, Op *op, PyObject **slot) {
    int64_t n;
    if (read_len(r, op->flags, 0, &n) < 0) return -1;
    if (n < 0) {
        if (op->flags & F_NULLABLE) { put_none(slot); return 0; }
        fail("null in a non-nullable field");
        return -1;
    }
    if (n > r->len - r->pos) { fail("length beyond the data"); return -1; }
    Py_ssize_t at = r->pos;
    r->pos += (Py_ssize_t)n;
    if (!r->view) {
        r->view = PyMemoryView_Check(r->src) ? Py_NewRef(r->src) : PyMemoryView_FromObject(r->src);
        if (!r->view) return -1;
    }
    if (!r->view_kind) r->view_kind = view_kind(r->view);
#ifdef POOL_INTS_AND_VIEWS
    PyObject *old = *slot;
    if (old && r->view_kind == VIEW_RECYCLE && Py_TYPE(old) == &PyMemoryView_Type && Py_REFCNT(old) == 1 &&
        detached_view(old)) {
        fill_view(old, r->view, at, (Py_ssize_t)n);
        return 0;
    }
#endif
    PyObject *v = view_slice(r->view, r->view_kind, at, (Py_ssize_t)n);
    if (!v) return -1;
    put_slot(slot, v);
    return 0;
}

static inline PyObject *read_view(Reader *r, Op *op) {
    PyObject *v = NULL;
    if (read_view_into(r, op, &v) < 0) { Py_XDECREF(v); return NULL; }
    return v;
}

static inline int64_t fixed_width(int code) {
    switch (code) {
    case OP_INT16: case OP_UINT16: return 2;
    case OP_INT32: case OP_UINT32: return 4;
    case OP_INT64: case OP_FLOAT64: return 8;
    case OP_UUID: return 16;
    default: return 1;
    }
}

/* The slots of the fields absent at this version or tagged at their defaults: a constant, or
 * empty for a LazyDefault (made on first read). A new object's slots are empty already. */
static int fill_defaults(PyObject *o, Prog *pg, int fresh) {
    if (fresh && !pg->has_const) return 0;
    for (Py_ssize_t i = 0; i < pg->ndflt; i++) {
        Dflt *d = &pg->dflt[i];
        PyObject **slot = &SLOT(o, d->offset);
        if (d->kind == D_CONST) {
            if (*slot != d->value) put_slot(slot, Py_NewRef(d->value));
        } else if (*slot) {
            PyObject *old = *slot;
            *slot = NULL;
            release(old);
        }
    }
    return 0;
}

/* -- arrays of structs built on first read ---------------------------------------------------
 *
 * Where the buffer is read-only, a non-empty array of structs in a field with a LazyDefault is
 * walked and checked exactly as decoding it would check it (every length, count, varint, tag,
 * null, string length, UTF-8 and bound) but its elements are not made: the slot holds a Pending
 * (where the elements start and end, how many, the array's op) and the field's LazyDefault builds
 * the list on first read and keeps it in the slot; the encoder builds it too. Elements are built
 * with the same decode_struct, and the arrays nested in them with them: reading everything then
 * walks the bytes twice (the check, the build), not once more per level of nesting (a pending
 * array inside a built one would be walked again to find where it ends). Building cannot fail
 * on bytes already checked: a malformed message fails to decode, and reading a field of one that
 * decoded never does. A Pending keeps the buffer (a Holder: one export of it per message, and the
 * program), as records views do; a writable buffer is decoded whole, its bytes may change before
 * they are read. */

struct Holder {
    PyObject_HEAD
    Py_buffer buf;          /* an export of the source: it stays alive, and is not resized */
    PyObject *program;      /* the ProgramObject whose ops the Pendings point into */
    PyObject *view;         /* memoryview over the source for records views, made once */
};

typedef struct {
    PyObject_HEAD
    Holder *holder;
    Op *op;                 /* the array's op: its elements are op->elem->sub */
    Py_ssize_t pos, end;    /* the elements' bytes */
    Py_ssize_t count;
} PendingObject;

static PyTypeObject HolderType, PendingType;

#define PENDING_KEEP 1024
static PendingObject *pending_pool[PENDING_KEEP];
static int pending_pool_n;

static void Holder_dealloc(Holder *h) {
    Py_CLEAR(h->view);
    if (h->buf.obj) PyBuffer_Release(&h->buf);
    Py_CLEAR(h->program);
    PyObject_Free(h);
}

static void Pending_dealloc(PendingObject *pd) {
    Holder *h = pd->holder;
    pd->holder = NULL;
    if (pending_pool_n < PENDING_KEEP) pending_pool[pending_pool_n++] = pd;   /* for the next decode */
    else PyObject_Free(pd);
    Py_XDECREF(h);
}

static PyTypeObject HolderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproto.codecs._decoder.Holder",
    .tp_basicsize = sizeof(Holder),
    .tp_dealloc = (destructor)Holder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("The buffer and program that pending arrays of one message read from."),
};

static PyTypeObject PendingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproto.codecs._decoder.Pending",
    .tp_basicsize = sizeof(PendingObject),
    .tp_dealloc = (destructor)Pending_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("An array of structs checked but not built yet (its field builds it on first read)."),
};

/* The reader's Holder, made on its first Pending; NULL without an error when the source's export
 * is not the buffer being read (the array is then built now). */
static Holder *reader_holder(Reader *r) {
    if (r->holder) return r->holder;
    Holder *h = PyObject_New(Holder, &HolderType);
    if (!h) return NULL;
    h->program = NULL;
    h->view = NULL;
    if (PyObject_GetBuffer(r->src, &h->buf, PyBUF_SIMPLE) < 0) {
        h->buf.obj = NULL;
        Py_DECREF(h);
        return NULL;
    }
    h->program = Py_NewRef((PyObject *)r->prog);
    if (h->buf.buf != (const void *)r->p || h->buf.len != r->len) {
        Py_DECREF(h);
        r->lazy = 0;
        return NULL;
    }
    r->holder = h;
    return h;
}

/* The end of a read: the holder keeps the reader's view for the records views of later builds. */
static void reader_done(Reader *r) {
    if (r->holder && r->view && !r->holder->view) {
        r->holder->view = r->view;
        r->view = NULL;
    }
    Py_CLEAR(r->view);
    Py_CLEAR(r->holder);
}

/* Whether n bytes are UTF-8 as Python's strict decoder takes them (Unicode's well-formed
 * sequences: no overlong forms, no surrogates, nothing past U+10FFFF). */
static int utf8_ok(const uint8_t *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ULL)) { i += 8; continue; }
        }
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        int k;
        uint8_t lo = 0x80, hi = 0xBF;   /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < k || p[i + 1] < lo || p[i + 1] > hi) return 0;
        for (int j = 2; j <= k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        i += k + 1;
    }
    return 1;
}

static int skip_struct(Reader *r, Prog *pg);

/* Check one value as decode_value reads it, making nothing; -1 (ValueError) where it would fail. */
static int skip_value(Reader *r, Op *op) {
    int64_t n;
    switch (op->code) {
    case OP_STRING:
    case OP_BYTES: {
        int str = op->code == OP_STRING && !(op->flags & F_VIEW);
        if (read_len(r, op->flags, str, &n) < 0) return -1;
        if (n < 0) {
            if (op->flags & F_NULLABLE) return 0;
            fail("null in a non-nullable field");
            return -1;
        }
        if (str && n > 32767) { fail("string too long"); return -1; }
        if (n > r->len - r->pos) { fail("length beyond the data"); return -1; }
        if (str && !utf8_ok(r->p + r->pos, (Py_ssize_t)n)) { fail("string not UTF-8"); return -1; }
        r->pos += (Py_ssize_t)n;
        return 0;
    }
    case OP_STRUCT:
        if (op->flags & F_NULLABLE) {
            if (!NEED(r, 1)) { fail("truncated"); return -1; }
            int8_t marker = (int8_t)r->p[r->pos++];
            if (marker < 0 || (marker == 0 && (op->flags & F_TAGGED))) return 0;
        }
        return skip_struct(r, op->sub);
    case OP_ARRAY: {
        if (read_len(r, op->flags, 0, &n) < 0) return -1;
        if (n < 0) {
            if (op->flags & F_NULLABLE) return 0;
            fail("null in a non-nullable array");
            return -1;
        }
        Op *elem = op->elem;
        int64_t w = fixed_width(elem->code);
        if (n * w > r->len - r->pos) { fail("count beyond the data"); return -1; }
        if (elem->code < OP_STRING) {   /* fixed-width elements: the count checked is the bytes */
            r->pos += (Py_ssize_t)(n * w);
            return 0;
        }
        if (elem->code == OP_STRUCT && !(elem->flags & F_NULLABLE)) {
            for (int64_t i = 0; i < n; i++)
                if (skip_struct(r, elem->sub) < 0) return -1;
        } else {
            for (int64_t i = 0; i < n; i++)
                if (skip_value(r, elem) < 0) return -1;
        }
        return 0;
    }
    default: {
        int64_t w = fixed_width(op->code);
        if (!NEED(r, w)) { fail("truncated"); return -1; }
        r->pos += (Py_ssize_t)w;
        return 0;
    }
    }
}

/* Tagged fields as decode_tags reads them. */
static int skip_tags(Reader *r, Prog *pg) {
    int64_t count;
    if (read_uvarint(r, &count) < 0) return -1;
    for (int64_t k = 0; k < count; k++) {
        int64_t tag, size;
        if (read_uvarint(r, &tag) < 0 || read_uvarint(r, &size) < 0) return -1;
        if (size > r->len - r->pos) { fail("tagged field beyond the data"); return -1; }
        Py_ssize_t end = r->pos + (Py_ssize_t)size;
        Py_ssize_t i;
        for (i = 0; i < pg->ntags; i++)
            if (pg->tags[i].tag == tag) break;
        if (i < pg->ntags) {
            if (skip_value(r, &pg->tags[i].op) < 0) return -1;
            if (r->pos != end) { fail("tagged field size mismatch"); return -1; }
        } else {
            r->pos = end;
        }
    }
    return 0;
}

/* A struct as decode_struct reads it. */
static int skip_struct(Reader *r, Prog *pg) {
    for (Py_ssize_t i = 0; i < pg->nops; i++) {
        Op *op = &pg->ops[i];
        if (op->code < OP_STRING) {   /* fixed width: here, not a call each */
            int64_t w = fixed_width(op->code);
            if (!NEED(r, w)) { fail("truncated"); return -1; }
            r->pos += (Py_ssize_t)w;
        } else if (skip_value(r, op) < 0) {
            return -1;
        }
    }
    if (!pg->flexible) return 0;
    if (r->pos < r->len && r->p[r->pos] == 0) {   /* no tagged fields */
        r->pos++;
        return 0;
    }
    return skip_tags(r, pg);
}

/* The n elements starting at r->pos, checked, as a Pending (the reader has its Holder). */
static PyObject *pend_array(Reader *r, Op *op, int64_t n) {
    Py_ssize_t start = r->pos;
    for (int64_t i = 0; i < n; i++)
        if (skip_struct(r, op->elem->sub) < 0) return NULL;
    PendingObject *pd;
    if (pending_pool_n > 0) {
        pd = pending_pool[--pending_pool_n];
        PyObject_Init((PyObject *)pd, &PendingType);
    } else {
        pd = PyObject_New(PendingObject, &PendingType);
        if (!pd) return NULL;
    }
    pd->holder = (Holder *)Py_NewRef(r->holder);
    pd->op = op;
    pd->pos = start;
    pd->end = r->pos;
    pd->count = (Py_ssize_t)n;
    return (PyObject *)pd;
}

/* -- values written into slots ----------------------------------------------------------------
 *
 * A slot is written with what it held before in mind: NULL in a new object, the previous value
 * in an object of a freed message decoded into again (see "decoding into a freed message").
 * An equal int, str or Uuid is kept; an int only the slot holds is overwritten in place; a list or
 * message object only the slot holds is filled again; anything else is released. */

static inline int put_int(PyObject **slot, int64_t x) {
    PyObject *old = *slot;
    if (x >= SMALL_INT_MIN && x <= SMALL_INT_MAX) {
        PyObject *s = small_ints[x - SMALL_INT_MIN];
        if (old != s) put_slot(slot, Py_NewRef(s));
        return 0;
    }
#ifdef POOL_INTS_AND_VIEWS
    if (old && Py_TYPE(old) == &PyLong_Type) {
        uint64_t a = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
        int k = a < ((uint64_t)1 << PyLong_SHIFT) ? 1 : a < ((uint64_t)1 << (2 * PyLong_SHIFT)) ? 2 : 3;
        if (Py_SIZE(old) == (x < 0 ? -k : k)) {
            digit d[INT_MAX_DIGITS];
            for (int i = 0; i < k; i++) { d[i] = (digit)(a & PyLong_MASK); a >>= PyLong_SHIFT; }
            digit *od = ((PyLongObject *)old)->ob_digit;
            if (Py_REFCNT(old) == 1) {   /* nobody else sees it change */
                memcpy(od, d, (size_t)k * sizeof(digit));
                return 0;
            }
            if (memcmp(od, d, (size_t)k * sizeof(digit)) == 0) return 0;
        }
    }
#endif
    PyObject *v = new_int(x);
    if (!v) return -1;
    put_slot(slot, v);
    return 0;
}

static inline int put_str(PyObject **slot, const uint8_t *p, Py_ssize_t n) {
    PyObject *old = *slot;
    if (old && PyUnicode_CheckExact(old) && PyUnicode_IS_COMPACT_ASCII(old) && PyUnicode_GET_LENGTH(old) == n &&
        memcmp(PyUnicode_1BYTE_DATA(old), p, (size_t)n) == 0)
        return 0;
    PyObject *v = new_str(p, n);
    if (!v) return -1;
    put_slot(slot, v);
    return 0;
}

static inline int put_uuid(PyObject **slot, const uint8_t *p) {
    PyObject *old = *slot;
    if (old && (PyObject *)Py_TYPE(old) == uuid_new && PyBytes_GET_SIZE(old) == 16 &&
        memcmp(PyBytes_AS_STRING(old), p, 16) == 0)
        return 0;
    PyObject *v = new_uuid(p);
    if (!v) return -1;
    put_slot(slot, v);
    return 0;
}

/* old (owned), when a message object of pg's class that nobody else holds: decoded into again;
 * else released. */
static inline PyObject *reusable(PyObject *old, Prog *pg) {
    if (!old) return NULL;
    if (pg->reuse && Py_TYPE(old) == pg->type && Py_REFCNT(old) == 1) return old;
    release(old);
    return NULL;
}

/* A list of n items taking the place of old (owned): old itself, when a list nobody else holds,
 * with its first n items kept (the rest released) and the new ones NULL; else a new list. */
static PyObject *reuse_list(PyObject *old, Py_ssize_t n) {
    if (!old || Py_TYPE(old) != &PyList_Type || Py_REFCNT(old) != 1) {
        if (old) release(old);
        return new_list(n);
    }
    PyListObject *l = (PyListObject *)old;
    Py_ssize_t size = Py_SIZE(l);
    if (l->allocated < n) {   /* as list_resize grows it */
        PyObject **items = PyMem_Realloc(l->ob_item, (size_t)n * sizeof(PyObject *));
        if (!items) { Py_DECREF(old); return PyErr_NoMemory(); }
        l->ob_item = items;
        l->allocated = n;
    }
    for (Py_ssize_t i = size; i < n; i++) l->ob_item[i] = NULL;
    Py_SET_SIZE(l, n < size ? n : size);
    for (Py_ssize_t i = size; --i >= n;) {   /* a list never shows its items past its size */
        PyObject *x = l->ob_item[i];
        l->ob_item[i] = NULL;
        if (x) release(x);
    }
    Py_SET_SIZE(l, n);
    return old;
}

static int read_into(Reader *r, Op *op, PyObject **slot);

/* An array (its count not read yet) in place of old (owned): None when null and nullable. */
static PyObject *read_array(Reader *r, Op *op, PyObject *old) {
    int64_t n;
    if (read_len(r, op->flags, 0, &n) < 0) goto fail;
    if (n < 0) {
        if (!(op->flags & F_NULLABLE)) { fail("null in a non-nullable array"); goto fail; }
        if (old) release(old);
        Py_RETURN_NONE;
    }
    Op *elem = op->elem;
    /* every element takes at least one byte (fixed-width ones their width): no list is sized
     * beyond the data left */
    if (n * fixed_width(elem->code) > r->len - r->pos) { fail("count beyond the data"); goto fail; }
    if ((op->flags & F_PEND) && r->lazy && n > 0) {   /* checked now, built on first read */
        if (reader_holder(r)) {
            if (old) release(old);
            return pend_array(r, op, n);
        }
        if (PyErr_Occurred()) goto fail;
    }
    PyObject *list = reuse_list(old, (Py_ssize_t)n);
    if (!list) return NULL;
    PyObject **items = ((PyListObject *)list)->ob_item;
    if (elem->code == OP_INT32) {   /* replicas, ISR and the like: no call each */
        const uint8_t *p = r->p + r->pos;
        for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++, p += 4)
            if (put_int(&items[i], (int32_t)be32(p)) < 0) { Py_DECREF(list); return NULL; }
        r->pos += (Py_ssize_t)n * 4;
        return list;
    }
    if (elem->code == OP_STRUCT && !(elem->flags & F_NULLABLE)) {
        for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
            PyObject *item = items[i];
            items[i] = NULL;
            if (!(items[i] = decode_struct(r, elem->sub, reusable(item, elem->sub)))) { Py_DECREF(list); return NULL; }
        }
        return list;
    }
    for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++)
        if (read_into(r, elem, &items[i]) < 0) { Py_DECREF(list); return NULL; }
    return list;
fail:
    if (old) release(old);
    return NULL;
}

static PyObject *decode_value(Reader *r, Op *op) {
    switch (op->code) {
    case OP_BOOL:
        if (!NEED(r, 1)) return fail("truncated");
        return PyBool_FromLong(r->p[r->pos++] != 0);
    case OP_FLOAT64: {
        if (!NEED(r, 8)) return fail("truncated");
        uint64_t bits = be64(r->p + r->pos);
        double d;
        memcpy(&d, &bits, 8);
        r->pos += 8;
        return PyFloat_FromDouble(d);
    }
    case OP_BYTES: {
        if (op->flags & F_VIEW) return read_view(r, op);
        int64_t n;
        if (read_len(r, op->flags, 0, &n) < 0) return NULL;
        if (n < 0) {
            if (op->flags & F_NULLABLE) Py_RETURN_NONE;
            return fail("null in a non-nullable field");
        }
        if (n > r->len - r->pos) return fail("length beyond the data");
        Py_ssize_t at = r->pos;
        r->pos += (Py_ssize_t)n;
        return PyBytes_FromStringAndSize((const char *)r->p + at, (Py_ssize_t)n);
    }
    }
    PyObject *v = NULL;   /* the rest as read_into writes them */
    if (read_into(r, op, &v) < 0) { Py_XDECREF(v); return NULL; }
    return v;
}

/* The value of op read into *slot (see put_slot): 0, or -1 with ValueError. */
static int read_into(Reader *r, Op *op, PyObject **slot) {
    const uint8_t *p = r->p + r->pos;
    switch (op->code) {
    case OP_INT8:
        if (!NEED(r, 1)) break;
        r->pos += 1;
        return put_int(slot, (int8_t)p[0]);
    case OP_INT16:
        if (!NEED(r, 2)) break;
        r->pos += 2;
        return put_int(slot, (int16_t)be16(p));
    case OP_UINT16:
        if (!NEED(r, 2)) break;
        r->pos += 2;
        return put_int(slot, be16(p));
    case OP_INT32:
        if (!NEED(r, 4)) break;
        r->pos += 4;
        return put_int(slot, (int32_t)be32(p));
    case OP_UINT32:
        if (!NEED(r, 4)) break;
        r->pos += 4;
        return put_int(slot, be32(p));
    case OP_INT64:
        if (!NEED(r, 8)) break;
        r->pos += 8;
        return put_int(slot, (int64_t)be64(p));
    case OP_UUID:
        if (!NEED(r, 16)) break;
        r->pos += 16;
        return put_uuid(slot, p);
    case OP_STRING: {
        if (op->flags & F_VIEW) break;
        int64_t n;
        if (read_len(r, op->flags, 1, &n) < 0) return -1;
        if (n < 0) {
            if (!(op->flags & F_NULLABLE)) { fail("null in a non-nullable field"); return -1; }
            put_none(slot);
            return 0;
        }
        if (n > 32767) { fail("string too long"); return -1; }
        if (n > r->len - r->pos) { fail("length beyond the data"); return -1; }
        r->pos += (Py_ssize_t)n;
        return put_str(slot, r->p + r->pos - n, (Py_ssize_t)n);
    }
    case OP_STRUCT: {
        if (op->flags & F_NULLABLE) {
            if (!NEED(r, 1)) break;
            /* Kafka writes a null tagged struct as the byte 0, a regular one as -1 */
            int8_t marker = (int8_t)r->p[r->pos++];
            if (marker < 0 || (marker == 0 && (op->flags & F_TAGGED))) { put_none(slot); return 0; }
        }
        PyObject *old = *slot;
        *slot = NULL;
        return (*slot = decode_struct(r, op->sub, reusable(old, op->sub))) ? 0 : -1;
    }
    case OP_ARRAY: {
        PyObject *old = *slot;
        *slot = NULL;
        return (*slot = read_array(r, op, old)) ? 0 : -1;
    }
    case OP_BYTES:
        if (op->flags & F_VIEW) return read_view_into(r, op, slot);
        /* fall through */
    default: {
        PyObject *v = decode_value(r, op);
        if (!v) return -1;
        put_slot(slot, v);
        return 0;
    }
    }
    if (op->code == OP_STRING) return read_view_into(r, op, slot);   /* a zeroCopy string: a view */
    fail("truncated");
    return -1;
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
            if (pg->tags[i].tag == tag) break;
        if (i < pg->ntags) {
            if (read_into(r, &pg->tags[i].op, &SLOT(o, pg->tags[i].op.offset)) < 0) goto error;
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
    if (unknown) put_slot(&SLOT(o, pg->unknown_offset), unknown);
    else put_none(&SLOT(o, pg->unknown_offset));
    return 0;
error:
    Py_XDECREF(unknown);
    return -1;
}

static PyObject *new_message(PyTypeObject *type);

/* A struct of pg, in o (owned: a reused object, see reusable) or in a new object when o is NULL. */
static PyObject *decode_struct(Reader *r, Prog *pg, PyObject *o) {
    int fresh = !o;
    if (fresh && !(o = new_message(pg->type))) return NULL;
    if (fill_defaults(o, pg, fresh) < 0) goto error;
    PyObject *prev64 = NULL;   /* the last int64 made here (borrowed: it is in a slot) */
    int64_t prev64_value = 0;
    for (Py_ssize_t i = 0; i < pg->nops; i++) {
        Op *op = &pg->ops[i];
        PyObject **slot = &SLOT(o, op->offset);
        const uint8_t *p = r->p + r->pos;
        /* the common fixed-width fields here, the rest in read_into (a call each) */
        switch (op->code) {
        case OP_INT16:
            if (!NEED(r, 2)) { fail("truncated"); goto error; }
            r->pos += 2;
            if (put_int(slot, (int16_t)be16(p)) < 0) goto error;
            break;
        case OP_INT32:
            if (!NEED(r, 4)) { fail("truncated"); goto error; }
            r->pos += 4;
            if (put_int(slot, (int32_t)be32(p)) < 0) goto error;
            break;
        case OP_INT64: {
            if (!NEED(r, 8)) { fail("truncated"); goto error; }
            r->pos += 8;
            int64_t x = (int64_t)be64(p);
            if (prev64 && x == prev64_value) {   /* a fetched partition's high watermark and LSO */
                if (*slot != prev64) put_slot(slot, Py_NewRef(prev64));
            } else {
                if (put_int(slot, x) < 0) goto error;
                prev64 = *slot;
                prev64_value = x;
            }
            break;
        }
        case OP_BYTES:
            if ((op->flags & F_VIEW) ? read_view_into(r, op, slot) < 0 : read_into(r, op, slot) < 0) {
                goto error;
            }
            break;
        case OP_ARRAY:
            /* an empty array with a LazyDefault is left to it: [] made on first read */
            if ((op->flags & F_LAZY) && ((op->flags & F_COMPACT) ? NEED(r, 1) && p[0] == 1
                                         : NEED(r, 4) && be32(p) == 0)) {
                r->pos += (op->flags & F_COMPACT) ? 1 : 4;
                if (*slot) { PyObject *old = *slot; *slot = NULL; release(old); }
                break;
            }
            /* fall through */
        default:
            if (read_into(r, op, slot) < 0) goto error;
        }
    }
    if (pg->flexible && !(r->pos < r->len && r->p[r->pos] == 0)) {
        if (decode_tags(r, pg, o) < 0) goto error;
    } else {   /* no tagged fields (or none on the wire, a count of 0) */
        r->pos += pg->flexible;
        put_none(&SLOT(o, pg->unknown_offset));
    }
    return o;
error:
    Py_DECREF(o);
    return NULL;
}

/* The list of a Pending's elements, built from the bytes it checked. */
static PyObject *build_pending(PendingObject *pd) {
    Holder *h = pd->holder;
    Reader r = {(const uint8_t *)h->buf.buf, h->buf.len, pd->pos, h->buf.obj, Py_XNewRef(h->view),
                (ProgramObject *)h->program, 0, (Holder *)Py_NewRef(h)};   /* nested arrays built now */
    gc_enter();
    int paused = pd->end - pd->pos > 4096 && PyGC_Disable();   /* as decode() */
    Prog *sub = pd->op->elem->sub;
    PyObject *list = new_list(pd->count);
    for (Py_ssize_t i = 0; list && i < pd->count; i++) {
        PyObject *v = decode_struct(&r, sub, NULL);
        if (!v) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, v);
    }
    if (paused) PyGC_Enable();
    if (list && r.pos != pd->end) {   /* the bytes were checked: never, unless they changed */
        Py_CLEAR(list);
        PyErr_SetString(PyExc_SystemError, "a pending array read differently from its check");
    }
    reader_done(&r);
    return list;
}

/* The pending array v in slot off of o, built and kept there (borrowed), or NULL on failure. */
static PyObject *build_slot(PyObject *o, Py_ssize_t off, PyObject *v) {
    PyObject *list = build_pending((PendingObject *)v);
    if (list) put_slot(&SLOT(o, off), list);   /* the Pending goes, and with the last one the buffer */
    return list;
}

/* The value in slot off of o (borrowed; NULL when empty), a pending array built and kept there
 * first; -1 on failure. Inline: the encoder reads every slot through it. */
static inline int slot_value(PyObject *o, Py_ssize_t off, PyObject **out) {
    PyObject *v = SLOT(o, off);
    if (__builtin_expect(v != NULL && Py_TYPE(v) == &PendingType, 0) && !(v = build_slot(o, off, v))) return -1;
    *out = v;
    return 0;
}

/* -- writing ---------------------------------------------------------------------------------- */

/* Values of at least this many bytes in bytes/records fields go to encode_parts' list as they are
 * (Kafka's zero-copy Send of records); smaller ones are cheaper copied than sent as a part. */
#define ZERO_COPY_MIN 1024

typedef struct {
    PyObject *buf;          /* the bytes object being filled (NULL until the first write) */
    char *p;                /* PyBytes_AS_STRING(buf) */
    Py_ssize_t len, cap;
    Py_ssize_t hint;        /* first allocation */
    PyObject *parts;        /* encode_parts' list, or NULL: everything into buf */
} Writer;

/* Fails an encoding: the codec then runs the Python encoder, which says what is wrong. */
static int efail(const char *why) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, why);
    return -1;
}

static int grow(Writer *w, Py_ssize_t n) {
    Py_ssize_t need = w->len + n;
    if (need <= w->cap) return 0;
    Py_ssize_t cap = w->cap ? w->cap * 2 : (w->hint > 64 ? w->hint : 64);
    if (cap < need) cap = need;
    if (!w->buf) {
        w->buf = PyBytes_FromStringAndSize(NULL, cap);
        if (!w->buf) return -1;
    } else if (_PyBytes_Resize(&w->buf, cap) < 0) {
        return -1;
    }
    w->p = PyBytes_AS_STRING(w->buf);
    w->cap = cap;
    return 0;
}

#define ENSURE(w, n) (((w)->len + (Py_ssize_t)(n) <= (w)->cap) ? 0 : grow((w), (n)))

static inline int put(Writer *w, const void *src, Py_ssize_t n) {
    if (ENSURE(w, n) < 0) return -1;
    memcpy(w->p + w->len, src, n);
    w->len += n;
    return 0;
}

static inline int put_u8(Writer *w, uint8_t b) {
    if (ENSURE(w, 1) < 0) return -1;
    w->p[w->len++] = (char)b;
    return 0;
}

static inline int put_be(Writer *w, uint64_t v, int n) {
    if (ENSURE(w, n) < 0) return -1;
    for (int i = n - 1; i >= 0; i--) { w->p[w->len + i] = (char)(v & 0xff); v >>= 8; }
    w->len += n;
    return 0;
}

static int put_uvarint(Writer *w, uint64_t v) {
    if (ENSURE(w, 10) < 0) return -1;
    while (v >= 0x80) { w->p[w->len++] = (char)((v & 0x7f) | 0x80); v >>= 7; }
    w->p[w->len++] = (char)v;
    return 0;
}

/* A length or count (-1: null), as read_len reads it. */
static int put_len(Writer *w, int flags, int is_string, Py_ssize_t n) {
    if (flags & F_COMPACT) return put_uvarint(w, (uint64_t)(n + 1));
    if (n > INT32_MAX) return efail("longer than an int32 length");   /* struct.error in Python */
    return is_string ? put_be(w, (uint16_t)(int16_t)n, 2) : put_be(w, (uint32_t)(int32_t)n, 4);
}

/* The bytes written so far become one part, the next ones go to a new buffer. */
static int flush_part(Writer *w, int last) {
    if (!w->buf || w->len == 0) return 0;
    if (!last) {   /* a copy of the bytes so far, the buffer kept for the next ones */
        PyObject *part = PyBytes_FromStringAndSize(w->p, w->len);
        if (!part) return -1;
        int rc = PyList_Append(w->parts, part);
        Py_DECREF(part);
        w->len = 0;
        return rc;
    }
    if (_PyBytes_Resize(&w->buf, w->len) < 0) { w->buf = NULL; return -1; }
    int rc = PyList_Append(w->parts, w->buf);
    Py_CLEAR(w->buf);
    w->p = NULL;
    w->len = w->cap = 0;
    return rc;
}

static PyObject *finish(Writer *w) {
    if (!w->buf) return PyBytes_FromStringAndSize(NULL, 0);
    if (_PyBytes_Resize(&w->buf, w->len) < 0) { w->buf = NULL; return NULL; }
    PyObject *out = w->buf;
    w->buf = NULL;
    return out;
}

/* An exact int of one digit, without a call: (1 and *out) or 0. */
static inline int small_int(PyObject *v, long long *out) {
    if (!PyLong_CheckExact(v)) return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)v)) return 0;
    *out = (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
    return 1;
#else
    Py_ssize_t size = Py_SIZE(v);
    if (size < -1 || size > 1) return 0;
    *out = (long long)size * (long long)((PyLongObject *)v)->ob_digit[0];
    return 1;
#endif
}

/* A long that fits [lo, hi], as struct.pack takes it (ints only: __index__ goes to Python). */
static int get_int(PyObject *v, long long lo, long long hi, long long *out) {
    if (small_int(v, out)) {
        if (*out < lo || *out > hi) return efail("int out of range");
        return 0;
    }
    if (!PyLong_Check(v)) return efail("not an int");
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow || x < lo || x > hi) return efail("int out of range");
    *out = x;
    return 0;
}

/* v != default, as the generated encoder's differs_from_default decides it. */
static int differs(PyObject *v, Dflt *d) {
    if (d->kind == D_CONST) {
        if (d->value == Py_None) return v != Py_None;
        if (v == d->value && !PyFloat_Check(v)) return 0;   /* NaN != NaN */
        PyObject *ne = PyObject_RichCompare(v, d->value, Py_NE);
        if (!ne) return -1;
        int r = PyObject_IsTrue(ne);
        Py_DECREF(ne);
        return r;
    }
    if (d->kind == D_LIST) {
        if (PyList_CheckExact(v)) return PyList_GET_SIZE(v) != 0;
        PyObject *empty = PyList_New(0);
        if (!empty) return -1;
        PyObject *ne = PyObject_RichCompare(v, empty, Py_NE);
        Py_DECREF(empty);
        if (!ne) return -1;
        int r = PyObject_IsTrue(ne);
        Py_DECREF(ne);
        return r;
    }
    Prog *pg = d->sub;
    if (Py_TYPE(v) != pg->type) return 1;
    for (Py_ssize_t i = 0; i < pg->ndflt; i++) {
        PyObject *sub;
        if (slot_value(v, pg->dflt[i].offset, &sub) < 0) return -1;
        if (!sub) {
            if (pg->dflt[i].kind != D_CONST) continue;   /* a LazyDefault not yet read */
            return efail("unset slot");
        }
        Py_INCREF(sub);
        int r = differs(sub, &pg->dflt[i]);
        Py_DECREF(sub);
        if (r) return r;
    }
    PyObject *unknown = SLOT(v, pg->unknown_offset);
    if (!unknown) return efail("unset slot");
    return PyObject_IsTrue(unknown);
}

static int encode_struct(Writer *w, Prog *pg, PyObject *o);

static int encode_bytes(Writer *w, Op *op, PyObject *v) {
    Py_buffer view;
    int rc;
    if (PyBytes_Check(v) || PyByteArray_Check(v)) {
        if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0) return -1;
    } else if (PyMemoryView_Check(v)) {
        if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0) return -1;   /* fails once released */
        Py_buffer *b = PyMemoryView_GET_BUFFER(v);
        /* len() of the view must be its size in bytes, as the Python encoder writes len() */
        if (b->ndim != 1 || b->itemsize != 1) { PyBuffer_Release(&view); return efail("not a byte view"); }
    } else {
        return efail("not bytes");
    }
    rc = put_len(w, op->flags, 0, view.len);
    if (rc == 0) {
        if (w->parts && view.len >= ZERO_COPY_MIN) {
            /* the value itself is the next part, as the Python encoder appends it */
            rc = flush_part(w, 0);
            if (rc == 0) rc = PyList_Append(w->parts, v);
        } else {
            rc = put(w, view.buf, view.len);
        }
    }
    PyBuffer_Release(&view);
    return rc;
}

static int encode_value(Writer *w, Op *op, PyObject *v) {
    long long x;
    switch (op->code) {
    case OP_BOOL: {
        int t = PyObject_IsTrue(v);
        if (t < 0) return -1;
        return put_u8(w, (uint8_t)t);
    }
    case OP_INT8:
        if (get_int(v, -128, 127, &x) < 0) return -1;
        return put_u8(w, (uint8_t)(int8_t)x);
    case OP_INT16:
        if (get_int(v, INT16_MIN, INT16_MAX, &x) < 0) return -1;
        return put_be(w, (uint16_t)(int16_t)x, 2);
    case OP_UINT16:
        if (get_int(v, 0, UINT16_MAX, &x) < 0) return -1;
        return put_be(w, (uint64_t)x, 2);
    case OP_INT32:
        if (get_int(v, INT32_MIN, INT32_MAX, &x) < 0) return -1;
        return put_be(w, (uint32_t)(int32_t)x, 4);
    case OP_UINT32:
        if (get_int(v, 0, UINT32_MAX, &x) < 0) return -1;
        return put_be(w, (uint64_t)x, 4);
    case OP_INT64:
        if (get_int(v, INT64_MIN, INT64_MAX, &x) < 0) return -1;
        return put_be(w, (uint64_t)x, 8);
    case OP_FLOAT64: {
        if (!PyFloat_Check(v) && !PyLong_Check(v)) return efail("not a float");
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        uint64_t bits;
        memcpy(&bits, &d, 8);
        return put_be(w, bits, 8);
    }
    case OP_UUID:
        if (!PyBytes_Check(v) || PyBytes_GET_SIZE(v) != 16) return efail("not a uuid");
        return put(w, PyBytes_AS_STRING(v), 16);
    case OP_STRING: {
        if (v == Py_None) {
            if (!(op->flags & F_NULLABLE)) return efail("null in a non-nullable field");
            return put_len(w, op->flags, 1, -1);
        }
        if (!PyUnicode_Check(v)) return efail("not a str");
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (!s) return -1;
        if (n > 32767) return efail("string too long");
        if (put_len(w, op->flags, 1, n) < 0) return -1;
        return put(w, s, n);
    }
    case OP_BYTES:
        if (v == Py_None) {
            if (!(op->flags & F_NULLABLE)) return efail("null in a non-nullable field");
            return put_len(w, op->flags, 0, -1);
        }
        return encode_bytes(w, op, v);
    case OP_STRUCT:
        if (op->flags & F_NULLABLE) {
            if (v == Py_None)   /* Kafka writes a null tagged struct as the byte 0, a regular one as -1 */
                return put_u8(w, (op->flags & F_TAGGED) ? 0 : 0xff);
            if (put_u8(w, 1) < 0) return -1;
        }
        return encode_struct(w, op->sub, v);
    case OP_ARRAY: {
        if (v == Py_None) {
            if (!(op->flags & F_NULLABLE)) return efail("null in a non-nullable array");
            return put_len(w, op->flags, 0, -1);
        }
        int is_list = PyList_Check(v);
        if (!is_list && !PyTuple_Check(v)) return efail("not a list");
        Py_ssize_t n = Py_SIZE(v);
        if (put_len(w, op->flags, 0, n) < 0) return -1;
        Py_ssize_t i = 0;
        if (op->elem->code == OP_INT32) {   /* broker ids, replicas, partitions: no calls */
            long long x;
            if (ENSURE(w, 4 * n) < 0) return -1;
            PyObject **items = is_list ? ((PyListObject *)v)->ob_item : ((PyTupleObject *)v)->ob_item;
            for (; i < n && small_int(items[i], &x) && x >= INT32_MIN && x <= INT32_MAX; i++) {
                uint32_t u = (uint32_t)(int32_t)x;
                uint8_t *q = (uint8_t *)w->p + w->len;
                q[0] = (uint8_t)(u >> 24); q[1] = (uint8_t)(u >> 16); q[2] = (uint8_t)(u >> 8); q[3] = (uint8_t)u;
                w->len += 4;
            }
        }
        /* a list may change under a callback (__bool__, __ne__): hold each item, re-check size */
        for (; i < n; i++) {
            if (is_list && i >= PyList_GET_SIZE(v)) return efail("list changed size");
            PyObject *item = is_list ? PyList_GET_ITEM(v, i) : PyTuple_GET_ITEM(v, i);
            Py_INCREF(item);
            int rc = encode_value(w, op->elem, item);
            Py_DECREF(item);
            if (rc < 0) return -1;
        }
        return 0;
    }
    }
    return efail("bad op");
}

typedef struct {
    int64_t tag;
    PyObject *data;         /* owned: unknown field bytes, or a known field's encoding */
} TagOut;

/* The tagged fields of a struct: the known ones not at their default plus the unknown ones, in
 * tag order (unknown first on equal tags, as the Python encoder's stable sort leaves them). */
static int encode_tags(Writer *w, Prog *pg, PyObject *o) {
    PyObject *unknown = SLOT(o, pg->unknown_offset);
    if (!unknown) return efail("unset slot");
    int has_unknown = PyObject_IsTrue(unknown);
    if (has_unknown < 0) return -1;
    if (!has_unknown && pg->ntags == 0) return put_u8(w, 0);
    Py_ssize_t nunk = 0;
    PyObject *unk = NULL;
    if (has_unknown) {
        if (!PyList_CheckExact(unknown)) return efail("unknown tagged fields not a list");
        unk = PyList_GetSlice(unknown, 0, PyList_GET_SIZE(unknown));   /* a snapshot */
        if (!unk) return -1;
        nunk = PyList_GET_SIZE(unk);
    }
    Py_ssize_t cap = nunk + pg->ntags, n = 0;
    TagOut stack[16];
    TagOut *out = cap <= 16 ? stack : PyMem_Malloc(sizeof(TagOut) * cap);
    int rc = -1;
    if (!out) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < nunk; i++) {
        PyObject *item = PyList_GET_ITEM(unk, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(item, 1))) { efail("bad unknown tagged field"); goto done; }
        long long tag;
        if (get_int(PyTuple_GET_ITEM(item, 0), 0, INT64_MAX, &tag) < 0) goto done;
        out[n].tag = tag;
        out[n].data = Py_NewRef(PyTuple_GET_ITEM(item, 1));
        n++;
    }
    for (Py_ssize_t i = 0; i < pg->ntags; i++) {
        Tag *t = &pg->tags[i];
        PyObject *v;
        if (slot_value(o, t->op.offset, &v) < 0) goto done;
        if (!v) {
            if (t->dflt.kind != D_CONST) continue;   /* a LazyDefault not yet read: at its default */
            efail("unset slot");
            goto done;
        }
        Py_INCREF(v);
        int d = differs(v, &t->dflt);
        if (d > 0) {
            Writer sub = {NULL, NULL, 0, 0, 64, NULL};
            if (encode_value(&sub, &t->op, v) < 0) { Py_XDECREF(sub.buf); d = -1; }
            else if (!(out[n].data = finish(&sub))) d = -1;
            else out[n++].tag = t->tag;
        }
        Py_DECREF(v);
        if (d < 0) goto done;
    }
    for (Py_ssize_t i = 1; i < n; i++) {   /* insertion sort: stable, and n is small */
        TagOut x = out[i];
        Py_ssize_t j = i;
        while (j > 0 && out[j - 1].tag > x.tag) { out[j] = out[j - 1]; j--; }
        out[j] = x;
    }
    if (put_uvarint(w, (uint64_t)n) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size = PyBytes_GET_SIZE(out[i].data);
        if (put_uvarint(w, (uint64_t)out[i].tag) < 0 || put_uvarint(w, (uint64_t)size) < 0 ||
            put(w, PyBytes_AS_STRING(out[i].data), size) < 0) goto done;
    }
    rc = 0;
done:
    if (out) {
        for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(out[i].data);
        if (out != stack) PyMem_Free(out);
    }
    Py_XDECREF(unk);
    return rc;
}

static int encode_struct(Writer *w, Prog *pg, PyObject *o) {
    if (Py_TYPE(o) != pg->type) return efail("not the message's class");
    for (Py_ssize_t i = 0; i < pg->nguards; i++) {
        PyObject *v;
        if (slot_value(o, pg->guards[i].offset, &v) < 0) return -1;
        if (!v) {
            if (pg->guards[i].kind != D_CONST) continue;   /* a LazyDefault not yet read */
            return efail("unset slot");
        }
        Py_INCREF(v);
        int d = differs(v, &pg->guards[i]);
        Py_DECREF(v);
        if (d) return d < 0 ? -1 : efail("a field absent at this version is set");
    }
    for (Py_ssize_t i = 0; i < pg->nops; i++) {
        Op *op = &pg->ops[i];
        PyObject *v;
        if (slot_value(o, op->offset, &v) < 0) return -1;
        if (v) {
            Py_INCREF(v);
        } else if ((op->flags & F_LAZY) && op->code == OP_ARRAY) {   /* a LazyDefault not yet read: [] */
            if (put_len(w, op->flags, 0, 0) < 0) return -1;
            continue;
        } else if (op->flags & F_LAZY) {   /* a LazyDefault not yet read: its default struct */
            v = PyObject_CallMethod((PyObject *)op->sub->type, "_make_default", NULL);
            if (!v) return -1;
        } else {
            return efail("unset slot");
        }
        int rc = encode_value(w, op, v);
        Py_DECREF(v);
        if (rc < 0) return -1;
    }
    return pg->flexible ? encode_tags(w, pg, o) : 0;
}


/* -- default fields made on first use -----------------------------------------------------------
 *
 * A field whose default is a struct (not null) or an empty list gets a LazyDefault in place of
 * its slot descriptor: the decoder leaves the slot empty where the field is absent or tagged and
 * not on the wire (three of a FetchResponse partition's seven objects), or is an empty array, and
 * the first read makes the default and keeps it, so the field reads as it would have. The encoder
 * takes an empty slot of such a field as its default. Every array of structs has one too (with no
 * factory where its default is null): the first read of a pending array builds its list. */

typedef struct {
    PyObject_HEAD
    Py_ssize_t offset;
    PyObject *name;
    PyObject *factory;      /* the struct class's _make_default, list, or None: no default to make */
    PyTypeObject *type;     /* the class that has the slot */
} LazyObject;

static inline int Lazy_check(LazyObject *self, PyObject *obj) {
    if (Py_TYPE(obj) == self->type || PyType_IsSubtype(Py_TYPE(obj), self->type)) return 0;
    PyErr_Format(PyExc_TypeError, "descriptor '%U' for '%.100s' objects doesn't apply to a '%.100s' object",
                 self->name, self->type->tp_name, Py_TYPE(obj)->tp_name);
    return -1;
}

static PyObject *Lazy_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *member, *factory;
    static char *kwlist[] = {"member", "factory", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:LazyDefault", kwlist, &member, &factory)) return NULL;
    if (!PyObject_TypeCheck(member, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)member)->d_member->type != T_OBJECT_EX)
        return PyErr_Format(PyExc_TypeError, "expected an object slot's member descriptor");
    LazyObject *self = (LazyObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->offset = ((PyMemberDescrObject *)member)->d_member->offset;
    self->name = Py_NewRef(PyDescr_NAME(member));
    self->factory = Py_NewRef(factory);
    self->type = (PyTypeObject *)Py_NewRef(PyDescr_TYPE(member));
    return (PyObject *)self;
}

static void Lazy_dealloc(LazyObject *self) {
    Py_XDECREF(self->name);
    Py_XDECREF(self->factory);
    Py_XDECREF(self->type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Lazy_get(LazyObject *self, PyObject *obj, PyObject *type) {
    if (!obj) return Py_NewRef(self);
    if (Lazy_check(self, obj) < 0) return NULL;   /* the slot is read by offset */
    PyObject *v = SLOT(obj, self->offset);
    if (v && Py_TYPE(v) != &PendingType) return Py_NewRef(v);
    if (v) {   /* a pending array: built now, and kept */
        if (slot_value(obj, self->offset, &v) < 0) return NULL;
        return Py_NewRef(v);
    }
    if (self->factory == Py_None) {   /* an emptied slot without a default, as a member reads it */
        PyErr_SetObject(PyExc_AttributeError, self->name);
        return NULL;
    }
    v = PyObject_CallNoArgs(self->factory);
    if (!v) return NULL;
    put_slot(&SLOT(obj, self->offset), v);   /* kept: the field now reads as the same object */
    return Py_NewRef(v);
}

static int Lazy_set(LazyObject *self, PyObject *obj, PyObject *value) {
    if (Lazy_check(self, obj) < 0) return -1;
    if (!value && !SLOT(obj, self->offset)) {
        PyErr_SetObject(PyExc_AttributeError, self->name);
        return -1;
    }
    Py_XINCREF(value);
    put_slot(&SLOT(obj, self->offset), value);
    return 0;
}

PyDoc_STRVAR(Lazy_pending_doc, "pending(obj) -> bool: whether obj's array in this field is still to be built.");

static PyObject *Lazy_pending(LazyObject *self, PyObject *obj) {
    if (Lazy_check(self, obj) < 0) return NULL;
    PyObject *v = SLOT(obj, self->offset);
    return PyBool_FromLong(v && Py_TYPE(v) == &PendingType);
}

static PyMethodDef Lazy_methods[] = {
    {"pending", (PyCFunction)Lazy_pending, METH_O, Lazy_pending_doc},
    {NULL, NULL, 0, NULL},
};

static PyObject *Lazy_offset(LazyObject *self, void *closure) { return PyLong_FromSsize_t(self->offset); }
static PyObject *Lazy_name(LazyObject *self, void *closure) { return Py_NewRef(self->name); }

static PyGetSetDef Lazy_getset[] = {
    {"offset", (getter)Lazy_offset, NULL, "byte offset of the slot", NULL},
    {"__name__", (getter)Lazy_name, NULL, "the field's name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LazyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproto.codecs._decoder.LazyDefault",
    .tp_basicsize = sizeof(LazyObject),
    .tp_dealloc = (destructor)Lazy_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("LazyDefault(member, factory): a slot whose default (factory(), unless None) is made, "
                        "or whose pending array is built, on first read."),
    .tp_getset = Lazy_getset,
    .tp_methods = Lazy_methods,
    .tp_descr_get = (descrgetfunc)Lazy_get,
    .tp_descr_set = (descrsetfunc)Lazy_set,
    .tp_new = Lazy_new,
};

/* -- freeing message objects ----------------------------------------------------------------------
 *
 * A message object is its slots and nothing else (no __dict__, no weak references, no finalizer),
 * so it is freed by dropping each slot; CPython's generic subtype_dealloc walks the member tables
 * and finalizer checks of every class instead (a fifth of decoding a FetchResponse went to freeing
 * the previous one). A user's subclass keeps subtype_dealloc, which clears what the subclass added
 * and then calls this. Objects of the generated classes are kept for reuse (below), all alike in
 * memory for a number of slots: a GC header and the object, nothing before it (no managed dict or
 * weak references, which set_fast_dealloc checks). */

/* Freed objects of the generated classes, by number of slots, for the decoder to fill again:
 * a message's objects are freed together and the next decode makes as many (no allocator round
 * trip, no zeroing: their slots were emptied when they were freed). */
#define FREE_MAX_SLOTS 32
#define FREE_MAX_KEEP 4096
static PyObject *free_objects[FREE_MAX_SLOTS + 1][FREE_MAX_KEEP];
static int free_count[FREE_MAX_SLOTS + 1];

static void message_dealloc(PyObject *self);

static PyObject *new_message(PyTypeObject *type) {
    if (type->tp_dealloc == message_dealloc) {
        Py_ssize_t k = (type->tp_basicsize - (Py_ssize_t)sizeof(PyObject)) / (Py_ssize_t)sizeof(PyObject *);
        if (k <= FREE_MAX_SLOTS && free_count[k] > 0) {
            PyObject *o = free_objects[k][--free_count[k]];
#if defined(Py_REF_DEBUG) || defined(Py_TRACE_REFS)
            PyObject_Init(o, type);
#else
            Py_SET_TYPE(o, type);   /* PyObject_Init's work, without the call: a heap type is increfed */
            Py_INCREF(type);
            Py_SET_REFCNT(o, 1);
#endif
            gc_track(o);
            return o;
        }
    }
    return type->tp_alloc(type, 0);
}

/* The slots of a message object being freed, and the object itself (see message_dealloc). */
static int keep_message(PyObject *o, ProgramObject *prog);

static void free_message(PyObject *self, PyTypeObject *tp, PyTypeObject *t) {
    if (tp == t) {
        Noted *e = noted_entry(self);
        if (e->obj == self) {
            e->obj = NULL;
            if (keep_message(self, e->prog)) return;
        }
    }
    PyObject **p = (PyObject **)((char *)self + sizeof(PyObject));
    PyObject **end = (PyObject **)((char *)self + t->tp_basicsize);
    for (; p < end; p++) {
        PyObject *v = *p;
        if (v) { *p = NULL; release(v); }   /* lists, ints and views it alone holds are kept */
    }
    Py_ssize_t k = (t->tp_basicsize - (Py_ssize_t)sizeof(PyObject)) / (Py_ssize_t)sizeof(PyObject *);
    if (tp == t && k <= FREE_MAX_SLOTS && free_count[k] < FREE_MAX_KEEP)
        free_objects[k][free_count[k]++] = self;   /* slots empty, untracked: new_message's */
    else
        tp->tp_free(self);
    Py_DECREF(tp);   /* a heap type: its instances hold a reference (subtype_dealloc leaves it to us) */
}

static void message_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self), *t = tp;
    while (t->tp_dealloc != message_dealloc) t = t->tp_base;   /* the generated class */
    gc_untrack(self);
    if (dealloc_depth < 40) {   /* a message's own nesting: no trashcan needed (three calls) */
        dealloc_depth++;
        free_message(self, tp, t);
        dealloc_depth--;
        return;
    }
    Py_TRASHCAN_BEGIN(self, message_dealloc)   /* deeper (a long chain): CPython's trashcan */
    free_message(self, tp, t);
    Py_TRASHCAN_END
}

static PyObject *set_fast_dealloc(PyObject *mod, PyObject *cls) {
    if (!PyType_Check(cls)) return PyErr_Format(PyExc_TypeError, "expected a class");
    PyTypeObject *t = (PyTypeObject *)cls;
    /* only a class whose instances are exactly object slots after the header */
    Py_ssize_t nslots = 0;
    for (PyTypeObject *b = t; b && b != &PyBaseObject_Type; b = b->tp_base) {
        PyMemberDef *m = b->tp_members;
        if (!(b->tp_flags & Py_TPFLAGS_HEAPTYPE)) return PyErr_Format(PyExc_TypeError, "not a generated class");
        for (; m && m->name; m++) {
            if (m->type != T_OBJECT_EX) return PyErr_Format(PyExc_TypeError, "a slot that is not an object");
            nslots++;
        }
    }
    if (t->tp_base == NULL || t->tp_dictoffset != 0 || t->tp_weaklistoffset != 0 || t->tp_itemsize != 0 ||
#ifdef Py_TPFLAGS_MANAGED_DICT
        (t->tp_flags & Py_TPFLAGS_MANAGED_DICT) ||
#endif
        t->tp_del || t->tp_finalize ||
#ifdef Py_TPFLAGS_MANAGED_WEAKREF
        (t->tp_flags & Py_TPFLAGS_MANAGED_WEAKREF) ||
#endif
        t->tp_basicsize != (Py_ssize_t)(sizeof(PyObject) + nslots * sizeof(PyObject *)) ||
        !(t->tp_flags & Py_TPFLAGS_HAVE_GC) || t->tp_free != PyObject_GC_Del)
        return PyErr_Format(PyExc_TypeError, "%.100s is not a plain slots class", t->tp_name);
    t->tp_dealloc = message_dealloc;
    Py_RETURN_NONE;
}

/* -- decoding into a freed message -------------------------------------------------------------
 *
 * Freeing a message is a third to a half of decoding one, and the next message of a program is
 * mostly the same objects again. So the last message a program decoded whole (no pending
 * arrays) is noted; when its user frees it, the program keeps it (its root, with every object
 * it alone holds) instead, and the next decode writes into those objects (decode_struct with a
 * reused object): equal ints and strings stay, other ints only the slot holds are overwritten,
 * lists and objects only their parent holds are filled again. Whatever else is held elsewhere
 * (a partition the user kept) is not touched: it is replaced. The views of the old buffer are
 * dropped when the message is kept (the buffer is released as before), and a program keeps one
 * message. A message is noted in a small table by address: the last one decoded of each program,
 * unless another takes its entry. */

/* Drop the views of the buffer in o and in what o alone holds (o is held by nobody else). */
static void drop_views(PyObject *o, Prog *pg) {
    for (Py_ssize_t i = 0; i < pg->nview_ops; i++) {
        Op *op = pg->view_ops[i];
        PyObject **slot = &SLOT(o, op->offset), *v = *slot;
        if (!v) continue;
        Op *elem = op->code == OP_ARRAY ? op->elem : op;
        if ((elem->flags & F_VIEW) || Py_TYPE(v) == &PyMemoryView_Type) {
#ifdef POOL_INTS_AND_VIEWS
            /* left in the slot without the buffer, made a view again by the next decode */
            if (Py_TYPE(v) == &PyMemoryView_Type && Py_REFCNT(v) == 1 && detach_view(v)) continue;
#endif
            *slot = NULL;
            release(v);
        } else if (Py_REFCNT(v) == 1) {
            Prog *sub = elem->sub;
            if (op->code == OP_STRUCT) {
                if (Py_TYPE(v) == sub->type) drop_views(v, sub);
            } else if (Py_TYPE(v) == &PyList_Type) {
                for (Py_ssize_t k = 0; k < Py_SIZE(v); k++) {
                    PyObject *e = PyList_GET_ITEM(v, k);
                    if (e && Py_TYPE(e) == sub->type && Py_REFCNT(e) == 1) drop_views(e, sub);
                }
            }
        }
    }
}

/* A noted message being freed (its refcount 0, untracked): kept by its program instead; 0 when
 * the program keeps one already. */
static int keep_message(PyObject *o, ProgramObject *prog) {
#if defined(Py_REF_DEBUG) || defined(Py_TRACE_REFS)
    return 0;   /* a resurrected object would be miscounted */
#else
    if (prog->kept) return 0;
    Py_SET_REFCNT(o, 1);
    prog->kept = o;
    if (prog->root->has_view) drop_views(o, prog->root);
    return 1;
#endif
}

/* The message a decode is to write into (owned, tracked), or NULL. */
static inline PyObject *take_kept(ProgramObject *prog, int lazy) {
    PyObject *o = prog->kept;
    if (!o || lazy) return NULL;   /* a lazy decode would replace its arrays by pending ones */
    prog->kept = NULL;
    gc_track(o);
    return o;
}

/* The end of a decode: a message made whole is noted, to be kept when freed. */
static inline void note(ProgramObject *prog, PyObject *o, Reader *r) {
    if (!r->holder && prog->root->reuse) {
        Noted *e = noted_entry(o);
        e->obj = o;
        e->prog = prog;
    }
}

/* Whether the instances of pg's class (and its nested structs') can be decoded into again, and
 * which of their fields can hold views. */
static int mark_reuse(ProgramObject *self, Prog *pg) {
    Py_ssize_t nslots = (pg->type->tp_basicsize - (Py_ssize_t)sizeof(PyObject)) / (Py_ssize_t)sizeof(PyObject *);
    pg->reuse = pg->type->tp_dealloc == message_dealloc && pg->nops + pg->ndflt + 1 == nslots;
    Py_ssize_t n = pg->nops + pg->ntags;
    if (!(pg->view_ops = arena(self, sizeof(Op *) * (size_t)n))) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Op *op = i < pg->nops ? &pg->ops[i] : &pg->tags[i - pg->nops].op;
        Op *elem = op->code == OP_ARRAY ? op->elem : op;
        if (elem->code == OP_STRUCT && mark_reuse(self, elem->sub) < 0) return -1;
        if ((elem->flags & F_VIEW) || (elem->code == OP_STRUCT && elem->sub->has_view))
            pg->view_ops[pg->nview_ops++] = op;
    }
    pg->has_view = pg->nview_ops > 0;
    return 0;
}

/* -- the Program type ------------------------------------------------------------------------- */

static PyObject *Program_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *spec;
    static char *kwlist[] = {"spec", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Program", kwlist, &spec)) return NULL;
    ProgramObject *self = (ProgramObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->spec = Py_NewRef(spec);
    self->next = programs;
    if (programs) programs->prev = self;
    programs = self;
    self->root = compile_struct(self, spec);
    if (!self->root || mark_reuse(self, self->root) < 0) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}

static void Program_dealloc(ProgramObject *self) {
    for (int i = 0; i < NOTED; i++)
        if (noted[i].prog == self) noted[i].obj = NULL;
    Py_CLEAR(self->kept);
    if (self->prev) self->prev->next = self->next;
    else if (programs == self) programs = self->next;
    if (self->next) self->next->prev = self->prev;
    for (Py_ssize_t i = 0; i < self->nblocks; i++) PyMem_Free(self->blocks[i]);
    PyMem_Free(self->blocks);
    Py_XDECREF(self->spec);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(decode_doc, "decode(buf, pos[, lazy=True]) -> (object, new pos); ValueError on malformed "
             "input. Arrays of structs of a read-only buffer are left pending unless lazy is false. "
             "The garbage collector is paused while more than 4 KiB are read.");

static PyObject *Program_decode(ProgramObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 && nargs != 3)
        return PyErr_Format(PyExc_TypeError, "decode() takes 2 or 3 arguments (%zd given)", nargs);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    int lazy = nargs == 3 ? PyObject_IsTrue(args[2]) : 1;
    if (lazy < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Reader r = {(const uint8_t *)view.buf, view.len, pos, args[0], NULL, self, view.readonly && lazy, NULL};
    PyObject *result = NULL;
    if (pos < 0 || pos > view.len) {
        fail("position outside the data");
    } else {
        /* A large message makes thousands of objects, all alive at the end: collecting garbage
         * among them halfway is wasted work (about 15% of a 2,000-partition MetadataResponse). */
        gc_enter();
        int paused = view.len - pos > 4096 && PyGC_Disable();
        PyObject *o = decode_struct(&r, self->root, take_kept(self, r.lazy));
        if (paused) PyGC_Enable();
        if (o) {
            note(self, o, &r);
            result = Py_BuildValue("(Nn)", o, r.pos);
        }
    }
    reader_done(&r);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(decode_whole_doc, "decode_whole(buf[, lazy=True]) -> object: decode(buf, 0[, lazy]) that must "
             "read every byte; ValueError on malformed input or bytes left over.");

static PyObject *Program_decode_whole(ProgramObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 && nargs != 2)
        return PyErr_Format(PyExc_TypeError, "decode_whole() takes 1 or 2 arguments (%zd given)", nargs);
    PyObject *buf = args[0];
    int lazy = nargs == 2 ? PyObject_IsTrue(args[1]) : 1;
    if (lazy < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) return NULL;
    Reader r = {(const uint8_t *)view.buf, view.len, 0, buf, NULL, self, view.readonly && lazy, NULL};
    gc_enter();
    int paused = view.len > 4096 && PyGC_Disable();   /* as decode() */
    PyObject *o = decode_struct(&r, self->root, take_kept(self, r.lazy));
    if (paused) PyGC_Enable();
    if (o && r.pos != view.len) {
        Py_CLEAR(o);
        fail("bytes left over after the message");
    }
    if (o) note(self, o, &r);
    reader_done(&r);
    PyBuffer_Release(&view);
    return o;
}

PyDoc_STRVAR(encode_doc, "encode(obj) -> bytes; raises on anything the Python encoder must handle.");

static PyObject *Program_encode(ProgramObject *self, PyObject *obj) {
    Writer w = {NULL, NULL, 0, 0, self->last_size + 16, NULL};
    if (encode_struct(&w, self->root, obj) < 0) { Py_XDECREF(w.buf); return NULL; }
    self->last_size = w.len;
    return finish(&w);
}

PyDoc_STRVAR(encode_parts_doc,
             "encode_parts(obj, parts): append the encoding to the list parts, bytes/records values "
             "of 1 KiB or more as they are; on failure parts is left as it was.");

static PyObject *Program_encode_parts(ProgramObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[1]))
        return PyErr_Format(PyExc_TypeError, "encode_parts(obj, parts: list)");
    PyObject *parts = args[1];
    Py_ssize_t mark = PyList_GET_SIZE(parts);
    Writer w = {NULL, NULL, 0, 0, self->parts_size, parts};
    Py_ssize_t cap = 0;
    int rc = encode_struct(&w, self->root, args[0]);
    cap = w.cap;
    if (rc == 0) rc = flush_part(&w, 1);
    Py_XDECREF(w.buf);   /* kept after the last large value */
    if (rc < 0) {
        PyList_SetSlice(parts, mark, PyList_GET_SIZE(parts), NULL);
        return NULL;
    }
    self->parts_size = cap;
    Py_RETURN_NONE;
}

static PyMethodDef Program_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))Program_decode, METH_FASTCALL, decode_doc},
    {"decode_whole", (PyCFunction)(void (*)(void))Program_decode_whole, METH_FASTCALL, decode_whole_doc},
    {"encode", (PyCFunction)Program_encode, METH_O, encode_doc},
    {"encode_parts", (PyCFunction)(void (*)(void))Program_encode_parts, METH_FASTCALL, encode_parts_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproto.codecs._decoder.Program",
    .tp_basicsize = sizeof(ProgramObject),
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("A compiled decoder and encoder program for one (message, version)."),
    .tp_methods = Program_methods,
    .tp_new = Program_new,
};

/* The offset of a __slots__ member descriptor, so the program can fill slots directly. */
static PyObject *slot_offset(PyObject *mod, PyObject *descr) {
    if (PyObject_TypeCheck(descr, &LazyType)) return PyLong_FromSsize_t(((LazyObject *)descr)->offset);
    if (!PyObject_TypeCheck(descr, &PyMemberDescr_Type))
        return PyErr_Format(PyExc_TypeError, "expected a slot member descriptor, got %.100s",
                            Py_TYPE(descr)->tp_name);
    PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
    if (m->type != T_OBJECT_EX) return PyErr_Format(PyExc_TypeError, "not an object slot");
    return PyLong_FromSsize_t(m->offset);
}

static PyObject *set_uuid_type(PyObject *mod, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyBytes_Type))
        return PyErr_Format(PyExc_TypeError, "expected a subclass of bytes");
    PyTypeObject *t = (PyTypeObject *)cls;
    Py_XSETREF(uuid_new, Py_NewRef(cls));
    /* made directly only when its instances are exactly bytes objects (no __dict__, no slots) */
    uuid_type = (t->tp_basicsize == PyBytes_Type.tp_basicsize && t->tp_itemsize == PyBytes_Type.tp_itemsize &&
                 t->tp_dictoffset == 0 && t->tp_weaklistoffset == 0) ? t : NULL;
    cache_clear(uuid_cache, UUID_CACHE_SETS);
    Py_RETURN_NONE;
}

static PyObject *pool_stats(PyObject *mod, PyObject *unused) {
    Py_ssize_t objects = 0, lists = 0, ints = 0, views = 0;
    for (int k = 0; k <= FREE_MAX_SLOTS; k++) objects += free_count[k];
    for (int k = 0; k <= POOL_LIST_MAX_CAP; k++) lists += list_pool_n[k];
#ifdef POOL_INTS_AND_VIEWS
    for (int k = 0; k <= INT_MAX_DIGITS; k++) ints += int_pool_n[k];
    views = view_pool_n;
#endif
    return Py_BuildValue("{snsnsnsnsi}", "objects", objects, "lists", lists, "ints", ints, "views", views,
                         "pending", pending_pool_n);
}

static PyObject *clear_pools(PyObject *mod, PyObject *unused) {
    for (ProgramObject *p = programs; p; p = p->next) Py_CLEAR(p->kept);   /* into the pools, freed below */
    for (int k = 0; k <= FREE_MAX_SLOTS; k++)
        while (free_count[k] > 0) {
            /* its class may be gone: PyObject_GC_Del reads the type only for the size of what
             * precedes the object, a GC header for every generated class, as for a list */
            PyObject *o = free_objects[k][--free_count[k]];
            Py_SET_TYPE(o, &PyList_Type);
            PyObject_GC_Del(o);
        }
    for (int k = 0; k <= POOL_LIST_MAX_CAP; k++)
        while (list_pool_n[k] > 0) Py_DECREF(list_pool[k][--list_pool_n[k]]);
#ifdef POOL_INTS_AND_VIEWS
    for (int k = 0; k <= INT_MAX_DIGITS; k++)
        while (int_pool_n[k] > 0) Py_DECREF(int_pool[k][--int_pool_n[k]]);
    while (view_pool_n > 0) {   /* given back their export when kept: freed as released views */
        PyMemoryViewObject *v = (PyMemoryViewObject *)view_pool[--view_pool_n];
        v->flags |= _Py_MEMORYVIEW_RELEASED;
        PyObject_GC_Track(v);   /* memory_dealloc untracks without looking */
        Py_DECREF(v);
    }
#endif
    while (pending_pool_n > 0) PyObject_Free(pending_pool[--pending_pool_n]);
    cache_clear(str_cache, STR_CACHE_SETS);
    cache_clear(uuid_cache, UUID_CACHE_SETS);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"clear_pools", clear_pools, METH_NOARGS,
     "Free the message objects, lists, ints, byte views and pending-array markers kept for the decoder, the messages "
     "programs keep to decode into, and the shared strings."},
    {"pool_stats", pool_stats, METH_NOARGS,
     "How many freed message objects, lists, ints, byte views and pending-array markers are kept for the decoder."},
    {"slot_offset", slot_offset, METH_O, "Byte offset of a __slots__ member descriptor."},
    {"set_uuid_type", set_uuid_type, METH_O, "Set the class of decoded UUIDs (a subclass of bytes)."},
    {"set_fast_dealloc", set_fast_dealloc, METH_O,
     "Free the instances of a generated message class by dropping their slots (TypeError if it is not one)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_decoder", "Compiled decoder and encoder programs for kproto's codec.", -1, module_methods,
};

/* The interface this source offers; kproto.accelerators.API names the one the Python
 * side expects, and a build whose number differs is not used. Bump both together. */
#define KPROTO_API 3

PyMODINIT_FUNC PyInit__decoder(void) {
    if (PyType_Ready(&ProgramType) < 0 || PyType_Ready(&LazyType) < 0 || PyType_Ready(&HolderType) < 0 ||
        PyType_Ready(&PendingType) < 0)
        return NULL;
    for (int i = SMALL_INT_MIN; i <= SMALL_INT_MAX; i++)
        if (!small_ints[i - SMALL_INT_MIN] && !(small_ints[i - SMALL_INT_MIN] = PyLong_FromLong(i))) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddObject(m, "Program", Py_NewRef((PyObject *)&ProgramType)) < 0) {
        Py_DECREF(&ProgramType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "LazyDefault", Py_NewRef((PyObject *)&LazyType)) < 0) {
        Py_DECREF(&LazyType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "API", KPROTO_API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
