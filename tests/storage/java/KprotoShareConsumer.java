import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A share group's member for the storage tests: ``KprotoShareConsumer BOOTSTRAP GROUP TOPIC N``
 * sets the group to start at the earliest offset and reads N records of TOPIC two at a time,
 * acknowledging the first delivery of the first one RELEASE (it comes again, delivered twice)
 * and every other delivery ACCEPT, committing after each poll; it prints each accepted record's
 * offset and delivery count. What the share coordinator keeps of this is __share_group_state.
 */
public final class KprotoShareConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2];
        int wanted = Integer.parseInt(args[3]);
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(res, List.of(new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)));
            admin.incrementalAlterConfigs(ops).all().get();
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("max.poll.records", "2");
        long deadline = System.currentTimeMillis() + 60_000;
        Set<Long> accepted = new HashSet<>();
        boolean released = false;
        try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            while (accepted.size() < wanted && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    if (!released) {   // delivered again: a delivery count of 2 in the state
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                        released = true;
                        continue;
                    }
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    System.out.println("{\"offset\": " + r.offset() + ", \"delivery\": "
                                       + r.deliveryCount().orElse((short) -1) + "}");
                    accepted.add(r.offset());
                }
                c.commitSync();
            }
        }
        if (accepted.size() < wanted) {
            System.err.println("only " + accepted.size() + " of " + wanted + " records");
            System.exit(1);
        }
    }
}
