// The Java client's transactional producer of the transactions chaos run
// (tests/broker/test_cluster_txn_chaos.py): TRANSACTIONS transactions of transactional id
// TXN_ID, each RECORDS records over the partitions of TOPIC, the even ones committed and the odd
// ones aborted, while the test kills leaders.
//
//   java -cp ... KprotoTxnChaos BOOTSTRAP TOPIC PARTITIONS TXN_ID TRANSACTIONS RECORDS SECONDS
//
// Record i of transaction t is TXN_ID-t-i, sent to partition (t + i) % PARTITIONS. Each
// transaction is flushed before it ends, so an aborted one's records are in the log too. A
// commit or abort that times out is called again (the producer keeps the transaction's state);
// an abortable error aborts the transaction; anything else (a fatal error) ends the program with
// exit code 1, the exception on stderr. SECONDS bounds the whole run (exit 2, every stack on stderr).
//
// One JSON object per line on stdout, in this order for a transaction (each line written under
// one lock, so a send's line precedes its callback's):
//   {"event":"send","seq":N,"value":"..."}                    before the send is handed over
//   {"event":"ack","seq":N,"partition":P,"offset":O}  or  {"event":"error","seq":N,"error":"..."}
//   {"event":"end","txn":T,"first":N,"last":N,"outcome":"commit"|"abort","retries":R,"error":"..."}
// (first..last: the transaction's sends; error: what turned an intended commit into an abort),
// and {"event":"done","ms":N} last.
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class KprotoTxnChaos {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String txnId = args[3];
        int transactions = Integer.parseInt(args[4]), records = Integer.parseInt(args[5]);
        long limitMs = Long.parseLong(args[6]) * 1000L;
        // a pause after each transaction: a short run still spans the faults of the test
        long paceMs = args.length > 7 ? Long.parseLong(args[7]) : 0L;
        KprotoChaosProducer.startWatchdog("KprotoTxnChaos", limitMs);
        long t0 = System.nanoTime();
        try {
            run(bootstrap, topic, partitions, txnId, transactions, records, paceMs);
        } catch (Throwable t) {
            t.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
        KprotoChaosProducer.emit("{\"event\":\"done\",\"ms\":" + (System.nanoTime() - t0) / 1_000_000 + "}");
        System.out.flush();
        System.exit(0);
    }

    static void run(String bootstrap, String topic, int partitions, String txnId, int transactions, int records,
                    long paceMs) throws InterruptedException {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", txnId);
        p.put("transactional.id", txnId);
        p.put("transaction.timeout.ms", "60000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        // through a failover: retried rather than given up on, a new leader found within a second
        p.put("delivery.timeout.ms", "120000");
        p.put("request.timeout.ms", "10000");
        p.put("max.block.ms", "20000");
        p.put("retry.backoff.ms", "50");
        p.put("reconnect.backoff.max.ms", "200");
        p.put("metadata.max.age.ms", "1000");
        p.put("linger.ms", "1");
        long seq = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (int t = 0; t < transactions; t++) {
                boolean commit = t % 2 == 0;
                long first = seq;
                producer.beginTransaction();
                String error = null;
                try {
                    for (int i = 0; i < records; i++) {
                        final long n = seq++;
                        String value = txnId + "-" + t + "-" + i;
                        KprotoChaosProducer.emit("{\"event\":\"send\",\"seq\":" + n + ",\"value\":" + KprotoChaosProducer.quote(value) + "}");
                        producer.send(new ProducerRecord<>(topic, (t + i) % partitions, null, value), (md, err) -> {
                            if (err == null)
                                KprotoChaosProducer.emit("{\"event\":\"ack\",\"seq\":" + n + ",\"partition\":" + md.partition() + ",\"offset\":" + md.offset() + "}");
                            else
                                KprotoChaosProducer.emit("{\"event\":\"error\",\"seq\":" + n + ",\"error\":" + KprotoChaosProducer.quote(err.toString()) + "}");
                        });
                    }
                    producer.flush();  // written, also those of an abort
                } catch (KafkaException e) {
                    if (fatal(e)) throw e;
                    error = e.toString();
                }
                int[] retries = {0};
                boolean committed = false;
                if (commit && error == null) {
                    try {
                        retrying(retries, producer::commitTransaction);
                        committed = true;
                    } catch (KafkaException e) {
                        if (fatal(e)) throw e;
                        error = e.toString();
                    }
                }
                if (!committed) retrying(retries, producer::abortTransaction);
                KprotoChaosProducer.emit("{\"event\":\"end\",\"txn\":" + t + ",\"first\":" + first + ",\"last\":" + (seq - 1)
                     + ",\"outcome\":\"" + (committed ? "commit" : "abort") + "\",\"retries\":" + retries[0]
                     + ",\"error\":" + (error == null ? "null" : KprotoChaosProducer.quote(error)) + "}");
                if (paceMs > 0) Thread.sleep(paceMs);
            }
            producer.close(Duration.ofSeconds(60));
        }
    }

    /** An error the producer cannot go on after (the others abort the transaction). */
    static boolean fatal(KafkaException e) {
        return e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException
            || e instanceof OutOfOrderSequenceException || e instanceof AuthorizationException
            || e instanceof UnsupportedVersionException || e instanceof TransactionalIdAuthorizationException;
    }

    /** Call commit or abort again while it times out: the producer finishes the same end. */
    static void retrying(int[] retries, Runnable end) {
        while (true) {
            try {
                end.run();
                return;
            } catch (TimeoutException e) {
                retries[0]++;
                if (retries[0] > 20) throw e;
            }
        }
    }
}
