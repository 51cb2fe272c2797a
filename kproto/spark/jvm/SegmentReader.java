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
 *  skipped, records below the log start offset or at the next segment's base dropped. */
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
    private long baseOffset, baseTs, maxTs;
    private int tsKind;
    private boolean logAppend;
    private int headerRows;  // rows written into the headers' child vectors
    private int headerCap;  // their capacity (reserved here)

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
        }
        int rows = 0;
        while (rows < ROWS) {
            if (recLeft > 0) {
                rows = records(rows);
                continue;
            }
            if (cur == null || winStart + pos >= pieceEnd) {
                if (rows > 0) {
                    break;  // a batch holds one partition's rows (topic, partition are constants)
                }
                if (!nextPiece()) {
                    break;
                }
                continue;
            }
            nextBatch();
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
        Planner.LOG.warn("{}: {}-{} {} at byte {}: {}; {} bytes skipped", KafkaSegmentsJvm.NAME,
                cur.topic, cur.partition, cur.path, here, why, next - here);
        if (next - winStart <= dataLen) {
            pos = (int) (next - winStart);
        } else {
            winStart = next;
            pos = 0;
            dataLen = 0;
        }
    }

    /** Frames the batch at {@code pos}; sets up its records when it is to be read. */
    private void nextBatch() throws IOException {
        long left = pieceEnd - winStart - pos;
        if (left < 17) {
            skipRest("torn tail (a partial batch header)");
            return;
        }
        ensure((int) Math.min(left, HEADER));
        int length = getInt(data, pos + 8);
        if (length < 14) {  // below any message's size: zeros or damage, nothing to frame by
            resync("a batch length of " + length);
            return;
        }
        byte magic = data[pos + 16];
        if (magic != 2) {
            throw new UnsupportedOperationException(KafkaSegmentsJvm.NAME + ": " + cur.path + " at byte "
                    + (winStart + pos) + " holds a message of magic " + magic
                    + " (only record batches of magic 2 are read here)" + KafkaSegmentsJvm.FALLBACK);
        }
        if (length < HEADER - 12) {
            resync("a batch length of " + length);
            return;
        }
        if (left < HEADER) {
            skipRest("torn tail (a partial batch header)");
            return;
        }
        if (12L + length > left) {
            skipRest("torn tail (a batch of " + (12L + length) + " bytes, " + left + " present)");
            return;
        }
        if (length > MAX_RECORD_BATCH) {
            skipRest("a batch length of " + length);
            return;
        }
        int size = 12 + length;
        ensure(size);
        int at = pos;
        pos += size;
        crc.reset();
        crc.update(data, at + 21, size - 21);
        if ((int) crc.getValue() != getInt(data, at + 17)) {
            Planner.LOG.warn("{}: {}-{} {} at byte {}: CRC-32C does not match; batch of {} bytes skipped",
                    KafkaSegmentsJvm.NAME, cur.topic, cur.partition, cur.path, winStart + at, size);
            return;
        }
        int attrs = getShort(data, at + 21);
        if ((attrs & 0x20) != 0) {
            return;  // control batch
        }
        long base = getLong(data, at);
        int lastDelta = getInt(data, at + 23);
        if (cur.logStart >= 0 && base + lastDelta < cur.logStart) {
            return;
        }
        int count = getInt(data, at + 57);
        if (count <= 0) {
            return;
        }
        baseOffset = base;
        baseTs = getLong(data, at + 27);
        maxTs = getLong(data, at + 35);
        logAppend = (attrs & 0x08) != 0;
        tsKind = logAppend ? 1 : 0;
        int codec = attrs & 0x07;
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
            Planner.LOG.warn("{}: {}-{} {} at byte {}: records do not decompress ({}); batch of {} bytes skipped",
                    KafkaSegmentsJvm.NAME, cur.topic, cur.partition, cur.path, winStart + at, e, size);
            return;
        }
        recLeft = count;
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

    private int varint() {
        long v = varlong();
        if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
            throw new IllegalStateException("a varint out of int32 range");
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

    /** Decodes records of the current batch into rows from {@code rows} on. */
    private int records(int rows) {
        int rowStart = rows;
        int headerStart = headerRows;
        try {
            while (recLeft > 0 && rows < ROWS) {
                varPos = recPos;
                int length = varint();
                int end = varPos + length;
                if (length < 0 || end > recEnd) {
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
                if (hc < 0 || hc > end - varPos) {
                    throw new IllegalStateException("a header count of " + hc);
                }
                recPos = end;
                recLeft--;
                if ((cur.logStart >= 0 && off < cur.logStart) || (cur.nextBase >= 0 && off >= cur.nextBase)) {
                    continue;
                }
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
                timestamp.putLong(rows, (logAppend ? maxTs : baseTs + tsDelta) * 1000L);
                tsType.putInt(rows, tsKind);
                if (headers != null) {
                    putHeaders(rows, hc, end);
                } else {
                    varPos = end;
                }
                if (varPos != end) {
                    throw new IllegalStateException("a record's fields end at " + varPos + ", its length at " + end);
                }
                rows++;
            }
        } catch (RuntimeException e) {
            // the batch passed its CRC yet does not decode: drop its rows, report, go on
            Planner.LOG.warn("{}: {}-{} {}: records do not decode ({}); batch at offset {} skipped",
                    KafkaSegmentsJvm.NAME, cur.topic, cur.partition, cur.path, e.getMessage(), baseOffset);
            recLeft = 0;
            if (headers != null) {
                headerRows = headerStart;
            }
            // the rows this call wrote of it are dropped (any a previous call handed over stay)
            return rowStart;
        }
        return rows;
    }

    private void putHeaders(int row, int count, int end) {
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
