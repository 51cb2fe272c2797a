// A Java consumer in a group with kproto's consumers (tests/client_io/test_client_io_brokers.py):
//
//   java -cp ... KprotoGroupMember BOOTSTRAP TOPIC GROUP PROTOCOL STOP_FILE SECONDS
//
// PROTOCOL is "classic" (range assignor, computed by the group leader) or "consumer" (KIP-848,
// the broker assigns). It polls until STOP_FILE exists, then commits nothing, closes and exits 0;
// SECONDS bounds the whole run (exit 2). One JSON object per line on stdout:
//   {"event":"assigned","partitions":[P,...],"member_id":"..."}   after each change of its assignment
//   {"event":"record","partition":P,"offset":O}  for each record it read
//   {"event":"done"}                              last
import java.io.File;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class KprotoGroupMember {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], protocol = args[3];
        File stopFile = new File(args[4]);
        long limitMs = Long.parseLong(args[5]) * 1000L;
        Thread watchdog = new Thread(() -> {
            try { Thread.sleep(limitMs); } catch (InterruptedException e) { return; }
            System.err.println("KprotoGroupMember: time limit reached");
            System.exit(2);
        });
        watchdog.setDaemon(true);
        watchdog.start();

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            p.put("partition.assignment.strategy", RangeAssignor.class.getName());
            p.put("session.timeout.ms", "6000");
            p.put("heartbeat.interval.ms", "200");
        }
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            Set<TopicPartition> last = null;
            while (!stopFile.exists()) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("{\"event\":\"record\",\"partition\":" + r.partition()
                                       + ",\"offset\":" + r.offset() + "}");
                }
                Set<TopicPartition> now = consumer.assignment();
                if (!now.equals(last)) {
                    List<Integer> parts = new ArrayList<>();
                    for (TopicPartition tp : now) parts.add(tp.partition());
                    Collections.sort(parts);
                    System.out.println("{\"event\":\"assigned\",\"partitions\":" + parts
                                       + ",\"member_id\":\"" + consumer.groupMetadata().memberId() + "\"}");
                    last = new HashSet<>(now);
                }
                System.out.flush();
            }
        }
        System.out.println("{\"event\":\"done\"}");
        System.out.flush();
        System.exit(0);
    }
}
