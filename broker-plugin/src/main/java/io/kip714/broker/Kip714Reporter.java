package io.kip714.broker;

import java.util.List;
import java.util.Map;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetry;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.server.telemetry.ClientTelemetryReceiver;

/**
 * Forwards every client-telemetry push the broker accepts to kip714; for any broker from Kafka 3.7.
 *
 * <p>Load it with {@code metric.reporters=io.kip714.broker.Kip714Reporter} and
 * {@code kip714.url=http://HOST:8714}. A broker that has a {@link ClientTelemetry} reporter
 * advertises GetTelemetrySubscriptions and PushTelemetry (KIP-714), applies its client-metrics
 * subscriptions and push rules, and hands each accepted, decompressed push to
 * {@link ClientTelemetryReceiver#exportMetrics}. On Kafka 4.2+ use {@link Kip714ExporterReporter},
 * which also forwards the push interval (KIP-1217).
 *
 * <p>The reporter ignores the broker's own metrics: {@code metric.reporters} is just the hook
 * Kafka offers telemetry plugins.
 */
// ClientTelemetry/ClientTelemetryReceiver: deprecated for removal by KIP-1217, the only API before 4.2
@SuppressWarnings({"deprecation", "removal"})
public class Kip714Reporter implements MetricsReporter, ClientTelemetry {
    private volatile Forwarder forwarder;

    @Override
    public void configure(Map<String, ?> configs) {
        ForwarderConfig config = ForwarderConfig.parse(configs);
        Forwarder started = new Forwarder(config, ForwarderConfig.brokerId(configs));
        started.start();
        forwarder = started;
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
    }

    @Override
    public void metricChange(KafkaMetric metric) {
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
    }

    @Override
    public void close() {
        Forwarder current = forwarder;
        if (current != null) {
            current.close();
        }
    }

    @Override
    public ClientTelemetryReceiver clientReceiver() {
        return (context, payload) -> forward(context, payload, ForwardedPush.UNKNOWN);
    }

    /**
     * Queues the push for kip714; runs on the broker's request thread, so it only copies and queues.
     * A push before {@link #configure} (which the broker never does) is dropped.
     */
    protected final void forward(AuthorizableRequestContext context, ClientTelemetryPayload payload,
            int pushIntervalMs) {
        Forwarder current = forwarder;
        if (current != null) {
            current.offer(ForwardedPush.of(context, payload, pushIntervalMs));
        }
    }

    /** The live counters (also in JMX as {@code kafka.server:type=kip714-forwarder}). */
    public ForwarderStatsMBean stats() {
        return forwarder;
    }
}
