/* The capture decoder's packet loop over a classic pcap file, in C (optional accelerator).
 *
 * scan() walks the file's packet records from a position and reads each packet's IPv4/TCP
 * fields exactly as kproto.capture.bulk does (scan_ng() the Enhanced Packet Blocks of a
 * pcapng file, stopping at any other block for the Python walker). It consumes itself, without returning to
 * Python, the packets whose whole effect is a plain state update:
 *   - a segment of a connection known not to be Kafka (only counted);
 *   - an acknowledgement-only segment of a Kafka connection that changes nothing;
 *   - an in-order segment of a Kafka connection whose bytes fall inside a frame already being
 *     buffered without completing it, or start a frame they do not complete (the stream
 *     advances, the bytes are buffered);
 *   - an in-order segment of whole frames arriving at a frame start: they are cut and handed
 *     to the decoder's _request_frame/_response_frame, as the Python path does, and scan
 *     returns for Python to take the exchanges they finished.
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
static PyObject *frame_type, *problems_type;     /* Frame and Problems */
static PyObject *s_request_frame, *s_response_frame;
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
 * than the chunk (its size in *need), 2 when the chunk starts with a whole frame, 0 when
 * Python must see it, -1 on error: the cutter cuts
 * directly (not raw SASL tokens), nothing is read of a frame yet, and the chunk's first bytes
 * are a size prefix its rule (RequestRule or ResponseRule exactly) finds sane. */
/* The rule's sane(): a size prefix (and for requests, the key and version's sign bytes) at
 * ``p`` with ``left`` bytes there; the frame's size in *size. */
static int sane_at(int request, long long max_frame, const uint8_t *p, Py_ssize_t left,
                   long long *size) {
    if (left < (request ? 8 : 4)) return 0;   /* 4 + the rule's sane_bytes */
    *size = (int32_t)be32(p);
    if (*size < (request ? 8 : 4) || *size > max_frame) return 0;
    return !request || (p[4] < 0x80 && p[6] < 0x80);
}

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
    long long size;
    if (!sane_at(request, max_frame, chunk, n, &size)) goto done;
    /* a chunk of whole frames: each sane, the last ending with the chunk */
    if (4 + size <= n) {
        Py_ssize_t pos = 4 + (Py_ssize_t)size;
        long long next;
        while (pos < n && sane_at(request, max_frame, chunk + pos, n - pos, &next)
               && 4 + next <= n - pos)
            pos += 4 + (Py_ssize_t)next;
        if (pos != n) goto done;
    }
    *need = size;
    r = 4 + size <= n ? 2 : 1;              /* 2: a whole frame at least */
done:
    Py_XDECREF(v);
    Py_XDECREF(rule);
    return r;
error:
    r = -1;
    goto done;
}

/* The connection's packet count and time (what _segment does first) */
static int tick(PyObject *conn, PyObject *ts) {
    long long ticks;
    int ok = attr_ll(conn, s_ticks, &ticks);
    if (ok <= 0) {
        if (ok == 0) PyErr_SetString(PyExc_TypeError, "a connection's ticks must be an int");
        return -1;
    }
    if (set_ll(conn, s_ticks, ticks + 1) < 0) return -1;
    return PyObject_SetAttr(conn, s_last_ts, ts);
}

/* A chunk of whole frames (checked by frame_start) at a cutter's frame start: the frames
 * FrameCutter.data's direct path cuts (the first with the problems pending, offsets from
 * ``base``), then each handed to the decoder's _request_frame or _response_frame in order. */
static int cut_whole(PyObject *decoder, PyObject *conn, int from_client, PyObject *cutter,
                     const uint8_t *chunk, Py_ssize_t n, PyObject *ts, long long base,
                     PyObject *pending) {
    PyObject *frames = PyList_New(0);
    if (frames == NULL) return -1;
    int r = -1;
    Py_INCREF(pending);
    for (Py_ssize_t pos = 0; pos < n;) {   /* frame_start checked every size */
        Py_ssize_t size = (Py_ssize_t)(int32_t)be32(chunk + pos);
        PyObject *frame = Py_BuildValue("(y#nOOLiOO)", (const char *)chunk + pos + 4, size, size,
                                        ts, ts, base, 0, Py_False, pending);
        if (frame != NULL) Py_SETREF(frame, PyObject_Call(frame_type, frame, NULL));
        if (frame == NULL || PyList_Append(frames, frame) < 0) { Py_XDECREF(frame); goto out; }
        Py_DECREF(frame);
        Py_SETREF(pending, PyObject_CallNoArgs(problems_type));
        if (pending == NULL) goto out;
        base += 4 + size;
        pos += 4 + size;
    }
    if (PyObject_SetAttr(cutter, s_pending, pending) < 0 || set_ll(cutter, s_base, base) < 0)
        goto out;
    PyObject *handler = PyObject_GetAttr(decoder, from_client ? s_request_frame : s_response_frame);
    if (handler == NULL) goto out;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(frames); i++) {
        PyObject *got = PyObject_CallFunctionObjArgs(handler, conn, PyList_GET_ITEM(frames, i), NULL);
        if (got == NULL) { Py_DECREF(handler); goto out; }
        Py_DECREF(got);
    }
    Py_DECREF(handler);
    r = 0;
out:
    Py_XDECREF(pending);
    Py_DECREF(frames);
    return r;
}

/* Consume one TCP segment of Kafka connection ``conn`` when its effect is a plain state update
 * (see the top comment); 1: consumed, 2: consumed and frames handed to the decoder, 0: Python
 * must take it, -1: error. The checks mirror
 * CaptureDecoder._segment, TcpStream.in_order/acked and FrameCutter.data/_cut. */
static int consume(PyObject *decoder, PyObject *conn, const uint8_t *src, unsigned sport, uint32_t seq,
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
    if (n == 0) goto update;  /* an acknowledgement only, nothing outstanding: nothing to do */
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
    int whole = 0;
    if (have == 0) {
        /* at a frame start: the chunk the start of a frame longer than it (FrameCutter.data's
         * direct path stops at once, the chunk is buffered and _cut reads the frame's size),
         * or whole frames (cut from it directly) */
        int start = frame_start(cutter, payload, n, &need);
        if (start <= 0) { if (start < 0) goto error; goto done; }
        whole = start == 2;
    } else {
        ok = attr_ll(cutter, s_need, &need);
        if (ok <= 0) { if (ok < 0) goto error; goto done; }
    }
    if ((ok = attr_ll(cutter, s_missing, &missing)) <= 0) { if (ok < 0) goto error; goto done; }
    if ((ok = attr_ll(cutter, s_base, &base)) <= 0) { if (ok < 0) goto error; goto done; }
    if ((ok = attr_ll(mine, s_offset, &offset)) <= 0) { if (ok < 0) goto error; goto done; }
    if (!whole && (need < 0 || missing < 0 || (long long)have + missing + n >= 4 + need)) goto done;
    v = PyObject_GetAttr(cutter, whole ? s_pending : s_ts);
    if (v == NULL) goto error;
    if (!whole && !PyList_CheckExact(v)) goto done;
    /* consumed */
    r = whole ? 2 : 1;
    if (tick(conn, ts) < 0) goto error;
    if (set_ll(mine, s_next_seq, (long long)((seq + (uint32_t)n) & 0xFFFFFFFFu)) < 0) goto error;
    if (set_ll(mine, s_offset, offset + n) < 0) goto error;
    if (whole) {  /* cut, then handed to the decoder in order, as _segment does */
        if (cut_whole(decoder, conn, from_client, cutter, payload, n, ts, base, v) < 0)
            goto error;
        goto done;
    }
    /* the bytes join the frame */
    if (have == 0 && set_ll(cutter, s_need, need) < 0) goto error;
    PyObject *at = PyLong_FromLongLong(base + missing + have);
    PyObject *item = at == NULL ? NULL : PyTuple_Pack(2, at, ts);
    Py_XDECREF(at);
    if (item == NULL) goto error;
    int bad = PyList_Append(v, item);
    Py_DECREF(item);
    if (bad) goto error;
    if (PyByteArray_Resize(buf, have + n) < 0) goto error;
    memcpy(PyByteArray_AS_STRING(buf) + have, payload, (size_t)n);
    goto done;
update:
    r = 1;
    if (tick(conn, ts) < 0) goto error;
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

/* What the packets consumed so far add up to. */
typedef struct {
    Py_ssize_t packets;
    long long nbytes;
    PyObject *last_ts;   /* owned, or NULL */
} Tally;

/* The connections of the last two address pairs looked up in one call (a long frame's
 * segments and their acknowledgements alternate between two): no key and dict lookup for
 * each packet. Emptied whenever Python code may have changed the connections. */
typedef struct {
    int valid;
    uint8_t addrs[8];     /* source and destination IPv4 addresses */
    unsigned sport, dport;
    PyObject *conn;       /* owned: the connection, or None (not Kafka) */
} Known;

typedef struct {
    Known e[2];
    int next;
} KnownCache;

static void known_clear(KnownCache *c) {
    for (int i = 0; i < 2; i++) {
        if (c->e[i].valid) Py_DECREF(c->e[i].conn);
        c->e[i].valid = 0;
    }
}

/* One packet record: ``incl`` captured bytes at ``data + d`` (the file's ``index``-th packet),
 * taken at ``ts``, of link type ``linktype``. Returns 0 when consumed, 3 when consumed and
 * frames went to the decoder, 1 with bulk's row of the packet in *item, 2 with the fields of a
 * Packet for the reference path in *item (with the link type when ``with_link``: a pcapng
 * interface's), -1 on error. */
static int one_packet(PyObject *decoder, PyObject *connections, const uint8_t *data,
                      Py_ssize_t d, uint32_t incl, uint32_t orig, double ts, long linktype,
                      int with_link, Py_ssize_t index, Tally *tally, PyObject **item,
                      KnownCache *known_conns) {
    const uint8_t *p = data + d;
    Py_ssize_t need = 0, at = 0, off = 0;
    int known = link_layout(linktype, &need, &at, &off);
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
    if (tsobj == NULL) return -1;
    if (!fast) {
        *item = with_link ? Py_BuildValue("(NnkIl)", tsobj, d, (unsigned long)incl, orig, linktype)
                          : Py_BuildValue("(NnkI)", tsobj, d, (unsigned long)incl, orig);
        return *item == NULL ? -1 : 2;
    }
    const uint8_t *tcp = p + t;
    unsigned sport = be16(tcp), dport = be16(tcp + 2), flags = tcp[13];
    uint32_t seq = be32(tcp + 4), ack = be32(tcp + 8);
    const uint8_t *addrs = p + off + 12;
    PyObject *src = NULL, *dst = NULL, *key = NULL, *conn = NULL;  /* conn: borrowed */
    for (int i = 0; i < 2; i++) {
        Known *k = &known_conns->e[i];
        if (k->valid && k->sport == sport && k->dport == dport && memcmp(k->addrs, addrs, 8) == 0) {
            conn = k->conn;
            break;
        }
    }
    if (conn == NULL) {
        src = PyBytes_FromStringAndSize((const char *)addrs, 4);
        dst = PyBytes_FromStringAndSize((const char *)addrs + 4, 4);
        key = src && dst ? Py_BuildValue("(OIOI)", src, sport, dst, dport) : NULL;
        conn = key ? PyDict_GetItemWithError(connections, key) : NULL;
        if (conn != NULL) {   /* remembered for the next packets */
            Known *k = &known_conns->e[known_conns->next];
            known_conns->next ^= 1;
            if (k->valid) Py_DECREF(k->conn);
            k->valid = 1;
            memcpy(k->addrs, addrs, 8);
            k->sport = sport;
            k->dport = dport;
            k->conn = Py_NewRef(conn);
            conn = k->conn;
        }
    }
    int took = 0;
    if (conn == NULL && !PyErr_Occurred()) {
        took = 0;   /* not seen yet: Python classifies it */
    } else if (conn == Py_None) {
        took = 1;   /* a connection that is not Kafka: counted only */
    } else if (conn != NULL) {
        Py_INCREF(conn);
        took = consume(decoder, conn, p + off + 12, sport, seq, ack, flags, p + t + hlen,
                       stop - t - hlen, tsobj);
        Py_DECREF(conn);
    }
    if (PyErr_Occurred()) {
        Py_XDECREF(src); Py_XDECREF(dst); Py_XDECREF(key); Py_DECREF(tsobj);
        return -1;
    }
    if (took == 2)   /* Python code ran (the decoder's frame handlers): forget the lookups */
        known_clear(known_conns);
    if (took) {
        tally->packets += 1;
        tally->nbytes += incl;
        Py_XSETREF(tally->last_ts, tsobj);
        Py_XDECREF(src); Py_XDECREF(dst); Py_XDECREF(key);
        return took == 2 ? 3 : 0;   /* 3: Python takes what the frames finished */
    }
    if (src == NULL) {   /* found among the known: the row's addresses */
        src = PyBytes_FromStringAndSize((const char *)addrs, 4);
        dst = src == NULL ? NULL : PyBytes_FromStringAndSize((const char *)addrs + 4, 4);
        if (dst == NULL) {
            Py_XDECREF(src); Py_DECREF(tsobj);
            return -1;
        }
    }
    *item = Py_BuildValue("(NnkOIOIkkInn)", tsobj, index, (unsigned long)incl, src, sport,
                          dst, dport, (unsigned long)seq, (unsigned long)ack, flags,
                          d + t + hlen, d + stop);
    Py_XDECREF(src); Py_XDECREF(dst); Py_XDECREF(key);
    return *item == NULL ? -1 : 1;
}

/* scan's and scan_ng's answer: what was consumed, then what Python takes next. */
static PyObject *answer(Py_ssize_t pos, Py_ssize_t index, Tally *tally, int kind,
                        PyObject *item) {
    PyObject *result = Py_BuildValue("(nnnLOiO)", pos, index, tally->packets, tally->nbytes,
                                     tally->last_ts ? tally->last_ts : Py_None, kind,
                                     item ? item : Py_None);
    Py_XDECREF(item);
    Py_XDECREF(tally->last_ts);
    return result;
}

PyDoc_STRVAR(scan_doc,
"scan(decoder, connections, data, pos, index, big_endian, nanos, linktype)\n--\n\n"
"Walk a classic pcap file's records from ``pos`` (``index``: packets before it), consuming\n"
"the packets that only update state or carry whole frames (see the module). Returns\n"
"``(pos, index, packets, bytes, last_ts, kind, item)``: what was consumed (count, captured\n"
"bytes, last timestamp or None), then kind 0 (stopped at the end of the records, or at one\n"
"not whole: ``pos`` is there), 1 (``item`` is bulk's row of the next packet, for Python),\n"
"2 (``item`` is ``(ts, start, captured length, original length)`` of a packet for the\n"
"reference path) or 3 (the last packet consumed handed frames to the decoder's\n"
"_request_frame/_response_frame: its finished exchanges are waiting).");

static PyObject *scan(PyObject *mod, PyObject *args) {
    PyObject *decoder, *connections;
    Py_buffer view;
    Py_ssize_t pos, index;
    int big, nanos;
    long linktype;
    if (!PyArg_ParseTuple(args, "OO!y*nnppl", &decoder, &PyDict_Type, &connections, &view, &pos,
                          &index, &big, &nanos, &linktype))
        return NULL;
    const uint8_t *data = view.buf;
    Py_ssize_t end = view.len;
    double scale = nanos ? 1e-9 : 1e-6;
    Tally tally = {0, 0, NULL};
    KnownCache known_conns = {{{0}, {0}}, 0};
    PyObject *item = NULL;
    int kind = 0;
    if (pos < 0) pos = end;
    while (pos <= end - 16) {
        const uint8_t *rec = data + pos;
        uint32_t sec = rd32(rec, big), frac = rd32(rec + 4, big), incl = rd32(rec + 8, big),
                 orig = rd32(rec + 12, big);
        if ((uint64_t)incl > (uint64_t)(end - pos - 16)) break;   /* not whole: Python reports */
        Py_ssize_t d = pos + 16;
        volatile double frac_s = (double)frac * scale;   /* as numpy: sec + frac * scale */
        double ts = (double)sec + frac_s;
        pos = d + (Py_ssize_t)incl;
        index += 1;
        kind = one_packet(decoder, connections, data, d, incl, orig, ts, linktype, 0, index,
                          &tally, &item, &known_conns);
        if (kind < 0) {
            known_clear(&known_conns);
            Py_XDECREF(tally.last_ts);
            PyBuffer_Release(&view);
            return NULL;
        }
        if (kind) break;
    }
    known_clear(&known_conns);
    PyBuffer_Release(&view);
    return answer(pos, index, &tally, kind, item);
}

/* A pcapng interface as scan_ng reads it: (link type, seconds per unit, offset). */
typedef struct {
    long linktype;
    double unit, offset;
} Iface;

PyDoc_STRVAR(scan_ng_doc,
"scan_ng(decoder, connections, data, pos, index, big_endian, ifaces)\n--\n\n"
"scan over the blocks of a pcapng section from ``pos``: its Enhanced Packet Blocks whose\n"
"interface is one of ``ifaces`` (per interface: link type, seconds per timestamp unit,\n"
"timestamp offset; the section's so far) and whose lengths are whole. It stops (kind 0,\n"
"``pos`` there) at any other block, which the Python walker reads. Returns what scan\n"
"returns; kind 2's item also has the packet's link type.");

static PyObject *scan_ng(PyObject *mod, PyObject *args) {
    PyObject *decoder, *connections, *ifaces;
    Py_buffer view;
    Py_ssize_t pos, index;
    int big;
    if (!PyArg_ParseTuple(args, "OO!y*nnpO!", &decoder, &PyDict_Type, &connections, &view, &pos,
                          &index, &big, &PyTuple_Type, &ifaces))
        return NULL;
    Py_ssize_t n_if = PyTuple_GET_SIZE(ifaces);
    Iface *ifs = PyMem_New(Iface, n_if > 0 ? n_if : 1);
    if (ifs == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n_if; i++) {
        PyObject *it = PyTuple_GET_ITEM(ifaces, i);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 3 || !PyLong_Check(PyTuple_GET_ITEM(it, 0))
                || !PyFloat_Check(PyTuple_GET_ITEM(it, 1)) || !PyLong_Check(PyTuple_GET_ITEM(it, 2))) {
            PyErr_SetString(PyExc_TypeError, "an interface is (link type, unit, offset)");
            goto fail;
        }
        ifs[i].linktype = PyLong_AsLong(PyTuple_GET_ITEM(it, 0));
        ifs[i].unit = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(it, 1));
        /* float + int in Python: the int converted to the nearest double */
        ifs[i].offset = PyLong_AsDouble(PyTuple_GET_ITEM(it, 2));
        if (PyErr_Occurred()) goto fail;
    }
    const uint8_t *data = view.buf;
    Py_ssize_t end = view.len;
    Tally tally = {0, 0, NULL};
    KnownCache known_conns = {{{0}, {0}}, 0};
    PyObject *item = NULL;
    int kind = 0;
    if (pos < 0) pos = end;
    while (pos <= end - 12) {
        const uint8_t *b = data + pos;
        uint32_t btype = rd32(b, big), blen = rd32(b + 4, big);
        /* an Enhanced Packet Block whose fields are there (else the walker reads it) */
        if (btype != 6 || blen < 32 || blen % 4 || (Py_ssize_t)blen > end - pos) break;
        const uint8_t *body = b + 8;
        uint32_t iface = rd32(body, big), hi = rd32(body + 4, big), lo = rd32(body + 8, big),
                 incl = rd32(body + 12, big), orig = rd32(body + 16, big);
        if ((Py_ssize_t)iface >= n_if || (uint64_t)incl + 20 > (uint64_t)blen - 12) break;
        /* as the walker: ((hi << 32) | lo) * unit + offset, each step rounded */
        volatile double units = (double)(((uint64_t)hi << 32) | lo) * ifs[iface].unit;
        double ts = units + ifs[iface].offset;
        Py_ssize_t d = pos + 28;
        pos += (Py_ssize_t)blen;
        index += 1;
        kind = one_packet(decoder, connections, data, d, incl, orig, ts, ifs[iface].linktype, 1,
                          index, &tally, &item, &known_conns);
        if (kind < 0) {
            known_clear(&known_conns);
            Py_XDECREF(tally.last_ts);
            goto fail;
        }
        if (kind) break;
    }
    known_clear(&known_conns);
    PyMem_Free(ifs);
    PyBuffer_Release(&view);
    return answer(pos, index, &tally, kind, item);
fail:
    PyMem_Free(ifs);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *setup(PyObject *mod, PyObject *args) {
    PyObject *req, *resp, *frame, *problems;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyType_Type, &req, &PyType_Type, &resp,
                          &PyType_Type, &frame, &PyType_Type, &problems))
        return NULL;
    Py_XSETREF(request_rule, Py_NewRef(req));
    Py_XSETREF(response_rule, Py_NewRef(resp));
    Py_XSETREF(frame_type, Py_NewRef(frame));
    Py_XSETREF(problems_type, Py_NewRef(problems));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"scan_ng", scan_ng, METH_VARARGS, scan_ng_doc},
    {"setup", setup, METH_VARARGS,
     PyDoc_STR("setup(RequestRule, ResponseRule, Frame, Problems): the frame rules whose size "
               "checks scan knows, and the classes of the frames and problems it makes.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kproto.capture._segments",
    "The capture decoder's packet loop over classic pcap files, in C (see scan).", -1, methods,
};

/* The interface this source offers; kproto.accelerators.API names the one the Python
 * side expects, and a build whose number differs is not used. Bump both together. */
#define KPROTO_API 1

PyMODINIT_FUNC PyInit__segments(void) {
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_ticks, "ticks"); INTERN(s_last_ts, "last_ts"); INTERN(s_client, "client");
    INTERN(s_ip, "ip"); INTERN(s_port, "port"); INTERN(s_c2b, "c2b"); INTERN(s_b2c, "b2c");
    INTERN(s_next_seq, "next_seq"); INTERN(s_offset, "offset"); INTERN(s_pending, "pending");
    INTERN(s_acked_past, "acked_past"); INTERN(s_requests, "requests");
    INTERN(s_responses, "responses"); INTERN(s_synced, "synced"); INTERN(s_need, "need");
    INTERN(s_buf, "buf"); INTERN(s_missing, "missing"); INTERN(s_base, "base"); INTERN(s_ts, "_ts");
    INTERN(s_direct, "direct"); INTERN(s_raw, "raw"); INTERN(s_rule, "rule");
    INTERN(s_max_frame, "max_frame"); INTERN(s_request_frame, "_request_frame");
    INTERN(s_response_frame, "_response_frame");
#undef INTERN
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "API", KPROTO_API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
