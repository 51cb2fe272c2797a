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
 *
 * frame_v2 and build_columns are the storage reader's one-pass path (kproto.storage.reader):
 * frame_v2 walks the v2 batch headers of a buffer, checking each batch's CRC-32C, into an
 * int64 table; build_columns turns the records of a run of those batches into the Arrow
 * buffers of every record column at once (keys and values copied once, the per-batch fields
 * spread over their records), and build_headers the headers' buffers. Both stop at the first
 * thing they do not expect and leave it to the Python path, which is the reference and
 * reports the damage.
 *
 * record_tuples turns decoded columns into a client's record tuples (see its comment).
 *
 * The producer's side: murmur2 is Kafka's Utils.murmur2 (the partitioner's hash of a key) and
 * encode_records writes the v2 records of a batch (DefaultRecord.writeTo), byte-exact with the
 * pure Python versions in kproto.client.partitioner and kproto.records.builder; resolve sets
 * the futures of an acknowledged batch (kproto.client.producer).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
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

/* One record's fields, positions relative to the buffer's base. */
typedef struct {
    int64_t rs, re, ts, od, ks, kl, vs, vl, hc, hs;
    uint8_t at;
} rec_fields;

/* Decode the record at *pp (never reading at or past sendp) into f and move *pp past it.
 * Returns 0, or -1 with *err and *err_at set. */
static inline int parse_record(const uint8_t *base, const uint8_t **pp, const uint8_t *sendp,
                               rec_fields *f, const char **err, int64_t *err_at)
{
    const uint8_t *p = *pp, *q = p, *rend = sendp;
    int64_t len, v;
    VARINT(len, 5, "record length");
    if (len <= 0 || len > rend - q)
        FAIL("bad record length", p);
    f->rs = p - base;
    rend = q + len;
    f->re = rend - base;
    f->at = *q++;
    VARINT(f->ts, 10, "timestamp delta");
    VARINT(f->od, 5, "offset delta");
    VARINT(f->kl, 5, "key length");
    if (f->kl < -1 || f->kl > rend - q)
        FAIL("bad key length", q);
    f->ks = q - base;
    q += f->kl > 0 ? f->kl : 0;
    VARINT(f->vl, 5, "value length");
    if (f->vl < -1 || f->vl > rend - q)
        FAIL("bad value length", q);
    f->vs = q - base;
    q += f->vl > 0 ? f->vl : 0;
    VARINT(f->hc, 5, "header count");
    if (f->hc < 0 || f->hc > (rend - q) / 2)
        FAIL("bad header count", q);
    f->hs = q - base;
    for (int64_t h = 0; h < f->hc; h++) {
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
    *pp = rend;
    return 0;
}

/* Decode the scount records of base[sstart:send] into o at record numbers k, k+1, ...
 * Positions written are relative to base. Returns 0, or -1 with *err and *err_at set. */
static int scan_section(const uint8_t *base, int64_t sstart, int64_t send, int64_t scount,
                        Py_ssize_t k, const scan_out *o, const char **err, int64_t *err_at)
{
    const uint8_t *p = base + sstart, *sendp = base + send;
    rec_fields f;
    for (int64_t i = 0; i < scount; i++, k++) {
        if (parse_record(base, &p, sendp, &f, err, err_at) < 0)
            return -1;
        o->rs[k] = f.rs; o->re[k] = f.re; o->at[k] = f.at; o->ts[k] = f.ts; o->od[k] = f.od;
        o->ks[k] = f.ks; o->kl[k] = f.kl; o->vs[k] = f.vs; o->vl[k] = f.vl; o->hc[k] = f.hc;
        o->hs[k] = f.hs;
    }
    if (p != sendp) {
        *err = "bytes left after the last record";
        *err_at = (int64_t)(p - base);
        return -1;
    }
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

/* Kafka's LogValidator checks of count records filling base[0:end - base] (see check_v2):
 * 1 with *max_ts and *max_at set when every one passes, else 0. */
static int check_records(const uint8_t *base, const uint8_t *end, int64_t count, int64_t first,
                         int create_time, int64_t now, int64_t before, int64_t after,
                         int check_ts, int need_keys, int64_t *max_ts, int64_t *max_at)
{
    const uint8_t *p = base;
    const char *err = NULL;
    int64_t err_at = 0, mts = INT64_MIN, mat = -1;
    rec_fields f;
    if (count <= 0)
        return 0;
    for (int64_t i = 0; i < count; i++) {
        if (parse_record(base, &p, end, &f, &err, &err_at) < 0 || f.od != i
                || (need_keys && f.kl < 0))
            return 0;
        int64_t ts = create_time ? (int64_t)((uint64_t)first + (uint64_t)f.ts) : first;
        if (check_ts && ((int64_t)((uint64_t)now - (uint64_t)ts) > before
                         || (int64_t)((uint64_t)ts - (uint64_t)now) > after))
            return 0;
        if (ts > mts || mat < 0) {
            mts = ts;
            mat = i;
        }
    }
    if (p != end)
        return 0;
    *max_ts = mts;
    *max_at = mat;
    return 1;
}

/* check_v2(data, count, first_timestamp, create_time, now_ms, before_max_ms, after_max_ms,
 *          check_timestamps, need_keys)
 * Kafka's LogValidator checks of one v2 batch's (decompressed) records section in one pass,
 * building nothing: exactly count well-formed records filling data, offset deltas 0, 1, ...,
 * with check_timestamps every timestamp within [now - before_max, now + after_max] (int64
 * arithmetic wrapping as numpy's), with need_keys every record keyed. A record's timestamp
 * is first_timestamp + its delta when create_time, else first_timestamp. Returns (max
 * timestamp, offset delta of the first record holding it), or None when any check fails:
 * the caller's columnar path (the reference) then reports what is wrong. */
static PyObject *check_v2(PyObject *self, PyObject *args)
{
    Py_buffer data;
    long long count, first, now, before, after;
    int create_time, check_ts, need_keys;
    if (!PyArg_ParseTuple(args, "y*LLpLLLpp", &data, &count, &first, &create_time, &now, &before,
                          &after, &check_ts, &need_keys))
        return NULL;
    const uint8_t *base = (const uint8_t *)data.buf;
    int64_t max_ts, max_at;
    int ok = check_records(base, base + data.len, count, first, create_time, now, before, after,
                           check_ts, need_keys, &max_ts, &max_at);
    PyBuffer_Release(&data);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)max_ts, (long long)max_at);
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

/* ------------------------------------------------------------------------------- CRC-32C
 * Kafka's batch checksum (Castagnoli). With SSE 4.2 three independent streams run at once
 * and are combined by "shift by n zero bytes" tables (the crc32 instruction has a latency of
 * three cycles and a throughput of one, so one stream would run at a third of the speed);
 * elsewhere a slicing-by-8 table. */
#define CRC_POLY 0x82f63b78u
#define CRC_LONG 8192
#define CRC_SHORT 256

static uint32_t crc_table[8][256];
static uint32_t crc_long[4][256], crc_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1)
            sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = gf2_times(mat, mat[n]);
}

/* The operator appending len zero bytes (len a power of two) to a raw CRC register. */
static void crc_zeros_op(uint32_t *even, size_t len)
{
    uint32_t odd[32], row = 1;
    odd[0] = CRC_POLY;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd);  /* two zero bits */
    gf2_square(odd, even);  /* four */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0)
            return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void crc_zeros(uint32_t zeros[][256], size_t len)
{
    uint32_t op[32];
    crc_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff]
        ^ zeros[3][crc >> 24];
}

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC_POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
    crc_zeros(crc_long, CRC_LONG);
    crc_zeros(crc_short, CRC_SHORT);
}

static uint32_t crc32c_sw(const uint8_t *p, size_t len)
{
    uint32_t crc = 0xffffffffu;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff]
            ^ crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff]
            ^ crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff]
            ^ crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
#endif
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))   /* _mm_crc32_u64: 64-bit x86 only */
#include <nmmintrin.h>
#define HAVE_CRC_HW 1

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(const uint8_t *p, size_t len)
{
    uint64_t c0 = 0xffffffffu, c1, c2;
    while (len >= 3 * CRC_LONG) {
        c1 = c2 = 0;
        const uint8_t *stop = p + CRC_LONG;
        do {
            c0 = _mm_crc32_u64(c0, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + CRC_LONG));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * CRC_LONG));
            p += 8;
        } while (p < stop);
        c0 = crc_shift(crc_long, (uint32_t)c0) ^ c1;
        c0 = crc_shift(crc_long, (uint32_t)c0) ^ c2;
        p += 2 * CRC_LONG;
        len -= 3 * CRC_LONG;
    }
    while (len >= 3 * CRC_SHORT) {
        c1 = c2 = 0;
        const uint8_t *stop = p + CRC_SHORT;
        do {
            c0 = _mm_crc32_u64(c0, load64(p));
            c1 = _mm_crc32_u64(c1, load64(p + CRC_SHORT));
            c2 = _mm_crc32_u64(c2, load64(p + 2 * CRC_SHORT));
            p += 8;
        } while (p < stop);
        c0 = crc_shift(crc_short, (uint32_t)c0) ^ c1;
        c0 = crc_shift(crc_short, (uint32_t)c0) ^ c2;
        p += 2 * CRC_SHORT;
        len -= 3 * CRC_SHORT;
    }
    while (len >= 8) {
        c0 = _mm_crc32_u64(c0, load64(p));
        p += 8;
        len -= 8;
    }
    while (len--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0 ^ 0xffffffffu;
}
#endif

static int crc_hw;  /* set at import when the CPU has the instruction */

static uint32_t crc32c(const uint8_t *p, size_t len)
{
#ifdef HAVE_CRC_HW
    if (crc_hw)
        return crc32c_hw(p, len);
#endif
    return crc32c_sw(p, len);
}

/* crc32c(data[, software]) -> int: the CRC-32C of data (software=True: the table path). */
static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer data;
    int software = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &data, &software))
        return NULL;
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS
    c = software ? crc32c_sw(data.buf, (size_t)data.len) : crc32c(data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

/* ------------------------------------------------------------------------- batch framing */
/* Columns of the batch table (one int64 row per v2 batch), as kproto.records.columns names
 * them (FRAME_FIELDS). */
enum { F_POS, F_SIZE, F_BASE, F_EPOCH, F_ATTR, F_LOD, F_FTS, F_MTS, F_PID, F_PEPOCH, F_BSEQ,
       F_COUNT, F_CRC, F_CRC_COMPUTED, NF };

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline int64_t be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4));
}

static inline int16_t be16(const uint8_t *p)
{
    return (int16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* leader_batch(records, now, before_max, after_max, check_ts, need_keys, log_append_time,
 *              base_offset, leader_epoch) -> (batch bytes, max timestamp, its offset delta) | None
 * A produce request's records for one partition, when they are exactly one uncompressed v2
 * batch that every check of Kafka's LogValidator passes (framing, count, CRC, no control
 * batch, a sequence for a producer id, a producer id for a transaction, the records as
 * check_v2 checks them): a copy with Kafka's offset assignment applied (base offset, partition
 * leader epoch; the timestamp type and max timestamp set from the records, or to now under
 * LogAppendTime, the CRC recomputed when they change), in one pass over the bytes. None in any
 * other case: the caller's general path then reads the records and reports what is wrong. */
static PyObject *leader_batch(PyObject *self, PyObject *args)
{
    Py_buffer in;
    long long now, before, after, base_offset;
    int check_ts, need_keys, log_append, leader_epoch;
    if (!PyArg_ParseTuple(args, "y*LLLpppLi", &in, &now, &before, &after, &check_ts, &need_keys,
                          &log_append, &base_offset, &leader_epoch))
        return NULL;
    const uint8_t *b = (const uint8_t *)in.buf;
    Py_ssize_t n = in.len;
    PyObject *out = NULL;
    int64_t max_ts = INT64_MIN, max_at = -1;
    if (n < 61 || b[16] != 2 || (int64_t)be32(b + 8) + 12 != n)
        goto none;
    int16_t attrs = be16(b + 21);
    int32_t lod = be32(b + 23), count = be32(b + 57);
    int64_t first = be64(b + 27), stored_max = be64(b + 35), pid = be64(b + 43);
    int32_t base_seq = be32(b + 53);
    /* uncompressed (a codec: the general path decompresses), no control batch, count = last
     * offset delta + 1 > 0, a sequence with a producer id, a producer id with a transaction */
    if ((attrs & 0x07) || (attrs & 0x20) || count <= 0 || (int64_t)lod + 1 != count
            || (pid >= 0 && base_seq < 0) || ((attrs & 0x10) && pid < 0))
        goto none;
    if (crc32c(b + 21, (size_t)(n - 21)) != (uint32_t)be32(b + 17))
        goto none;
    int create_time = !(attrs & 0x08);
    if (!check_records(b + 61, b + n, count, first, create_time, now, before, after, check_ts,
                       need_keys, &max_ts, &max_at))
        goto none;
    if (log_append) {
        max_ts = now;
        max_at = 0;
    }
    int16_t new_attrs = log_append ? (int16_t)(attrs | 0x08) : (int16_t)(attrs & ~0x08);
    out = PyBytes_FromStringAndSize((const char *)b, n);
    if (out == NULL)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    put_be64(o, (uint64_t)base_offset);
    put_be32(o + 12, (uint32_t)leader_epoch);
    if (new_attrs != attrs || stored_max != max_ts) {
        o[21] = (uint8_t)((uint16_t)new_attrs >> 8);
        o[22] = (uint8_t)new_attrs;
        put_be64(o + 35, (uint64_t)max_ts);
        put_be32(o + 17, crc32c(o + 21, (size_t)(n - 21)));
    }
    PyBuffer_Release(&in);
    return Py_BuildValue("(NLL)", out, (long long)max_ts, (long long)max_at);
none:
    PyBuffer_Release(&in);
    Py_RETURN_NONE;
done:
    PyBuffer_Release(&in);
    return NULL;
}

/* frame_v2(buf, pos, end, max_bytes, table[, crc]) -> (batches, next position, stop)
 * Reads the v2 batches of buf[pos:end] into rows of table (int64, NF columns), computing each
 * one's CRC-32C (unless crc is False: the column is -1 then, for the caller to fill), as long
 * as each is a whole, well-formed v2 batch as kproto.records.reader's
 * BatchReader and RecordBatch accept it. Stops after the batch that brings the bytes covered
 * to max_bytes or fills the table (stop 1), at end exactly (stop 0), or before anything else
 * (stop 2: fewer than 12 bytes, a torn tail, a bad size, another magic, a negative count),
 * which the Python reader then reads and reports. */
static PyObject *frame_v2(PyObject *self, PyObject *args)
{
    Py_buffer buf, tab;
    Py_ssize_t pos, end, max_bytes;
    int with_crc = 1;
    if (!PyArg_ParseTuple(args, "y*nnnw*|p", &buf, &pos, &end, &max_bytes, &tab, &with_crc))
        return NULL;
    Py_ssize_t rows = tab.len / (NF * 8), k = 0;
    int stop = 2;
    if (pos < 0 || end > buf.len || pos > end || tab.len % (NF * 8) != 0) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&tab);
        PyErr_SetString(PyExc_ValueError, "frame_v2: bad range or table");
        return NULL;
    }
    const uint8_t *b = buf.buf;
    int64_t *t = tab.buf;
    Py_ssize_t covered = 0;
    Py_BEGIN_ALLOW_THREADS
    while (1) {
        if (pos == end) {
            stop = 0;
            break;
        }
        if (k == rows || covered >= max_bytes) {
            stop = 1;
            break;
        }
        if (end - pos < 12)
            break;
        const uint8_t *h = b + pos;
        int64_t length = be32(h + 8);
        /* BatchReader: below 14 is corrupt, past the end a torn tail; RecordBatch: a v2
         * batch needs its 61-byte header; another magic is the legacy reader's */
        if (length < 49 || length > end - pos - 12 || h[16] != 2)
            break;
        int64_t size = 12 + length;
        int32_t count = be32(h + 57);
        if (count < 0)
            break;
        int64_t *r = t + k * NF;
        r[F_POS] = pos;
        r[F_SIZE] = size;
        r[F_BASE] = be64(h);
        r[F_EPOCH] = be32(h + 12);
        r[F_CRC] = (uint32_t)be32(h + 17);
        r[F_ATTR] = be16(h + 21);
        r[F_LOD] = be32(h + 23);
        r[F_FTS] = be64(h + 27);
        r[F_MTS] = be64(h + 35);
        r[F_PID] = be64(h + 43);
        r[F_PEPOCH] = be16(h + 51);
        r[F_BSEQ] = be32(h + 53);
        r[F_COUNT] = count;
        r[F_CRC_COMPUTED] = with_crc ? (int64_t)crc32c(h + 21, (size_t)(size - 21)) : -1;
        k++;
        pos += size;
        covered += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&tab);
    return Py_BuildValue("nni", k, pos, stop);
}

/* ------------------------------------------------------------------------ column builder */
/* Outputs of build_columns, in the order of the outs sequence (kproto.records.columns
 * BUILD_OUTPUTS); per-batch ones may be None (the caller has a constant array for them). */
enum { O_OFFSET, O_TIMESTAMP, O_TS_TYPE, O_KEY_OFFS, O_KEY_VALID, O_KEY_DATA, O_VALUE_OFFS,
       O_VALUE_VALID, O_VALUE_DATA, O_HEADER_OFFS, O_EPOCH, O_PID, O_PEPOCH, O_BSEQ, O_TXN,
       O_CONTROL, O_POSITION, N_BUILD_OUT };
/* Outputs of build_headers (HEADER_OUTPUTS). */
enum { OH_KEY_OFFS, OH_KEY_DATA, OH_VALUE_OFFS, OH_VALUE_VALID, OH_VALUE_DATA, N_HEADER_OUT };

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF): what Python decodes
 * without replacing anything. */
static int utf8_valid(const uint8_t *s, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return 0;
        if (n - i <= need)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int j = 2; j <= need; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xBF)
                return 0;
        i += need + 1;
    }
    return 1;
}

typedef struct {
    /* inputs */
    const uint8_t *base;
    int64_t base_len;
    Py_buffer *parts;
    Py_ssize_t nparts;
    const int64_t *hdr;
    Py_ssize_t nb;
    int64_t shift, n;
    /* outputs (NULL when not wanted) */
    uint8_t *o[N_BUILD_OUT];
    int64_t cap[N_BUILD_OUT];
    uint8_t *h[N_HEADER_OUT];
    int64_t hcap[N_HEADER_OUT];
    /* results */
    int64_t key_bytes, value_bytes, key_nulls, value_nulls, headers, header_key_bytes,
        header_value_bytes;
    int utf8;
    const char *err;
} build_ctx;

#define BAIL(msg) do { c->err = (msg); return -1; } while (0)
#define RV(dst, maxb) do { \
        int n_ = read_varint(q, rend, (maxb), &(dst)); \
        if (n_ <= 0) BAIL("bad varint"); \
        q += n_; } while (0)

/* One walk over the records of every batch of c->hdr. headers_pass 0: every column but the
 * headers' content (which is counted and checked); 1: the headers' buffers only. The checks
 * are those of scan_section and parse_headers: any failure returns -1 and the caller's
 * Python path decodes the batches again, reporting what it finds. */
static int build_walk(build_ctx *c, int headers_pass)
{
    int64_t k = 0, koff = 0, voff = 0, hk = 0, hkoff = 0, hvoff = 0;
    int64_t *offset = (int64_t *)c->o[O_OFFSET], *ts = (int64_t *)c->o[O_TIMESTAMP];
    int8_t *tstype = (int8_t *)c->o[O_TS_TYPE];
    int32_t *koffs = (int32_t *)c->o[O_KEY_OFFS], *voffs = (int32_t *)c->o[O_VALUE_OFFS];
    int32_t *hoffs = (int32_t *)c->o[O_HEADER_OFFS];
    uint8_t *kvalid = c->o[O_KEY_VALID], *vvalid = c->o[O_VALUE_VALID];
    uint8_t *kdata = c->o[O_KEY_DATA], *vdata = c->o[O_VALUE_DATA];
    int32_t *epoch = (int32_t *)c->o[O_EPOCH], *bseq = (int32_t *)c->o[O_BSEQ];
    int64_t *pid = (int64_t *)c->o[O_PID], *position = (int64_t *)c->o[O_POSITION];
    int16_t *pepoch = (int16_t *)c->o[O_PEPOCH];
    uint8_t *txn = c->o[O_TXN], *control = c->o[O_CONTROL];
    int64_t kcap = c->cap[O_KEY_DATA], vcap = c->cap[O_VALUE_DATA];
    int32_t *hkoffs = (int32_t *)c->h[OH_KEY_OFFS], *hvoffs = (int32_t *)c->h[OH_VALUE_OFFS];
    uint8_t *hkdata = c->h[OH_KEY_DATA], *hvdata = c->h[OH_VALUE_DATA];
    uint8_t *hvvalid = c->h[OH_VALUE_VALID];
    int64_t hkcap = c->hcap[OH_KEY_DATA], hvcap = c->hcap[OH_VALUE_DATA];
    int64_t hcount_cap = c->headers;  /* build_headers checked every output against it */
    Py_ssize_t part = 0;

    if (!headers_pass) {
        koffs[0] = voffs[0] = hoffs[0] = 0;
        c->utf8 = 1;
    } else {
        hkoffs[0] = hvoffs[0] = 0;
    }
    for (Py_ssize_t b = 0; b < c->nb; b++) {
        const int64_t *r = c->hdr + b * NF;
        int64_t count = r[F_COUNT];
        if (count == 0)
            continue;  /* as Kafka: an empty batch's records section is never read */
        int attr = (int)r[F_ATTR];
        const uint8_t *sec;
        int64_t slen;
        if ((attr & 7) == 0) {
            if (r[F_POS] < 0 || r[F_SIZE] < 61 || r[F_POS] > c->base_len - r[F_SIZE])
                BAIL("batch outside the buffer");
            sec = c->base + r[F_POS] + 61;
            slen = r[F_SIZE] - 61;
        } else {
            if (part >= c->nparts)
                BAIL("fewer parts than compressed batches");
            sec = c->parts[part].buf;
            slen = c->parts[part].len;
            part++;
        }
        if (count < 0 || count > slen / 7 || count > c->n - k)
            BAIL("record count does not fit");
        int log_append = (attr & 0x08) != 0;
        int64_t base_off = r[F_BASE];
        int64_t first_ts = log_append ? r[F_MTS] : r[F_FTS];
        const uint8_t *p = sec, *send = sec + slen;
        for (int64_t i = 0; i < count; i++, k++) {
            const uint8_t *q = p, *rend = send;
            int64_t len, tsd, od, klen, vlen, hcount, v;
            RV(len, 5);
            if (len <= 0 || len > rend - q)
                BAIL("bad record length");
            rend = q + len;
            q++;  /* attributes */
            RV(tsd, 10);
            RV(od, 5);
            RV(klen, 5);
            if (klen < -1 || klen > rend - q)
                BAIL("bad key length");
            const uint8_t *kp = q;
            q += klen > 0 ? klen : 0;
            RV(vlen, 5);
            if (vlen < -1 || vlen > rend - q)
                BAIL("bad value length");
            const uint8_t *vp = q;
            q += vlen > 0 ? vlen : 0;
            RV(hcount, 5);
            if (hcount < 0 || hcount > (rend - q) / 2)
                BAIL("bad header count");
            for (int64_t j = 0; j < hcount; j++) {
                RV(v, 5);
                if (v < 0 || v > rend - q)
                    BAIL("bad header key length");
                if (!headers_pass) {
                    if (c->utf8 && !utf8_valid(q, v))
                        c->utf8 = 0;
                    c->header_key_bytes += v;
                } else {
                    if (hk >= hcount_cap || v > hkcap - hkoff)
                        BAIL("header outputs too small");
                    memcpy(hkdata + hkoff, q, (size_t)v);
                    hkoff += v;
                    hkoffs[hk + 1] = (int32_t)hkoff;
                }
                q += v;
                RV(v, 5);
                if (v < -1 || v > rend - q)
                    BAIL("bad header value length");
                if (!headers_pass) {
                    c->header_value_bytes += v > 0 ? v : 0;
                } else {
                    if (v >= 0) {
                        if (v > hvcap - hvoff)
                            BAIL("header outputs too small");
                        memcpy(hvdata + hvoff, q, (size_t)v);
                        hvoff += v;
                        hvvalid[hk >> 3] |= (uint8_t)(1u << (hk & 7));
                    }
                    hvoffs[hk + 1] = (int32_t)hvoff;
                    hk++;
                }
                q += v > 0 ? v : 0;
            }
            if (q != rend)
                BAIL("record fields do not fill the record length");
            p = rend;
            if (headers_pass)
                continue;
            c->headers += hcount;
            if (c->headers > INT32_MAX)
                BAIL("too many headers");
            hoffs[k + 1] = (int32_t)c->headers;
            offset[k] = (int64_t)((uint64_t)base_off + (uint64_t)od);
            ts[k] = log_append ? first_ts : (int64_t)((uint64_t)first_ts + (uint64_t)tsd);
            tstype[k] = (int8_t)log_append;
            if (klen >= 0) {
                if (klen > kcap - koff)
                    BAIL("key outputs too small");
                memcpy(kdata + koff, kp, (size_t)klen);
                koff += klen;
                kvalid[k >> 3] |= (uint8_t)(1u << (k & 7));
            } else
                c->key_nulls++;
            if (vlen >= 0) {
                if (vlen > vcap - voff)
                    BAIL("value outputs too small");
                memcpy(vdata + voff, vp, (size_t)vlen);
                voff += vlen;
                vvalid[k >> 3] |= (uint8_t)(1u << (k & 7));
            } else
                c->value_nulls++;
            if (koff > INT32_MAX || voff > INT32_MAX)
                BAIL("more than 2 GiB of keys or values");
            koffs[k + 1] = (int32_t)koff;
            voffs[k + 1] = (int32_t)voff;
        }
        if (p != send)
            BAIL("bytes left after the last record");
        if (headers_pass)
            continue;
        /* the batch's fields, spread over its records */
        int64_t k0 = k - count;
        if (epoch)
            for (int64_t j = k0; j < k; j++) epoch[j] = (int32_t)r[F_EPOCH];
        if (pid)
            for (int64_t j = k0; j < k; j++) pid[j] = r[F_PID];
        if (pepoch)
            for (int64_t j = k0; j < k; j++) pepoch[j] = (int16_t)r[F_PEPOCH];
        if (bseq)
            for (int64_t j = k0; j < k; j++) bseq[j] = (int32_t)r[F_BSEQ];
        if (position)
            for (int64_t j = k0; j < k; j++) position[j] = r[F_POS] + c->shift;
        if (txn && (attr & 0x10))
            for (int64_t j = k0; j < k; j++) txn[j >> 3] |= (uint8_t)(1u << (j & 7));
        if (control && (attr & 0x20))
            for (int64_t j = k0; j < k; j++) control[j >> 3] |= (uint8_t)(1u << (j & 7));
    }
    if (k != c->n)
        BAIL("record count does not match");
    if (part != c->nparts)
        BAIL("more parts than compressed batches");
    if (!headers_pass) {
        c->key_bytes = koff;
        c->value_bytes = voff;
    } else if (hk != c->headers || hkoff != c->header_key_bytes || hvoff != c->header_value_bytes)
        BAIL("headers differ between the passes");
    return 0;
}

#undef RV
#undef BAIL

/* Writable buffers of a sequence of n objects (None: not wanted), each of at least need[i]
 * bytes (need[i] < 0: any size); zeroes those listed in zero. */
static int get_outs(PyObject *seq, int n, const int64_t *need, const int *zero, Py_buffer *views,
                    uint8_t **ptr, int64_t *cap, const char *fn)
{
    PyObject *fast = PySequence_Fast(seq, "outs must be a sequence");
    if (!fast)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_TypeError, "%s: %d outputs expected", fn, n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(fast, i);
        ptr[i] = NULL;
        cap[i] = 0;
        if (it == Py_None)
            continue;
        if (PyObject_GetBuffer(it, &views[i], PyBUF_WRITABLE) < 0) {
            Py_DECREF(fast);
            return -1;
        }
        ptr[i] = views[i].buf;
        cap[i] = views[i].len;
        if (need[i] >= 0 && cap[i] < need[i]) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_ValueError, "%s: output %d too small", fn, i);
            return -1;
        }
        if (zero[i])
            memset(ptr[i], 0, (size_t)cap[i]);
    }
    Py_DECREF(fast);
    return 0;
}

static void release_views(Py_buffer *views, int n)
{
    for (int i = 0; i < n; i++)
        if (views[i].obj)
            PyBuffer_Release(&views[i]);
}

/* Common arguments of build_columns and build_headers: (base, parts, table, n, shift). */
static int build_inputs(build_ctx *c, Py_buffer *base, Py_buffer *tab, PyObject *parts,
                        Py_ssize_t n)
{
    c->base = base->buf;
    c->base_len = base->len;
    c->hdr = tab->buf;
    c->nb = tab->len / (NF * 8);
    c->n = n;
    if (tab->len % (NF * 8) != 0 || n < 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "bad batch table or record count");
        return -1;
    }
    if (!(c->parts = get_parts(parts, &c->nparts)))
        return -1;
    return 0;
}

/* build_columns(base, parts, table, n, shift, outs) -> (key bytes, value bytes, null keys,
 * null values, headers, header key bytes, header value bytes, header keys all UTF-8)
 * The records of the batches in table (rows of frame_v2) as Arrow buffers: a batch without
 * compression is read in base at its position, a compressed one from the next item of parts
 * (its decompressed records section; batches without records have none). outs: writable
 * buffers for int64 offset[n], int64 timestamp[n], int8 timestamp_type[n], key int32
 * offsets[n+1], validity[(n+7)/8] and data (room for every key), the same for values, headers
 * int32 list offsets[n+1], then per-batch fields spread over their records or None: int32
 * leader_epoch, int64 producer_id, int16 producer_epoch, int32 base_sequence, the
 * is_transactional and is_control bitmaps, int64 position (the batch's + shift). Raises
 * ValueError on anything not as expected (malformed records included). */
static PyObject *build_columns(PyObject *self, PyObject *args)
{
    Py_buffer base, tab, views[N_BUILD_OUT];
    PyObject *parts, *outs;
    Py_ssize_t n;
    long long shift;
    build_ctx c;
    memset(&c, 0, sizeof(c));
    memset(views, 0, sizeof(views));
    if (!PyArg_ParseTuple(args, "y*Oy*nLO", &base, &parts, &tab, &n, &shift, &outs))
        return NULL;
    PyObject *result = NULL;
    c.shift = shift;
    if (build_inputs(&c, &base, &tab, parts, n) < 0)
        goto done;
    int64_t bits = (n + 7) / 8;
    int64_t need[N_BUILD_OUT] = {8 * n, 8 * n, n, 4 * (n + 1), bits, -1, 4 * (n + 1), bits, -1,
                                 4 * (n + 1), 4 * n, 8 * n, 2 * n, 4 * n, bits, bits, 8 * n};
    int zero[N_BUILD_OUT] = {0};
    zero[O_KEY_VALID] = zero[O_VALUE_VALID] = zero[O_TXN] = zero[O_CONTROL] = 1;
    if (get_outs(outs, N_BUILD_OUT, need, zero, views, c.o, c.cap, "build_columns") < 0)
        goto done;
    for (int i = 0; i <= O_HEADER_OFFS; i++)
        if (!c.o[i]) {
            PyErr_SetString(PyExc_TypeError, "build_columns: the record columns are needed");
            goto done;
        }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = build_walk(&c, 0);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_SetString(PyExc_ValueError, c.err);
    else
        result = Py_BuildValue("(LLLLLLLO)", (long long)c.key_bytes, (long long)c.value_bytes,
                               (long long)c.key_nulls, (long long)c.value_nulls,
                               (long long)c.headers, (long long)c.header_key_bytes,
                               (long long)c.header_value_bytes, c.utf8 ? Py_True : Py_False);
done:
    if (c.parts)
        release_parts(c.parts, c.nparts);
    release_views(views, N_BUILD_OUT);
    PyBuffer_Release(&base);
    PyBuffer_Release(&tab);
    return result;
}

/* build_headers(base, parts, table, n, (headers, key bytes, value bytes), outs)
 * The headers of the records build_columns read (the same arguments), with the totals it
 * returned: outs are header key int32 offsets[headers+1] and data[key bytes], header value
 * int32 offsets[headers+1], validity[(headers+7)/8] and data[value bytes]. */
static PyObject *build_headers(PyObject *self, PyObject *args)
{
    Py_buffer base, tab, views[N_HEADER_OUT];
    PyObject *parts, *outs;
    Py_ssize_t n;
    long long total, kbytes, vbytes;
    build_ctx c;
    memset(&c, 0, sizeof(c));
    memset(views, 0, sizeof(views));
    if (!PyArg_ParseTuple(args, "y*Oy*n(LLL)O", &base, &parts, &tab, &n, &total, &kbytes,
                          &vbytes, &outs))
        return NULL;
    PyObject *result = NULL;
    if (build_inputs(&c, &base, &tab, parts, n) < 0)
        goto done;
    if (total < 0 || kbytes < 0 || vbytes < 0 || total >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "build_headers: bad totals");
        goto done;
    }
    c.headers = total;
    c.header_key_bytes = kbytes;
    c.header_value_bytes = vbytes;
    int64_t need[N_HEADER_OUT] = {4 * (total + 1), kbytes, 4 * (total + 1), (total + 7) / 8,
                                  vbytes};
    int zero[N_HEADER_OUT] = {0, 0, 0, 1, 0};
    if (get_outs(outs, N_HEADER_OUT, need, zero, views, c.h, c.hcap, "build_headers") < 0)
        goto done;
    for (int i = 0; i < N_HEADER_OUT; i++)
        if (!c.h[i]) {
            PyErr_SetString(PyExc_TypeError, "build_headers: every output is needed");
            goto done;
        }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = build_walk(&c, 1);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_SetString(PyExc_ValueError, c.err);
    else
        result = Py_NewRef(Py_None);
done:
    if (c.parts)
        release_parts(c.parts, c.nparts);
    release_views(views, N_HEADER_OUT);
    PyBuffer_Release(&base);
    PyBuffer_Release(&tab);
    return result;
}

/* A field's bytes (None for length -1), or NULL with ValueError when it leaves data. */
static PyObject *field_bytes(const uint8_t *data, Py_ssize_t len, int64_t start, int32_t n)
{
    if (n == -1)
        Py_RETURN_NONE;
    if (n < -1 || start < 0 || start > len || (int64_t)n > len - start) {
        PyErr_SetString(PyExc_ValueError, "record_tuples: a field lies outside the data");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)data + start, n);
}

/* record_tuples(cls, topic, partition, data, offset, timestamp, key_start, key_len,
 *               value_start, value_len, headers, first)
 * The records first.. of decoded columns as instances of cls, a tuple subclass of seven
 * fields (topic, partition, offset, timestamp, key, value, headers), e.g. a client's record
 * NamedTuple. offset, timestamp, key_start, value_start: int64[n]; key_len, value_len:
 * int32[n]; headers: a list of n tuples or None (every record's headers ()). Every key and
 * value is checked against data. A record whose items cannot form a reference cycle (all
 * but a tracked headers tuple) is left untracked by the garbage collector, as CPython does
 * for such plain tuples: a fetch's records do not slow every collection down. */
static PyObject *record_tuples(PyObject *self, PyObject *args)
{
    PyObject *cls, *topic, *partition, *headers;
    Py_buffer data, off, ts, ks, kl, vs, vl;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "O!OOy*y*y*y*y*y*y*On", &PyType_Type, &cls, &topic, &partition,
                          &data, &off, &ts, &ks, &kl, &vs, &vl, &headers, &first))
        return NULL;
    PyObject *out = NULL;
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t n = off.len / 8;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_tuples: cls must be a tuple subclass");
        goto done;
    }
    if (off.len != 8 * n || ts.len != 8 * n || ks.len != 8 * n || vs.len != 8 * n
            || kl.len != 4 * n || vl.len != 4 * n || first < 0 || first > n) {
        PyErr_SetString(PyExc_ValueError, "record_tuples: column lengths differ");
        goto done;
    }
    if (headers != Py_None && (!PyList_CheckExact(headers) || PyList_GET_SIZE(headers) != n)) {
        PyErr_SetString(PyExc_ValueError, "record_tuples: headers must be a list of n tuples");
        goto done;
    }
    const uint8_t *d = (const uint8_t *)data.buf;
    const int64_t *o = off.buf, *t = ts.buf, *kst = ks.buf, *vst = vs.buf;
    const int32_t *kln = kl.buf, *vln = vl.buf;
    PyObject *empty = PyTuple_New(0);
    if (!empty)
        goto done;
    out = PyList_New(n - first);
    for (Py_ssize_t i = first; out && i < n; i++) {
        /* an exact tuple from tuple's own allocator: its deallocator keeps free lists */
        PyObject *rec = type == &PyTuple_Type ? PyTuple_New(7) : type->tp_alloc(type, 7);
        if (!rec) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i - first, rec); /* the list owns it, filled or not */
        PyObject *h = headers == Py_None ? empty : PyList_GET_ITEM(headers, i);
        PyObject *items[7] = {
            Py_NewRef(topic), Py_NewRef(partition), PyLong_FromLongLong(o[i]),
            PyLong_FromLongLong(t[i]), field_bytes(d, data.len, kst[i], kln[i]),
            field_bytes(d, data.len, vst[i], vln[i]), Py_NewRef(h)};
        int ok = 1;
        for (int j = 0; j < 7; j++) {
            ok &= items[j] != NULL;
            PyTuple_SET_ITEM(rec, j, items[j]);
        }
        if (!ok) {
            Py_CLEAR(out);
            break;
        }
        if (!PyObject_GC_IsTracked(topic) && !PyObject_GC_IsTracked(partition)
                && !PyObject_GC_IsTracked(h))
            PyObject_GC_UnTrack(rec);
    }
    Py_DECREF(empty);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&off);
    PyBuffer_Release(&ts);
    PyBuffer_Release(&ks);
    PyBuffer_Release(&kl);
    PyBuffer_Release(&vs);
    PyBuffer_Release(&vl);
    return out;
}

/* murmur2(data) -> Kafka's Utils.murmur2 of a bytes-like object, a signed 32-bit int. */
static PyObject *py_murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *d = (const uint8_t *)b.buf;
    Py_ssize_t length = b.len;
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t n4 = length >> 2;
    for (Py_ssize_t i = 0; i < n4; i++) {
        const uint8_t *q = d + 4 * i;
        uint32_t k = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t base = length & ~(Py_ssize_t)3;
    switch (length & 3) {
    case 3: h ^= (uint32_t)d[base + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)d[base + 1] << 8;  /* fall through */
    case 1: h ^= d[base]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&b);
    return PyLong_FromLong((long)(int32_t)h);
}

/* A growable output buffer for encode_records. */
typedef struct {
    uint8_t *p;
    Py_ssize_t len, cap;
} wbuf;

static int wb_reserve(wbuf *w, Py_ssize_t extra)
{
    if (extra > PY_SSIZE_T_MAX / 2 - w->len) {
        PyErr_NoMemory();
        return -1;
    }
    if (w->len + extra <= w->cap)
        return 0;
    Py_ssize_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + extra)
        cap *= 2;
    uint8_t *p = PyMem_Realloc(w->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    w->p = p;
    w->cap = cap;
    return 0;
}

/* Zig-zag varint of v into w (room for 10 bytes reserved by the caller). */
static inline void put_varint(wbuf *w, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        w->p[w->len++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    w->p[w->len++] = (uint8_t)z;
}

/* A nullable bytes field: varint length (-1 for None) then the bytes. Its bytes-like view is
 * taken in get_field and released by the caller. */
static int get_field(PyObject *o, Py_buffer *b, const char *what)
{
    if (o == Py_None) {
        b->obj = NULL;
        b->buf = NULL;
        b->len = -1;
        return 0;
    }
    if (PyObject_GetBuffer(o, b, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "encode_records: a record's %s must be bytes-like or None", what);
        return -1;
    }
    return 0;
}

static int put_field(wbuf *w, const Py_buffer *b)
{
    if (wb_reserve(w, 10 + (b->len > 0 ? b->len : 0)) < 0)
        return -1;
    put_varint(w, b->len);
    if (b->len > 0) {
        memcpy(w->p + w->len, b->buf, b->len);
        w->len += b->len;
    }
    return 0;
}

static void release_field(Py_buffer *b)
{
    if (b->obj)
        PyBuffer_Release(b);
}

/* One record's body (everything after its length prefix) into w. */
static int encode_body(wbuf *w, int64_t offset_delta, int64_t ts_delta, PyObject *key,
                       PyObject *value, PyObject *headers)
{
    Py_buffer kb, vb;
    if (!PyTuple_Check(headers) && !PyList_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "encode_records: a record's headers must be a tuple or list");
        return -1;
    }
    if (get_field(key, &kb, "key") < 0)
        return -1;
    if (get_field(value, &vb, "value") < 0) {
        release_field(&kb);
        return -1;
    }
    int rc = -1;
    Py_ssize_t nh = PySequence_Fast_GET_SIZE(headers);
    if (wb_reserve(w, 21) < 0)
        goto out;
    w->p[w->len++] = 0; /* attributes */
    put_varint(w, ts_delta);
    put_varint(w, offset_delta);
    if (put_field(w, &kb) < 0 || put_field(w, &vb) < 0 || wb_reserve(w, 10) < 0)
        goto out;
    put_varint(w, nh);
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(headers, i);
        if ((!PyTuple_Check(h) && !PyList_Check(h)) || PySequence_Fast_GET_SIZE(h) != 2) {
            PyErr_SetString(PyExc_TypeError, "encode_records: a header must be a (key, value) pair");
            goto out;
        }
        PyObject *hk = PySequence_Fast_GET_ITEM(h, 0), *hv = PySequence_Fast_GET_ITEM(h, 1);
        Py_buffer hkb, hvb;
        if (hk == Py_None) {
            PyErr_SetString(PyExc_ValueError, "header keys cannot be null");
            goto out;
        }
        if (PyUnicode_Check(hk)) {
            Py_ssize_t n;
            const char *s = PyUnicode_AsUTF8AndSize(hk, &n);
            if (!s || wb_reserve(w, 10 + n) < 0)
                goto out;
            put_varint(w, n);
            memcpy(w->p + w->len, s, n);
            w->len += n;
        } else {
            if (get_field(hk, &hkb, "header key") < 0)
                goto out;
            int bad = put_field(w, &hkb);
            release_field(&hkb);
            if (bad < 0)
                goto out;
        }
        if (get_field(hv, &hvb, "header value") < 0)
            goto out;
        int bad = put_field(w, &hvb);
        release_field(&hvb);
        if (bad < 0)
            goto out;
    }
    rc = 0;
out:
    release_field(&kb);
    release_field(&vb);
    return rc;
}

/* encode_records(records, base_offset, base_timestamp) -> bytes
 * The v2 records (DefaultRecord.writeTo, each with its varint length prefix) of a list of
 * (offset, timestamp, key, value, headers) tuples: attributes 0, timestamp and offset deltas
 * from the bases, nullable key and value, headers as (str or bytes key, bytes or None value)
 * pairs. Byte-exact with kproto.records.builder.encode_record. */
static PyObject *encode_records(PyObject *self, PyObject *args)
{
    PyObject *records;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "O!LL", &PyList_Type, &records, &base_offset, &base_ts))
        return NULL;
    wbuf w = {NULL, 0, 0}, body = {NULL, 0, 0};
    Py_ssize_t n = PyList_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 5) {
            PyErr_SetString(PyExc_TypeError,
                            "encode_records: records must be (offset, timestamp, key, value, headers) tuples");
            goto fail;
        }
        long long off = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 0));
        if (off == -1 && PyErr_Occurred())
            goto fail;
        long long ts = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 1));
        if (ts == -1 && PyErr_Occurred())
            goto fail;
        body.len = 0;
        long long od, td;
        if (__builtin_sub_overflow(off, base_offset, &od) || __builtin_sub_overflow(ts, base_ts, &td)) {
            /* as the Python writer: a delta beyond 64 bits does not fit a varlong */
            PyErr_SetString(PyExc_ValueError, "encode_records: a delta does not fit a varlong");
            goto fail;
        }
        if (encode_body(&body, od, td, PyTuple_GET_ITEM(r, 2), PyTuple_GET_ITEM(r, 3),
                        PyTuple_GET_ITEM(r, 4)) < 0)
            goto fail;
        if (wb_reserve(&w, 10 + body.len) < 0)
            goto fail;
        put_varint(&w, body.len);
        memcpy(w.p + w.len, body.p, body.len);
        w.len += body.len;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)w.p, w.len);
    PyMem_Free(w.p);
    PyMem_Free(body.p);
    return out;
fail:
    PyMem_Free(w.p);
    PyMem_Free(body.p);
    return NULL;
}

/* One future of resolve: 0 done (or already done), -1 with an exception set. */
static int resolve_one(PyObject *fut, PyObject *rec, PyTypeObject *type, PyObject *topic,
                       PyObject *partition, long long offset, PyObject *done_name,
                       PyObject *set_result_name)
{
    PyObject *d = PyObject_CallMethodNoArgs(fut, done_name);
    int is_done = d ? PyObject_IsTrue(d) : -1;
    Py_XDECREF(d);
    if (is_done != 0)
        return is_done < 0 ? -1 : 0;
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) < 1 || !PyLong_Check(PyTuple_GET_ITEM(rec, 0))) {
        PyErr_SetString(PyExc_TypeError, "resolve: a record must be a tuple led by its timestamp");
        return -1;
    }
    PyObject *md = type == &PyTuple_Type ? PyTuple_New(4) : type->tp_alloc(type, 4);
    if (!md)
        return -1;
    PyObject *off = PyLong_FromLongLong(offset);
    if (!off) {
        Py_DECREF(md);
        return -1;
    }
    PyTuple_SET_ITEM(md, 0, Py_NewRef(topic));
    PyTuple_SET_ITEM(md, 1, Py_NewRef(partition));
    PyTuple_SET_ITEM(md, 2, off);
    PyTuple_SET_ITEM(md, 3, Py_NewRef(PyTuple_GET_ITEM(rec, 0)));
    if (type->tp_dictoffset == 0)  /* a str and ints only: nothing to collect through it */
        PyObject_GC_UnTrack(md);
    PyObject *r = PyObject_CallMethodOneArg(fut, set_result_name, md);
    Py_DECREF(md);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* resolve(futures, cls, topic, partition, base_offset, records)
 * The producer's acknowledgement of one batch: each future of futures not done yet gets
 * cls(topic, partition, offset, timestamp), cls a 4-field tuple subclass (RecordMetadata),
 * offset base_offset + its index (-1 when base_offset is -1), timestamp the first item of
 * its record in records (a list of tuples, one per future). The results hold only a str and
 * ints, so they are left untracked by the garbage collector, as CPython does for such plain
 * tuples: the futures a sender keeps do not make every full collection longer. */
static PyObject *resolve(PyObject *self, PyObject *args)
{
    PyObject *futures, *cls, *topic, *partition, *records;
    long long base;
    if (!PyArg_ParseTuple(args, "O!O!UO!LO!", &PyList_Type, &futures, &PyType_Type, &cls, &topic,
                          &PyLong_Type, &partition, &base, &PyList_Type, &records))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)cls;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "resolve: cls must be a tuple subclass");
        return NULL;
    }
    if (PyList_GET_SIZE(records) < PyList_GET_SIZE(futures)) {
        PyErr_SetString(PyExc_ValueError, "resolve: fewer records than futures");
        return NULL;
    }
    if (base > LLONG_MAX - PyList_GET_SIZE(futures)) {
        PyErr_SetString(PyExc_OverflowError, "resolve: the offsets do not fit in 64 bits");
        return NULL;
    }
    static PyObject *done_name, *set_result_name;
    if (!done_name && !(done_name = PyUnicode_InternFromString("done")))
        return NULL;
    if (!set_result_name && !(set_result_name = PyUnicode_InternFromString("set_result")))
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(futures) && i < PyList_GET_SIZE(records); i++) {
        PyObject *fut = Py_NewRef(PyList_GET_ITEM(futures, i));
        PyObject *rec = Py_NewRef(PyList_GET_ITEM(records, i));
        int ok = resolve_one(fut, rec, type, topic, partition, base >= 0 ? base + i : -1,
                             done_name, set_result_name);
        Py_DECREF(fut);
        Py_DECREF(rec);
        if (ok < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan_v2", scan_v2, METH_VARARGS, "Decode the varint fields of v2 records sections."},
    {"check_v2", check_v2, METH_VARARGS,
     "LogValidator's record checks of one v2 records section, without building columns."},
    {"scan_parts", scan_parts, METH_VARARGS,
     "scan_v2 over one buffer per records section (no concatenation)."},
    {"gather_binary", gather_binary, METH_VARARGS,
     "Copy one field of every record into Arrow's binary layout (int32 offsets + data)."},
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C (Castagnoli) of a bytes-like object."},
    {"frame_v2", frame_v2, METH_VARARGS, "Frame the v2 batches of a buffer into a table."},
    {"leader_batch", leader_batch, METH_VARARGS,
     "One produced v2 batch checked as LogValidator checks it and copied with its offsets assigned."},
    {"build_columns", build_columns, METH_VARARGS,
     "Every record column of framed batches as Arrow buffers, in one pass."},
    {"build_headers", build_headers, METH_VARARGS,
     "The headers of framed batches as Arrow buffers."},
    {"record_tuples", record_tuples, METH_VARARGS,
     "Records of decoded columns as instances of a 7-field tuple subclass."},
    {"murmur2", py_murmur2, METH_O, "Kafka's Utils.murmur2 of a bytes-like object (signed int32)."},
    {"encode_records", encode_records, METH_VARARGS,
     "The v2 records of (offset, timestamp, key, value, headers) tuples."},
    {"resolve", resolve, METH_VARARGS,
     "Set each pending future of an acknowledged batch to its record's metadata."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kproto.records._speedups",
    "Optional C accelerator for kproto.records.columns.", -1, methods,
};

/* The interface this source offers; kproto.accelerators.API names the one the Python
 * side expects, and a build whose number differs is not used. Bump both together. */
#define KPROTO_API 2

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init();
#ifdef HAVE_CRC_HW
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "FRAME_WIDTH", NF) < 0
              || PyModule_AddIntConstant(m, "CRC_HARDWARE", crc_hw) < 0
              || PyModule_AddIntConstant(m, "API", KPROTO_API) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
