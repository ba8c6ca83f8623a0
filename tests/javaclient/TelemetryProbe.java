import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Runs Apache Kafka's own Java clients against one bootstrap address for a while, then closes
 * them, so that each pushes KIP-714 telemetry and, on close, its terminating push.
 *
 * <p>Usage: {@code TelemetryProbe BOOTSTRAP SECONDS PREFIX}. Clients: {@code PREFIX-producer}
 * (default configuration, so idempotent), {@code PREFIX-assigned} (a consumer without group.id,
 * assigned one partition), {@code PREFIX-grouped} (a consumer of group {@code PREFIX-group},
 * subscribed to one topic, with the default classic group protocol), {@code PREFIX-kip848} (the
 * same with group.protocol=consumer, KIP-848) and {@code PREFIX-admin} (enable.metrics.push=true: an admin client's
 * default is false). The consumers are polled throughout, since a classic consumer's network
 * client, and so its telemetry, only runs inside poll(). Two more clients show what the Java
 * defaults leave out: {@code PREFIX-admin-default} (an admin client as configured by default) and
 * {@code PREFIX-idle} (a consumer that is never polled).
 *
 * <p>Prints one line per fact for the test to parse: {@code instance CLIENT_ID UUID} (the id the
 * client got from GetTelemetrySubscriptions, {@code null} if none came within the wait), {@code
 * no-instance CLIENT_ID EXCEPTION} (the client refused to wait for one), {@code poll-error
 * CLIENT_ID EXCEPTION} (at most once per client and exception class) and {@code closed CLIENT_ID}.
 */
public final class TelemetryProbe {
    private static final String TOPIC = "kip714-probe";
    private static final Duration POLL = Duration.ofMillis(100);
    private static final Duration INSTANCE_ID_TIMEOUT = Duration.ofSeconds(10);
    /** How long the never-polled consumer is given: it never asks, so any wait ends empty. */
    private static final Duration IDLE_INSTANCE_ID_TIMEOUT = Duration.ofSeconds(1);
    private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(10);

    private TelemetryProbe() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        long runMs = (long) (Double.parseDouble(args[1]) * 1000);
        String prefix = args[2];

        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                common(bootstrap, prefix + "-producer"),
                new ByteArraySerializer(), new ByteArraySerializer());
        Admin admin = Admin.create(admin(bootstrap, prefix + "-admin"));
        Admin adminDefault = Admin.create(common(bootstrap, prefix + "-admin-default"));
        KafkaConsumer<byte[], byte[]> idle = consumer(bootstrap, prefix + "-idle", null, null);
        KafkaConsumer<byte[], byte[]> assigned =
                consumer(bootstrap, prefix + "-assigned", null, null);
        assigned.assign(List.of(new TopicPartition(TOPIC, 0)));
        KafkaConsumer<byte[], byte[]> grouped =
                consumer(bootstrap, prefix + "-grouped", prefix + "-group", "classic");
        grouped.subscribe(List.of(TOPIC));
        KafkaConsumer<byte[], byte[]> kip848 =
                consumer(bootstrap, prefix + "-kip848", prefix + "-group-kip848", "consumer");
        kip848.subscribe(List.of(TOPIC));

        List<String> errors = new ArrayList<>();
        long deadline = System.nanoTime() + runMs * 1_000_000L;
        while (System.nanoTime() < deadline) {
            poll(assigned, prefix + "-assigned", errors);
            poll(grouped, prefix + "-grouped", errors);
            poll(kip848, prefix + "-kip848", errors);
        }

        instance(prefix + "-producer", () -> producer.clientInstanceId(INSTANCE_ID_TIMEOUT));
        instance(prefix + "-admin", () -> admin.clientInstanceId(INSTANCE_ID_TIMEOUT));
        instance(prefix + "-assigned", () -> assigned.clientInstanceId(INSTANCE_ID_TIMEOUT));
        instance(prefix + "-grouped", () -> grouped.clientInstanceId(INSTANCE_ID_TIMEOUT));
        instance(prefix + "-kip848", () -> kip848.clientInstanceId(INSTANCE_ID_TIMEOUT));
        instance(prefix + "-admin-default", () -> adminDefault.clientInstanceId(INSTANCE_ID_TIMEOUT));
        instance(prefix + "-idle", () -> idle.clientInstanceId(IDLE_INSTANCE_ID_TIMEOUT));

        producer.close(CLOSE_TIMEOUT);
        closed(prefix + "-producer");
        admin.close(CLOSE_TIMEOUT);
        closed(prefix + "-admin");
        assigned.close(CloseOptions.timeout(CLOSE_TIMEOUT));
        closed(prefix + "-assigned");
        grouped.close(CloseOptions.timeout(CLOSE_TIMEOUT));
        closed(prefix + "-grouped");
        kip848.close(CloseOptions.timeout(CLOSE_TIMEOUT));
        closed(prefix + "-kip848");
        adminDefault.close(CLOSE_TIMEOUT);
        closed(prefix + "-admin-default");
        idle.close(CloseOptions.timeout(CLOSE_TIMEOUT));
        closed(prefix + "-idle");
    }

    private static Properties common(String bootstrap, String clientId) {
        Properties properties = new Properties();
        properties.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        properties.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        properties.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        properties.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        return properties;
    }

    private static Properties admin(String bootstrap, String clientId) {
        Properties properties = common(bootstrap, clientId);
        properties.put(AdminClientConfig.ENABLE_METRICS_PUSH_CONFIG, "true");
        return properties;
    }

    private static KafkaConsumer<byte[], byte[]> consumer(
            String bootstrap, String clientId, String groupId, String groupProtocol) {
        Properties properties = common(bootstrap, clientId);
        if (groupId != null) {
            properties.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
            properties.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
        }
        return new KafkaConsumer<>(
                properties, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    private static void poll(
            KafkaConsumer<byte[], byte[]> consumer, String clientId, List<String> errors) {
        try {
            consumer.poll(POLL);
        } catch (RuntimeException error) {
            String seen = clientId + " " + error.getClass().getName();
            if (!errors.contains(seen)) {
                errors.add(seen);
                System.out.println("poll-error " + seen + ": " + error.getMessage());
                System.out.flush();
            }
        }
    }

    private interface InstanceId {
        Uuid get();
    }

    private static void instance(String clientId, InstanceId id) {
        try {
            System.out.println("instance " + clientId + " " + id.get());
        } catch (RuntimeException error) {
            System.out.println("no-instance " + clientId + " " + error.getClass().getName() + ": "
                    + error.getMessage());
        }
        System.out.flush();
    }

    private static void closed(String clientId) {
        System.out.println("closed " + clientId);
        System.out.flush();
    }
}
