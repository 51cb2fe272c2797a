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

#define FAIL(msg, at) do { err = (msg); err_at = (int64_t)((at) - base); goto done; } while (0)
#define VARINT(dst, maxb, what) do { \
        int n_ = read_varint(q, rend, (maxb), &(dst)); \
        if (n_ <= 0) FAIL(n_ == 0 ? what " runs past the record" : what " is too long", q); \
        q += n_; } while (0)

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
    int bad_args = segs.len % (3 * 8) != 0 || out[10].len < count;
    for (int i = 0; i < N_OUT - 1; i++)
        bad_args |= out[i].len < count * 8;
    if (bad_args) {
        PyErr_SetString(PyExc_TypeError, "scan_v2: bad segment or output buffer sizes");
        goto release;
    }
    const uint8_t *base = (const uint8_t *)data.buf;
    const int64_t *seg = (const int64_t *)segs.buf;
    Py_ssize_t nseg = segs.len / 24;
    int64_t *ts = out[0].buf, *od = out[1].buf, *ks = out[2].buf, *kl = out[3].buf,
            *vs = out[4].buf, *vl = out[5].buf, *hc = out[6].buf, *hs = out[7].buf,
            *rs = out[8].buf, *re = out[9].buf;
    uint8_t *at = out[10].buf;
    Py_ssize_t k = 0;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t s = 0; s < nseg; s++) {
        int64_t sstart = seg[3 * s], send = seg[3 * s + 1], scount = seg[3 * s + 2];
        if (sstart < 0 || send < sstart || send > data.len || scount < 0 || k + scount > count) {
            err = "bad segment";
            err_at = sstart;
            goto done;
        }
        const uint8_t *p = base + sstart, *sendp = base + send;
        for (int64_t i = 0; i < scount; i++, k++) {
            const uint8_t *q = p, *rend = sendp;
            int64_t len, v, klen, vlen, hcount;
            VARINT(len, 5, "record length");
            if (len <= 0 || len > rend - q)
                FAIL("bad record length", p);
            rs[k] = p - base;
            rend = q + len;
            re[k] = rend - base;
            at[k] = *q++;
            VARINT(ts[k], 10, "timestamp delta");
            VARINT(od[k], 5, "offset delta");
            VARINT(klen, 5, "key length");
            if (klen < -1 || klen > rend - q)
                FAIL("bad key length", q);
            ks[k] = q - base;
            kl[k] = klen;
            q += klen > 0 ? klen : 0;
            VARINT(vlen, 5, "value length");
            if (vlen < -1 || vlen > rend - q)
                FAIL("bad value length", q);
            vs[k] = q - base;
            vl[k] = vlen;
            q += vlen > 0 ? vlen : 0;
            VARINT(hcount, 5, "header count");
            if (hcount < 0 || hcount > (rend - q) / 2)
                FAIL("bad header count", q);
            hc[k] = hcount;
            hs[k] = q - base;
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
    }
    if (k != count) {
        err = "record count does not match the segments";
        err_at = 0;
    }
done:
    Py_END_ALLOW_THREADS
    if (err) {
        PyObject *info = Py_BuildValue("(sL)", err, (long long)err_at);
        if (info) {
            PyErr_SetObject(PyExc_ValueError, info);
            Py_DECREF(info);
        }
    }
release:
    PyBuffer_Release(&data);
    PyBuffer_Release(&segs);
    for (int i = 0; i < N_OUT; i++)
        if (out[i].obj)
            PyBuffer_Release(&out[i]);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan_v2", scan_v2, METH_VARARGS, "Decode the varint fields of v2 records sections."},
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
