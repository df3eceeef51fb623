// A Kafka Streams application with processing.guarantee=exactly_once_v2, for
// tests/kafka_reference/test_streams_eos.py (the test kills its JVM with SIGKILL and
// starts it again).
//
//   java -cp <classes>:<kafka-streams libs>/* StreamsEos BOOTSTRAP APP_ID STATE_DIR INPUT UPPER COUNTS
//
// INPUT holds words (values, no keys). Each word goes to UPPER upper-cased (a stateless
// step: read read_committed, each input record must appear there exactly once) and is
// counted through a repartition topic (groupBy the word) into COUNTS (key: the word,
// value: its count as a long; the last value of a word read read_committed must be its
// number of occurrences). Prints RUNNING once the application is running; runs until
// killed.

import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

public class StreamsEos {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], stateDir = args[2];
        String input = args[3], upper = args[4], counts = args[5];

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 3000);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> words = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        words.mapValues(w -> w.toUpperCase()).to(upper, Produced.with(Serdes.String(), Serdes.String()));
        words.groupBy((k, w) -> w, Grouped.with("by-word", Serdes.String(), Serdes.String()))
             .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("word-counts"))
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
             .toStream()
             .to(counts, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch dead = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("RUNNING");
                System.out.flush();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                System.out.println("STOPPED " + now);
                System.out.flush();
                dead.countDown();
            }
        });
        streams.start();
        dead.await();
        System.exit(1);
    }
}
