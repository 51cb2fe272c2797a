package kproto.spark.jvm;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/** Reads a task's segment pieces into columnar batches: record batches of magic 2, every
 *  codec, CRC-32C checked (a batch that fails is skipped and logged), control batches
 *  skipped, and the records of each piece's offset range ({@link Planner.Piece#from} to
 *  {@link Planner.Piece#until}) and timestamp range ({@link Planner.Piece#fromTs} to
 *  {@link Planner.Piece#untilTs}) outside aborted transactions ({@link Planner.Piece#aborted}). */
final class SegmentReader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 4096;
    static final int HEADER = 61;  // v2 batch header bytes
    static final int MAX_RECORD_BATCH = Integer.MAX_VALUE - 64;

    static final class Factory implements PartitionReaderFactory {
        final boolean headers;

        Factory(boolean headers) {
            this.headers = headers;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException(KafkaSegmentsJvm.NAME + " reads columnar batches only");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new SegmentReader(((Planner.SegmentPartition) partition).pieces, headers);
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }
    }

    private final Planner.Piece[] pieces;
    private final boolean withHeaders;
    private final OnHeapColumnVector key, value, offset, timestamp, tsType, headers;
    private final ConstantColumnVector topic, partition;
    private final ColumnarBatch batch;
    private final CRC32C crc = new CRC32C();
    /** Also told of every skip (the {@link LogDirCheck} tool prints them); null: the log only. */
    java.util.function.Consumer<String> onSkip;

    private int piece = -1;
    // a window of the current piece: data[0, dataLen) holds its bytes from winStart on (a few
    // MiB, or a batch when larger), pos the next batch's index in it
    static final int WINDOW = 8 << 20;
    private RandomAccessFile file;
    private long winStart, pieceEnd;
    private byte[] data = new byte[0];
    private int dataLen, pos;
    private Planner.Piece cur;
    // records of the current (decompressed) batch still to go
    private byte[] recs;
    private int recPos, recEnd, recLeft;
    private long baseOffset, baseTs, maxTs, batchAt;
    // where the next batch of the piece may start (once one is placed): see placed()
    private long low;
    private boolean lowSet, lowFull;
    private int tsKind;
    private boolean logAppend;
    private int headerRows;  // rows written into the headers' child vectors
    private int headerCap;  // their capacity (reserved here)
    private int headerHigh;  // header entries touched (their null flags) since the last reset
    private int capacity = ROWS;  // rows the column vectors hold

    SegmentReader(Planner.Piece[] pieces, boolean withHeaders) {
        this.pieces = pieces;
        this.withHeaders = withHeaders;
        StructType schema = KafkaSegmentsJvm.schema(withHeaders);
        key = new OnHeapColumnVector(ROWS, DataTypes.BinaryType);
        value = new OnHeapColumnVector(ROWS, DataTypes.BinaryType);
        topic = new ConstantColumnVector(ROWS, DataTypes.StringType);
        partition = new ConstantColumnVector(ROWS, DataTypes.IntegerType);
        offset = new OnHeapColumnVector(ROWS, DataTypes.LongType);
        timestamp = new OnHeapColumnVector(ROWS, DataTypes.TimestampType);
        tsType = new OnHeapColumnVector(ROWS, DataTypes.IntegerType);
        headers = withHeaders ? new OnHeapColumnVector(ROWS, schema.fields()[7].dataType()) : null;
        ColumnVector[] cols = withHeaders
                ? new ColumnVector[] {key, value, topic, partition, offset, timestamp, tsType, headers}
                : new ColumnVector[] {key, value, topic, partition, offset, timestamp, tsType};
        batch = new ColumnarBatch(cols);
    }

    @Override
    public boolean next() throws IOException {
        key.reset();
        value.reset();
        offset.reset();
        timestamp.reset();
        tsType.reset();
        if (headers != null) {
            headers.reset();
            headerRows = 0;
            headerHigh = 0;
        }
        int rows = 0;
        while (rows < ROWS) {
            if (cur == null || winStart + pos >= pieceEnd) {
                if (rows > 0) {
                    break;  // a batch holds one partition's rows (topic, partition are constants)
                }
                if (!nextPiece()) {
                    break;
                }
                continue;
            }
            if (nextBatch()) {
                rows = records(rows);  // all of the batch's rows or none of them
            }
        }
        batch.setNumRows(rows);
        return rows > 0;
    }

    private boolean nextPiece() throws IOException {
        cur = null;
        if (++piece >= pieces.length) {
            return false;
        }
        cur = pieces[piece];
        closeFile();
        file = new RandomAccessFile(cur.path, "r");
        pieceEnd = Math.max(cur.start, Math.min(cur.end, file.length()));
        winStart = cur.start;
        pos = 0;
        dataLen = 0;
        lowSet = false;
        topic.setUtf8String(UTF8String.fromString(cur.topic));
        partition.setInt(cur.partition);
        return true;
    }

    /** Makes data[pos, pos + n) hold the piece's next n bytes (n: at most what is left). */
    private void ensure(int n) throws IOException {
        if (dataLen - pos >= n) {
            return;
        }
        int keep = dataLen - pos;
        int want = (int) Math.min(Math.max(n, WINDOW), pieceEnd - winStart - pos);
        byte[] into = data.length < want ? new byte[want] : data;
        System.arraycopy(data, pos, into, 0, keep);
        data = into;
        winStart += pos;
        pos = 0;
        file.seek(winStart + keep);
        file.readFully(data, keep, want - keep);
        dataLen = want;
    }

    /** The piece is done: a torn tail (a batch that does not fit in what is left) is its
     *  end, as in kproto's Python reader. */
    /** Reports damage read past: a warning on the log, and to {@link #onSkip} when set. */
    private void skipped(long at, String what) {
        String line = KafkaSegmentsJvm.NAME + ": " + cur.topic + "-" + cur.partition + " " + cur.path
                + " at byte " + at + ": " + what;
        Planner.LOG.warn(line);
        if (onSkip != null) {
            onSkip.accept(line);
        }
    }

    private void skipRest(String why) {
        skipTo(why, pieceEnd);
    }

    /** Damage at {@code pos} that frames nothing: the read resumes at the next batch the
     *  .index knows in this piece, else the piece is done. */
    private void resync(String why) {
        long here = winStart + pos;
        long next = pieceEnd;
        for (long p : cur.resync) {
            if (p > here && p < pieceEnd) {
                next = p;
                break;
            }
        }
        skipTo(why, next);
    }

    private void skipTo(String why, long next) {
        long here = winStart + pos;
        skipped(here, why + "; " + (next - here) + " bytes skipped");
        if (next - winStart <= dataLen) {
            pos = (int) (next - winStart);
        } else {
            winStart = next;
            pos = 0;
            dataLen = 0;
        }
    }

    /** Frames the batch at {@code pos} as kproto's Python reader frames it; true when its
     *  records are set up to be read. */
    private boolean nextBatch() throws IOException {
        long left = pieceEnd - winStart - pos;
        if (left < 12) {
            skipRest("torn tail (a partial batch header)");
            return false;
        }
        ensure((int) Math.min(left, HEADER));
        int length = getInt(data, pos + 8);
        if (length < 14) {  // below any message's size: zeros or damage, nothing to frame by
            resync("a batch length of " + length);
            return false;
        }
        if (12L + length > left) {
            skipRest("torn tail (a batch of " + (12L + length) + " bytes, " + left + " present)");
            return false;
        }
        byte magic = data[pos + 16];
        if (magic == 0 || magic == 1) {
            legacy(magic, length);
            return false;
        }
        if (magic != 2) {
            resync("unknown magic " + magic);
            return false;
        }
        if (length < HEADER - 12) {
            resync("a batch length of " + length);
            return false;
        }
        if (length > MAX_RECORD_BATCH) {
            skipRest("a batch length of " + length);
            return false;
        }
        int size = 12 + length;
        ensure(size);
        int at = pos;
        int count = getInt(data, at + 57);
        if (count < 0) {
            resync("a record count of " + count);
            return false;
        }
        pos += size;
        crc.reset();
        crc.update(data, at + 21, size - 21);
        if ((int) crc.getValue() != getInt(data, at + 17)) {
            skipped(winStart + at, "CRC-32C does not match; batch of " + size + " bytes skipped");
            return false;
        }
        int attrs = getShort(data, at + 21);
        int codec = attrs & 0x07;
        if (codec > 4 || (count == 0 && size > HEADER)) {
            skipped(winStart + at, (codec > 4 ? "unknown compression codec " + codec : "a record count of 0 before "
                    + (size - HEADER) + " bytes of records") + "; batch of " + size + " bytes skipped");
            return false;
        }
        long base = getLong(data, at);
        long last = base + getInt(data, at + 23);
        if (!placed(base, last)) {
            skipped(winStart + at, "batch offsets " + base + ".." + last + " out of place; batch of "
                    + size + " bytes skipped");
            return false;
        }
        if ((attrs & 0x20) != 0) {
            return false;  // control batch
        }
        if (count == 0 || last < (cur.from == Long.MIN_VALUE ? 0 : cur.from) || (cur.until >= 0 && base >= cur.until)) {
            return false;
        }
        if (cur.fromTs != null && getLong(data, at + 35) < cur.fromTs && (attrs & 0x40) == 0) {
            return false;  // all below the start timestamp, unless a delete horizon is set
        }
        if ((attrs & 0x10) != 0 && aborted(cur.aborted, getLong(data, at + 43), last)) {
            return false;
        }
        baseOffset = base;
        baseTs = getLong(data, at + 27);
        maxTs = getLong(data, at + 35);
        logAppend = (attrs & 0x08) != 0;
        tsKind = logAppend ? 1 : 0;
        try {
            if (codec == 0) {
                recs = data;
                recPos = at + HEADER;
                recEnd = at + size;
            } else {
                recs = decompress(codec, data, at + HEADER, size - HEADER);
                decompressed += recs.length;
                recPos = 0;
                recEnd = recs.length;
            }
        } catch (IOException | RuntimeException | LinkageError e) {
            skipped(winStart + at, "records do not decompress (" + e + "); batch of " + size + " bytes skipped");
            return false;
        }
        recLeft = count;
        batchAt = winStart + at;
        return true;
    }

    /** Whether a batch of offsets {@code [base, last]} follows the ones before it in this
     *  piece (the first may start below the segment's base offset, not end below it) and
     *  ends below the next segment's base, as kproto's Python reader places batches (the
     *  base offset is not covered by the CRC); a batch placed sets where the next may start. */
    private boolean placed(long base, long last) {
        boolean bad = (lowSet ? lowFull || base < low : last < cur.segBase) || last < base
                || (cur.nextBase >= 0 && last >= cur.nextBase);
        if (!bad) {
            low = last + 1;
            lowFull = last == Long.MAX_VALUE;
            lowSet = true;
        }
        return !bad;
    }

    /** Whether a transactional data batch of producer {@code pid} ending at {@code last}
     *  belongs to an aborted transaction of {@code spans} (producer id, first offset, ABORT
     *  marker offset triples, sorted): the last span of that producer starting at or before
     *  {@code last} holds it when its marker comes later. */
    static boolean aborted(long[] spans, long pid, long last) {
        int lo = 0, hi = spans.length / 3;  // the first span after (pid, last)
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            long p = spans[3 * mid], f = spans[3 * mid + 1];
            if (p < pid || (p == pid && f <= last)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo > 0 && spans[3 * (lo - 1)] == pid && last < spans[3 * (lo - 1) + 2];
    }

    /** A message of magic 0 or 1 at {@code pos}: framing that does not hold resumes the read
     *  at the next .index position, a CRC-32 that does not match skips it (kproto's Python
     *  reader's rules), a whole one is refused (this reader reads record batches only). */
    private void legacy(int magic, int length) throws IOException {
        int size = 12 + length;
        if (length < (magic == 0 ? 14 : 22)) {
            resync("a message size of " + length + " below the magic " + magic + " minimum");
            return;
        }
        ensure(size);
        String damage = legacyDamage(data, pos, magic, size);
        if (damage != null) {
            resync(damage);
            return;
        }
        java.util.zip.CRC32 crc32 = new java.util.zip.CRC32();
        crc32.update(data, pos + 16, size - 16);
        if ((int) crc32.getValue() != getInt(data, pos + 12)) {
            skipped(winStart + pos, "CRC-32 does not match; message of " + size + " bytes skipped");
            pos += size;
            return;
        }
        throw new UnsupportedOperationException(KafkaSegmentsJvm.NAME + ": " + cur.path + " at byte "
                + (winStart + pos) + " holds a message of magic " + magic
                + " (only record batches of magic 2 are read here)" + KafkaSegmentsJvm.FALLBACK);
    }

    /** Why the message of magic 0 or 1 (at least its minimum size) of {@code size} bytes at
     *  {@code data[pos]} does not frame (its key and value lengths must fill it), or null. */
    static String legacyDamage(byte[] data, int pos, int magic, int size) {
        long p = pos + 18 + (magic == 1 ? 8 : 0), end = pos + (long) size;
        for (int i = 0; i < 2; i++) {  // key and value: they fill the message
            if (p + 4 > end) {
                return "a message's lengths run past it";
            }
            int n = getInt(data, (int) p);
            p += 4;
            if (n < -1 || p + Math.max(n, 0) > end) {
                return "a message's lengths run past it";
            }
            p += Math.max(n, 0);
        }
        return p != end ? "a message's lengths do not fill it" : null;
    }

    /** Decompressed bytes allowed to a task: this floor plus this ratio times the compressed
     *  bytes it met (the limits of kproto's Python reader): a decompression bomb is cut short
     *  and its batch skipped. */
    static final long BUDGET_FLOOR = 16L << 20, BUDGET_RATIO = 64;
    private long compressed, decompressed;

    private byte[] decompress(int codec, byte[] src, int off, int len) throws IOException {
        compressed += len;
        long allowed = BUDGET_FLOOR + BUDGET_RATIO * compressed - decompressed;
        InputStream raw = new ByteArrayInputStream(src, off, len);
        InputStream in;
        switch (codec) {
            case 1: in = new GZIPInputStream(raw, 8192); break;
            case 2: in = new org.xerial.snappy.SnappyInputStream(raw); break;
            case 3: in = new net.jpountz.lz4.LZ4FrameInputStream(raw); break;
            case 4: in = new com.github.luben.zstd.ZstdInputStream(raw); break;
            default: throw new IOException("unknown compression codec " + codec);
        }
        try (InputStream s = in) {
            byte[] out = new byte[(int) Math.min(Math.max(1024, len * 4L), allowed + 1)];
            int n = 0;
            while (true) {
                if (n == out.length) {
                    out = Arrays.copyOf(out, out.length * 2);
                }
                int r = s.read(out, n, out.length - n);
                if (r < 0) {
                    break;
                }
                n += r;
                if (n > allowed) {
                    throw new IOException("more than the decompression limit of " + allowed + " bytes");
                }
            }
            return n == out.length ? out : Arrays.copyOf(out, n);
        }
    }

    // ---------------------------------------------------------------- records
    private int varPos;

    private long varlong() {
        long raw = 0;
        int shift = 0;
        while (true) {
            if (varPos >= recEnd) {
                throw new IllegalStateException("a varint runs past the batch");
            }
            byte b = recs[varPos++];
            raw |= (long) (b & 0x7f) << shift;
            if (b >= 0) {
                break;
            }
            shift += 7;
            if (shift > 63) {
                throw new IllegalStateException("a varint of more than 10 bytes");
            }
        }
        return (raw >>> 1) ^ -(raw & 1);
    }

    /** An int32 varint as Kafka's {@code readVarint} takes it: at most 5 bytes. */
    private int varint() {
        int at = varPos;
        long v = varlong();
        if (varPos - at > 5 || v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
            throw new IllegalStateException("a varint longer than 5 bytes");
        }
        return (int) v;
    }

    private int bytesLen(int limit) {
        int n = varint();
        if (n < -1 || (n >= 0 && varPos + n > limit)) {
            throw new IllegalStateException("a length of " + n + " past the record");
        }
        return n;
    }

    /** Makes the column vectors hold at least {@code rows} rows. */
    private void reserve(int rows) {
        if (rows <= capacity) {
            return;
        }
        capacity = Math.max(rows, capacity * 2);
        key.reserve(capacity);
        value.reserve(capacity);
        offset.reserve(capacity);
        timestamp.reserve(capacity);
        tsType.reserve(capacity);
        if (headers != null) {
            headers.reserve(capacity);
        }
    }

    /** Decodes every record of the current batch into rows from {@code rows} on and returns
     *  the row count after them; a batch whose records do not decode gives no row at all (the
     *  rows written of it are rolled back), as kafka-segments checks a whole batch before it
     *  gives any of its rows. A row may pass {@link #ROWS}: a batch is never split. */
    private int records(int rows) {
        int rowStart = rows;
        int headerStart = headerRows;
        try {
            for (; recLeft > 0; recLeft--) {
                varPos = recPos;
                int length = varint();
                int end = varPos + length;
                if (length <= 0 || end > recEnd) {
                    throw new IllegalStateException("a record of " + length + " bytes past the batch");
                }
                varPos++;  // attributes
                long tsDelta = varlong();
                long off = baseOffset + varint();
                int kl = bytesLen(end);
                int kAt = varPos;
                varPos += Math.max(kl, 0);
                int vl = bytesLen(end);
                int vAt = varPos;
                varPos += Math.max(vl, 0);
                int hc = varint();
                if (hc < 0 || hc > (end - varPos) / 2) {  // a header takes two bytes at least
                    throw new IllegalStateException("a header count of " + hc);
                }
                recPos = end;
                long ts = logAppend ? maxTs : baseTs + tsDelta;
                boolean keep = off >= cur.from && (cur.until < 0 || off < cur.until)
                        && (cur.fromTs == null || ts >= cur.fromTs) && (cur.untilTs == null || ts < cur.untilTs);
                if (keep) {
                    reserve(rows + 1);
                    if (kl < 0) {
                        key.putNull(rows);
                    } else {
                        key.putByteArray(rows, recs, kAt, kl);
                    }
                    if (vl < 0) {
                        value.putNull(rows);
                    } else {
                        value.putByteArray(rows, recs, vAt, vl);
                    }
                    offset.putLong(rows, off);
                    timestamp.putLong(rows, ts * 1000L);
                    tsType.putInt(rows, tsKind);
                }
                if (hc > 0 || keep && headers != null) {
                    // headers are checked whether or not they are read, as kafka-segments does
                    headers(keep && headers != null ? rows : -1, hc, end);
                }
                if (varPos != end) {
                    throw new IllegalStateException("a record's fields end at " + varPos + ", its length at " + end);
                }
                if (keep) {
                    rows++;
                }
            }
            if (recPos != recEnd) {
                throw new IllegalStateException((recEnd - recPos) + " bytes after the last record");
            }
        } catch (RuntimeException e) {
            // the batch passed its CRC yet does not decode: none of its rows, report, go on
            recLeft = 0;
            rollBack(rowStart, Math.min(rows + 1, capacity), headerStart);
            skipped(batchAt, "records do not decode (" + e.getMessage() + "); batch at offset "
                    + baseOffset + " skipped");
            return rowStart;
        }
        return rows;
    }

    /** Forgets rows {@code [rowStart, rowEnd)} and header entries from {@code headerStart} on:
     *  the null flags they set are cleared (a later row reuses the slots), appended bytes stay
     *  unused. */
    private void rollBack(int rowStart, int rowEnd, int headerStart) {
        if (rowEnd > rowStart) {
            key.putNotNulls(rowStart, rowEnd - rowStart);
            value.putNotNulls(rowStart, rowEnd - rowStart);
            if (headers != null) {
                headers.putNotNulls(rowStart, rowEnd - rowStart);
            }
        }
        if (headers != null) {
            int end = Math.min(headerHigh, headerCap);
            if (end > headerStart) {
                headers.arrayData().getChild(1).putNotNulls(headerStart, end - headerStart);
            }
            headerRows = headerStart;
            headerHigh = headerStart;
        }
    }

    /** The {@code count} headers of a record: into row {@code row}'s headers, or only checked
     *  ({@code row} -1). */
    private void headers(int row, int count, int end) {
        if (row < 0) {
            for (int i = 0; i < count; i++) {
                int kl = varint();
                if (kl < 0 || varPos + kl > end) {
                    throw new IllegalStateException("a header key of " + kl + " bytes");
                }
                varPos += kl;
                int vl = bytesLen(end);  // (not in one statement: it moves varPos)
                varPos += Math.max(vl, 0);
            }
            return;
        }
        if (count == 0) {
            headers.putNull(row);
            return;
        }
        WritableColumnVector structs = headers.arrayData();
        WritableColumnVector hk = structs.getChild(0), hv = structs.getChild(1);
        int first = headerRows;
        int need = first + count;
        if (headerCap < need) {
            int cap = Math.max(need, headerCap * 2);
            headerCap = cap;
            structs.reserve(cap);
            hk.reserve(cap);
            hv.reserve(cap);
        }
        headerHigh = Math.max(headerHigh, need);
        for (int i = 0; i < count; i++) {
            int kl = varint();
            if (kl < 0 || varPos + kl > end) {
                throw new IllegalStateException("a header key of " + kl + " bytes");
            }
            hk.putByteArray(first + i, recs, varPos, kl);
            varPos += kl;
            int vl = bytesLen(end);
            if (vl < 0) {
                hv.putNull(first + i);
            } else {
                hv.putByteArray(first + i, recs, varPos, vl);
                varPos += vl;
            }
            structs.putNotNull(first + i);
        }
        headerRows = need;
        headers.putArray(row, first, count);
    }

    private static int getInt(byte[] b, int i) {
        return (b[i] & 0xff) << 24 | (b[i + 1] & 0xff) << 16 | (b[i + 2] & 0xff) << 8 | (b[i + 3] & 0xff);
    }

    private static int getShort(byte[] b, int i) {
        return (b[i] & 0xff) << 8 | (b[i + 1] & 0xff);
    }

    private static long getLong(byte[] b, int i) {
        return ((long) getInt(b, i) << 32) | (getInt(b, i + 4) & 0xffffffffL);
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    private void closeFile() throws IOException {
        if (file != null) {
            file.close();
            file = null;
        }
    }

    @Override
    public void close() throws IOException {
        batch.close();
        closeFile();
    }
}
