/* Optional accelerator for kproto.records.columns: one pass over the records sections of v2
 * batches that follows the record length prefixes (the serial dependency numpy cannot
 * vectorise) and decodes every record's varint fields into preallocated arrays.
 *
 * scan_v2(data, segments, count, ts_delta, off_delta, key_start, key_len, value_start,
 *         value_len, header_count, header_start, rec_start, rec_end, attributes)
 *   data      bytes-like, the concatenated (decompressed) records sections
 *   segments  int64[nseg * 3]: start, end, record count of each batch's section in data
 *   the rest  writable int64[count] arrays (attributes: uint8[count]) filled per record
 * Raises ValueError(reason, offset) on malformed records; never reads outside data.
 * The pure numpy path in columns.py is the reference; this must agree with it exactly.
 *
 * scan_parts (one buffer per records section, so that decompressed sections and sections
 * mapped from a file are never concatenated) and gather_binary (keys or values straight into
 * Arrow's classic binary layout, instead of views followed by a cast) serve the storage
 * reader's path to Arrow; see the comments at each.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define N_OUT 11

/* Zig-zag varint at p (at most maxbytes bytes, never past end). Returns the bytes consumed,
 * 0 if it runs past end, -1 if it is longer than maxbytes. */
static inline int read_varint(const uint8_t *p, const uint8_t *end, int maxbytes, int64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < maxbytes; i++) {
        if (p + i >= end)
            return 0;
        uint8_t b = p[i];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return i + 1;
        }
        shift += 7;
    }
    return -1;
}

/* Per-record outputs of a scan, all indexed by the record number k. */
typedef struct {
    int64_t *ts, *od, *ks, *kl, *vs, *vl, *hc, *hs, *rs, *re;
    uint8_t *at;
} scan_out;

#define FAIL(msg, at_) do { *err = (msg); *err_at = (int64_t)((at_) - base); return -1; } while (0)
#define VARINT(dst, maxb, what) do { \
        int n_ = read_varint(q, rend, (maxb), &(dst)); \
        if (n_ <= 0) FAIL(n_ == 0 ? what " runs past the record" : what " is too long", q); \
        q += n_; } while (0)

/* Decode the scount records of base[sstart:send] into o at record numbers k, k+1, ...
 * Positions written are relative to base. Returns 0, or -1 with *err and *err_at set. */
static int scan_section(const uint8_t *base, int64_t sstart, int64_t send, int64_t scount,
                        Py_ssize_t k, const scan_out *o, const char **err, int64_t *err_at)
{
    const uint8_t *p = base + sstart, *sendp = base + send;
    for (int64_t i = 0; i < scount; i++, k++) {
        const uint8_t *q = p, *rend = sendp;
        int64_t len, v, klen, vlen, hcount;
        VARINT(len, 5, "record length");
        if (len <= 0 || len > rend - q)
            FAIL("bad record length", p);
        o->rs[k] = p - base;
        rend = q + len;
        o->re[k] = rend - base;
        o->at[k] = *q++;
        VARINT(o->ts[k], 10, "timestamp delta");
        VARINT(o->od[k], 5, "offset delta");
        VARINT(klen, 5, "key length");
        if (klen < -1 || klen > rend - q)
            FAIL("bad key length", q);
        o->ks[k] = q - base;
        o->kl[k] = klen;
        q += klen > 0 ? klen : 0;
        VARINT(vlen, 5, "value length");
        if (vlen < -1 || vlen > rend - q)
            FAIL("bad value length", q);
        o->vs[k] = q - base;
        o->vl[k] = vlen;
        q += vlen > 0 ? vlen : 0;
        VARINT(hcount, 5, "header count");
        if (hcount < 0 || hcount > (rend - q) / 2)
            FAIL("bad header count", q);
        o->hc[k] = hcount;
        o->hs[k] = q - base;
        for (int64_t h = 0; h < hcount; h++) {
            VARINT(v, 5, "header key length");
            if (v < 0 || v > rend - q)
                FAIL("bad header key length", q);
            q += v;
            VARINT(v, 5, "header value length");
            if (v < -1 || v > rend - q)
                FAIL("bad header value length", q);
            q += v > 0 ? v : 0;
        }
        if (q != rend)
            FAIL("record fields do not fill the record length", p);
        p = rend;
    }
    if (p != sendp)
        FAIL("bytes left after the last record", p);
    return 0;
}

#undef FAIL

static int check_outputs(Py_buffer *out, Py_ssize_t count, const char *fn)
{
    int bad = out[10].len < count;
    for (int i = 0; i < N_OUT - 1; i++)
        bad |= out[i].len < count * 8;
    if (bad)
        PyErr_Format(PyExc_TypeError, "%s: output buffers too small", fn);
    return bad ? -1 : 0;
}

static void set_outputs(scan_out *o, Py_buffer *out)
{
    o->ts = out[0].buf; o->od = out[1].buf; o->ks = out[2].buf; o->kl = out[3].buf;
    o->vs = out[4].buf; o->vl = out[5].buf; o->hc = out[6].buf; o->hs = out[7].buf;
    o->rs = out[8].buf; o->re = out[9].buf; o->at = out[10].buf;
}

/* Release the output buffers of a scan; its result: None, or NULL with the error set. */
static PyObject *finish_outputs(Py_buffer *out)
{
    for (int i = 0; i < N_OUT; i++)
        if (out[i].obj)
            PyBuffer_Release(&out[i]);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static void set_scan_error(const char *err, int64_t err_at, Py_ssize_t part)
{
    PyObject *info = part < 0 ? Py_BuildValue("(sL)", err, (long long)err_at)
                              : Py_BuildValue("(sLn)", err, (long long)err_at, part);
    if (info) {
        PyErr_SetObject(PyExc_ValueError, info);
        Py_DECREF(info);
    }
}

static PyObject *scan_v2(PyObject *self, PyObject *args)
{
    Py_buffer data, segs, out[N_OUT];
    Py_ssize_t count;
    memset(out, 0, sizeof(out));
    if (!PyArg_ParseTuple(args, "y*y*nw*w*w*w*w*w*w*w*w*w*w*", &data, &segs, &count,
                          &out[0], &out[1], &out[2], &out[3], &out[4], &out[5], &out[6],
                          &out[7], &out[8], &out[9], &out[10]))
        return NULL;
    const char *err = NULL;
    int64_t err_at = 0;
    if (segs.len % (3 * 8) != 0) {
        PyErr_SetString(PyExc_TypeError, "scan_v2: bad segment buffer size");
        goto release;
    }
    if (check_outputs(out, count, "scan_v2") < 0)
        goto release;
    const uint8_t *base = (const uint8_t *)data.buf;
    const int64_t *seg = (const int64_t *)segs.buf;
    Py_ssize_t nseg = segs.len / 24;
    scan_out o;
    set_outputs(&o, out);
    Py_ssize_t k = 0;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t s = 0; s < nseg; s++) {
        int64_t sstart = seg[3 * s], send = seg[3 * s + 1], scount = seg[3 * s + 2];
        if (sstart < 0 || send < sstart || send > data.len || scount < 0 || k + scount > count) {
            err = "bad segment";
            err_at = sstart;
            break;
        }
        if (scan_section(base, sstart, send, scount, k, &o, &err, &err_at) < 0)
            break;
        k += scount;
    }
    if (!err && k != count) {
        err = "record count does not match the segments";
        err_at = 0;
    }
    Py_END_ALLOW_THREADS
    if (err)
        set_scan_error(err, err_at, -1);
release:
    PyBuffer_Release(&data);
    PyBuffer_Release(&segs);
    return finish_outputs(out);
}

/* Buffers of every item of a sequence of bytes-like objects (released by release_parts). */
static Py_buffer *get_parts(PyObject *seq, Py_ssize_t *nparts)
{
    PyObject *fast = PySequence_Fast(seq, "parts must be a sequence of bytes-like objects");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    Py_buffer *views = PyMem_Calloc(n > 0 ? n : 1, sizeof(Py_buffer));
    if (!views) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, i), &views[i], PyBUF_SIMPLE) < 0) {
            for (Py_ssize_t j = 0; j < i; j++)
                PyBuffer_Release(&views[j]);
            PyMem_Free(views);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    *nparts = n;
    return views;
}

static void release_parts(Py_buffer *views, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
}

/* scan_parts(parts, counts, ts, od, ks, kl, vs, vl, hc, hs, rs, re, attributes)
 * As scan_v2, but each batch's records section is its own buffer (no concatenation): part i
 * holds exactly counts[i] records and positions are relative to the part.
 * Raises ValueError(reason, offset, part index) on malformed records. */
static PyObject *scan_parts(PyObject *self, PyObject *args)
{
    PyObject *seq;
    Py_buffer cnts, out[N_OUT];
    memset(out, 0, sizeof(out));
    memset(&cnts, 0, sizeof(cnts));
    if (!PyArg_ParseTuple(args, "Oy*w*w*w*w*w*w*w*w*w*w*w*", &seq, &cnts, &out[0], &out[1],
                          &out[2], &out[3], &out[4], &out[5], &out[6], &out[7], &out[8],
                          &out[9], &out[10]))
        return NULL;
    Py_ssize_t nparts = 0;
    Py_buffer *parts = NULL;
    const char *err = NULL;
    int64_t err_at = 0;
    Py_ssize_t s = 0;
    const int64_t *counts = (const int64_t *)cnts.buf;
    Py_ssize_t count = 0;
    if (!(parts = get_parts(seq, &nparts)))
        goto release;
    if (cnts.len != nparts * 8) {
        PyErr_SetString(PyExc_TypeError, "scan_parts: one count per part");
        goto release;
    }
    for (s = 0; s < nparts; s++) {
        if (counts[s] < 0 || counts[s] > parts[s].len) {  /* a record takes at least a byte */
            PyErr_SetString(PyExc_ValueError, "scan_parts: bad record count");
            goto release;
        }
        count += counts[s];
    }
    if (check_outputs(out, count, "scan_parts") < 0)
        goto release;
    scan_out o;
    set_outputs(&o, out);
    Py_ssize_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (s = 0; s < nparts; s++) {
        if (scan_section(parts[s].buf, 0, parts[s].len, counts[s], k, &o, &err, &err_at) < 0)
            break;
        k += counts[s];
    }
    Py_END_ALLOW_THREADS
    if (err)
        set_scan_error(err, err_at, s);
release:
    if (parts)
        release_parts(parts, nparts);
    if (cnts.obj)
        PyBuffer_Release(&cnts);
    return finish_outputs(out);
}

/* gather_binary(parts, counts, start, length, offsets, data)
 * Arrow's classic binary layout of one field (key or value) of the records scan_parts found:
 * record k lies in the part its count puts it in, at int64 start[k] with int64 length[k]
 * (-1: null, stored as empty). Writes int32 offsets[count + 1] and the bytes to data, which
 * must hold exactly their sum; checks every range against its part. */
static PyObject *gather_binary(PyObject *self, PyObject *args)
{
    PyObject *seq;
    Py_buffer cnts, st, ln, offs, dst;
    memset(&cnts, 0, sizeof(cnts)); memset(&st, 0, sizeof(st)); memset(&ln, 0, sizeof(ln));
    memset(&offs, 0, sizeof(offs)); memset(&dst, 0, sizeof(dst));
    if (!PyArg_ParseTuple(args, "Oy*y*y*w*w*", &seq, &cnts, &st, &ln, &offs, &dst))
        return NULL;
    Py_ssize_t nparts = 0;
    Py_buffer *parts = NULL;
    const char *err = NULL;
    if (!(parts = get_parts(seq, &nparts)))
        goto release;
    const int64_t *counts = cnts.buf, *start = st.buf, *length = ln.buf;
    Py_ssize_t count = st.len / 8;
    Py_ssize_t total = 0;
    for (Py_ssize_t s = 0; s < nparts && cnts.len == nparts * 8; s++)
        total += counts[s] >= 0 ? counts[s] : count + 1;
    if (cnts.len != nparts * 8 || total != count || ln.len != st.len
            || offs.len != (count + 1) * 4) {
        PyErr_SetString(PyExc_TypeError, "gather_binary: inconsistent argument sizes");
        goto release;
    }
    int32_t *o = offs.buf;
    uint8_t *d = dst.buf;
    Py_ssize_t cap = dst.len;
    Py_BEGIN_ALLOW_THREADS
    int64_t at = 0;
    Py_ssize_t k = 0;
    o[0] = 0;
    for (Py_ssize_t s = 0; s < nparts && !err; s++) {
        const uint8_t *src = parts[s].buf;
        int64_t plen = parts[s].len;
        for (int64_t i = 0; i < counts[s]; i++, k++) {
            int64_t a = start[k], n = length[k] > 0 ? length[k] : 0;
            if (a < 0 || n > plen - a || n > cap - at || at + n > INT32_MAX) {
                err = "record range outside its part or the output";
                break;
            }
            memcpy(d + at, src + a, (size_t)n);
            at += n;
            o[k + 1] = (int32_t)at;
        }
    }
    if (!err && at != cap)
        err = "output size does not match the lengths";
    Py_END_ALLOW_THREADS
    if (err)
        PyErr_SetString(PyExc_ValueError, err);
release:
    if (parts)
        release_parts(parts, nparts);
    Py_buffer *bufs[] = {&cnts, &st, &ln, &offs, &dst};
    for (int i = 0; i < 5; i++)
        if (bufs[i]->obj)
            PyBuffer_Release(bufs[i]);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan_v2", scan_v2, METH_VARARGS, "Decode the varint fields of v2 records sections."},
    {"scan_parts", scan_parts, METH_VARARGS,
     "scan_v2 over one buffer per records section (no concatenation)."},
    {"gather_binary", gather_binary, METH_VARARGS,
     "Copy one field of every record into Arrow's binary layout (int32 offsets + data)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kproto.records._speedups",
    "Optional C accelerator for kproto.records.columns.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
