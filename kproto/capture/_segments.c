/* The capture decoder's packet loop over a classic pcap file, in C (optional accelerator).
 *
 * scan() walks the file's packet records from a position and reads each packet's IPv4/TCP
 * fields exactly as kproto.capture.bulk does. It consumes itself, without returning to
 * Python, the packets whose whole effect is a plain state update:
 *   - a segment of a connection known not to be Kafka (only counted);
 *   - an acknowledgement-only segment of a Kafka connection that changes nothing;
 *   - an in-order segment of a Kafka connection whose bytes fall inside a frame already being
 *     buffered without completing it, or start a frame they do not complete (the stream
 *     advances, the bytes are buffered).
 * Every other packet is handed back to Python (as bulk's row, or as the fields of a Packet for
 * the reference walker), which does what it always did: the decoder's state is the Python
 * objects' own (TcpConnection, TcpStream, FrameCutter), read and written here in place, so
 * either path can take the next packet.
 *
 * Hostile input: every read of the file is bounded by the record's captured length and the
 * buffer's end; a packet this loop does not understand goes to Python unchanged.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SYN 0x02
#define FIN 0x01
#define RST 0x04
#define ACK 0x10

static PyObject *request_rule, *response_rule;  /* the frame rules whose checks are known here */
static PyObject *s_direct, *s_raw, *s_rule, *s_max_frame;
static PyObject *s_ticks, *s_last_ts, *s_client, *s_ip, *s_port, *s_c2b, *s_b2c, *s_next_seq,
    *s_offset, *s_pending, *s_acked_past, *s_requests, *s_responses, *s_synced, *s_need, *s_buf,
    *s_missing, *s_base, *s_ts;

static inline uint32_t rd32(const uint8_t *p, int big) {
    return big ? ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]
               : ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8) | p[0];
}
static inline uint32_t be32(const uint8_t *p) { return rd32(p, 1); }
static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

/* An attribute as a C long long; -1 with ok=0 when it is not an int (or is missing). */
static int attr_ll(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    int ok = PyLong_CheckExact(v);
    if (ok) {
        *out = PyLong_AsLongLong(v);
        if (*out == -1 && PyErr_Occurred()) { PyErr_Clear(); ok = 0; }
    }
    Py_DECREF(v);
    return ok;
}

static int set_ll(PyObject *o, PyObject *name, long long v) {
    PyObject *n = PyLong_FromLongLong(v);
    if (n == NULL) return -1;
    int r = PyObject_SetAttr(o, name, n);
    Py_DECREF(n);
    return r;
}

/* 1: the attribute is None, 0: it is not, -1: error */
static int attr_is_none(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

/* 1 when a cutter with an empty buffer would take ``chunk`` as the start of one frame longer
 * than the chunk (its size in *need), 0 when Python must see it, -1 on error: the cutter cuts
 * directly (not raw SASL tokens), nothing is read of a frame yet, and the chunk's first bytes
 * are a size prefix its rule (RequestRule or ResponseRule exactly) finds sane. */
static int frame_start(PyObject *cutter, const uint8_t *chunk, Py_ssize_t n, long long *need) {
    int r = 0;
    long long max_frame;
    PyObject *rule = NULL, *v = PyObject_GetAttr(cutter, s_direct);
    if (v == NULL) return -1;
    if (v != Py_True) goto done;
    Py_SETREF(v, PyObject_GetAttr(cutter, s_raw));
    if (v == NULL) return -1;
    if (v != Py_False) goto done;
    Py_SETREF(v, PyObject_GetAttr(cutter, s_need));
    if (v == NULL) return -1;
    if (v != Py_None) goto done;
    rule = PyObject_GetAttr(cutter, s_rule);
    if (rule == NULL) goto error;
    int request = (PyObject *)Py_TYPE(rule) == request_rule;
    if (!request && (PyObject *)Py_TYPE(rule) != response_rule) goto done;
    int ok = attr_ll(rule, s_max_frame, &max_frame);
    if (ok <= 0) { if (ok < 0) goto error; goto done; }
    if (n < (request ? 8 : 4)) goto done;   /* 4 + the rule's sane_bytes */
    long long size = (int32_t)be32(chunk);
    if (size < (request ? 8 : 4) || size > max_frame) goto done;
    if (request && (chunk[4] >= 0x80 || chunk[6] >= 0x80)) goto done;
    if (4 + size <= n) goto done;           /* a whole frame: Python cuts it */
    *need = size;
    r = 1;
done:
    Py_XDECREF(v);
    Py_XDECREF(rule);
    return r;
error:
    r = -1;
    goto done;
}

/* Consume one TCP segment of Kafka connection ``conn`` when its effect is a plain state update
 * (see the top comment); 1: consumed, 0: Python must take it, -1: error. The checks mirror
 * CaptureDecoder._segment, TcpStream.in_order/acked and FrameCutter.data/_cut. */
static int consume(PyObject *conn, const uint8_t *src, unsigned sport, uint32_t seq,
                   uint32_t ack, unsigned flags, const uint8_t *payload, Py_ssize_t n,
                   PyObject *ts) {
    if (flags & (SYN | FIN | RST)) return 0;
    int r = 0;
    PyObject *client = NULL, *ip = NULL, *mine = NULL, *other = NULL, *cutter = NULL,
             *buf = NULL, *v = NULL;
    long long port, nxt;
    client = PyObject_GetAttr(conn, s_client);
    if (client == NULL) goto error;
    int ok = attr_ll(client, s_port, &port);
    if (ok < 0) goto error;
    if (!ok) goto done;
    ip = PyObject_GetAttr(client, s_ip);
    if (ip == NULL) goto error;
    if (!PyBytes_CheckExact(ip)) goto done;
    int from_client = port == (long long)sport && PyBytes_GET_SIZE(ip) == 4
                      && memcmp(PyBytes_AS_STRING(ip), src, 4) == 0;
    mine = PyObject_GetAttr(conn, from_client ? s_c2b : s_b2c);
    other = mine == NULL ? NULL : PyObject_GetAttr(conn, from_client ? s_b2c : s_c2b);
    if (other == NULL) goto error;
    /* the acknowledgement must change nothing (TcpStream.acked's first check) */
    if (flags & ACK) {
        ok = attr_ll(other, s_next_seq, &nxt);
        if (ok < 0) goto error;
        if (ok) {
            int none = attr_is_none(other, s_acked_past);
            if (none < 0) goto error;
            uint32_t d = (ack - (uint32_t)nxt) & 0xFFFFFFFFu;
            if (!none || (0 < d && d < 0x80000000u)) goto done;
        } else {
            int none = attr_is_none(other, s_next_seq);
            if (none < 0) goto error;
            if (!none) goto done;   /* not an int: Python says what it is */
        }
    }
    int none = attr_is_none(mine, s_acked_past);
    if (none < 0) goto error;
    if (!none) goto done;
    if (n == 0) {  /* an acknowledgement only, nothing outstanding: nothing to do */
        r = 1;
        goto update;
    }
    /* in order, nothing held (TcpStream.in_order) */
    ok = attr_ll(mine, s_next_seq, &nxt);
    if (ok <= 0) { if (ok < 0) goto error; goto done; }
    if ((uint32_t)nxt != seq || nxt < 0 || nxt > 0xFFFFFFFFLL) goto done;
    v = PyObject_GetAttr(mine, s_pending);
    if (v == NULL) goto error;
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != 0) goto done;
    Py_CLEAR(v);
    /* inside a buffered frame, without completing it (FrameCutter.data then _cut) */
    cutter = PyObject_GetAttr(conn, from_client ? s_requests : s_responses);
    if (cutter == NULL) goto error;
    v = PyObject_GetAttr(cutter, s_synced);
    if (v == NULL) goto error;
    if (v != Py_True) goto done;
    Py_CLEAR(v);
    long long need, missing, base, offset;
    buf = PyObject_GetAttr(cutter, s_buf);
    if (buf == NULL) goto error;
    if (!PyByteArray_CheckExact(buf)) goto done;
    Py_ssize_t have = PyByteArray_GET_SIZE(buf);
    if (have == 0) {
        /* at a frame start, the chunk the start of a frame longer than it: FrameCutter.data's
         * direct path stops at once, the chunk is buffered and _cut reads the frame's size */
        int start = frame_start(cutter, payload, n, &need);
        if (start <= 0) { if (start < 0) goto error; goto done; }
    } else {
        ok = attr_ll(cutter, s_need, &need);
        if (ok <= 0) { if (ok < 0) goto error; goto done; }
    }
    if ((ok = attr_ll(cutter, s_missing, &missing)) <= 0) { if (ok < 0) goto error; goto done; }
    if ((ok = attr_ll(cutter, s_base, &base)) <= 0) { if (ok < 0) goto error; goto done; }
    if ((ok = attr_ll(mine, s_offset, &offset)) <= 0) { if (ok < 0) goto error; goto done; }
    if (need < 0 || missing < 0 || (long long)have + missing + n >= 4 + need) goto done;
    if (have == 0 && set_ll(cutter, s_need, need) < 0) goto error;
    v = PyObject_GetAttr(cutter, s_ts);
    if (v == NULL) goto error;
    if (!PyList_CheckExact(v)) goto done;
    /* consumed: the stream advances, the bytes join the frame */
    PyObject *at = PyLong_FromLongLong(base + missing + have);
    PyObject *item = at == NULL ? NULL : PyTuple_Pack(2, at, ts);
    Py_XDECREF(at);
    if (item == NULL) goto error;
    int bad = PyList_Append(v, item);
    Py_DECREF(item);
    if (bad) goto error;
    if (PyByteArray_Resize(buf, have + n) < 0) goto error;
    memcpy(PyByteArray_AS_STRING(buf) + have, payload, (size_t)n);
    if (set_ll(mine, s_next_seq, (long long)((seq + (uint32_t)n) & 0xFFFFFFFFu)) < 0) goto error;
    if (set_ll(mine, s_offset, offset + n) < 0) goto error;
    r = 1;
update:;
    long long ticks;
    ok = attr_ll(conn, s_ticks, &ticks);
    if (ok < 0) goto error;
    if (!ok) {  /* cannot happen for a TcpConnection; undo nothing was done for n > 0 */
        PyErr_SetString(PyExc_TypeError, "connection ticks is not an int");
        goto error;
    }
    if (set_ll(conn, s_ticks, ticks + 1) < 0) goto error;
    if (PyObject_SetAttr(conn, s_last_ts, ts) < 0) goto error;
done:
    Py_XDECREF(client); Py_XDECREF(ip); Py_XDECREF(mine); Py_XDECREF(other);
    Py_XDECREF(cutter); Py_XDECREF(buf); Py_XDECREF(v);
    return r;
error:
    r = -1;
    goto done;
}

/* Link types read here: (bytes needed, offset of the protocol field or -1 for raw IP,
 * network offset), as kproto.capture.bulk._LINKS. */
static int link_layout(long linktype, Py_ssize_t *need, Py_ssize_t *at, Py_ssize_t *off) {
    switch (linktype) {
    case 1: *need = 14; *at = 12; *off = 14; return 1;
    case 113: *need = 16; *at = 14; *off = 16; return 1;
    case 276: *need = 20; *at = 0; *off = 20; return 1;
    case 12: case 14: case 101: case 228: case 229: *need = 1; *at = -1; *off = 0; return 1;
    default: return 0;
    }
}

PyDoc_STRVAR(scan_doc,
"scan(connections, data, pos, index, big_endian, nanos, linktype)\n--\n\n"
"Walk a classic pcap file's records from ``pos`` (``index``: packets before it), consuming\n"
"the packets that only update state (see the module). Returns ``(pos, index, packets,\n"
"bytes, last_ts, kind, item)``: what was consumed (count, captured bytes, last timestamp or\n"
"None), then kind 0 (stopped at the end of the records, or at one not whole: ``pos`` is\n"
"there), 1 (``item`` is bulk's row of the next packet, for Python) or 2 (``item`` is\n"
"``(ts, start, captured length, original length)`` of a packet for the reference path).");

static PyObject *scan(PyObject *mod, PyObject *args) {
    PyObject *connections;
    Py_buffer view;
    Py_ssize_t pos, index;
    int big, nanos;
    long linktype;
    if (!PyArg_ParseTuple(args, "O!y*nnppl", &PyDict_Type, &connections, &view, &pos, &index,
                          &big, &nanos, &linktype))
        return NULL;
    const uint8_t *data = view.buf;
    Py_ssize_t end = view.len;
    double scale = nanos ? 1e-9 : 1e-6;
    Py_ssize_t need = 0, at = 0, off = 0;
    int known = link_layout(linktype, &need, &at, &off);
    Py_ssize_t packets = 0;
    long long nbytes = 0;
    PyObject *last_ts = NULL, *result = NULL, *item = NULL;
    int kind = 0;
    if (pos < 0) pos = end;
    while (pos <= end - 16) {
        const uint8_t *rec = data + pos;
        uint32_t sec = rd32(rec, big), frac = rd32(rec + 4, big), incl = rd32(rec + 8, big),
                 orig = rd32(rec + 12, big);
        if ((uint64_t)incl > (uint64_t)(end - pos - 16)) break;   /* not whole: Python reports */
        Py_ssize_t d = pos + 16;
        const uint8_t *p = data + d;
        volatile double frac_s = (double)frac * scale;   /* as numpy: sec + frac * scale */
        double ts = (double)sec + frac_s;
        pos = d + (Py_ssize_t)incl;
        index += 1;
        /* the fields, as bulk._rows reads them */
        int fast = 0;
        Py_ssize_t t = 0, hlen = 0, stop = 0;
        if (known && (Py_ssize_t)incl >= (need > off + 20 ? need : off + 20)) {
            int proto_ok = at < 0 ? (p[0] >> 4) == 4 : be16(p + at) == 0x0800;
            const uint8_t *ipp = p + off;
            unsigned vihl = ipp[0], ipproto = ipp[9];
            unsigned total = be16(ipp + 2), frag = be16(ipp + 6);
            Py_ssize_t ihl = (Py_ssize_t)(vihl & 0x0F) * 4;
            if (proto_ok && (vihl >> 4) == 4 && ihl >= 20 && ipproto == 6 && (frag & 0x3FFF) == 0) {
                stop = (Py_ssize_t)total >= ihl
                           ? ((Py_ssize_t)incl < off + (Py_ssize_t)total ? (Py_ssize_t)incl
                                                                          : off + (Py_ssize_t)total)
                           : (Py_ssize_t)incl;
                t = off + ihl;
                if (t + 20 <= stop) {
                    hlen = (Py_ssize_t)(p[t + 12] >> 4) * 4;
                    fast = hlen >= 20 && t + hlen <= stop;
                }
            }
        }
        PyObject *tsobj = PyFloat_FromDouble(ts);
        if (tsobj == NULL) goto done;
        if (!fast) {
            item = Py_BuildValue("(NnkI)", tsobj, d, (unsigned long)incl, orig);
            kind = 2;
            goto out;
        }
        const uint8_t *tcp = p + t;
        unsigned sport = be16(tcp), dport = be16(tcp + 2), flags = tcp[13];
        uint32_t seq = be32(tcp + 4), ack = be32(tcp + 8);
        PyObject *src = PyBytes_FromStringAndSize((const char *)p + off + 12, 4);
        PyObject *dst = PyBytes_FromStringAndSize((const char *)p + off + 16, 4);
        PyObject *key = src && dst ? Py_BuildValue("(OIOI)", src, sport, dst, dport) : NULL;
        PyObject *conn = key ? PyDict_GetItemWithError(connections, key) : NULL;  /* borrowed */
        int took = 0;
        if (conn == NULL && !PyErr_Occurred()) {
            took = 0;   /* not seen yet: Python classifies it */
        } else if (conn == Py_None) {
            took = 1;   /* a connection that is not Kafka: counted only */
        } else if (conn != NULL) {
            Py_INCREF(conn);
            took = consume(conn, p + off + 12, sport, seq, ack, flags, p + t + hlen,
                           stop - t - hlen, tsobj);
            Py_DECREF(conn);
        }
        if (PyErr_Occurred()) {
            Py_XDECREF(src); Py_XDECREF(dst); Py_XDECREF(key); Py_DECREF(tsobj);
            goto done;
        }
        if (took) {
            packets += 1;
            nbytes += incl;
            Py_XSETREF(last_ts, tsobj);
            Py_DECREF(src); Py_DECREF(dst); Py_DECREF(key);
            continue;
        }
        item = Py_BuildValue("(NnkOIOIkkInn)", tsobj, index, (unsigned long)incl, src, sport,
                             dst, dport, (unsigned long)seq, (unsigned long)ack, flags,
                             d + t + hlen, d + stop);
        Py_XDECREF(src); Py_XDECREF(dst); Py_XDECREF(key);
        kind = 1;
        goto out;
    }
out:
    if (kind && item == NULL) goto done;
    result = Py_BuildValue("(nnnLOiO)", pos, index, packets, nbytes,
                           last_ts ? last_ts : Py_None, kind, item ? item : Py_None);
done:
    Py_XDECREF(item);
    Py_XDECREF(last_ts);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *setup(PyObject *mod, PyObject *args) {
    PyObject *req, *resp;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &req, &PyType_Type, &resp)) return NULL;
    Py_XSETREF(request_rule, Py_NewRef(req));
    Py_XSETREF(response_rule, Py_NewRef(resp));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"setup", setup, METH_VARARGS,
     PyDoc_STR("setup(RequestRule, ResponseRule): the frame rules whose size checks scan knows.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kproto.capture._segments",
    "The capture decoder's packet loop over classic pcap files, in C (see scan).", -1, methods,
};

PyMODINIT_FUNC PyInit__segments(void) {
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_ticks, "ticks"); INTERN(s_last_ts, "last_ts"); INTERN(s_client, "client");
    INTERN(s_ip, "ip"); INTERN(s_port, "port"); INTERN(s_c2b, "c2b"); INTERN(s_b2c, "b2c");
    INTERN(s_next_seq, "next_seq"); INTERN(s_offset, "offset"); INTERN(s_pending, "pending");
    INTERN(s_acked_past, "acked_past"); INTERN(s_requests, "requests");
    INTERN(s_responses, "responses"); INTERN(s_synced, "synced"); INTERN(s_need, "need");
    INTERN(s_buf, "buf"); INTERN(s_missing, "missing"); INTERN(s_base, "base"); INTERN(s_ts, "_ts");
    INTERN(s_direct, "direct"); INTERN(s_raw, "raw"); INTERN(s_rule, "rule");
    INTERN(s_max_frame, "max_frame");
#undef INTERN
    return PyModule_Create(&module);
}
