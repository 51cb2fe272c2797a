// Kafka's own classes on the payloads kproto's benchmarks write to files: decode, encode and
// zero-copy send of protocol messages (benchmarks/bench_protocol.py), record-batch reads
// (benchmarks/bench_records.py) and scans of log segment files (benchmarks/bench_storage.py).
// Built and run by benchmarks/java_runner.py; prints one JSON object.
//
//   java -cp <classes>:<kafka-clients and its codec jars> ProtocolBench [--warmup S] [--rounds N]
//        [--round-seconds S] [--cpu-time] [--protocol LABEL MESSAGE VERSION FILE]... [--records LABEL FILE]...
//        [--segments LABEL FILE[<path separator>FILE...]]...

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Function;
import java.util.function.LongSupplier;

import org.apache.kafka.common.message.FetchResponseData;
import org.apache.kafka.common.message.MetadataResponseData;
import org.apache.kafka.common.message.ProduceRequestData;
import org.apache.kafka.common.network.Send;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;
import org.apache.kafka.common.protocol.SendBuilder;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.requests.ResponseHeader;
import org.apache.kafka.common.utils.internals.AppInfoParser;
import org.apache.kafka.common.utils.internals.BufferSupplier;
import org.apache.kafka.common.utils.internals.CloseableIterator;

public final class ProtocolBench {
    static double warmupSeconds = 5;
    static int rounds = 5;
    static double roundSeconds = 1;
    /** Time rates by the process's CPU time (all its threads: the JIT's and the collector's too)
     *  rather than the wall clock: on a machine shared with other work, as Python's process_time. */
    static boolean cpuTime = false;
    static final com.sun.management.OperatingSystemMXBean OS =
        (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
    /** Results folded in here so the JIT cannot drop the work being measured. */
    static long sink;
    /** The last decoded message is kept for the same reason (hashing it would cost more than decoding). */
    static Object last;

    public static void main(String[] args) throws Exception {
        List<String[]> protocol = new ArrayList<>();
        List<String[]> records = new ArrayList<>();
        List<String[]> segments = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--warmup": warmupSeconds = Double.parseDouble(args[++i]); break;
                case "--rounds": rounds = Integer.parseInt(args[++i]); break;
                case "--round-seconds": roundSeconds = Double.parseDouble(args[++i]); break;
                case "--cpu-time": cpuTime = true; break;
                case "--protocol": protocol.add(Arrays.copyOfRange(args, i + 1, i + 5)); i += 4; break;
                case "--records": records.add(Arrays.copyOfRange(args, i + 1, i + 3)); i += 2; break;
                case "--segments": segments.add(Arrays.copyOfRange(args, i + 1, i + 3)); i += 2; break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        StringBuilder out = new StringBuilder();
        out.append("{\"java\":").append(str(System.getProperty("java.version")))
           .append(",\"kafka\":").append(str(AppInfoParser.getVersion()))
           .append(",\"warmup_s\":").append(warmupSeconds).append(",\"rounds\":").append(rounds)
           .append(",\"round_s\":").append(roundSeconds)
           .append(",\"clock\":").append(str(cpuTime ? "cpu" : "wall")).append(",\"protocol\":{");
        for (int i = 0; i < protocol.size(); i++) {
            String[] p = protocol.get(i);
            out.append(i == 0 ? "" : ",").append(str(p[0])).append(':')
               .append(protocolEntry(p[1], Short.parseShort(p[2]), Files.readAllBytes(Paths.get(p[3]))));
        }
        out.append("},\"records\":{");
        for (int i = 0; i < records.size(); i++) {
            String[] r = records.get(i);
            out.append(i == 0 ? "" : ",").append(str(r[0])).append(':')
               .append(recordsEntry(Files.readAllBytes(Paths.get(r[1]))));
        }
        out.append("},\"segments\":{");
        for (int i = 0; i < segments.size(); i++) {
            String[] g = segments.get(i);
            out.append(i == 0 ? "" : ",").append(str(g[0])).append(':')
               .append(segmentsEntry(g[1].split(java.util.regex.Pattern.quote(File.pathSeparator))));
        }
        out.append("}}");
        System.out.println(out);
        System.err.println("sink " + sink);
    }

    /** The generated class's reading constructor, called directly (not by reflection) for the
     *  messages the benchmark uses. */
    static Function<Readable, ApiMessage> reader(String message, short version) {
        switch (message) {
            case "MetadataResponse": return r -> new MetadataResponseData(r, version);
            case "ProduceRequest": return r -> new ProduceRequestData(r, version);
            case "FetchResponse": return r -> new FetchResponseData(r, version);
            default: throw new IllegalArgumentException("no reader for " + message);
        }
    }

    static byte[] encode(ApiMessage msg, short version) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ByteBuffer buf = ByteBuffer.allocate(msg.size(cache, version));
        msg.write(new ByteBufferAccessor(buf), cache, version);
        return buf.array();
    }

    /** The framed message as the network layer sends it: records stay the buffers they were
     *  decoded from (SendBuilder.writeRecords), the rest is serialised into small buffers. */
    static Send send(ApiMessage msg, String message, short version) {
        ApiKeys key = ApiKeys.forId(msg.apiKey());
        if (message.endsWith("Response"))
            return SendBuilder.buildResponseSend(
                new ResponseHeader(1, key.responseHeaderVersion(version)), msg, version);
        return SendBuilder.buildRequestSend(new RequestHeader(key, version, "bench", 1), msg);
    }

    static String protocolEntry(String message, short version, byte[] data) throws Exception {
        Function<Readable, ApiMessage> read = reader(message, version);
        ByteBuffer input = ByteBuffer.wrap(data);
        ApiMessage decoded = read.apply(new ByteBufferAccessor(input.duplicate()));
        byte[] again = encode(decoded, version);
        // The same bytes both ways, or the figures would not be about the payload kproto measured.
        if (!Arrays.equals(again, data))
            throw new IllegalStateException(message + " v" + version + " re-encodes to "
                                            + again.length + " bytes, not the input's " + data.length);
        Send framed = send(decoded, message, version);
        double decode = rate(() -> {
            last = read.apply(new ByteBufferAccessor(input.duplicate()));
            return 1;
        });
        double encodeRate = rate(() -> { sink += encode(decoded, version).length; return 1; });
        double sendRate = rate(() -> { sink += send(decoded, message, version).size(); return 1; });
        return "{\"message\":" + str(message) + ",\"version\":" + version + ",\"bytes\":" + data.length
            + ",\"reencoded_sha256\":" + str(sha256(again)) + ",\"send_bytes\":" + framed.size()
            + ",\"decode\":" + decode + ",\"encode\":" + encodeRate + ",\"send\":" + sendRate + "}";
    }

    /** Every record of every batch, offset, timestamp, key and value touched, as the Kafka
     *  consumer reads a fetched partition (streaming iterator, one reused decompression buffer). */
    static long readRecords(ByteBuffer data, BufferSupplier buffers) {
        return readRecords(data, buffers, false);
    }

    static String recordsEntry(byte[] data) {
        ByteBuffer input = ByteBuffer.wrap(data);
        BufferSupplier buffers = BufferSupplier.create();
        long count = readRecords(input, buffers);
        long batches = 0;
        for (RecordBatch ignored : MemoryRecords.readableRecords(input.duplicate()).batches()) batches++;
        double perSecond = rate(() -> readRecords(input, buffers));
        return "{\"bytes\":" + data.length + ",\"batches\":" + batches + ",\"records\":" + count
            + ",\"records_per_s\":" + perSecond + "}";
    }

    /** A scan of segment files as kproto.storage.read_arrow makes it: every record of every
     *  batch of every file, with what the consumer's iteration touches. ``mapped``: each file
     *  mapped once (as read_arrow maps it) and read with MemoryRecords; ``mapped_crc``: the
     *  same with each batch's CRC checked (read_arrow computes every CRC, and a consumer with
     *  check.crcs checks them); ``file_records``: through FileRecords, as Kafka's log reads
     *  (each batch read from the channel into a buffer). */
    static String segmentsEntry(String[] paths) throws Exception {
        ByteBuffer[] mapped = new ByteBuffer[paths.length];
        FileRecords[] files = new FileRecords[paths.length];
        long bytes = 0;
        for (int i = 0; i < paths.length; i++) {
            try (FileChannel ch = FileChannel.open(Paths.get(paths[i]), StandardOpenOption.READ)) {
                MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
                mapped[i] = m;
                bytes += ch.size();
            }
            files[i] = FileRecords.open(new File(paths[i]), false, true, 0, false);
        }
        BufferSupplier buffers = BufferSupplier.create();
        long count = 0, batches = 0;
        for (ByteBuffer m : mapped) {
            count += readRecords(m, buffers, false);
            for (RecordBatch ignored : MemoryRecords.readableRecords(m.duplicate()).batches()) batches++;
        }
        long fileCount = 0;
        for (FileRecords f : files) fileCount += readBatches(f.batches(), buffers, false);
        if (fileCount != count)
            throw new IllegalStateException("FileRecords read " + fileCount + " records, MemoryRecords " + count);
        double mappedRate = rate(() -> { long n = 0; for (ByteBuffer m : mapped) n += readRecords(m, buffers, false); return n; });
        double crcRate = rate(() -> { long n = 0; for (ByteBuffer m : mapped) n += readRecords(m, buffers, true); return n; });
        double fileRate = rate(() -> { long n = 0; for (FileRecords f : files) n += readBatches(f.batches(), buffers, false); return n; });
        // The channel only: FileRecords.close() would flush and trim files it only read.
        for (FileRecords f : files) f.channel().close();
        return "{\"files\":" + paths.length + ",\"bytes\":" + bytes + ",\"batches\":" + batches
            + ",\"records\":" + count + ",\"mapped\":" + mappedRate + ",\"mapped_crc\":" + crcRate
            + ",\"file_records\":" + fileRate + "}";
    }

    static long readRecords(ByteBuffer data, BufferSupplier buffers, boolean checkCrc) {
        return readBatches(MemoryRecords.readableRecords(data.duplicate()).batches(), buffers, checkCrc);
    }

    /** Every record of the batches, offset, timestamp, key and value touched; with checkCrc each
     *  batch's CRC is verified first (RecordBatch.ensureValid). */
    static long readBatches(Iterable<? extends RecordBatch> all, BufferSupplier buffers, boolean checkCrc) {
        long n = 0;
        long acc = 0;
        for (RecordBatch batch : all) {
            if (checkCrc) batch.ensureValid();
            try (CloseableIterator<Record> it = batch.streamingIterator(buffers)) {
                while (it.hasNext()) {
                    Record r = it.next();
                    acc += r.offset() + r.timestamp() + r.keySize() + r.valueSize();
                    ByteBuffer k = r.key(), v = r.value();
                    acc += (k == null ? 0 : k.remaining()) + (v == null ? 0 : v.remaining());
                    n++;
                }
            }
        }
        sink += acc;
        return n;
    }

    /** Nanoseconds of the clock rates are timed by (see cpuTime). */
    static long clock() {
        return cpuTime ? OS.getProcessCpuTime() : System.nanoTime();
    }

    /** Units per second (an op returns how many units it did): warm-up, then the median of
     *  ``rounds`` timed rounds. The clock is read every ``chunk`` ops, chunk sized to ~1 ms. */
    static double rate(LongSupplier op) {
        long chunk = 1;
        long end = clock() + (long) (warmupSeconds * 1e9);
        while (true) {
            long t0 = clock();
            for (long i = 0; i < chunk; i++) sink += op.getAsLong();
            long dt = clock() - t0;
            if (dt < 1_000_000) chunk *= 2;
            if (clock() >= end) break;
        }
        double[] rates = new double[rounds];
        for (int r = 0; r < rounds; r++) {
            long units = 0;
            long t0 = clock();
            long stop = t0 + (long) (roundSeconds * 1e9);
            long now;
            do {
                for (long i = 0; i < chunk; i++) units += op.getAsLong();
                now = clock();
            } while (now < stop);
            rates[r] = units / ((now - t0) / 1e9);
        }
        Arrays.sort(rates);
        return rounds % 2 == 1 ? rates[rounds / 2] : (rates[rounds / 2 - 1] + rates[rounds / 2]) / 2;
    }

    static String sha256(byte[] b) throws Exception {
        StringBuilder s = new StringBuilder();
        for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) s.append(String.format("%02x", x));
        return s.toString();
    }

    static String str(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
