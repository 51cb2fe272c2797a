// The Java client's part of the live-traffic capture test: admin calls, an idempotent zstd
// producer, a transaction and a KIP-848 consumer group, over SASL_PLAINTEXT with SCRAM. Prints one
// JSON line per acknowledged record ({"topic","partition","offset","value"}) and "done" at the end.
// Arguments: bootstrap mechanism user password topic group
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class LiveTraffic {
    static Properties base(String[] a) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", a[1]);
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
              + a[2] + "\" password=\"" + a[3] + "\";");
        p.put("client.id", "java-live");
        return p;
    }

    static void acked(RecordMetadata m, String value) {
        System.out.println("{\"topic\":\"" + m.topic() + "\",\"partition\":" + m.partition()
                           + ",\"offset\":" + m.offset() + ",\"value\":\"" + value + "\"}");
    }

    public static void main(String[] a) throws Exception {
        String topic = a[4], group = a[5];
        try (Admin admin = Admin.create(base(a))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            admin.describeCluster().nodes().get();
            admin.describeTopics(List.of(topic)).allTopicNames().get();
            admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, topic))).all().get();
        }
        Properties pp = base(a);
        pp.put("acks", "all");
        pp.put("compression.type", "zstd");
        pp.put("linger.ms", "5");
        int n = 0;
        try (Producer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < 6; i++, n++) {
                String v = "java-" + i;
                acked(p.send(new ProducerRecord<>(topic, "k" + i, v)).get(), v);
            }
        }
        Properties tp = base(a);
        tp.put("transactional.id", "java-live-txn");
        tp.put("compression.type", "zstd");
        try (Producer<String, String> p = new KafkaProducer<>(tp, new StringSerializer(), new StringSerializer())) {
            p.initTransactions();
            p.beginTransaction();
            List<String> values = new ArrayList<>();
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < 3; i++, n++) {
                values.add("java-txn-" + i);
                fs.add(p.send(new ProducerRecord<>(topic, "t" + i, values.get(i))));
            }
            p.commitTransaction();
            for (int i = 0; i < 3; i++) acked(fs.get(i).get(), values.get(i));
        }
        Properties cp = base(a);
        cp.put("group.id", group);
        cp.put("group.protocol", "consumer");
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("isolation.level", "read_committed");
        int seen = 0;
        try (Consumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60000;
            while (seen < n && System.currentTimeMillis() < deadline)
                seen += c.poll(Duration.ofMillis(200)).count();
            c.commitSync();
        }
        try (Admin admin = Admin.create(base(a))) {
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            admin.describeConsumerGroups(List.of(group)).all().get();
        }
        System.out.println("{\"done\":" + seen + "}");
    }
}
