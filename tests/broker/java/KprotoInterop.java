// The Java client (kafka-clients) against kproto's broker: run by tests/broker/test_broker_java.py,
// which compiles it against the kafka-clients jars tools/setup.sh caches (see java_interop.py).
//
//   java -cp ... KprotoInterop BOOTSTRAP SECONDS PHASE...
//
// phases: admin produce group group848 session txn topicids (group848: the group phase with KIP-848's
// group.protocol=consumer instead of the classic protocol; topicids stands alone: it creates its topic)
//
// admin creates the topics the other phases use, so it comes first. SECONDS bounds the whole run:
// a watchdog prints every thread's stack to stderr and exits with code 2 when it is over.
//
// Every result is one JSON object per line on stdout ({"phase": ..., "event": ...}); the Python
// test checks them against what the broker logged. Any failure ends the program with exit code 1
// (the exception on stderr). Everything is bounded by the client timeouts set below.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnknownTopicIdException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.*;

public class KprotoInterop {
    static String bootstrap;
    static final Duration POLL = Duration.ofMillis(100);
    static final long PHASE_MS = 20_000;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        long limitMs = Long.parseLong(args[1]) * 1000L;
        KprotoChaosProducer.startWatchdog("KprotoInterop", limitMs);
        try {
            for (int i = 2; i < args.length; i++) {
                long start = System.nanoTime();
                switch (args[i]) {
                    case "admin": admin(); break;
                    case "produce": produce(); break;
                    case "group": group("group", "classic"); break;
                    case "group848": group("group848", "consumer"); break;
                    case "session": session(); break;
                    case "txn": txn(); break;
                    case "topicids": topicIds(); break;
                    default: throw new IllegalArgumentException(args[i]);
                }
                emit("phase", args[i], "event", "done", "ms", (System.nanoTime() - start) / 1_000_000);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
        System.out.flush();
        System.exit(0);
    }

    // ------------------------------------------------------------------ output
    static String json(Object v) {
        if (v == null) return "null";
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        if (v instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (sb.length() > 1) sb.append(", ");
                sb.append(json(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
            }
            return sb.append("}").toString();
        }
        if (v instanceof Collection) {
            StringBuilder sb = new StringBuilder("[");
            for (Object o : (Collection<?>) v) {
                if (sb.length() > 1) sb.append(", ");
                sb.append(json(o));
            }
            return sb.append("]").toString();
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char c : v.toString().toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append("\"").toString();
    }

    static synchronized void emit(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        System.out.println(json(m));
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    // ------------------------------------------------------------------ clients
    static Properties common(String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "15000");
        p.put("reconnect.backoff.max.ms", "200");
        p.put("retry.backoff.ms", "50");
        p.put("metadata.max.age.ms", "5000");
        return p;
    }

    static KafkaProducer<String, String> producer(String clientId, Map<String, String> extra) {
        Properties p = common(clientId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "15000");
        p.put("delivery.timeout.ms", "15000");
        p.put("linger.ms", "5");
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String clientId, Map<String, String> extra) {
        Properties p = common(clientId);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("fetch.max.wait.ms", "100");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static Admin adminClient() {
        return Admin.create(common("j-admin"));
    }

    static void acked(String phase, RecordMetadata md, String key, String value, Map<String, Object> extra) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("phase", phase);
        m.put("event", "acked");
        m.put("topic", md.topic());
        m.put("partition", md.partition());
        m.put("offset", md.hasOffset() ? md.offset() : -1);
        m.put("key", key);
        m.put("value", value);
        m.putAll(extra);
        emitMap(m);
    }

    static synchronized void emitMap(Map<String, Object> m) {
        System.out.println(json(m));
    }

    /** Sends and waits for every acknowledgement (in send order). */
    static void sendAll(String phase, KafkaProducer<String, String> producer, List<ProducerRecord<String, String>> records,
                        Map<String, Object> extra) throws Exception {
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (ProducerRecord<String, String> r : records) futures.add(producer.send(r));
        producer.flush();
        for (int i = 0; i < records.size(); i++) {
            RecordMetadata md = futures.get(i).get(15, TimeUnit.SECONDS);
            acked(phase, md, records.get(i).key(), records.get(i).value(), extra);
        }
    }

    // ------------------------------------------------------------------ admin
    static final Map<String, Integer> TOPICS = new LinkedHashMap<>();
    static {
        TOPICS.put("j-codecs", 3);
        TOPICS.put("j-group", 4);
        TOPICS.put("j-group848", 4);
        TOPICS.put("j-session", 3);
        TOPICS.put("j-txn", 1);
        TOPICS.put("j-admin", 2);
        TOPICS.put("j-scratch", 1);
    }

    static void admin() throws Exception {
        try (Admin admin = adminClient()) {
            List<NewTopic> topics = new ArrayList<>();
            for (Map.Entry<String, Integer> e : TOPICS.entrySet())
                topics.add(new NewTopic(e.getKey(), Optional.of(e.getValue()), Optional.empty()));
            admin.createTopics(topics).all().get(15, TimeUnit.SECONDS);
            // a second creation fails with TopicExistsException
            try {
                admin.createTopics(List.of(new NewTopic("j-admin", 1, (short) 1))).all().get(15, TimeUnit.SECONDS);
                check(false, "creating an existing topic succeeded");
            } catch (ExecutionException ex) {
                emit("phase", "admin", "event", "create-existing", "error", ex.getCause().getClass().getSimpleName());
            }
            emit("phase", "admin", "event", "client", "version", clientVersion(),
                 "java", System.getProperty("java.version"));
            Set<String> names = admin.listTopics().names().get(15, TimeUnit.SECONDS);
            emit("phase", "admin", "event", "list-topics", "names", new TreeSet<>(names));

            Map<String, TopicDescription> desc = admin.describeTopics(TOPICS.keySet()).allTopicNames().get(15, TimeUnit.SECONDS);
            for (TopicDescription d : desc.values()) {
                List<Object> leaders = new ArrayList<>();
                for (TopicPartitionInfo p : d.partitions()) leaders.add(p.leader().id());
                emit("phase", "admin", "event", "describe-topic", "topic", d.name(), "topic_id", d.topicId().toString(),
                     "partitions", d.partitions().size(), "leaders", leaders, "internal", d.isInternal());
            }
            DescribeClusterResult cluster = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : cluster.nodes().get(15, TimeUnit.SECONDS)) nodes.add(n.host() + ":" + n.port() + "/" + n.id());
            emit("phase", "admin", "event", "describe-cluster", "cluster_id", cluster.clusterId().get(15, TimeUnit.SECONDS),
                 "controller", cluster.controller().get(15, TimeUnit.SECONDS).id(), "nodes", nodes);

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, "j-admin");
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET)))).all().get(15, TimeUnit.SECONDS);
            Config cfg = admin.describeConfigs(List.of(res)).all().get(15, TimeUnit.SECONDS).get(res);
            emit("phase", "admin", "event", "describe-configs", "retention.ms", cfg.get("retention.ms").value(),
                 "source", cfg.get("retention.ms").source().toString(), "cleanup.policy", cfg.get("cleanup.policy").value());

            admin.createPartitions(Map.of("j-admin", NewPartitions.increaseTo(3))).all().get(15, TimeUnit.SECONDS);
            int count = admin.describeTopics(List.of("j-admin")).allTopicNames().get(15, TimeUnit.SECONDS)
                .get("j-admin").partitions().size();
            emit("phase", "admin", "event", "create-partitions", "partitions", count);

            try (KafkaProducer<String, String> p = producer("j-admin-producer", Map.of())) {
                List<ProducerRecord<String, String>> recs = new ArrayList<>();
                for (int i = 0; i < 10; i++)
                    recs.add(new ProducerRecord<>("j-admin", 2, 1_700_000_000_000L + i * 1000L, "adm-" + i, "admin value " + i));
                sendAll("admin", p, recs, Map.of());
            }
            TopicPartition tp = new TopicPartition("j-admin", 2);
            Map<String, Object> offsets = new LinkedHashMap<>();
            offsets.put("earliest", admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get(15, TimeUnit.SECONDS).offset());
            offsets.put("latest", admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get(15, TimeUnit.SECONDS).offset());
            ListOffsetsResult.ListOffsetsResultInfo max = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp()))
                .partitionResult(tp).get(15, TimeUnit.SECONDS);
            offsets.put("max_timestamp_offset", max.offset());
            offsets.put("max_timestamp", max.timestamp());
            offsets.put("for_timestamp", admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(1_700_000_004_500L)))
                .partitionResult(tp).get(15, TimeUnit.SECONDS).offset());
            emit("phase", "admin", "event", "list-offsets", "offsets", offsets);

            DeletedRecords deleted = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4)))
                .lowWatermarks().get(tp).get(15, TimeUnit.SECONDS);
            long earliest = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get(15, TimeUnit.SECONDS).offset();
            emit("phase", "admin", "event", "delete-records", "low_watermark", deleted.lowWatermark(), "earliest", earliest);

            admin.deleteTopics(List.of("j-scratch")).all().get(15, TimeUnit.SECONDS);
            Set<String> after = admin.listTopics().names().get(15, TimeUnit.SECONDS);
            emit("phase", "admin", "event", "delete-topic", "still_listed", after.contains("j-scratch"));
        }
    }

    // ------------------------------------------------------------------ produce: every codec and acks
    static void produce() throws Exception {
        String[] codecs = {"none", "gzip", "snappy", "lz4", "zstd"};
        String[] acks = {"0", "1", "all"};
        int n = 30;
        for (String codec : codecs) {
            for (String ack : acks) {
                Map<String, String> cfg = new HashMap<>();
                cfg.put("compression.type", codec);
                cfg.put("acks", ack);
                boolean idempotent = ack.equals("all");
                cfg.put("enable.idempotence", Boolean.toString(idempotent));
                try (KafkaProducer<String, String> p = producer("j-produce-" + codec + "-" + ack, cfg)) {
                    List<ProducerRecord<String, String>> recs = new ArrayList<>();
                    for (int i = 0; i < n; i++) {
                        String key = codec + "/" + ack + "/" + i;
                        // compressible values, a few kB in all per batch
                        String value = ("value " + key + " ").repeat(1 + i % 7);
                        recs.add(new ProducerRecord<>("j-codecs", i % 3, key, value));
                    }
                    sendAll("produce", p, recs, Map.of("codec", codec, "acks", ack, "idempotent", idempotent));
                }
            }
        }
    }

    // ------------------------------------------------------------------ group: two members, commits, rebalances
    static class Member implements ConsumerRebalanceListener {
        final String name, phase;
        final KafkaConsumer<String, String> consumer;
        Set<TopicPartition> assigned = new TreeSet<>(Comparator.comparing(TopicPartition::toString));
        int generation = 0;

        Member(String phase, String protocol, String name) {
            this.name = name;
            this.phase = phase;
            String topic = "j-" + phase;
            Map<String, String> cfg = new HashMap<>(Map.of("group.id", topic, "group.protocol", protocol,
                "max.poll.records", "10", "max.poll.interval.ms", "15000"));
            if (protocol.equals("classic")) {   // the consumer protocol has these on the broker's side
                cfg.put("session.timeout.ms", "10000");
                cfg.put("heartbeat.interval.ms", "500");
            }
            this.consumer = consumer(name, cfg);
            consumer.subscribe(List.of(topic), this);
        }

        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            // commit what was consumed before giving the partitions up: no record is seen twice
            consumer.commitSync(Duration.ofSeconds(10));
            assigned.removeAll(parts);
            emit("phase", phase, "event", "revoked", "member", name, "partitions", names(parts), "owned", names(assigned));
        }

        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            assigned.addAll(parts);
            generation = consumer.groupMetadata().generationId();
            emit("phase", phase, "event", "assigned", "member", name, "partitions", names(parts), "owned", names(assigned),
                 "generation", generation, "member_id", consumer.groupMetadata().memberId());
        }

        int poll() {
            ConsumerRecords<String, String> recs = consumer.poll(POLL);
            for (ConsumerRecord<String, String> r : recs)
                emit("phase", phase, "event", "consumed", "member", name, "topic", r.topic(),
                     "partition", r.partition(), "offset", r.offset(), "key", r.key(), "value", r.value());
            return recs.count();
        }
    }

    static List<Object> names(Collection<TopicPartition> parts) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : parts) out.add(tp.partition());
        Collections.sort((List) out);
        return out;
    }

    static void fill(String phase, String topic, int partitions, int from, int to) throws Exception {
        try (KafkaProducer<String, String> p = producer("j-" + phase + "-producer", Map.of("acks", "all"))) {
            List<ProducerRecord<String, String>> recs = new ArrayList<>();
            for (int i = from; i < to; i++) recs.add(new ProducerRecord<>(topic, i % partitions, phase + "-" + i, "v" + i));
            sendAll(phase, p, recs, Map.of());
        }
    }

    static void until(String what, java.util.function.BooleanSupplier done, Runnable step) {
        long deadline = System.currentTimeMillis() + PHASE_MS;
        while (!done.getAsBoolean()) {
            check(System.currentTimeMillis() < deadline, "timed out: " + what);
            step.run();
        }
    }

    static void group(String phase, String protocol) throws Exception {
        String topic = "j-" + phase, prefix = "j-" + phase + "-";
        fill(phase, topic, 4, 0, 200);
        Member a = new Member(phase, protocol, prefix + "a");
        int[] seen = {0};
        until("a owns all four partitions and has consumed 100 records",
              () -> a.assigned.size() == 4 && seen[0] >= 100, () -> seen[0] += a.poll());
        a.consumer.commitSync(Duration.ofSeconds(10));
        emit("phase", phase, "event", "step", "what", "b joins");
        Member b = new Member(phase, protocol, prefix + "b");
        until("two members with two partitions each, all 200 records consumed",
              () -> a.assigned.size() == 2 && b.assigned.size() == 2 && seen[0] >= 200,
              () -> { seen[0] += a.poll(); seen[0] += b.poll(); });
        fill(phase, topic, 4, 200, 240);  // ten more in each partition, for both members
        until("the 40 new records", () -> seen[0] >= 240, () -> { seen[0] += a.poll(); seen[0] += b.poll(); });
        a.consumer.commitSync(Duration.ofSeconds(10));
        b.consumer.commitSync(Duration.ofSeconds(10));
        emit("phase", phase, "event", "step", "what", "b leaves");
        // b leaves (LeaveGroup): a takes all four partitions back and consumes what follows
        b.consumer.close(Duration.ofSeconds(10));
        fill(phase, topic, 4, 240, 280);
        until("a owns all four partitions again and has consumed 280 records",
              () -> a.assigned.size() == 4 && seen[0] >= 280, () -> seen[0] += a.poll());
        a.consumer.commitSync(Duration.ofSeconds(10));
        Map<TopicPartition, OffsetAndMetadata> committed = a.consumer.committed(new HashSet<>(a.assigned), Duration.ofSeconds(10));
        Map<String, Object> c = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet())
            c.put(Integer.toString(e.getKey().partition()), e.getValue().offset());
        emit("phase", phase, "event", "committed", "offsets", c);
        a.consumer.close(Duration.ofSeconds(10));
        // a new member resumes at the committed offsets: nothing left to read
        Member c2 = new Member(phase, protocol, prefix + "c");
        until("c owns all four partitions", () -> c2.assigned.size() == 4, () -> seen[0] += c2.poll());
        Map<String, Object> positions = new TreeMap<>();
        for (TopicPartition tp : c2.assigned) positions.put(Integer.toString(tp.partition()), c2.consumer.position(tp, Duration.ofSeconds(10)));
        for (int i = 0; i < 3; i++) seen[0] += c2.poll();
        emit("phase", phase, "event", "resumed", "positions", positions, "consumed_total", seen[0]);
        try (Admin admin = adminClient()) {
            Collection<ConsumerGroupListing> groups = admin.listConsumerGroups().all().get(15, TimeUnit.SECONDS);
            List<Object> ids = new ArrayList<>();
            for (ConsumerGroupListing g : groups) ids.add(g.groupId());
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(topic)).all().get(15, TimeUnit.SECONDS).get(topic);
            List<Object> members = new ArrayList<>();
            for (MemberDescription m : d.members()) members.add(m.clientId() + ":" + names(m.assignment().topicPartitions()));
            Map<TopicPartition, OffsetAndMetadata> offs = admin.listConsumerGroupOffsets(topic)
                .partitionsToOffsetAndMetadata().get(15, TimeUnit.SECONDS);
            Map<String, Object> o = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offs.entrySet())
                o.put(e.getKey().topic() + "-" + e.getKey().partition(), e.getValue().offset());
            emit("phase", phase, "event", "describe-group", "groups", ids, "state", d.state().toString(),
                 "assignor", d.partitionAssignor(), "type", String.valueOf(d.type()), "members", members, "offsets", o);
        }
        c2.consumer.close(Duration.ofSeconds(10));
    }

    // ------------------------------------------------------------------ incremental fetch sessions
    static void session() throws Exception {
        fill("session", "j-session", 3, 0, 30);  // ten records in each of the three partitions
        TopicPartition p0 = new TopicPartition("j-session", 0), p1 = new TopicPartition("j-session", 1),
            p2 = new TopicPartition("j-session", 2);
        try (KafkaConsumer<String, String> c = consumer("j-session-consumer", Map.of("max.poll.records", "1000"));
             KafkaProducer<String, String> p = producer("j-session-producer", Map.of("acks", "all", "linger.ms", "0"))) {
            c.assign(List.of(p0, p1, p2));
            int[] got = {0};
            until("the 30 records of j-session", () -> got[0] >= 30, () -> got[0] += c.poll(POLL).count());
            emit("phase", "session", "event", "step", "what", "idle");
            for (int i = 0; i < 3; i++) check(c.poll(POLL).count() == 0, "records while idle");
            for (int round = 0; round < 3; round++) {
                // one record into partition 1 only: the next fetches name partition 1 and nothing else
                RecordMetadata md = p.send(new ProducerRecord<>("j-session", 1, "session-p1-" + round, "r" + round)).get(15, TimeUnit.SECONDS);
                acked("session", md, "session-p1-" + round, "r" + round, Map.of());
                int[] n = {0};
                until("the record in partition 1", () -> n[0] >= 1, () -> {
                    for (ConsumerRecord<String, String> r : c.poll(POLL)) {
                        check(r.partition() == 1, "record from partition " + r.partition());
                        n[0]++;
                    }
                });
                emit("phase", "session", "event", "consumed-p1", "round", round, "position", c.position(p1));
            }
            for (int i = 0; i < 3; i++) c.poll(POLL);
            emit("phase", "session", "event", "step", "what", "unassign 2");
            c.assign(List.of(p0, p1));    // partition 2 is forgotten by the session
            for (int i = 0; i < 5; i++) c.poll(POLL);
            emit("phase", "session", "event", "step", "what", "reassign 2");
            c.assign(List.of(p0, p1, p2));  // and added back
            c.seek(p2, 5);
            int[] again = {0};
            until("the last five records of partition 2", () -> again[0] >= 5, () -> again[0] += c.poll(POLL).count());
            for (int i = 0; i < 3; i++) c.poll(POLL);
            Map<String, Object> pos = new TreeMap<>();
            for (TopicPartition tp : List.of(p0, p1, p2)) pos.put(Integer.toString(tp.partition()), c.position(tp));
            emit("phase", "session", "event", "positions", "positions", pos);
        }
    }

    /** kafka-clients' version: its AppInfoParser moved to an internals package in 4.x. */
    static String clientVersion() {
        for (String c : new String[]{"org.apache.kafka.common.utils.AppInfoParser",
                                     "org.apache.kafka.common.utils.internals.AppInfoParser"}) {
            try {
                return (String) Class.forName(c).getMethod("getVersion").invoke(null);
            } catch (ReflectiveOperationException e) {
                // the other package
            }
        }
        return "unknown";
    }

    // ------------------------------------------------------------------ transactions
    static void txn() throws Exception {
        Map<String, String> cfg = Map.of("transactional.id", "j-txn-producer", "transaction.timeout.ms", "30000");
        try (KafkaProducer<String, String> p = producer("j-txn-producer", cfg)) {
            p.initTransactions();
            String[] outcome = {"commit", "abort", "commit"};
            for (int t = 0; t < outcome.length; t++) {
                p.beginTransaction();
                List<ProducerRecord<String, String>> recs = new ArrayList<>();
                for (int i = 0; i < 10; i++) recs.add(new ProducerRecord<>("j-txn", 0, "txn" + t + "-" + i, outcome[t] + " " + i));
                sendAll("txn", p, recs, Map.of("txn", t, "outcome", outcome[t]));
                if (t == 2) {
                    // a consume-transform-produce step: the group's offset commits with the transaction
                    p.sendOffsetsToTransaction(Map.of(new TopicPartition("j-txn", 0), new OffsetAndMetadata(20)),
                                               new ConsumerGroupMetadata("j-txn-group"));
                }
                if (outcome[t].equals("commit")) p.commitTransaction(); else p.abortTransaction();
                emit("phase", "txn", "event", "ended", "txn", t, "outcome", outcome[t]);
            }
        }
        TopicPartition tp = new TopicPartition("j-txn", 0);
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<String, String> c = consumer("j-txn-" + isolation, Map.of("isolation.level", isolation))) {
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                long end = c.endOffsets(List.of(tp)).get(tp);
                List<Object> keys = new ArrayList<>();
                until("j-txn up to its end at " + isolation, () -> c.position(tp) >= end,
                      () -> { for (ConsumerRecord<String, String> r : c.poll(POLL)) keys.add(r.key()); });
                emit("phase", "txn", "event", "read", "isolation", isolation, "end", end, "keys", keys);
            }
        }
        try (Admin admin = adminClient()) {
            OffsetAndMetadata om = admin.listConsumerGroupOffsets("j-txn-group").partitionsToOffsetAndMetadata()
                .get(15, TimeUnit.SECONDS).get(tp);
            emit("phase", "txn", "event", "txn-offset", "offset", om == null ? null : om.offset());
            // what kafka-transactions.sh asks: list, describe, describe-producers
            List<String> listed = new ArrayList<>();
            for (TransactionListing l : admin.listTransactions().all().get(15, TimeUnit.SECONDS))
                listed.add(l.transactionalId() + "=" + l.state());
            TransactionDescription d = admin.describeTransactions(List.of("j-txn-producer")).all()
                .get(15, TimeUnit.SECONDS).get("j-txn-producer");
            List<Object> producers = new ArrayList<>();
            for (ProducerState st : admin.describeProducers(List.of(tp)).partitionResult(tp).get(15, TimeUnit.SECONDS).activeProducers())
                producers.add(Map.of("producer_id", st.producerId(), "epoch", st.producerEpoch(),
                                     "last_sequence", st.lastSequence(), "open", st.currentTransactionStartOffset().isPresent()));
            emit("phase", "txn", "event", "txn-admin", "listed", listed, "state", d.state().toString(),
                 "producer_id", d.producerId(), "epoch", d.producerEpoch(), "timeout_ms", d.transactionTimeoutMs(),
                 "partitions", d.topicPartitions().size(), "producers", producers);
        }
    }

    // ------------------------------------------------------------------ topics by id
    /** Admin.describeTopics by topic id (a Metadata request naming ids, with empty names), for a
     *  topic that exists and for an id no topic has. */
    static <T> T untilKnown(Callable<T> call) throws Exception {
        long deadline = System.nanoTime() + 15_000_000_000L;
        while (true) {
            try {
                return call.call();
            } catch (ExecutionException ex) {
                boolean unknown = ex.getCause() instanceof UnknownTopicOrPartitionException
                    || ex.getCause() instanceof UnknownTopicIdException;
                if (!unknown || System.nanoTime() > deadline) throw ex;
                Thread.sleep(100);
            }
        }
    }

    static void topicIds() throws Exception {
        try (Admin admin = adminClient()) {
            admin.createTopics(List.of(new NewTopic("j-topicids", Optional.of(2), Optional.empty())))
                .all().get(15, TimeUnit.SECONDS);
            // on a cluster a broker learns of a new topic a little after the controller answered
            // CreateTopics: until then it says the topic (or id) is unknown, and Admin does not retry
            Uuid id = untilKnown(() -> admin.describeTopics(List.of("j-topicids")).allTopicNames()
                .get(15, TimeUnit.SECONDS).get("j-topicids").topicId());
            TopicDescription d = untilKnown(() -> admin.describeTopics(TopicCollection.ofTopicIds(List.of(id)))
                .allTopicIds().get(15, TimeUnit.SECONDS).get(id));
            emit("phase", "topicids", "event", "by-id", "topic_id", id.toString(), "name", d.name(),
                 "partitions", d.partitions().size());
            Uuid unknown = Uuid.randomUuid();
            try {
                admin.describeTopics(TopicCollection.ofTopicIds(List.of(unknown))).allTopicIds().get(15, TimeUnit.SECONDS);
                check(false, "describing an unknown topic id succeeded");
            } catch (ExecutionException ex) {
                emit("phase", "topicids", "event", "unknown-id", "error", ex.getCause().getClass().getSimpleName());
            }
        }
    }
}
