// Kafka's Java Producer and Consumer, driven by tests/kafka_reference/test_java_clients.py.
// Run with the JDK's source launcher: java -cp '<kafka libs>/*' JavaClients.java MODE ARGS
//   produce BOOTSTRAP TOPIC CODEC COUNT         -> "SENT <count>" (idempotent: Kafka's default)
//   consume BOOTSTRAP TOPIC GROUP INSTANCE COUNT -> one line per record, then "DONE"
//     (cooperative-sticky assignor, read_uncommitted, static membership when INSTANCE != "-")
//   member BOOTSTRAP TOPIC GROUP INSTANCE SESSION_MS -> a static member (range assignor) that
//     polls until stdin says "close" (it closes: a static member sends no LeaveGroup), printing
//     "ASSIGNED p,p", "REVOKED p,p", "LOST p,p", "FENCED", "CLOSED"
//   kip848 BOOTSTRAP TOPIC GROUP INSTANCE ASSIGNOR -> a member of the consumer rebalance
//     protocol (group.protocol=consumer, group.remote.assignor ASSIGNOR unless "-", static
//     when INSTANCE != "-") that polls and commits until stdin says "close", printing
//     "ASSIGNED <ms> p,p", "REVOKED <ms> p,p", "LOST <ms> p,p" (ms: the wall clock when the
//     callback ran), "CONSUMED <n>" after each poll that returned records, "CLOSED"
//   txn BOOTSTRAP TRANSACTIONAL_ID TOPIC TIMEOUT_MS STEPS -> a transactional producer
//     (transaction.timeout.ms TIMEOUT_MS) running STEPS, comma-separated: "commit:N" and
//     "abort:N" (a transaction of N records "<step>-<i>", partition i % partitions; an
//     aborted one is flushed first, so its records are in the log) print
//     "COMMITTED <step>" / "ABORTED <step>"; "open:N" sends N, flushes, prints "OPEN <step>",
//     waits for a line on stdin, then sends one more and commits; "stall:N:MS" sends N,
//     flushes, sleeps MS and commits; "offsets:N" sends N and, before committing, sends the
//     offset N of partition 0 to the transaction for the group "<TRANSACTIONAL_ID>-group"
//     (sendOffsetsToTransaction). A step that throws prints "FAILED <exception class>"
//     and ends the run. "INITIALIZED" after initTransactions().
//   read BOOTSTRAP TOPIC ISOLATION COUNT -> every partition from the beginning with
//     isolation.level ISOLATION: one value per line until COUNT (or 10 s without a
//     record), then "DONE <n>"

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class JavaClients {
    static byte[] utf8(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static String partitions(Collection<TopicPartition> tps) {
        return tps.stream().map(tp -> Integer.toString(tp.partition())).sorted()
            .collect(Collectors.joining(","));
    }

    /** A consumer's properties: `group` ("-" or null: none), static membership when
     * `instance` is not "-" or null, from the earliest offset, no auto-commit. */
    static Properties consumerProperties(String bootstrap, String group, String instance) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        if (group != null && !group.equals("-")) p.put("group.id", group);
        if (instance != null && !instance.equals("-")) p.put("group.instance.id", instance);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        return p;
    }

    /** Set once stdin says "close" (or ends): the long-running modes poll until then. */
    static AtomicBoolean closeOnStdin() {
        AtomicBoolean close = new AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null && !line.equals("close")) { }
            } catch (Exception e) { }
            close.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        return close;
    }

    static void member(String[] args) throws Exception {
        Properties p = consumerProperties(args[1], args[3], args[4]);
        p.put("session.timeout.ms", args[5]);
        p.put("heartbeat.interval.ms", "200");
        p.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor");
        AtomicBoolean close = closeOnStdin();
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                    System.out.println("ASSIGNED " + partitions(tps));
                }
                public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                    System.out.println("REVOKED " + partitions(tps));
                }
                public void onPartitionsLost(Collection<TopicPartition> tps) {
                    System.out.println("LOST " + partitions(tps));
                }
            });
            try {
                while (!close.get()) consumer.poll(Duration.ofMillis(100));
            } catch (FencedInstanceIdException e) {
                System.out.println("FENCED");
            }
        }
        System.out.println("CLOSED");
    }

    static void kip848(String[] args) throws Exception {
        Properties p = consumerProperties(args[1], args[3], args[4]);
        p.put("group.protocol", "consumer");
        if (!args[5].equals("-")) p.put("group.remote.assignor", args[5]);
        AtomicBoolean close = closeOnStdin();
        long consumed = 0;
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                    System.out.println("ASSIGNED " + System.currentTimeMillis() + " " + partitions(tps));
                }
                public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                    System.out.println("REVOKED " + System.currentTimeMillis() + " " + partitions(tps));
                }
                public void onPartitionsLost(Collection<TopicPartition> tps) {
                    System.out.println("LOST " + System.currentTimeMillis() + " " + partitions(tps));
                }
            });
            while (!close.get()) {
                int n = consumer.poll(Duration.ofMillis(100)).count();
                if (n > 0) {
                    consumed += n;
                    consumer.commitSync();
                    System.out.println("CONSUMED " + consumed);
                }
            }
        }
        System.out.println("CLOSED");
    }

    static void txn(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[1]);
        p.put("transactional.id", args[2]);
        p.put("transaction.timeout.ms", args[4]);
        p.put("max.block.ms", "30000");
        String topic = args[3];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            System.out.println("INITIALIZED");
            int partitions = producer.partitionsFor(topic).size();
            String[] steps = args[5].split(",");
            for (int step = 0; step < steps.length; step++) {
                String[] s = steps[step].split(":");
                int n = Integer.parseInt(s[1]);
                try {
                    producer.beginTransaction();
                    for (int i = 0; i < n; i++)
                        producer.send(new ProducerRecord<>(topic, i % partitions, null,
                                                           utf8(step + "-" + i)));
                    if (s[0].equals("abort")) {
                        producer.flush();          // the aborted records reach the log
                        producer.abortTransaction();
                        System.out.println("ABORTED " + step);
                        continue;
                    }
                    if (s[0].equals("open")) {
                        producer.flush();
                        System.out.println("OPEN " + step);
                        in.readLine();
                        producer.send(new ProducerRecord<>(topic, 0, null, utf8(step + "-late")));
                    } else if (s[0].equals("stall")) {
                        producer.flush();
                        Thread.sleep(Long.parseLong(s[2]));
                    } else if (s[0].equals("offsets")) {
                        producer.sendOffsetsToTransaction(
                            java.util.Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(n)),
                            new ConsumerGroupMetadata(args[2] + "-group"));
                    }
                    producer.commitTransaction();
                    System.out.println("COMMITTED " + step);
                } catch (Exception e) {
                    Throwable t = e;
                    while (t.getCause() != null && t instanceof java.util.concurrent.ExecutionException)
                        t = t.getCause();
                    System.out.println("FAILED " + t.getClass().getName());
                    return;
                }
            }
        }
    }

    static void read(String[] args) throws Exception {
        Properties p = consumerProperties(args[1], null, null);   // assigned: no group
        p.put("isolation.level", args[3]);
        int count = Integer.parseInt(args[4]);
        int seen = 0;
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = consumer.partitionsFor(args[2]).stream()
                .map(i -> new TopicPartition(i.topic(), i.partition())).collect(Collectors.toList());
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long idle = System.currentTimeMillis() + 10_000;
            while (seen < count && System.currentTimeMillis() < idle) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(new String(r.value(), StandardCharsets.UTF_8));
                    seen++;
                    idle = System.currentTimeMillis() + 10_000;
                }
            }
        }
        System.out.println("DONE " + seen);
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("member")) {
            member(args);
            return;
        }
        if (args[0].equals("kip848")) {
            kip848(args);
            return;
        }
        if (args[0].equals("produce")) {
            Properties p = new Properties();
            p.put("bootstrap.servers", args[1]);
            p.put("compression.type", args[3]);
            p.put("acks", "all");
            p.put("linger.ms", "5");
            int count = Integer.parseInt(args[4]);
            try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
                for (int i = 0; i < count; i++) {
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(
                        args[2], null, 1_700_000_000_000L + i, i % 4 == 0 ? null : utf8("k" + (i % 9)),
                        utf8("java value " + i));
                    r.headers().add("i", utf8(Integer.toString(i)));
                    producer.send(r);
                }
                producer.flush();
            }
            System.out.println("SENT " + count);
        } else if (args[0].equals("txn")) {
            txn(args);
        } else if (args[0].equals("read")) {
            read(args);
        } else {
            Properties p = consumerProperties(args[1], args[3], args[4]);
            p.put("partition.assignment.strategy",
                  "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
            p.put("isolation.level", "read_uncommitted");
            int count = Integer.parseInt(args[5]);
            int seen = 0;
            try (KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                consumer.subscribe(List.of(args[2]));
                long deadline = System.currentTimeMillis() + 60_000;
                while (seen < count && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                        StringBuilder line = new StringBuilder();
                        line.append(r.partition()).append('\t').append(r.offset()).append('\t')
                            .append(r.timestamp()).append('\t')
                            .append(r.key() == null ? "<null>" : new String(r.key(), StandardCharsets.UTF_8))
                            .append('\t').append(new String(r.value(), StandardCharsets.UTF_8));
                        for (Header h : r.headers())
                            line.append('\t').append(h.key()).append('=')
                                .append(h.value() == null ? "<null>" : new String(h.value(), StandardCharsets.UTF_8));
                        System.out.println(line);
                        seen++;
                    }
                    consumer.commitSync();
                }
                System.out.println("ASSIGNED " + consumer.assignment().size());
            }
            System.out.println("DONE " + seen);
        }
    }
}
