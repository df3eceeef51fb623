// Kafka's Java producer for bench/bench_transactions.py: the "same Java client"
// rows, against pylog serve and Kafka's broker in the same run.
//   java -cp '<kafka libs>/*:<classes>' TxnProducerPerf BOOTSTRAP RECORDS PER_TXN TOPIC...
// For each TOPIC (one run each, in this one JVM), RECORDS records of 100 B to partition 0,
// acks=all, linger.ms=5, idempotent (Kafka's default); PER_TXN > 0: a transactional
// producer (a fresh transactional.id per run) committing every PER_TXN records. Prints
// "RATE <records/s>" per run: the time from the first send to the last acknowledgement
// (idempotent: flush; transactional: commitTransaction), initTransactions not included.
// The first topic takes an untimed warm-up run first (the JIT compiles the send path).

import java.util.Properties;
import java.util.UUID;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnProducerPerf {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        int records = Integer.parseInt(args[1]);
        int perTxn = Integer.parseInt(args[2]);
        byte[] value = new byte[100];
        java.util.Arrays.fill(value, (byte) 'x');
        for (int t = 2; t < args.length; t++) {
            String topic = args[Math.max(t, 3)];
            boolean warmUp = t == 2;
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("acks", "all");
            props.put("linger.ms", "5");
            props.put("enable.idempotence", "true");
            props.put("key.serializer", ByteArraySerializer.class.getName());
            props.put("value.serializer", ByteArraySerializer.class.getName());
            if (perTxn > 0) {
                props.put("transactional.id", "bench-java-" + UUID.randomUUID());
            }
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
                if (perTxn > 0) {
                    producer.initTransactions();
                }
                long started = System.nanoTime();
                int sent = 0;
                while (sent < records) {
                    int n = perTxn > 0 ? Math.min(perTxn, records - sent) : records;
                    if (perTxn > 0) {
                        producer.beginTransaction();
                    }
                    for (int i = 0; i < n; i++) {
                        producer.send(new ProducerRecord<>(topic, 0, null, value));
                    }
                    sent += n;
                    if (perTxn > 0) {
                        producer.commitTransaction();
                    } else {
                        producer.flush();
                    }
                }
                double seconds = (System.nanoTime() - started) / 1e9;
                if (!warmUp) {
                    System.out.println("RATE " + (records / seconds));
                }
                System.out.flush();
            }
        }
    }
}
