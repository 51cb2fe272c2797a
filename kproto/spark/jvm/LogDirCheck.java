package kproto.spark.jvm;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads log directories through the planning and the reader of {@code kafka-segments-jvm},
 * without a Spark session, many in one JVM: each line of stdin is a path (a log directory or
 * a partition folder), optionally followed by tab-separated {@code option=value} pairs of the
 * source; each gives one JSON line on stdout, in order:
 * {@code {"rows": [[topic, partition, offset, timestamp_us, timestampType, key, value, headers], ...],
 * "skips": [...]}} (bytes as hex, headers as {@code [[key, value], ...]} or null),
 * {@code {"refused": message}} for what the source refuses (as a Spark read would), or
 * {@code {"crash": trace}} for any other exception or error, which is a bug.
 */
public final class LogDirCheck {
    private LogDirCheck() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isEmpty()) {
                out.println(check(line));
                out.flush();
            }
        }
    }

    /** The JSON lines of {@code lines} (one input a line), for a caller inside a JVM (as
     *  through a Spark session's gateway). */
    public static String checkAll(String lines) {
        StringBuilder out = new StringBuilder();
        for (String line : lines.split("\n")) {
            if (!line.isEmpty()) {
                out.append(check(line)).append('\n');
            }
        }
        return out.toString();
    }

    /** The JSON line of one input line. */
    static String check(String line) {
        String[] fields = line.split("\t");
        Map<String, String> options = new HashMap<>();
        options.put("path", fields[0]);
        for (int i = 1; i < fields.length; i++) {
            int eq = fields[i].indexOf('=');
            options.put(fields[i].substring(0, Math.max(eq, 0)), fields[i].substring(eq + 1));
        }
        StringBuilder json = new StringBuilder();
        try {
            read(options, json);
        } catch (UnsupportedOperationException | IllegalArgumentException e) {
            json.setLength(0);
            json.append("{\"refused\": ").append(quote(String.valueOf(e.getMessage()))).append('}');
        } catch (Throwable e) {  // a bug: reported, and the next input is read
            java.io.StringWriter trace = new java.io.StringWriter();
            e.printStackTrace(new java.io.PrintWriter(trace));
            json.setLength(0);
            json.append("{\"crash\": ").append(quote(trace.toString())).append('}');
        }
        return json.toString();
    }

    private static void read(Map<String, String> options, StringBuilder json) throws Exception {
        KafkaSegmentsJvm.check(options);
        List<String> skips = new ArrayList<>();
        json.append("{\"rows\": [");
        boolean first = true;
        for (InputPartition task : KafkaSegmentsJvm.plan(options, List.of(options.get("path")), 1)) {
            try (SegmentReader reader = new SegmentReader(((Planner.SegmentPartition) task).pieces, true)) {
                reader.onSkip = skips::add;
                while (reader.next()) {
                    ColumnarBatch batch = reader.get();
                    for (int r = 0; r < batch.numRows(); r++) {
                        InternalRow row = batch.getRow(r);
                        json.append(first ? "[" : ", [");
                        first = false;
                        json.append(quote(row.getUTF8String(2).toString())).append(", ")
                                .append(row.getInt(3)).append(", ").append(row.getLong(4)).append(", ")
                                .append(row.getLong(5)).append(", ").append(row.getInt(6)).append(", ");
                        hex(json, row.isNullAt(0) ? null : row.getBinary(0));
                        json.append(", ");
                        hex(json, row.isNullAt(1) ? null : row.getBinary(1));
                        json.append(", ");
                        if (row.isNullAt(7)) {
                            json.append("null");
                        } else {
                            ArrayData hs = row.getArray(7);
                            json.append('[');
                            for (int h = 0; h < hs.numElements(); h++) {
                                InternalRow kv = hs.getStruct(h, 2);
                                json.append(h == 0 ? "[" : ", [");
                                hex(json, kv.getUTF8String(0).getBytes());
                                json.append(", ");
                                hex(json, kv.isNullAt(1) ? null : kv.getBinary(1));
                                json.append(']');
                            }
                            json.append(']');
                        }
                        json.append(']');
                    }
                }
            }
        }
        json.append("], \"skips\": [");
        for (int i = 0; i < skips.size(); i++) {
            json.append(i == 0 ? "" : ", ").append(quote(skips.get(i)));
        }
        json.append("]}");
    }

    private static void hex(StringBuilder json, byte[] bytes) {
        if (bytes == null) {
            json.append("null");
            return;
        }
        json.append('"');
        for (byte b : bytes) {
            json.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
        }
        json.append('"');
    }

    static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
