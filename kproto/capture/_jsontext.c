/* Message bodies to JSON text in C (optional accelerator of kproto.capture.json_text).
 *
 * A Writer is compiled from a spec that json_text builds from the codec's JSON plan (the same
 * plan its generated Python writers follow) and writes exactly what they write: the same
 * fields, order, tagged defaults, topicName beside a named topicId, and each value as Python's
 * JSON encoder writes what the codec's converter makes of it. Strings are escaped and UUIDs
 * written by the very functions the Python writers call. A value the Python writers would
 * refuse raises here too (any exception: the caller then takes the reference path).
 *
 * spec of a struct: (named_by, entries)
 *   named_by: ((attr, tagged, default), ...)   fields that name the struct's topic
 *   entries:  ((key, attr, kind, is_array, tagged, default, sub, is_tid), ...)
 *             key: UTF-8 bytes of '"jsonKey": '; kind: see K_*; sub: a struct spec or None
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

enum { K_INT, K_STRING, K_BOOL, K_FLOAT, K_BYTES, K_UUID, K_STRUCT };

typedef struct Struct Struct;
typedef struct {
    PyObject *key;      /* bytes */
    PyObject *attr;     /* str */
    int kind, is_array, tagged, is_tid;
    PyObject *dflt;
    Struct *sub;
} Entry;
typedef struct {
    PyObject *attr;
    int tagged;
    PyObject *dflt;
} Namer;
struct Struct {
    Py_ssize_t n_entries, n_named;
    Entry *entries;
    Namer *named;
    int has_tid;
};

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char *stack;   /* the caller's first buffer (not to be freed), or NULL */
} Buf;

static PyObject *escape_fn;   /* the JSON encoder's string escaping (encode_basestring) */
static PyObject *uuid_fn;     /* a UUID's text */

static int grow(Buf *b, Py_ssize_t n) {
    if (n > PY_SSIZE_T_MAX - b->len) { PyErr_NoMemory(); return -1; }
    Py_ssize_t need = b->len + n;
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > PY_SSIZE_T_MAX / 2) { cap = need; break; }
        cap *= 2;
    }
    char *p;
    if (b->p != NULL && b->p == b->stack) {   /* leaving the caller's buffer */
        p = PyMem_Malloc((size_t)cap);
        if (p != NULL) memcpy(p, b->p, (size_t)b->len);
    } else {
        p = PyMem_Realloc(b->p, (size_t)cap);
    }
    if (p == NULL) { PyErr_NoMemory(); return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const char *s, Py_ssize_t n) {
    if (grow(b, n) < 0) return -1;
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}
#define PUTS(b, lit) put(b, lit, (Py_ssize_t)sizeof(lit) - 1)

static int put_str(Buf *b, PyObject *s) {  /* a str, UTF-8 (lone surrogates as they are) */
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u != NULL) return put(b, u, n);
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
    PyErr_Clear();
    PyObject *e = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
    if (e == NULL) return -1;
    int r = put(b, PyBytes_AS_STRING(e), PyBytes_GET_SIZE(e));
    Py_DECREF(e);
    return r;
}

static int odd(void) {
    PyErr_SetString(PyExc_TypeError, "a value not of its field's type");
    return -1;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static char B64_PAIRS[4096][2];   /* the two characters of every 12 bits (filled at import) */

static void b64_pairs_init(void) {
    for (int i = 0; i < 4096; i++) {
        B64_PAIRS[i][0] = B64[i >> 6];
        B64_PAIRS[i][1] = B64[i & 63];
    }
}

static int put_base64(Buf *b, PyObject *v) {
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0) return -1;
    Py_ssize_t n = view.len;
    if (n > (PY_SSIZE_T_MAX - 8) / 4 * 3) { PyBuffer_Release(&view); PyErr_NoMemory(); return -1; }
    Py_ssize_t out = (n + 2) / 3 * 4;
    if (grow(b, out + 2) < 0) { PyBuffer_Release(&view); return -1; }
    const unsigned char *s = view.buf;
    char *d = b->p + b->len;
    *d++ = '"';
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {   /* two characters per lookup: 12 bits each */
        uint32_t x = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
        memcpy(d, B64_PAIRS[x >> 12], 2);
        memcpy(d + 2, B64_PAIRS[x & 0xFFF], 2);
        d += 4;
    }
    if (n - i == 1) {
        uint32_t x = (uint32_t)s[i] << 16;
        d[0] = B64[x >> 18]; d[1] = B64[(x >> 12) & 63]; d[2] = '='; d[3] = '=';
        d += 4;
    } else if (n - i == 2) {
        uint32_t x = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
        d[0] = B64[x >> 18]; d[1] = B64[(x >> 12) & 63]; d[2] = B64[(x >> 6) & 63]; d[3] = '=';
        d += 4;
    }
    *d++ = '"';
    b->len = d - b->p;
    PyBuffer_Release(&view);
    return 0;
}

/* A str as the JSON encoder writes it (ensure_ascii off): an ASCII string with nothing to
 * escape (no quote, backslash or control character) is itself in quotes, written here; any
 * other goes through the encoder's own escaping. */
static int put_call(Buf *b, PyObject *fn, PyObject *v);
static int put_string(Buf *b, PyObject *s) {
    if (PyUnicode_IS_ASCII(s)) {
        const unsigned char *p = PyUnicode_1BYTE_DATA(s);
        Py_ssize_t n = PyUnicode_GET_LENGTH(s), i = 0;
        while (i < n && p[i] >= 0x20 && p[i] != '"' && p[i] != '\\') i++;
        if (i == n) {
            if (grow(b, n + 2) < 0) return -1;
            b->p[b->len] = '"';
            memcpy(b->p + b->len + 1, p, (size_t)n);
            b->p[b->len + 1 + n] = '"';
            b->len += n + 2;
            return 0;
        }
    }
    return put_call(b, escape_fn, s);
}

static int put_call(Buf *b, PyObject *fn, PyObject *v) {  /* the text fn(v) */
    PyObject *t = PyObject_CallOneArg(fn, v);
    if (t == NULL) return -1;
    int r = PyUnicode_Check(t) ? put_str(b, t) : odd();
    Py_DECREF(t);
    return r;
}

static int write_struct(Buf *b, Struct *st, PyObject *o, PyObject *names);

/* One value of kind ``kind`` (not an array) */
static int write_scalar(Buf *b, int kind, PyObject *v, Struct *sub, PyObject *names) {
    switch (kind) {
    case K_INT:
        if (PyLong_CheckExact(v)) {
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (!overflow) {  /* decimal digits, as str(int) writes them */
                char tmp[24], *e = tmp + sizeof tmp, *d = e;
                unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
                do { *--d = (char)('0' + u % 10); u /= 10; } while (u);
                if (x < 0) *--d = '-';
                return put(b, d, e - d);
            }
            PyObject *t = PyObject_Str(v);
            if (t == NULL) return -1;
            int r = put_str(b, t);
            Py_DECREF(t);
            return r;
        }
        return v == Py_None ? PUTS(b, "null") : odd();
    case K_STRING:
        if (PyUnicode_CheckExact(v)) return put_string(b, v);
        return v == Py_None ? PUTS(b, "null") : odd();
    case K_BOOL: {
        if (v == Py_None) return PUTS(b, "null");
        int t = PyObject_IsTrue(v);
        if (t < 0) return -1;
        return t ? PUTS(b, "true") : PUTS(b, "false");
    }
    case K_FLOAT: {
        if (v == Py_None) return PUTS(b, "null");
        PyObject *f = PyNumber_Float(v);
        if (f == NULL) return -1;
        double x = PyFloat_AS_DOUBLE(f);
        int r;
        if (isnan(x)) r = PUTS(b, "NaN");
        else if (isinf(x)) r = x > 0 ? PUTS(b, "Infinity") : PUTS(b, "-Infinity");
        else {
            PyObject *t = PyFloat_Type.tp_repr(f);
            r = t == NULL ? -1 : put_str(b, t);
            Py_XDECREF(t);
        }
        Py_DECREF(f);
        return r;
    }
    case K_BYTES:
        return v == Py_None ? PUTS(b, "null") : put_base64(b, v);
    case K_UUID:
        if (v == Py_None) return PUTS(b, "null");
        if (PUTS(b, "\"") < 0 || put_call(b, uuid_fn, v) < 0) return -1;
        return PUTS(b, "\"");
    case K_STRUCT:
        return v == Py_None ? PUTS(b, "null") : write_struct(b, sub, v, names);
    }
    PyErr_SetString(PyExc_SystemError, "unknown kind");
    return -1;
}

static int write_value(Buf *b, Entry *e, PyObject *v, PyObject *names) {
    if (!e->is_array || v == Py_None) return write_scalar(b, e->kind, v, e->sub, names);
    PyObject *seq = PySequence_Fast(v, "not a sequence");
    if (seq == NULL) return -1;
    int r = PUTS(b, "[");
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
        if (i && PUTS(b, ", ") < 0) { r = -1; break; }
        r = write_scalar(b, e->kind, items[i], e->sub, names);
    }
    if (r == 0) r = PUTS(b, "]");
    Py_DECREF(seq);
    return r;
}

/* 1: v differs from the tagged field's default (``not (v == default)``), 0: it does not */
static int differs(PyObject *v, PyObject *dflt) {
    PyObject *eq = PyObject_RichCompare(v, dflt, Py_EQ);
    if (eq == NULL) return -1;
    int t = PyObject_IsTrue(eq);
    Py_DECREF(eq);
    return t < 0 ? -1 : !t;
}

static int write_struct(Buf *b, Struct *st, PyObject *o, PyObject *names) {
    if (Py_EnterRecursiveCall(" writing JSON")) return -1;
    int r = -1, first = 1, unnamed = 0;
    if (PUTS(b, "{") < 0) goto out;
    if (st->has_tid) {
        /* the reference names the id unless the struct's JSON has a true name or topic */
        unnamed = PyObject_IsTrue(names);
        if (unnamed < 0) goto out;
        for (Py_ssize_t i = 0; unnamed && i < st->n_named; i++) {
            Namer *nm = &st->named[i];
            PyObject *v = PyObject_GetAttr(o, nm->attr);
            if (v == NULL) goto out;
            int t = nm->tagged ? differs(v, nm->dflt) : 1;
            if (t > 0) t = PyObject_IsTrue(v);
            Py_DECREF(v);
            if (t < 0) goto out;
            if (t) unnamed = 0;
        }
    }
    for (Py_ssize_t i = 0; i < st->n_entries; i++) {
        Entry *e = &st->entries[i];
        PyObject *v = PyObject_GetAttr(o, e->attr);
        if (v == NULL) goto out;
        int w = e->tagged ? differs(v, e->dflt) : 1;
        int bad = w < 0;
        if (w > 0) {
            bad = (!first && PUTS(b, ", ") < 0)
                  || put(b, PyBytes_AS_STRING(e->key), PyBytes_GET_SIZE(e->key)) < 0
                  || write_value(b, e, v, names) < 0;
            first = 0;
            if (!bad && e->is_tid && unnamed && v != Py_None) {
                PyObject *t = PyObject_CallOneArg(uuid_fn, v);
                PyObject *name = NULL;
                if (t == NULL) bad = 1;
                else {
                    int has = PySequence_Contains(names, t);
                    if (has < 0) bad = 1;
                    else if (has) {
                        name = PyObject_GetItem(names, t);
                        bad = name == NULL || PUTS(b, ", \"topicName\": ") < 0
                              || (PyUnicode_CheckExact(name) ? put_string(b, name)
                                                             : put_call(b, escape_fn, name)) < 0;
                    }
                }
                Py_XDECREF(t);
                Py_XDECREF(name);
            }
        }
        Py_DECREF(v);
        if (bad) goto out;
    }
    r = PUTS(b, "}");
out:
    Py_LeaveRecursiveCall();
    return r;
}

/* -- compiling a spec ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Struct *top;
    PyObject *keep;   /* the spec: keeps keys, attrs and defaults alive */
} WriterObject;

static void free_struct(Struct *st) {
    if (st == NULL) return;
    for (Py_ssize_t i = 0; i < st->n_entries; i++) free_struct(st->entries[i].sub);
    PyMem_Free(st->entries);
    PyMem_Free(st->named);
    PyMem_Free(st);
}

static Struct *compile_struct(PyObject *spec, int depth) {
    PyObject *named, *entries;
    if (depth > 64) { PyErr_SetString(PyExc_ValueError, "spec nested too deep"); return NULL; }
    if (!PyArg_ParseTuple(spec, "O!O!", &PyTuple_Type, &named, &PyTuple_Type, &entries)) return NULL;
    Struct *st = PyMem_Calloc(1, sizeof(Struct));
    if (st == NULL) { PyErr_NoMemory(); return NULL; }
    st->n_named = PyTuple_GET_SIZE(named);
    st->named = PyMem_Calloc((size_t)st->n_named + 1, sizeof(Namer));
    st->entries = PyMem_Calloc((size_t)PyTuple_GET_SIZE(entries) + 1, sizeof(Entry));
    if (st->named == NULL || st->entries == NULL) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t i = 0; i < st->n_named; i++) {
        Namer *nm = &st->named[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(named, i), "UpO", &nm->attr, &nm->tagged, &nm->dflt))
            goto fail;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(entries); i++) {
        Entry *e = &st->entries[i];
        PyObject *sub;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(entries, i), "SUippOOp", &e->key, &e->attr,
                              &e->kind, &e->is_array, &e->tagged, &e->dflt, &sub, &e->is_tid))
            goto fail;
        st->n_entries = i + 1;
        if (e->kind < K_INT || e->kind > K_STRUCT || (e->kind == K_STRUCT) != (sub != Py_None)) {
            PyErr_SetString(PyExc_ValueError, "bad entry kind");
            goto fail;
        }
        if (e->is_tid) st->has_tid = 1;
        if (sub != Py_None && (e->sub = compile_struct(sub, depth + 1)) == NULL) goto fail;
    }
    return st;
fail:
    free_struct(st);
    return NULL;
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *spec;
    if (!PyArg_ParseTuple(args, "O!:Writer", &PyTuple_Type, &spec)) return NULL;
    WriterObject *self = (WriterObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->top = compile_struct(spec, 0);
    if (self->top == NULL) { Py_DECREF(self); return NULL; }
    self->keep = Py_NewRef(spec);
    return (PyObject *)self;
}

static void Writer_dealloc(WriterObject *self) {
    free_struct(self->top);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Writer_call(WriterObject *self, PyObject *args, PyObject *kwds) {
    PyObject *obj, *names, *pieces;
    if (!PyArg_ParseTuple(args, "OOO!", &obj, &names, &PyList_Type, &pieces)) return NULL;
    if (escape_fn == NULL || uuid_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() not called");
        return NULL;
    }
    Buf b = {NULL, 0, 0, NULL};
    PyObject *text = NULL;
    if (write_struct(&b, self->top, obj, names) == 0)
        text = PyUnicode_DecodeUTF8(b.p, b.len, "surrogatepass");
    PyMem_Free(b.p);
    if (text == NULL) return NULL;
    int r = PyList_Append(pieces, text);
    Py_DECREF(text);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kproto.capture._jsontext.Writer",
    .tp_basicsize = sizeof(WriterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Writer(spec): call with (message, topic names, pieces) to append the "
                        "message's JSON text to pieces."),
    .tp_new = Writer_new,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_call = (ternaryfunc)Writer_call,
};

/* -- the head of a JSON line ---------------------------------------------------------------- */

/* What head() needs from kproto.capture.exchange (set by setup_head) */
static PyObject *endpoint_fn;   /* an endpoint's JSON text (cached there) */
static PyObject *key_texts;     /* dict: API key (int or None) -> its "api_key"/"api_name" text */
static PyObject *s_client, *s_broker, *s_ts, *s_kind, *s_api_key, *s_api_version, *s_decoded_as,
    *s_correlation_id, *s_client_id, *s_request_end, *s_response_end, *s_request_bytes,
    *s_response_bytes, *s_round, *three;

/* the client and broker of the last head, and their text (owned) */
static PyObject *last_client, *last_broker, *last_pair;
/* the whole second of the last timestamp and its ISO text up to the dot */
static double last_second = -1.0;
static char last_second_text[32];

/* 1: written, 0: a value head() leaves to Python, -1: error */
static int put_int_or_null(Buf *b, PyObject *v) {
    if (v == Py_None) return PUTS(b, "null") < 0 ? -1 : 1;
    if (!PyLong_CheckExact(v)) return 0;
    return write_scalar(b, K_INT, v, NULL, NULL) < 0 ? -1 : 1;
}

/* a frame size: a positive int, or null for 0 (None too) */
static int put_size(Buf *b, PyObject *v) {
    if (v == Py_None) return PUTS(b, "null") < 0 ? -1 : 1;
    if (!PyLong_CheckExact(v)) return 0;
    int zero = PyObject_Not(v);
    if (zero < 0) return -1;
    if (zero) return PUTS(b, "null") < 0 ? -1 : 1;
    return write_scalar(b, K_INT, v, NULL, NULL) < 0 ? -1 : 1;
}

/* the ISO text of a capture time as exchange._iso writes it, for a float of years 1970-9999 */
static int put_iso(Buf *b, double ts) {
    double whole, frac = modf(ts, &whole);
    double x = frac * 1e6, us = round(x);            /* Python's round(): half to even */
    if (fabs(x - us) == 0.5) us = 2.0 * round(x / 2.0);
    if (us >= 1000000.0) { whole += 1.0; us -= 1000000.0; }
    if (whole != last_second) {
        time_t t = (time_t)whole;
        struct tm tm;
        if (gmtime_r(&t, &tm) == NULL) return 0;
        int n = snprintf(last_second_text, sizeof last_second_text, "%04d-%02d-%02dT%02d:%02d:%02d.",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         tm.tm_sec);
        if (n != 20) { last_second = -1.0; return 0; }
        last_second = whole;
    }
    char text[48];
    int n = snprintf(text, sizeof text, "\"%s%06dZ\"", last_second_text, (int)us);
    if (n <= 0 || n >= (int)sizeof text) return 0;
    return put(b, text, n) < 0 ? -1 : 1;
}

static int head_fields(Buf *b, PyObject *ex) {
    PyObject *v = NULL;
    int r = 0;
#define GET(name) do { Py_XSETREF(v, PyObject_GetAttr(ex, name)); if (v == NULL) return -1; } while (0)
#define STEP(call) do { r = (call); if (r <= 0) goto out; } while (0)
    GET(s_ts);
    if (PUTS(b, "{\"ts\": ") < 0) goto error;
    if (v == Py_None) { if (PUTS(b, "null") < 0) goto error; }
    else if (PyFloat_CheckExact(v) && PyFloat_AS_DOUBLE(v) >= 0.0
             && PyFloat_AS_DOUBLE(v) < 253402300799.0) STEP(put_iso(b, PyFloat_AS_DOUBLE(v)));
    else goto fallback;
    /* client and broker */
    PyObject *client = PyObject_GetAttr(ex, s_client);
    PyObject *broker = client == NULL ? NULL : PyObject_GetAttr(ex, s_broker);
    if (broker == NULL) { Py_XDECREF(client); goto error; }
    PyObject *pair;   /* owned here: Python code may run before it is written */
    if (client != last_client || broker != last_broker || last_pair == NULL) {
        PyObject *c = PyObject_CallOneArg(endpoint_fn, client);
        PyObject *k = c == NULL ? NULL : PyObject_CallOneArg(endpoint_fn, broker);
        pair = k == NULL ? NULL
            : PyUnicode_FromFormat("\"client\": %U, \"broker\": %U, ", c, k);
        Py_XDECREF(c); Py_XDECREF(k);
        if (pair == NULL) { Py_DECREF(client); Py_DECREF(broker); goto error; }
        Py_XSETREF(last_client, client);
        Py_XSETREF(last_broker, broker);
        Py_XSETREF(last_pair, Py_NewRef(pair));
    } else {
        pair = Py_NewRef(last_pair);
        Py_DECREF(client); Py_DECREF(broker);
    }
    int bad = PUTS(b, ", ") < 0 || put_str(b, pair) < 0;
    Py_DECREF(pair);
    if (bad) goto error;
    GET(s_kind);
    if (!PyUnicode_CheckExact(v)) goto fallback;
    if (PUTS(b, "\"kind\": ") < 0 || put_string(b, v) < 0) goto error;
    if (PUTS(b, ", ") < 0) goto error;
    GET(s_api_key);
    if (v != Py_None && !PyLong_CheckExact(v)) goto fallback;
    PyObject *key_text = PyDict_GetItemWithError(key_texts, v);   /* borrowed */
    if (key_text == NULL) { if (PyErr_Occurred()) goto error; goto fallback; }
    if (!PyUnicode_CheckExact(key_text)) goto fallback;
    if (put_str(b, key_text) < 0 || PUTS(b, "\"api_version\": ") < 0) goto error;
    GET(s_api_version);
    STEP(put_int_or_null(b, v));
    if (PUTS(b, ", \"decoded_as\": ") < 0) goto error;
    GET(s_decoded_as);
    STEP(put_int_or_null(b, v));
    if (PUTS(b, ", \"correlation_id\": ") < 0) goto error;
    GET(s_correlation_id);
    STEP(put_int_or_null(b, v));
    if (PUTS(b, ", \"client_id\": ") < 0) goto error;
    GET(s_client_id);
    if (v == Py_None) { if (PUTS(b, "null") < 0) goto error; }
    else if (PyUnicode_CheckExact(v)) { if (put_string(b, v) < 0) goto error; }
    else goto fallback;
    if (PUTS(b, ", \"latency_ms\": ") < 0) goto error;
    {   /* round((response_end - request_end) * 1000.0, 3), by float's own __round__ */
        PyObject *start = PyObject_GetAttr(ex, s_request_end);
        if (start == NULL) goto error;
        GET(s_response_end);
        if (start == Py_None || v == Py_None) {
            Py_DECREF(start);
            if (PUTS(b, "null") < 0) goto error;
        } else if (PyFloat_CheckExact(start) && PyFloat_CheckExact(v)) {
            PyObject *ms = PyFloat_FromDouble((PyFloat_AS_DOUBLE(v) - PyFloat_AS_DOUBLE(start)) * 1000.0);
            Py_DECREF(start);
            if (ms == NULL) goto error;
            PyObject *rounded = PyObject_CallMethodOneArg(ms, s_round, three);
            Py_DECREF(ms);
            if (rounded == NULL) goto error;
            if (!PyFloat_CheckExact(rounded) || !isfinite(PyFloat_AS_DOUBLE(rounded))) {
                Py_DECREF(rounded);
                goto fallback;
            }
            PyObject *t = PyFloat_Type.tp_repr(rounded);
            Py_DECREF(rounded);
            bad = t == NULL || put_str(b, t) < 0;
            Py_XDECREF(t);
            if (bad) goto error;
        } else {
            Py_DECREF(start);
            goto fallback;
        }
    }
    if (PUTS(b, ", \"request_bytes\": ") < 0) goto error;
    GET(s_request_bytes);
    STEP(put_size(b, v));
    if (PUTS(b, ", \"response_bytes\": ") < 0) goto error;
    GET(s_response_bytes);
    STEP(put_size(b, v));
    r = 1;
out:
    Py_XDECREF(v);
    return r;
fallback:   /* a value left to Python */
    r = 0;
    goto out;
error:
    r = -1;
    goto out;
#undef GET
#undef STEP
}

PyDoc_STRVAR(head_doc,
"head(exchange)\n--\n\n"
"The head of the exchange's JSON line (its members before the bodies, without a closing\n"
"brace), as kproto.capture.exchange writes it; None when a value is not of the usual types\n"
"(the caller then writes it).");

static PyObject *head(PyObject *mod, PyObject *ex) {
    if (endpoint_fn == NULL || key_texts == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup_head() not called");
        return NULL;
    }
    char stack[512];
    Buf b = {stack, 0, sizeof stack, stack};
    int r = head_fields(&b, ex);
    PyObject *text = NULL;
    if (r > 0) text = PyUnicode_DecodeUTF8(b.p, b.len, "surrogatepass");
    else if (r == 0) text = Py_NewRef(Py_None);
    if (b.p != stack) PyMem_Free(b.p);
    return text;
}

static PyObject *setup_head(PyObject *mod, PyObject *args) {
    PyObject *endpoint, *keys;
    if (!PyArg_ParseTuple(args, "OO!", &endpoint, &PyDict_Type, &keys)) return NULL;
    Py_XSETREF(endpoint_fn, Py_NewRef(endpoint));
    Py_XSETREF(key_texts, Py_NewRef(keys));
    Py_CLEAR(last_client); Py_CLEAR(last_broker); Py_CLEAR(last_pair);
    Py_RETURN_NONE;
}

static PyObject *setup(PyObject *mod, PyObject *args) {
    PyObject *escape, *uuid;
    if (!PyArg_ParseTuple(args, "OO", &escape, &uuid)) return NULL;
    Py_XSETREF(escape_fn, Py_NewRef(escape));
    Py_XSETREF(uuid_fn, Py_NewRef(uuid));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"head", head, METH_O, head_doc},
    {"setup_head", setup_head, METH_VARARGS,
     PyDoc_STR("setup_head(endpoint_text, key_texts): the function giving an endpoint's JSON "
               "text and the dict of API keys' texts that head() uses.")},
    {"setup", setup, METH_VARARGS,
     PyDoc_STR("setup(escape, uuid_text): the string escaping and UUID text functions to use.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kproto.capture._jsontext",
    "Message bodies to JSON text in C (see kproto.capture.json_text).", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* The interface this source offers; kproto.accelerators.API names the one the Python
 * side expects, and a build whose number differs is not used. Bump both together. */
#define KPROTO_API 2

PyMODINIT_FUNC PyInit__jsontext(void) {
    b64_pairs_init();
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_client, "client"); INTERN(s_broker, "broker"); INTERN(s_ts, "ts");
    INTERN(s_kind, "kind"); INTERN(s_api_key, "api_key"); INTERN(s_api_version, "api_version");
    INTERN(s_decoded_as, "decoded_as"); INTERN(s_correlation_id, "correlation_id");
    INTERN(s_client_id, "client_id"); INTERN(s_request_end, "request_end");
    INTERN(s_response_end, "response_end"); INTERN(s_request_bytes, "request_bytes");
    INTERN(s_response_bytes, "response_bytes"); INTERN(s_round, "__round__");
#undef INTERN
    if ((three = PyLong_FromLong(3)) == NULL) return NULL;
    if (PyType_Ready(&WriterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Writer", (PyObject *)&WriterType) < 0
            || PyModule_AddIntConstant(m, "API", KPROTO_API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
