// A share group with the Java client's KafkaShareConsumer (tests/broker/test_broker_share_java.py):
// RECORDS records produced to TOPIC (its partitions made here), then consumed by CONSUMERS share
// consumers of GROUP in explicit acknowledgement mode: the first delivery of offset 0 of every
// partition is released (it comes again with delivery count 2), every other record accepted.
//
//   java -cp ... KprotoShare BOOTSTRAP TOPIC PARTITIONS GROUP RECORDS CONSUMERS SECONDS [earliest]
//
// With "earliest" the group's share.auto.offset.reset is set to earliest first (a group config,
// IncrementalAlterConfigs); else the broker's default must be earliest for the records to be seen.
//
// One JSON object per line on stdout:
//   {"event":"record","consumer":C,"partition":P,"offset":O,"delivery":N,"ack":"ACCEPT"|"RELEASE"}
//   {"event":"done","accepted":N}
// SECONDS bounds the whole run (exit 2 when it is over); an exception ends it with exit 1.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KprotoShare {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String group = args[3];
        int records = Integer.parseInt(args[4]), consumers = Integer.parseInt(args[5]);
        long limitMs = Long.parseLong(args[6]) * 1000L;
        boolean earliest = args.length > 7 && args[7].equals("earliest");
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limitMs);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("time limit reached");
            Runtime.getRuntime().halt(2);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        try {
            run(bootstrap, topic, partitions, group, records, consumers, earliest);
        } catch (Throwable t) {
            t.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
        Runtime.getRuntime().halt(0);
    }

    static synchronized void print(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void run(String bootstrap, String topic, int partitions, String group, int records,
                    int consumers, boolean earliest) throws Exception {
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
            if (earliest) {
                ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
                admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                    .all().get(30, TimeUnit.SECONDS);
            }
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i));
            }
            producer.flush();
        }
        Set<String> accepted = ConcurrentHashMap.newKeySet();
        Set<String> released = ConcurrentHashMap.newKeySet();
        ExecutorService pool = Executors.newFixedThreadPool(consumers);
        List<Future<?>> running = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            final int id = c;
            running.add(pool.submit(() -> {
                Properties s = new Properties();
                s.put("bootstrap.servers", bootstrap);
                s.put("group.id", group);
                s.put("client.id", "share-" + id);
                s.put("share.acknowledgement.mode", "explicit");
                s.put("key.deserializer", StringDeserializer.class.getName());
                s.put("value.deserializer", StringDeserializer.class.getName());
                try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(s)) {
                    consumer.subscribe(List.of(topic));
                    while (accepted.size() < records) {
                        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                            String key = r.partition() + ":" + r.offset();
                            AcknowledgeType ack = r.offset() == 0 && released.add(key)
                                ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                            consumer.acknowledge(r, ack);
                            if (ack == AcknowledgeType.ACCEPT) {
                                accepted.add(key);
                            }
                            print(String.format("{\"event\":\"record\",\"consumer\":%d,\"partition\":%d,"
                                + "\"offset\":%d,\"delivery\":%d,\"ack\":\"%s\"}", id, r.partition(), r.offset(),
                                r.deliveryCount().orElse((short) -1), ack));
                        }
                        consumer.commitSync();
                    }
                }
                return null;
            }));
        }
        for (Future<?> f : running) {
            f.get();
        }
        pool.shutdown();
        print("{\"event\":\"done\",\"accepted\":" + accepted.size() + "}");
    }
}
