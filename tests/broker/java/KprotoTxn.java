// Transactions with the Java client (tests/broker/test_txn_v2_interop.py): TRANSACTIONS
// transactions of transactional id TXN_ID over the partitions of TOPIC (made here, REPLICAS
// replicas), committed and aborted in turn; each commits GROUP's offset of partition 0 with it
// (sendOffsetsToTransaction). Then what read_committed and read_uncommitted consumers see, the
// group's committed offset and the transaction's state (DescribeTransactions) before and after.
//
//   java -cp ... KprotoTxn BOOTSTRAP TOPIC PARTITIONS REPLICAS TXN_ID GROUP TRANSACTIONS SECONDS
//
// One JSON object per line on stdout:
//   {"event":"client","version":"4.4.0"}
//   {"event":"state","when":"init"|"end","state":"...","producer_id":N,"epoch":N}
//   {"event":"read","isolation":"read_committed","values":[...]}   (sorted)
//   {"event":"offset","offset":N}
//   {"event":"done","ms":N}                                         (the transactions' time)
// SECONDS bounds the whole run (exit 2 when it is over); an exception ends it with exit 1.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KprotoTxn {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        short replicas = Short.parseShort(args[3]);
        String txnId = args[4], group = args[5];
        int transactions = Integer.parseInt(args[6]);
        long limitMs = Long.parseLong(args[7]) * 1000L;
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limitMs);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("KprotoTxn: out of time");
            System.exit(2);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        try {
            run(bootstrap, topic, partitions, replicas, txnId, group, transactions);
        } catch (Throwable t) {
            t.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
        System.out.flush();
        System.exit(0);
    }

    static void emit(Object... kv) {
        StringBuilder sb = new StringBuilder("{");
        for (int i = 0; i < kv.length; i += 2) {
            if (i > 0) sb.append(',');
            sb.append(json(kv[i])).append(':').append(json(kv[i + 1]));
        }
        System.out.println(sb.append('}'));
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Collection) {
            StringJoiner j = new StringJoiner(",", "[", "]");
            for (Object e : (Collection<?>) o) j.add(json(e));
            return j.toString();
        }
        return '"' + o.toString().replace("\\", "\\\\").replace("\"", "\\\"") + '"';
    }

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

    static void state(Admin admin, String txnId, String when) throws Exception {
        // commitTransaction returns once PrepareCommit is written; the markers and CompleteCommit
        // follow on the coordinator's time (Kafka's and kproto's alike): wait for them, 30 s at most
        long deadline = System.nanoTime() + 30_000_000_000L;
        TransactionDescription d;
        while (true) {
            d = admin.describeTransactions(List.of(txnId)).all().get(15, TimeUnit.SECONDS).get(txnId);
            if (!d.state().toString().startsWith("Prepare") || System.nanoTime() > deadline) break;
            Thread.sleep(50);
        }
        emit("event", "state", "when", when, "state", d.state().toString(), "producer_id", d.producerId(),
             "epoch", d.producerEpoch());
    }

    static void run(String bootstrap, String topic, int partitions, short replicas, String txnId, String group,
                    int transactions) throws Exception {
        emit("event", "client", "version", clientVersion());
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, replicas))).all().get(30, TimeUnit.SECONDS);
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("client.id", txnId);
            p.put("transactional.id", txnId);
            p.put("transaction.timeout.ms", "30000");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            long ms;
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                producer.initTransactions();
                state(admin, txnId, "init");
                long t0 = System.nanoTime();
                for (int t = 0; t < transactions; t++) {
                    boolean commit = t % 2 == 0;
                    producer.beginTransaction();
                    for (int i = 0; i < 2 * partitions; i++)
                        producer.send(new ProducerRecord<>(topic, i % partitions, null, (commit ? "c" : "a") + t + "-" + i));
                    producer.sendOffsetsToTransaction(
                        Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(t + 1)),
                        new ConsumerGroupMetadata(group));
                    producer.flush();  // written, also those of an abort (it drops unsent records)
                    if (commit) producer.commitTransaction(); else producer.abortTransaction();
                }
                ms = (System.nanoTime() - t0) / 1_000_000;
            }
            state(admin, txnId, "end");
            for (String isolation : List.of("read_committed", "read_uncommitted")) {
                Properties c = new Properties();
                c.put("bootstrap.servers", bootstrap);
                c.put("isolation.level", isolation);
                c.put("enable.auto.commit", "false");
                c.put("key.deserializer", StringDeserializer.class.getName());
                c.put("value.deserializer", StringDeserializer.class.getName());
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                    List<TopicPartition> tps = new ArrayList<>();
                    for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
                    consumer.assign(tps);
                    consumer.seekToBeginning(tps);
                    Map<TopicPartition, Long> end = consumer.endOffsets(tps);
                    List<String> values = new ArrayList<>();
                    while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp)))
                        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) values.add(r.value());
                    Collections.sort(values);
                    emit("event", "read", "isolation", isolation, "values", values);
                }
            }
            OffsetAndMetadata om = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                .get(15, TimeUnit.SECONDS).get(new TopicPartition(topic, 0));
            emit("event", "offset", "offset", om == null ? null : om.offset());
            emit("event", "done", "ms", ms);
        }
    }
}
