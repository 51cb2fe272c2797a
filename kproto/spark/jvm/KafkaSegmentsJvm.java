package kproto.spark.jvm;

import java.util.Arrays;
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
 * {@code splitSize} (bytes per task, e.g. {@code 64m}); anything else is refused with a
 * pointer to the Python source {@code kafka-segments}, which reads it.
 */
public final class KafkaSegmentsJvm implements TableProvider, DataSourceRegister {

    static final String NAME = "kafka-segments-jvm";
    static final String FALLBACK = "; use format(\"kafka-segments\") (kproto's Python source) for it";
    /** Options as Spark hands them over (lower-cased), and the defaults of Spark's source
     *  this reader implements (any other value is refused). */
    static final Set<String> OPTIONS = new HashSet<>(Arrays.asList(
            "path", "paths", "topics", "subscribe", "includeheaders", "splitsize"));
    static final Map<String, String> DEFAULTS = Map.of(
            "startingoffsets", "earliest", "endingoffsets", "latest",
            "kafka.isolation.level", "read_uncommitted", "isolation", "read_uncommitted",
            "columns", "kafka", "failondataloss", "false");

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

    /** Refuses what this reader does not implement, naming the Python source that does. */
    static void check(Map<String, String> options) {
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
        return Planner.plan(paths, topics, split, tasks);
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
