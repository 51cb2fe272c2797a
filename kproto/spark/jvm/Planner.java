package kproto.spark.jvm;

import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import org.apache.spark.sql.connector.read.InputPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Planning on the driver: partition folders, their segments, cut into tasks at batch
 *  boundaries found by a walk over the batch headers. */
final class Planner {
    static final Logger LOG = LoggerFactory.getLogger("kproto.spark.jvm");
    static final long MIN_SPLIT = 4L << 20, MAX_SPLIT = 128L << 20;
    private static final Pattern FOLDER = Pattern.compile("(.+)-(\\d+)");
    private static final Pattern SEGMENT = Pattern.compile("(\\d{20})\\.log");
    static final String LOG_START_CHECKPOINT = "log-start-offset-checkpoint";
    static final int HEADER_BYTES = 61;  // a v2 batch header

    private Planner() {
    }

    /** A byte range of one segment: whole batches from {@code start}; {@code end} the
     *  segment's end or a batch boundary; the records it gives: offsets {@code [from, until)}
     *  ({@code until} -1: no end) and timestamps {@code [fromTs, untilTs)} (null: open)
     *  outside the {@code aborted} transactions. */
    static final class Piece implements Serializable {
        final String path, topic;
        final int partition;
        final long start, end, segBase, nextBase;  // nextBase -1: none
        final long from, until;
        final Long fromTs, untilTs;
        /** Aborted transactions (read_committed): producer id, first offset, ABORT marker
         *  offset triples, sorted; empty otherwise. */
        final long[] aborted;
        /** Batch positions the segment's .index knows: where a read resumes after damage. */
        final long[] resync;

        Piece(String path, String topic, int partition, long start, long end, long segBase, long nextBase,
              long from, long until, Long fromTs, Long untilTs, long[] aborted, long[] resync) {
            this.path = path;
            this.topic = topic;
            this.partition = partition;
            this.start = start;
            this.end = end;
            this.segBase = segBase;
            this.nextBase = nextBase;
            this.from = from;
            this.until = until;
            this.fromTs = fromTs;
            this.untilTs = untilTs;
            this.aborted = aborted;
            this.resync = resync;
        }

        Piece range(long start, long end) {
            return new Piece(path, topic, partition, start, end, segBase, nextBase, from, until, fromTs, untilTs, aborted,
                    resync);
        }

        @Override
        public String toString() {
            return topic + "-" + partition + "/" + Paths.get(path).getFileName() + "[" + start + ":" + end + "]";
        }
    }

    /** What a read selects of each partition: offsets {@code [start, end)} (Long.MIN_VALUE /
     *  -1: open) for every partition, narrowed per partition by the JSON forms of
     *  startingOffsets / endingOffsets, timestamps {@code [startTs, endTs)} (null: open) and
     *  the isolation level. */
    static final class Bounds {
        static final Bounds ALL = new Bounds(Long.MIN_VALUE, -1, Map.of(), null, null, false);
        final long start, end;
        final Map<String, long[]> perPartition;  // "topic partition" -> {start, end}
        final Long startTs, endTs;
        final boolean committed;

        Bounds(long start, long end, Map<String, long[]> perPartition, Long startTs, Long endTs,
               boolean committed) {
            this.start = start;
            this.end = end;
            this.perPartition = perPartition;
            this.startTs = startTs;
            this.endTs = endTs;
            this.committed = committed;
        }

        /** {start, end} of one partition. */
        long[] of(String topic, int partition) {
            long[] p = perPartition.get(topic + " " + partition);
            long lo = start, hi = end;
            if (p != null) {
                lo = Math.max(lo, p[0]);
                hi = hi < 0 ? p[1] : p[1] < 0 ? hi : Math.min(hi, p[1]);
            }
            return new long[] {lo, hi};
        }
    }

    /** One Spark task: consecutive pieces. */
    static final class SegmentPartition implements InputPartition {
        final Piece[] pieces;

        SegmentPartition(List<Piece> pieces) {
            this.pieces = pieces.toArray(new Piece[0]);
        }

        @Override
        public String toString() {
            return "SegmentPartition" + Arrays.toString(pieces);
        }
    }

    static long parseSize(String text) {
        Matcher m = Pattern.compile("(\\d+)\\s*([a-z]*)").matcher(text.trim().toLowerCase(Locale.ROOT));
        if (!m.matches()) {
            throw new IllegalArgumentException(KafkaSegmentsJvm.NAME + ": splitSize " + text + " is not a size");
        }
        long n = Long.parseLong(m.group(1));
        switch (m.group(2)) {
            case "": case "b": break;
            case "k": case "kb": n <<= 10; break;
            case "m": case "mb": n <<= 20; break;
            case "g": case "gb": n <<= 30; break;
            default: throw new IllegalArgumentException(KafkaSegmentsJvm.NAME + ": splitSize " + text + " is not a size");
        }
        if (n <= 0) {
            throw new IllegalArgumentException(KafkaSegmentsJvm.NAME + ": splitSize must be positive");
        }
        return n;
    }

    /** Log start offsets of a log directory's checkpoint, by "topic partition". */
    static Map<String, Long> logStarts(Path dir) {
        Map<String, Long> out = new HashMap<>();
        Path file = dir.resolve(LOG_START_CHECKPOINT);
        if (!Files.isRegularFile(file)) {
            return out;
        }
        try {
            List<String> lines = Files.readAllLines(file, StandardCharsets.UTF_8);
            for (int i = 2; i < lines.size(); i++) {
                String[] f = lines.get(i).trim().split(" ");
                if (f.length == 3) {
                    out.put(f[0] + " " + f[1], Long.parseLong(f[2]));
                }
            }
        } catch (IOException | RuntimeException e) {
            LOG.warn("{}: {} ignored: {}", KafkaSegmentsJvm.NAME, file, e.toString());
            out.clear();
        }
        return out;
    }

    static List<InputPartition> plan(List<String> paths, Set<String> topics, Bounds bounds, long splitBytes,
                                     int tasks) {
        List<Piece> pieces = new ArrayList<>();
        List<long[]> cuts = new ArrayList<>();  // batch positions of each piece's segment
        for (String p : paths) {
            Path path = Paths.get(p.startsWith("file:") ? p.substring(5).replaceFirst("^//", "") : p);
            if (!Files.isDirectory(path)) {
                throw new IllegalArgumentException(KafkaSegmentsJvm.NAME + ": " + p + " is not a directory"
                        + " (remote paths are not read here" + KafkaSegmentsJvm.FALLBACK + ")");
            }
            List<Path> folders = new ArrayList<>();
            Path checkpointDir = path;
            if (isPartitionFolder(path)) {
                folders.add(path);
                checkpointDir = path.toAbsolutePath().getParent();
            } else {
                try (Stream<Path> s = Files.list(path)) {
                    s.filter(Planner::isPartitionFolder).sorted().forEach(folders::add);
                } catch (IOException e) {
                    throw new IllegalArgumentException(KafkaSegmentsJvm.NAME + ": cannot list " + p + ": " + e, e);
                }
            }
            Map<String, Long> starts = checkpointDir == null ? new HashMap<>() : logStarts(checkpointDir);
            for (Path folder : folders) {
                Matcher m = FOLDER.matcher(folder.getFileName().toString());
                if (!m.matches()) {
                    continue;
                }
                String topic = m.group(1);
                int partition = Integer.parseInt(m.group(2));
                if (topics != null && !topics.contains(topic)) {
                    continue;
                }
                long logStart = starts.getOrDefault(topic + " " + partition, Long.MIN_VALUE);
                planPartition(folder, topic, partition, logStart, bounds, pieces, cuts);
            }
        }
        long total = 0;
        for (Piece piece : pieces) {
            total += piece.end - piece.start;
        }
        long target = splitBytes > 0 ? splitBytes
                : Math.min(MAX_SPLIT, Math.max(MIN_SPLIT, (total + tasks - 1) / Math.max(1, tasks)));
        return balance(pieces, cuts, target);
    }

    private static boolean isPartitionFolder(Path p) {
        return Files.isDirectory(p) && FOLDER.matcher(p.getFileName().toString()).matches();
    }

    private static void planPartition(Path folder, String topic, int partition, long logStart, Bounds bounds,
                                      List<Piece> pieces, List<long[]> cuts) {
        List<Path> logs = new ArrayList<>();
        try (Stream<Path> s = Files.list(folder)) {
            s.filter(f -> SEGMENT.matcher(f.getFileName().toString()).matches()).sorted().forEach(logs::add);
        } catch (IOException e) {
            LOG.warn("{}: {} not read: {}", KafkaSegmentsJvm.NAME, folder, e.toString());
            return;
        }
        long[] range = bounds.of(topic, partition);
        long from = Math.max(range[0], logStart), until = range[1];
        long[] aborted = new long[0];
        if (bounds.committed) {
            aborted = Transactions.aborted(logs);
            long lso = Transactions.firstUnstableOffset(folder, logs);
            if (lso >= 0) {
                until = until < 0 ? lso : Math.min(until, lso);
            }
        }
        for (int i = 0; i < logs.size(); i++) {
            long base = baseOf(logs.get(i));
            long nextBase = i + 1 < logs.size() ? baseOf(logs.get(i + 1)) : -1;
            if (nextBase >= 0 && nextBase <= from) {
                continue;  // every record of it is below the first offset read
            }
            if (until >= 0 && base >= until) {
                break;  // and of these, at or past the end
            }
            Path log = logs.get(i);
            long[] positions;
            long size;
            try (FileChannel ch = FileChannel.open(log, StandardOpenOption.READ)) {
                size = ch.size();
                positions = batchPositions(ch, size);
            } catch (IOException e) {
                LOG.warn("{}: {} not read: {}", KafkaSegmentsJvm.NAME, log, e.toString());
                continue;
            }
            if (size == 0) {
                continue;
            }
            long[][] indexFile = indexFile(log, size);
            long[][] index = indexFile != null ? indexFile : new long[][] {new long[0], new long[0]};
            // the segment holding the first offset read is entered through its index, as
            // kafka-segments enters it
            long start = from > base ? lookup(index, base, from) : 0;
            if (bounds.startTs != null) {
                long at = timestampStart(log, size, base, i == logs.size() - 1, bounds.startTs, indexFile);
                if (at < 0) {
                    continue;  // a closed segment whose largest timestamp is below the start
                }
                start = Math.max(start, at);
            }
            pieces.add(new Piece(log.toString(), topic, partition, start, size, base, nextBase, from, until,
                    bounds.startTs, bounds.endTs, aborted, index[1]));
            cuts.add(positions);
        }
    }

    /** The positions of a segment's .index entries, none when it is missing or unusable by
     *  Kafka's sanity checks as kproto's Python reader applies them (a size not a multiple of
     *  8 or past 2 GiB, offsets not growing, positions going back, a negative first entry, a
     *  last position past the log): that reader then rebuilds the index by a scan that stops
     *  at the first damage, so it knows no batch after the damage either. Entries end at the
     *  first all-zero slot (a preallocated index's tail); a slot past one per 26 bytes of log
     *  (the smallest message) is preallocation. */
    static long[] indexPositions(Path log, long logSize) {
        return index(log, logSize)[1];
    }

    /** The relative offsets and positions of a segment's usable .index entries (see
     *  {@link #indexPositions}). */
    static long[][] index(Path log, long logSize) {
        long[][] index = indexFile(log, logSize);
        return index != null ? index : new long[][] {new long[0], new long[0]};
    }

    /** {@link #index}, null when the .index is missing or unusable (kproto's Python reader
     *  then rebuilds it by scanning). */
    static long[][] indexFile(Path log, long logSize) {
        byte[] bytes = indexBytes(log, ".index", 8, logSize);
        if (bytes == null) {
            return null;
        }
        ByteBuffer b = ByteBuffer.wrap(bytes);
        long[] out = new long[bytes.length / 8], rels = new long[bytes.length / 8];
        int n = 0;
        int prevRel = 0;
        for (int i = 0; i + 8 <= bytes.length; i += 8) {
            int rel = b.getInt(i), position = b.getInt(i + 4);
            if (rel == 0 && position == 0) {
                break;
            }
            boolean bad = n == 0 ? rel < 0 || position < 0 : rel <= prevRel || position < out[n - 1];
            if (bad) {
                return null;
            }
            prevRel = rel;
            rels[n] = rel;
            out[n++] = position;
        }
        if (n > 0 && out[n - 1] >= logSize) {
            return null;
        }
        return new long[][] {Arrays.copyOf(rels, n), Arrays.copyOf(out, n)};
    }

    /** The whole slots of the part of a segment's index file ({@code suffix}, entries of
     *  {@code entry} bytes) that can hold entries (one per 26 bytes of log, the smallest
     *  message); null when it is missing, unreadable, past 2 GiB or not whole slots. */
    private static byte[] indexBytes(Path log, String suffix, int entry, long logSize) {
        Path file = Transactions.sibling(log, suffix);
        try {
            if (!Files.isRegularFile(file)) {
                return null;
            }
            long fileSize = Files.size(file);
            if (fileSize > Integer.MAX_VALUE || fileSize % entry != 0) {
                return null;
            }
            byte[] bytes = new byte[(int) Math.min(fileSize, entry * (logSize / 26 + 1))];
            int got;
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                got = readAt(ch, ByteBuffer.wrap(bytes), 0);
            }
            return Arrays.copyOf(bytes, got - got % entry);
        } catch (IOException e) {
            return null;
        }
    }

    /** A segment's .timeindex as kproto's Python reader takes it: {timestamps, relative
     *  offsets, {preallocated: 1 or 0}}, the entries ending at the first all-zero slot; null
     *  when it is missing or unusable (a size past 2 GiB or not a multiple of 12, timestamps
     *  not growing strictly, offsets going back). */
    static long[][] timeIndexFile(Path log, long logSize) {
        byte[] bytes = indexBytes(log, ".timeindex", 12, logSize);
        if (bytes == null) {
            return null;
        }
        ByteBuffer b = ByteBuffer.wrap(bytes);
        int slots = bytes.length / 12, n = 0;
        long[] ts = new long[slots], rels = new long[slots];
        for (; n < slots; n++) {
            long t = b.getLong(12 * n);
            int rel = b.getInt(12 * n + 8);
            if (t == 0 && rel == 0) {
                break;
            }
            if (n > 0 && (t <= ts[n - 1] || rel < rels[n - 1])) {
                return null;
            }
            ts[n] = t;
            rels[n] = rel;
        }
        long fileSize;
        try {
            fileSize = Files.size(Transactions.sibling(log, ".timeindex"));
        } catch (IOException e) {
            return null;
        }
        return new long[][] {Arrays.copyOf(ts, n), Arrays.copyOf(rels, n), {fileSize > 12L * n ? 1 : 0}};
    }

    /** Where a read of records from timestamp {@code ts} on starts in a segment (Kafka's
     *  {@code findOffsetByTimestamp}: the time index gives an offset, the offset index its
     *  position), -1 when none of it is read: a segment not the last whose time index is not
     *  preallocated and ends below {@code ts}. The indexes as kproto's Python reader takes
     *  them: when either file is missing or unusable both are rebuilt by a scan, and a rebuilt
     *  one replaces each that is unusable or has no entries. {@code offsets}: the segment's
     *  {@link #indexFile}, which the planner has read already. */
    static long timestampStart(Path log, long logSize, long base, boolean last, long ts, long[][] offsets) {
        long[][] times = timeIndexFile(log, logSize);
        if (offsets == null || times == null) {
            long[][][] rebuilt = rebuild(log, logSize, base);
            offsets = offsets == null || offsets[0].length == 0 ? rebuilt[0] : offsets;
            times = times == null || times[0].length == 0 ? rebuilt[1] : times;
        }
        int n = times[0].length;
        if (!last && times[2][0] == 0 && n > 0 && times[0][n - 1] < ts) {
            return -1;
        }
        long offset = base;  // TimeIndex.lookup: the last entry at or below ts
        for (int i = 0; i < n && times[0][i] <= ts; i++) {
            offset = base + times[1][i];
        }
        return lookup(offsets, base, offset);
    }

    /** The .index and .timeindex entries Kafka's segment recovery writes ({@code
     *  rebuild_indexes} of kproto's Python reader, one append per batch, an entry after more
     *  than 4096 bytes, the final time entry of a closed segment): {offset index, time index}
     *  as {@link #indexFile} and {@link #timeIndexFile} give them, from the batches a scan
     *  frames from the start of the log up to the first framing damage (a v2 batch of an
     *  unknown codec or no records stepped over, as that scan steps over it). */
    static long[][][] rebuild(Path log, long logSize, long base) {
        long[] rels = new long[16], positions = new long[16], times = new long[16], timeRels = new long[16];
        int nOff = 0, nTime = 0;
        long maxTs = -1, offsetOfMax = base, since = 0;
        try (FileChannel ch = FileChannel.open(log, StandardOpenOption.READ)) {
            ByteBuffer head = ByteBuffer.allocate(HEADER_BYTES);
            long pos = 0;
            while (logSize - pos >= 12) {
                Frame frame = frame(ch, head, pos, logSize);
                if (frame == Frame.TORN || frame == Frame.DAMAGED) {
                    break;
                }
                int size = 12 + head.getInt(8);
                if (frame == Frame.SKIPPED) {
                    pos += size;  // stepped over: no append
                    continue;
                }
                long lastOffset, batchTs;
                if (head.get(16) == 2) {
                    lastOffset = head.getLong(0) + head.getInt(23);
                    batchTs = head.getLong(35);
                } else {
                    lastOffset = head.getLong(0);
                    batchTs = head.get(16) == 1 ? head.getLong(18) : -1;
                }
                if (batchTs > maxTs) {
                    maxTs = batchTs;
                    offsetOfMax = lastOffset;
                }
                if (since > 4096) {
                    if (nOff == 0 || lastOffset - base > rels[nOff - 1]) {
                        if (nOff == rels.length) {
                            rels = Arrays.copyOf(rels, 2 * nOff);
                            positions = Arrays.copyOf(positions, 2 * nOff);
                        }
                        rels[nOff] = lastOffset - base;
                        positions[nOff++] = pos;
                    }
                    if (nTime == 0 || maxTs > times[nTime - 1]) {
                        if (nTime == times.length) {
                            times = Arrays.copyOf(times, 2 * nTime);
                            timeRels = Arrays.copyOf(timeRels, 2 * nTime);
                        }
                        times[nTime] = maxTs;
                        timeRels[nTime++] = offsetOfMax - base;
                    }
                    since = 0;
                }
                since += size;
                pos += size;
            }
        } catch (IOException e) {
            LOG.warn("{}: {} not scanned for its indexes: {}", KafkaSegmentsJvm.NAME, log, e.toString());
        }
        if (maxTs > (nTime == 0 ? -1 : times[nTime - 1])) {  // the closed segment's final entry
            times = Arrays.copyOf(times, nTime + 1);
            timeRels = Arrays.copyOf(timeRels, nTime + 1);
            times[nTime] = maxTs;
            timeRels[nTime++] = offsetOfMax - base;
        }
        return new long[][][] {
            {Arrays.copyOf(rels, nOff), Arrays.copyOf(positions, nOff)},
            {Arrays.copyOf(times, nTime), Arrays.copyOf(timeRels, nTime), {0}},
        };
    }

    /** How an entry of a segment frames, as kproto's Python reader frames it. */
    enum Frame {
        /** a batch (or a legacy message) the reader reads */
        BATCH,
        /** a v2 batch the reader steps over: an unknown codec, records behind a count of 0 */
        SKIPPED,
        /** the segment's end cuts it: nothing follows */
        TORN,
        /** bytes that frame nothing (a bad length, magic, count or legacy message) */
        DAMAGED
    }

    /** How the entry at {@code pos} of a {@code size}-byte segment frames; {@code head}
     *  (HEADER_BYTES) holds its first bytes after the call. One rule for the read_committed
     *  walk (Transactions) and the index rebuild; the cut positions ({@link #batchPositions})
     *  read lengths only, as a reader may start at any of them. */
    static Frame frame(FileChannel ch, ByteBuffer head, long pos, long size) throws IOException {
        int got = readAt(ch, head, pos);
        if (got < 12) {
            return Frame.TORN;
        }
        int length = head.getInt(8);
        if (length < 14) {
            return Frame.DAMAGED;
        }
        if (pos + 12 + length > size) {
            return Frame.TORN;
        }
        byte magic = head.get(16);
        if (magic == 2) {
            if (length < HEADER_BYTES - 12 || head.getInt(57) < 0) {
                return Frame.DAMAGED;
            }
            boolean skipped = (head.getShort(21) & 0x07) > 4
                    || (head.getInt(57) == 0 && length > HEADER_BYTES - 12);
            return skipped ? Frame.SKIPPED : Frame.BATCH;
        }
        if ((magic == 0 || magic == 1) && length >= (magic == 0 ? 14 : 22)) {
            byte[] message = new byte[12 + length];  // within the file: checked above
            boolean framed = readAt(ch, ByteBuffer.wrap(message), pos) == message.length
                    && SegmentReader.legacyDamage(message, 0, magic, message.length) == null;
            return framed ? Frame.BATCH : Frame.DAMAGED;
        }
        return Frame.DAMAGED;
    }

    /** Kafka's {@code OffsetIndex.lookup}: the position of the last entry whose offset is at
     *  or below {@code offset} (its batch ends there, so the batch holding {@code offset}
     *  starts at or after it), 0 when there is none. */
    static long lookup(long[][] index, long base, long offset) {
        long at = 0;
        for (int i = 0; i < index[0].length && base + index[0][i] <= offset; i++) {
            at = index[1][i];
        }
        return at;
    }

    static long baseOf(Path log) {
        return Long.parseLong(log.getFileName().toString().substring(0, 20));
    }

    /** Positions of the batches a walk over their headers finds (it stops at a header that
     *  does not fit: the reader reports what is there). */
    static long[] batchPositions(FileChannel ch, long size) throws IOException {
        long[] out = new long[64];
        int n = 0;
        ByteBuffer head = ByteBuffer.allocate(12);
        long pos = 0;
        while (pos + 12 <= size) {
            head.clear();
            int got = 0;
            while (head.hasRemaining()) {
                int r = ch.read(head, pos + got);
                if (r < 0) {
                    break;
                }
                got += r;
            }
            if (head.hasRemaining()) {
                break;
            }
            int length = head.getInt(8);
            if (length < 14 || pos + 12 + length > size) {
                break;
            }
            if (n == out.length) {
                out = Arrays.copyOf(out, n * 2);
            }
            out[n++] = pos;
            pos += 12 + length;
        }
        return Arrays.copyOf(out, n);
    }

    /** Reads up to {@code buf}'s capacity from {@code pos} into it (cleared first); the bytes
     *  read (fewer at the end of the file). */
    static int readAt(FileChannel ch, ByteBuffer buf, long pos) throws IOException {
        buf.clear();
        int got = 0;
        while (buf.hasRemaining()) {
            int r = ch.read(buf, pos + got);
            if (r < 0) {
                break;
            }
            got += r;
        }
        return got;
    }

    /** Tasks of about {@code target} bytes: pieces laid end to end, cut at the batch
     *  boundary nearest each multiple of {@code target}; small segments share a task. */
    static List<InputPartition> balance(List<Piece> pieces, List<long[]> cuts, long target) {
        List<InputPartition> tasks = new ArrayList<>();
        List<Piece> group = new ArrayList<>();
        long done = 0;
        for (int i = 0; i < pieces.size(); i++) {
            Piece s = pieces.get(i);
            long[] at = cuts.get(i);
            long start = s.start;
            while (done + s.end - start >= target) {
                long want = start + target - done;
                int j = Arrays.binarySearch(at, want);
                if (j < 0) {
                    j = -j - 1;  // first boundary above want; pick the nearer neighbour
                    if (j > 0 && (j == at.length || want - at[j - 1] <= at[j] - want)) {
                        j--;
                    }
                }
                while (j < at.length && at[j] <= start) {
                    j++;  // the nearest boundary is where this piece starts: take the next
                }
                if (j >= at.length || at[j] >= s.end) {
                    break;
                }
                long cut = at[j];
                group.add(s.range(start, cut));
                tasks.add(new SegmentPartition(group));
                group = new ArrayList<>();
                start = cut;
                done = 0;
            }
            group.add(s.range(start, s.end));
            done += s.end - start;
            if (done >= target) {
                tasks.add(new SegmentPartition(group));
                group = new ArrayList<>();
                done = 0;
            }
        }
        if (!group.isEmpty()) {
            tasks.add(new SegmentPartition(group));
        }
        return tasks;
    }
}
