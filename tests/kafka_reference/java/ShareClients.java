import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Kafka's KafkaShareConsumer (KIP-932) for tests/kafka_reference/test_java_share_consumer.py.
 *
 * share BOOTSTRAP TOPIC GROUP MAX_POLL_RECORDS RELEASE_EVERY
 *   subscribes in explicit acknowledgement mode and polls until stdin closes. Prints
 *   "GOT partition offset deliveryCount value" per record; a record whose offset is a
 *   multiple of RELEASE_EVERY (> 0) is released on its first delivery, every other one
 *   accepted; after each commitSync, "ACCEPTED partition offset" per record accepted whose
 *   partition's acknowledgement succeeded ("ACKFAIL partition error" otherwise).
 *
 * offsets BOOTSTRAP GROUP [TOPIC:PARTITION=OFFSET ...]
 *   with Kafka's Admin: alterShareGroupOffsets with the offsets given (if any), printing
 *   "ALTERED" or "ERROR ExceptionClass message", then listShareGroupOffsets of the group:
 *   "OFFSET topic partition offset" per share-partition.
 *
 * count BOOTSTRAP TOPIC GROUP MAX_POLL_RECORDS
 *   (bench/bench_share_groups.py) polls in implicit acknowledgement mode until stdin
 *   closes, printing "AT epochMillis recordsSoFar" after each poll that returned records
 *   (no line per record: the figure is the broker's, not the pipe's).
 */
public final class ShareClients {
    public static void main(String[] args) throws Exception {
        if (args.length >= 3 && args[0].equals("offsets")) {
            offsets(args);
            return;
        }
        if (args.length == 5 && args[0].equals("count")) {
            count(args);
            return;
        }
        if (args.length != 6 || !args[0].equals("share")) {
            System.err.println("usage: share BOOTSTRAP TOPIC GROUP MAX_POLL_RECORDS RELEASE_EVERY");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        props.put("group.id", args[3]);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("share.acknowledgement.mode", "explicit");
        props.put("max.poll.records", args[4]);
        int releaseEvery = Integer.parseInt(args[5]);
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                while (in.readLine() != null) { }
            } catch (Exception ignored) { }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            System.out.println("SUBSCRIBED");
            System.out.flush();
            while (!stop.get()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                List<ConsumerRecord<String, String>> accepted = new ArrayList<>();
                for (ConsumerRecord<String, String> r : records) {
                    short count = r.deliveryCount().orElse((short) -1);
                    System.out.println("GOT " + r.partition() + " " + r.offset() + " " + count + " " + r.value());
                    if (releaseEvery > 0 && r.offset() % releaseEvery == 0 && count == 1) {
                        consumer.acknowledge(r, AcknowledgeType.RELEASE);
                    } else {
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted.add(r);
                    }
                }
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync();
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
                    if (e.getValue().isPresent()) {
                        System.out.println("ACKFAIL " + e.getKey().partition() + " " + e.getValue().get());
                    }
                }
                for (ConsumerRecord<String, String> r : accepted) {
                    boolean ok = result.entrySet().stream().anyMatch(e ->
                        e.getKey().partition() == r.partition() && e.getKey().topic().equals(r.topic())
                            && e.getValue().isEmpty());
                    if (ok) {
                        System.out.println("ACCEPTED " + r.partition() + " " + r.offset());
                    }
                }
                System.out.flush();
            }
        }
        System.out.println("CLOSED");
        System.out.flush();
    }

    static void offsets(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        String group = args[2];
        try (Admin admin = Admin.create(props)) {
            if (args.length > 3) {
                Map<TopicPartition, Long> wanted = new HashMap<>();
                for (int i = 3; i < args.length; i++) {
                    String[] tpo = args[i].split("=");
                    int colon = tpo[0].lastIndexOf(':');
                    wanted.put(new TopicPartition(tpo[0].substring(0, colon),
                        Integer.parseInt(tpo[0].substring(colon + 1))), Long.parseLong(tpo[1]));
                }
                try {
                    admin.alterShareGroupOffsets(group, wanted).all().get();
                    System.out.println("ALTERED");
                } catch (java.util.concurrent.ExecutionException e) {
                    System.out.println("ERROR " + e.getCause().getClass().getSimpleName() + " "
                        + e.getCause().getMessage());
                }
            }
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> listed =
                admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                    .partitionsToOffsetAndMetadata(group).get();
            Map<String, Long> sorted = new TreeMap<>();
            for (Map.Entry<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> e : listed.entrySet()) {
                sorted.put(e.getKey().topic() + " " + e.getKey().partition(),
                    e.getValue() == null ? -1L : e.getValue().offset());
            }
            for (Map.Entry<String, Long> e : sorted.entrySet()) {
                System.out.println("OFFSET " + e.getKey() + " " + e.getValue());
            }
        }
        System.out.flush();
    }

    static void count(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        props.put("group.id", args[3]);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("max.poll.records", args[4]);
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                while (in.readLine() != null) { }
            } catch (Exception ignored) { }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        long seen = 0;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            System.out.println("SUBSCRIBED");
            System.out.flush();
            while (!stop.get()) {
                int n = consumer.poll(Duration.ofMillis(200)).count();
                if (n > 0) {
                    seen += n;
                    System.out.println("AT " + System.currentTimeMillis() + " " + seen);
                    System.out.flush();
                }
            }
            consumer.commitSync();
        }
        System.out.println("CLOSED");
        System.out.flush();
    }
}
