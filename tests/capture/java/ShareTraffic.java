// The Java client's share-group part of the live-traffic capture test (KIP-932), over
// SASL_PLAINTEXT with SCRAM: a topic and its share group's start set to the earliest offset
// (admin calls), an lz4 producer, a KafkaShareConsumer that acknowledges each record explicitly
// (ShareFetch, ShareAcknowledge, ShareGroupHeartbeat), then the group described. Prints one JSON
// line per acknowledged record ({"topic","partition","offset","value"}), one per record the
// share consumer accepted ({"consumed"}) and "done" at the end.
// Arguments: bootstrap mechanism user password topic group
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class ShareTraffic {
    static Properties base(String[] a, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", a[1]);
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
              + a[2] + "\" password=\"" + a[3] + "\";");
        p.put("client.id", clientId);
        return p;
    }

    static String quoted(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] a) throws Exception {
        String topic = a[4], group = a[5];
        try (Admin admin = Admin.create(base(a, "java-share-admin"))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            // a share group starts at the latest offset unless its group config says otherwise
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                                                       AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
        }
        Properties pp = base(a, "java-share-producer");
        pp.put("acks", "all");
        pp.put("compression.type", "lz4");
        pp.put("linger.ms", "5");
        int n = 6;
        try (Producer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++)
                fs.add(p.send(new ProducerRecord<>(topic, "s" + i, "java-share-" + i)));
            p.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata m = fs.get(i).get();
                System.out.println("{\"topic\":" + quoted(m.topic()) + ",\"partition\":" + m.partition()
                                   + ",\"offset\":" + m.offset() + ",\"value\":" + quoted("java-share-" + i) + "}");
            }
        }
        Properties cp = base(a, "java-share-consumer");
        cp.put("group.id", group);
        cp.put("share.acknowledgement.mode", "explicit");
        Set<String> seen = new HashSet<>();
        try (ShareConsumer<String, String> c = new KafkaShareConsumer<>(cp, new StringDeserializer(),
                                                                         new StringDeserializer())) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60000;
            while (seen.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    if (seen.add(r.value()))
                        System.out.println("{\"consumed\":" + quoted(r.value()) + "}");
                }
                c.commitSync();   // the acknowledgements in a ShareAcknowledge request of their own
            }
        }
        try (Admin admin = Admin.create(base(a, "java-share-admin"))) {
            admin.describeShareGroups(List.of(group)).all().get();
            admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec())).all().get();
        }
        System.out.println("{\"done\":" + seen.size() + "}");
    }
}
