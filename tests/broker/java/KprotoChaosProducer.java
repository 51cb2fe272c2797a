// The Java client's producer of the cluster chaos run (tests/broker/test_cluster_chaos.py): an
// idempotent acks=all KafkaProducer writing unique values to topic "chaos" until told to stop.
//
//   java -cp ... KprotoChaosProducer BOOTSTRAP STOP_FILE NAME SECONDS PAUSE_MS
//
// It sends NAME-0, NAME-1, ... (key: seq % 17), pausing PAUSE_MS after each send, until
// STOP_FILE exists, then flushes, closes and exits 0. SECONDS bounds the whole run: a watchdog prints every thread's stack to stderr and
// exits with code 2 when it is over. An exception the producer throws (a fatal producer error)
// ends the program with exit code 1, the exception on stderr.
//
// One JSON object per line on stdout, written in this order for a send:
//   {"event":"send","seq":N,"key":"...","value":"..."}    before the send is handed to the producer
//   {"event":"ack","seq":N,"partition":P,"offset":O}       or
//   {"event":"error","seq":N,"error":"..."}                from its callback
// and {"event":"done"} last. Each line is written under one lock, so a send's line precedes its
// callback's even when the callback runs on the producer's I/O thread.
import java.io.File;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class KprotoChaosProducer {
    static final String TOPIC = "chaos";
    static final int KEYS = 17;
    // how often the stop file is looked for: a syscall per send would slow the loop for nothing
    static final long STOP_CHECK_NS = 20_000_000L;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        File stopFile = new File(args[1]);
        String name = args[2];
        long limitMs = Long.parseLong(args[3]) * 1000L;
        long pauseMs = Long.parseLong(args[4]);
        startWatchdog("KprotoChaosProducer", limitMs);
        try {
            produce(bootstrap, stopFile, name, pauseMs);
        } catch (Throwable t) {
            t.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
        emit("{\"event\":\"done\"}");
        System.out.flush();
        System.exit(0);
    }

    static void produce(String bootstrap, File stopFile, String name, long pauseMs) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", name);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        // retried through every fault of the run rather than given up on
        p.put("delivery.timeout.ms", "120000");
        p.put("request.timeout.ms", "10000");
        p.put("max.block.ms", "60000");
        p.put("retry.backoff.ms", "50");
        p.put("reconnect.backoff.max.ms", "200");
        // find a new leader within a second of a failover
        p.put("metadata.max.age.ms", "1000");
        p.put("linger.ms", "2");
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        long seq = 0;
        long nextStopCheck = 0;
        while (true) {
            long now = System.nanoTime();
            if (now >= nextStopCheck) {
                if (stopFile.exists()) break;
                nextStopCheck = now + STOP_CHECK_NS;
            }
            final long n = seq++;
            String key = Long.toString(n % KEYS);
            String value = name + "-" + n;
            emit("{\"event\":\"send\",\"seq\":" + n + ",\"key\":" + quote(key) + ",\"value\":" + quote(value) + "}");
            producer.send(new ProducerRecord<>(TOPIC, key, value), (md, err) -> {
                if (err == null)
                    emit("{\"event\":\"ack\",\"seq\":" + n + ",\"partition\":" + md.partition() + ",\"offset\":" + md.offset() + "}");
                else
                    emit("{\"event\":\"error\",\"seq\":" + n + ",\"error\":" + quote(err.toString()) + "}");
            });
            // a steady load, not a flood the brokers (on two shared cores) fall behind on
            Thread.sleep(pauseMs);
        }
        producer.flush();
        producer.close(Duration.ofSeconds(60));
    }

    static synchronized void emit(String line) {
        System.out.println(line);
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }

    /** Halt with exit code 2 and every thread's stack after limitMs (shared with KprotoInterop). */
    static void startWatchdog(String program, long limitMs) {
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limitMs);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println(program + ": over " + limitMs + " ms, stacks:");
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                System.err.println(e.getKey());
                for (StackTraceElement el : e.getValue()) System.err.println("    at " + el);
            }
            System.out.flush();
            Runtime.getRuntime().halt(2);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
    }
}
