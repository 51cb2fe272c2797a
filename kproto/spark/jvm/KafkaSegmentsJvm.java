package kproto.spark.jvm;

import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("kafka-segments-jvm").load(logdir)}: the records of a Kafka log
 * directory (or one partition folder) with the columns of Spark's Kafka source, read on the
 * JVM. Options: {@code topics} / {@code subscribe} (comma list), {@code includeHeaders},
 * {@code splitSize} (bytes per task, e.g. {@code 64m}), {@code startingOffsets} /
 * {@code endingOffsets}, {@code startingTimestamp} / {@code endingTimestamp} (ms since the
 * epoch, {@code [start, end)}: closed segments whose time index ends below the start are not
 * read, the others entered through their time index, as Kafka's ListOffsets by timestamp
 * finds a record) and {@code isolation} / {@code kafka.isolation.level}, with the values
 * {@code kafka-segments} takes; anything else is refused with a pointer to that Python source,
 * which reads it.
 */
public final class KafkaSegmentsJvm implements TableProvider, DataSourceRegister {

    static final String NAME = "kafka-segments-jvm";
    static final String FALLBACK = "; use format(\"kafka-segments\") (kproto's Python source) for it";
    /** Options as Spark hands them over (lower-cased), and the defaults of Spark's source
     *  this reader implements (any other value is refused). */
    static final Set<String> OPTIONS = new HashSet<>(Arrays.asList(
            "path", "paths", "topics", "subscribe", "includeheaders", "splitsize", "startingoffsets",
            "endingoffsets", "startingtimestamp", "endingtimestamp", "isolation", "kafka.isolation.level"));
    static final Map<String, String> DEFAULTS = Map.of("columns", "kafka", "failondataloss", "false");
    /** Spark's Kafka source's offsets in its JSON form: -2 the earliest, -1 the latest. */
    static final long EARLIEST = -2, LATEST = -1;

    @Override
    public String shortName() {
        return NAME;
    }

    static boolean includeHeaders(Map<String, String> options) {
        String v = lower(options).getOrDefault("includeheaders", "false").trim().toLowerCase(Locale.ROOT);
        switch (v) {
            case "true": case "1": case "yes": return true;
            case "false": case "0": case "no": return false;
            default: throw new IllegalArgumentException(NAME + ": includeHeaders must be true or false, not " + v);
        }
    }

    static Map<String, String> lower(Map<String, String> options) {
        java.util.HashMap<String, String> out = new java.util.HashMap<>();
        options.forEach((k, v) -> out.put(k.toLowerCase(Locale.ROOT), v));
        return out;
    }

    /** Refuses what this reader does not implement, naming the Python source that does, and
     *  option values kafka-segments refuses. */
    static void check(Map<String, String> options) {
        bounds(options);
        for (Map.Entry<String, String> e : lower(options).entrySet()) {
            String key = e.getKey();
            if (OPTIONS.contains(key)) {
                continue;
            }
            String dflt = DEFAULTS.get(key);
            if (dflt != null && dflt.equalsIgnoreCase(e.getValue().trim())) {
                continue;
            }
            throw new UnsupportedOperationException(
                    NAME + ": option " + key + "=" + e.getValue() + " is not supported" + FALLBACK);
        }
    }

    /** The offset bounds and isolation of these options (kafka-segments' rules: startingOffsets
     *  {@code earliest}, an offset for every partition or JSON {@code {"topic": {"0": 42}}}
     *  with -2 the earliest, endingOffsets the same with {@code latest} and -1; a batch read
     *  neither starts at the latest nor ends at the earliest). */
    static Planner.Bounds bounds(Map<String, String> options) {
        Map<String, String> opts = lower(options);
        String isolation = opts.getOrDefault("isolation", opts.getOrDefault("kafka.isolation.level",
                "read_uncommitted")).trim();
        if (opts.containsKey("isolation") && opts.containsKey("kafka.isolation.level")
                && !opts.get("isolation").equals(opts.get("kafka.isolation.level"))) {
            throw new IllegalArgumentException(NAME + ": isolation (" + opts.get("isolation")
                    + ") and kafka.isolation.level (" + opts.get("kafka.isolation.level")
                    + ") say different things: give one");
        }
        isolation = isolation.toLowerCase(Locale.ROOT);
        if (!isolation.equals("read_uncommitted") && !isolation.equals("read_committed")) {
            throw new IllegalArgumentException(NAME + ": isolation must be read_uncommitted or read_committed, not "
                    + isolation);
        }
        Map<String, long[]> per = new HashMap<>();
        long start = offsets(opts, true, per), end = offsets(opts, false, per);
        return new Planner.Bounds(start, end, per, timestamp(opts, "startingtimestamp"),
                timestamp(opts, "endingtimestamp"), isolation.equals("read_committed"));
    }

    /** startingTimestamp / endingTimestamp: ms since the epoch (null: not given), an integer
     *  as Python's {@code int()} takes it (kafka-segments' rule: blanks around it, a sign,
     *  underscores between digits). */
    private static Long timestamp(Map<String, String> opts, String key) {
        String value = opts.get(key);
        if (value == null) {
            return null;
        }
        String v = value.strip();
        if (v.matches("[+-]?\\d+(_\\d+)*")) {
            try {
                return Long.parseLong(v.replace("_", "").replaceFirst("^\\+", ""));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(NAME + ": " + key + " does not fit in a long: " + value);
            }
        }
        throw new IllegalArgumentException(NAME + ": " + key + " must be an integer: " + value);
    }

    /** The offset of startingOffsets ({@code starting}) or endingOffsets for every partition
     *  (Long.MIN_VALUE or -1: open); its JSON form's per partition into {@code per}. */
    private static long offsets(Map<String, String> opts, boolean starting, Map<String, long[]> per) {
        String name = starting ? "startingOffsets" : "endingOffsets";
        String open = starting ? "earliest" : "latest", other = starting ? "latest" : "earliest";
        long none = starting ? Long.MIN_VALUE : -1;
        String value = opts.getOrDefault(name.toLowerCase(Locale.ROOT), open).trim();
        if (value.equalsIgnoreCase(open)) {
            return none;
        }
        if (value.equalsIgnoreCase(other)) {
            throw new IllegalArgumentException(NAME + ": " + name + " can't be " + other
                    + " for batch queries (as in Spark's Kafka source)");
        }
        if (!value.startsWith("{")) {
            try {
                return Long.parseLong(value);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(NAME + ": " + name.toLowerCase(Locale.ROOT)
                        + " must be an integer: " + value);
            }
        }
        String form = NAME + ": " + name + " must be earliest, latest, an offset or JSON like "
                + "{\"topic\": {\"0\": 42}}: " + value;
        com.fasterxml.jackson.databind.JsonNode root;
        try {
            root = new com.fasterxml.jackson.databind.ObjectMapper().readTree(value);
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException(form);
        }
        if (root == null || !root.isObject()) {
            throw new IllegalArgumentException(form);
        }
        for (Map.Entry<String, com.fasterxml.jackson.databind.JsonNode> topic : root.properties()) {
            if (!topic.getValue().isObject()) {
                throw new IllegalArgumentException(form);
            }
            for (Map.Entry<String, com.fasterxml.jackson.databind.JsonNode> p : topic.getValue().properties()) {
                com.fasterxml.jackson.databind.JsonNode v = p.getValue();
                int partition;
                long offset;
                try {
                    partition = Integer.parseInt(p.getKey().trim());
                    offset = v.isIntegralNumber() && v.canConvertToLong() ? v.asLong()
                            : v.isTextual() ? Long.parseLong(v.asText().trim()) : Long.parseLong("x");
                } catch (NumberFormatException e) {
                    throw new IllegalArgumentException(form);
                }
                String tp = topic.getKey() + "-" + partition;
                if (offset == (starting ? LATEST : EARLIEST)) {
                    throw new IllegalArgumentException(NAME + ": " + name + " for " + tp + " can't be " + other
                            + " for batch queries (as in Spark's Kafka source)");
                }
                if (offset < 0 && offset != EARLIEST && offset != LATEST) {
                    throw new IllegalArgumentException(NAME + ": " + name + " for " + tp
                            + " must be an offset, -2 (earliest) or -1 (latest), not " + offset);
                }
                long[] bounds = per.computeIfAbsent(topic.getKey() + " " + partition,
                        k -> new long[] {Long.MIN_VALUE, -1});
                bounds[starting ? 0 : 1] = offset < 0 ? none : offset;
            }
        }
        return none;
    }

    /** The tasks of a read of {@code paths} with these (checked) options, about
     *  {@code tasks} of them unless {@code splitSize} says. */
    static List<InputPartition> plan(Map<String, String> options, List<String> paths, int tasks) {
        Map<String, String> opts = lower(options);
        Set<String> topics = null;
        for (String key : new String[] {"topics", "subscribe"}) {
            String v = opts.get(key);
            if (v != null) {
                Set<String> these = new HashSet<>();
                for (String t : v.split(",")) {
                    if (!t.trim().isEmpty()) {
                        these.add(t.trim());
                    }
                }
                if (topics != null) {
                    these.retainAll(topics);
                }
                topics = these;
            }
        }
        long split = -1;
        String size = opts.get("splitsize");
        if (size != null) {
            split = Planner.parseSize(size);
        }
        return Planner.plan(paths, topics, bounds(opts), split, tasks);
    }

    /** Spark's Kafka source's columns (nullability as kproto's {@code kafka_spark_schema}). */
    static StructType schema(boolean headers) {
        StructType s = new StructType()
                .add("key", DataTypes.BinaryType, true)
                .add("value", DataTypes.BinaryType, true)
                .add("topic", DataTypes.StringType, false)
                .add("partition", DataTypes.IntegerType, false)
                .add("offset", DataTypes.LongType, false)
                .add("timestamp", DataTypes.TimestampType, false)
                .add("timestampType", DataTypes.IntegerType, false);
        if (headers) {
            StructType header = new StructType()
                    .add("key", DataTypes.StringType, true)
                    .add("value", DataTypes.BinaryType, true);
            s = s.add(new StructField("headers", new ArrayType(header, true), true, Metadata.empty()));
        }
        return s;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        check(options);
        return schema(includeHeaders(options));
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new SegmentsTable(schema);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return false;
    }

    /** The log directory as a table: batch reads only. */
    static final class SegmentsTable implements SupportsRead {
        private final StructType schema;

        SegmentsTable(StructType schema) {
            this.schema = schema;
        }

        @Override
        public String name() {
            return NAME;
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Set.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            check(options);
            return () -> new SegmentsScan(schema, options);
        }
    }

    /** One read: planned on the driver into {@link SegmentPartition}s. */
    static final class SegmentsScan implements Scan, Batch {
        private final StructType schema;
        private final CaseInsensitiveStringMap options;

        SegmentsScan(StructType schema, CaseInsensitiveStringMap options) {
            this.schema = schema;
            this.options = options;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return NAME + " " + options.getOrDefault("path", "");
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        private List<String> paths() {
            java.util.ArrayList<String> out = new java.util.ArrayList<>();
            String path = options.get("path");
            if (path != null) {
                out.add(path);
            }
            String paths = options.get("paths");
            if (paths != null) {  // DataFrameReader.load(a, b) hands a JSON list over
                for (String p : paths.replaceAll("^\\[|\\]$", "").split(",")) {
                    String q = p.trim().replaceAll("^\"|\"$", "").replace("\\/", "/");
                    if (!q.isEmpty()) {
                        out.add(q);
                    }
                }
            }
            if (out.isEmpty()) {
                throw new IllegalArgumentException(NAME + ": load(path) needs a log directory or partition folder");
            }
            return out;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            int tasks = 4;  // as kafka-segments when the session's parallelism is unknown
            try {
                tasks = Math.max(1, SparkSession.active().sparkContext().defaultParallelism());
            } catch (IllegalStateException e) {
                // no active session on this thread (planning outside a query): keep the default
            }
            return plan(options, paths(), tasks).toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new SegmentReader.Factory(schema.fieldNames().length > 7);
        }
    }
}
