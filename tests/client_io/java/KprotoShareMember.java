// A Java share consumer (KafkaShareConsumer, KIP-932) in a share group with kproto's
// (tests/client_io/test_client_io_share.py):
//
//   java -cp ... KprotoShareMember BOOTSTRAP TOPIC GROUP STOP_FILE SECONDS SLEEP_MS
//
// Explicit acknowledgement, at most 10 records a poll, SLEEP_MS of "work" per record. Each record's
// value is a decimal number i; it is acknowledged as the test's policy says: i % 10 == 3 RELEASE
// always (it ends archived at the delivery limit), i % 10 == 5 RELEASE at its first delivery and
// ACCEPT later, the others ACCEPT. Polls until STOP_FILE exists, then commits, closes and exits 0;
// SECONDS bounds the whole run (exit 2). One JSON object per line on stdout:
//   {"event":"delivered","partition":P,"offset":O,"delivery":D,"ack":"ACCEPT"}  each record, as acknowledged
//   {"event":"acked","partition":P,"offsets":[O,...],"error":null}  what the broker confirmed (or not)
//   {"event":"done"}                                                  last
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class KprotoShareMember {
    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        File stopFile = new File(args[3]);
        long limitMs = Long.parseLong(args[4]) * 1000L;
        long sleepMs = Long.parseLong(args[5]);
        Thread watchdog = new Thread(() -> {
            try { Thread.sleep(limitMs); } catch (InterruptedException e) { return; }
            System.err.println("KprotoShareMember: time limit reached");
            System.exit(2);
        });
        watchdog.setDaemon(true);
        watchdog.start();

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("max.poll.records", "10");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p)) {
            consumer.setAcknowledgementCommitCallback((Map<TopicIdPartition, Set<Long>> offsets, Exception e) -> {
                for (Map.Entry<TopicIdPartition, Set<Long>> entry : offsets.entrySet()) {
                    List<Long> sorted = new ArrayList<>(entry.getValue());
                    Collections.sort(sorted);
                    emit("{\"event\":\"acked\",\"partition\":" + entry.getKey().partition() + ",\"offsets\":" + sorted
                         + ",\"error\":" + (e == null ? "null" : "\"" + e.getClass().getSimpleName() + "\"") + "}");
                }
            });
            consumer.subscribe(List.of(topic));
            while (!stopFile.exists()) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    if (sleepMs > 0) Thread.sleep(sleepMs);
                    int i = Integer.parseInt(new String(r.value(), StandardCharsets.US_ASCII));
                    int delivery = r.deliveryCount().orElse((short) -1);
                    AcknowledgeType type = i % 10 == 3 || (i % 10 == 5 && delivery == 1)
                        ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                    consumer.acknowledge(r, type);
                    emit("{\"event\":\"delivered\",\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                         + ",\"delivery\":" + delivery + ",\"ack\":\"" + type + "\"}");
                }
            }
            consumer.commitSync();
        }
        emit("{\"event\":\"done\"}");
        System.exit(0);
    }
}
