import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * One Apache Kafka Java producer that sends records for a while and closes, so that it pushes
 * KIP-714 telemetry to its broker and, on close, its terminating push. Uses only the producer API
 * of Kafka 3.7 (the oldest client with KIP-714), so it compiles against every tested version.
 *
 * <p>Usage: {@code TelemetryProducer BOOTSTRAP SECONDS CLIENT_ID TOPIC}. Prints {@code instance
 * UUID} (the id the broker gave the client), {@code sent N} and, just before it closes (its
 * terminating push carries the same), {@code outgoing-byte-rate RATE at EPOCH_MS}: the producer's
 * own {@code producer-metrics} rate, which it pushes as {@code
 * org.apache.kafka.producer.outgoing.byte.rate}.
 */
public final class TelemetryProducer {
    private static final Duration WAIT = Duration.ofSeconds(10);

    private TelemetryProducer() {}

    public static void main(String[] args) throws Exception {
        long runNanos = (long) (Double.parseDouble(args[1]) * 1e9);
        Properties properties = new Properties();
        properties.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        properties.put(ProducerConfig.CLIENT_ID_CONFIG, args[2]);
        properties.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        properties.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        properties.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        // Its rates over 1 s samples (2 of them), not 30 s: steady after a second or two, so the
        // rate it pushes and the one it prints when it stops agree.
        properties.put(ProducerConfig.METRICS_SAMPLE_WINDOW_MS_CONFIG, "1000");
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                properties, new ByteArraySerializer(), new ByteArraySerializer());
        long deadline = System.nanoTime() + runNanos;
        int sent = 0;
        while (System.nanoTime() < deadline) {
            byte[] value = ("java-" + sent).getBytes(StandardCharsets.UTF_8);
            producer.send(new ProducerRecord<>(args[3], value));
            sent++;
            Thread.sleep(20);
        }
        producer.flush();
        System.out.println("instance " + producer.clientInstanceId(WAIT));
        System.out.println("sent " + sent);
        double rate = Double.NaN;
        for (Map.Entry<MetricName, ? extends Metric> entry : producer.metrics().entrySet()) {
            MetricName name = entry.getKey();
            if (name.group().equals("producer-metrics") && name.name().equals("outgoing-byte-rate")) {
                rate = ((Number) entry.getValue().metricValue()).doubleValue();
            }
        }
        System.out.println("outgoing-byte-rate " + rate + " at " + System.currentTimeMillis());
        System.out.flush();
        producer.close(WAIT);
    }
}
