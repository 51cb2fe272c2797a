package kproto.spark.jvm;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

/** read_committed planning of one partition, as kproto's Python reader plans it: the aborted
 *  transactions of its {@code .txnindex} files and its last stable offset (the first offset
 *  of the earliest transaction still open at the end of the log). */
final class Transactions {
    static final int TXN_ENTRY = 34;  // int16 version, producer id, first, last, last stable offset
    static final int SNAPSHOT_HEADER = 10, SNAPSHOT_ENTRY = 46;
    private static final Pattern SNAPSHOT = Pattern.compile("\\d{20}\\.snapshot");

    private Transactions() {
    }

    /** Producer id, first offset, ABORT marker offset triples of the segments' {@code .txnindex}
     *  files, sorted; a file of partial or unknown-version entries is left out whole (reported). */
    static long[] aborted(List<Path> logs) {
        List<long[]> spans = new ArrayList<>();
        for (Path log : logs) {
            Path index = sibling(log, ".txnindex");
            byte[] bytes;
            try {
                if (!Files.isRegularFile(index) || Files.size(index) > (64L << 20)) {
                    continue;
                }
                bytes = Files.readAllBytes(index);
            } catch (IOException e) {
                Planner.LOG.warn("{}: {} not read: {}", KafkaSegmentsJvm.NAME, index, e.toString());
                continue;
            }
            ByteBuffer b = ByteBuffer.wrap(bytes);
            List<long[]> these = new ArrayList<>();
            boolean ok = bytes.length % TXN_ENTRY == 0;
            for (int at = 0; ok && at < bytes.length; at += TXN_ENTRY) {
                ok = b.getShort(at) == 0;
                these.add(new long[] {b.getLong(at + 2), b.getLong(at + 10), b.getLong(at + 18)});
            }
            if (ok) {
                spans.addAll(these);
            } else {
                Planner.LOG.warn("{}: {} ignored: partial entries or an unknown version", KafkaSegmentsJvm.NAME, index);
            }
        }
        spans.sort(Comparator.<long[]>comparingLong(s -> s[0]).thenComparingLong(s -> s[1])
                .thenComparingLong(s -> s[2]));
        long[] out = new long[spans.size() * 3];
        for (int i = 0; i < spans.size(); i++) {
            System.arraycopy(spans.get(i), 0, out, 3 * i, 3);
        }
        return out;
    }

    /** The partition's last stable offset, -1 when no transaction is open: the producer state of
     *  the latest producer snapshot whose CRC-32C matches, brought up to date by the batch headers
     *  after it (a transactional data batch opens its producer's transaction, a control batch
     *  closes it), as a broker's recovery does; no snapshot: the headers of every segment. */
    static long firstUnstableOffset(Path folder, List<Path> logs) {
        Map<Long, Long> open = new HashMap<>();
        long from = -1;
        List<Path> snapshots = new ArrayList<>();
        try (Stream<Path> s = Files.list(folder)) {
            s.filter(f -> SNAPSHOT.matcher(f.getFileName().toString()).matches()).forEach(snapshots::add);
        } catch (IOException e) {
            Planner.LOG.warn("{}: {} not listed: {}", KafkaSegmentsJvm.NAME, folder, e.toString());
        }
        snapshots.sort(Comparator.comparingLong(Planner::baseOf).reversed());
        for (Path snap : snapshots) {
            Map<Long, Long> state = snapshot(snap);
            if (state != null) {
                open = state;
                from = Planner.baseOf(snap);
                break;
            }
        }
        int first = 0;  // the segment holding the snapshot's offset: the last based at or below it
        for (int i = 0; from >= 0 && i < logs.size(); i++) {
            if (Planner.baseOf(logs.get(i)) <= from) {
                first = i;
            }
        }
        ByteBuffer head = ByteBuffer.allocate(Planner.HEADER_BYTES);
        for (int i = first; i < logs.size(); i++) {
            Path log = logs.get(i);
            try (FileChannel ch = FileChannel.open(log, StandardOpenOption.READ)) {
                long size = ch.size(), pos = 0;
                long segBase = Planner.baseOf(log);
                long low = Long.MIN_VALUE;  // the next offset of the batch before
                long high = i + 1 < logs.size() ? Planner.baseOf(logs.get(i + 1)) : Long.MAX_VALUE;
                long[] resync = null;  // the .index positions, read at the first damage
                while (pos + 12 <= size) {
                    Planner.Frame frame = Planner.frame(ch, head, pos, size);
                    if (frame == Planner.Frame.TORN) {
                        break;  // nothing after it in this segment
                    }
                    if (frame == Planner.Frame.DAMAGED) {
                        // damage that frames nothing: the walk resumes at the next batch the
                        // .index knows, as kproto's Python reader resumes its scan
                        if (resync == null) {
                            resync = Planner.indexPositions(log, size);
                        }
                        long next = size;
                        for (long p : resync) {
                            if (p > pos) {
                                next = p;
                                break;
                            }
                        }
                        pos = next;
                        continue;
                    }
                    int length = head.getInt(8);
                    byte magic = head.get(16);
                    // a legacy entry's offset is its last; its first needs decompressing
                    long base = head.getLong(0), last = magic == 2 ? base + head.getInt(23) : base;
                    int attrs = magic == 2 ? head.getShort(21) : 0;
                    // a batch the reader skips (Frame.SKIPPED, offsets out of place) opens and
                    // closes nothing
                    boolean skipped = frame == Planner.Frame.SKIPPED
                            || last < segBase || last < base || base < low || last >= high;
                    if (!skipped) {
                        low = last + 1;
                        if (magic == 2) {
                            long pid = head.getLong(43);
                            if ((attrs & 0x10) != 0 && (from < 0 || base >= from)) {
                                if ((attrs & 0x20) != 0) {
                                    open.remove(pid);
                                } else {
                                    open.putIfAbsent(pid, base);
                                }
                            }
                        }
                    }
                    pos += 12 + length;
                }
            } catch (IOException e) {
                Planner.LOG.warn("{}: {} not read: {}", KafkaSegmentsJvm.NAME, log, e.toString());
            }
        }
        return open.isEmpty() ? -1 : open.values().stream().min(Long::compare).get();
    }

    /** Producer id to the first offset of its open transaction of a {@code .snapshot} file
     *  (version 1, CRC-32C over what follows the crc field); null when it is not one. */
    static Map<Long, Long> snapshot(Path path) {
        byte[] bytes;
        try {
            if (Files.size(path) > (64L << 20)) {
                return null;
            }
            bytes = Files.readAllBytes(path);
        } catch (IOException e) {
            return null;
        }
        if (bytes.length < SNAPSHOT_HEADER) {
            return null;
        }
        ByteBuffer b = ByteBuffer.wrap(bytes);
        int count = b.getInt(6);
        if (b.getShort(0) != 1 || count < 0 || (long) count * SNAPSHOT_ENTRY != bytes.length - SNAPSHOT_HEADER) {
            return null;
        }
        CRC32C crc = new CRC32C();
        crc.update(bytes, 6, bytes.length - 6);
        if ((int) crc.getValue() != b.getInt(2)) {
            return null;
        }
        Map<Long, Long> open = new HashMap<>();
        for (int i = 0; i < count; i++) {
            int at = SNAPSHOT_HEADER + i * SNAPSHOT_ENTRY;
            long txnFirst = b.getLong(at + 38);
            if (txnFirst >= 0) {
                open.put(b.getLong(at), txnFirst);
            }
        }
        return open;
    }

    static Path sibling(Path log, String suffix) {
        String name = log.getFileName().toString();
        return log.resolveSibling(name.substring(0, name.length() - 4) + suffix);
    }
}
