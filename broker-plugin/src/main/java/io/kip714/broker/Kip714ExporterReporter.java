package io.kip714.broker;

import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;

/**
 * {@link Kip714Reporter} through KIP-1217's {@code ClientTelemetryExporter} (Kafka 4.2+), which
 * also tells the plugin each client's push interval.
 *
 * <p>A broker prefers the exporter when a reporter offers both, so each push is forwarded once. The
 * class is separate because a class implementing an interface the broker lacks cannot load: a 3.7
 * to 4.1 broker is configured with {@link Kip714Reporter} and never touches this one.
 */
@SuppressWarnings({"deprecation", "removal"}) // inherits ClientTelemetry from Kip714Reporter
public class Kip714ExporterReporter extends Kip714Reporter implements ClientTelemetryExporterProvider {
    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return (context, payload) ->
                forward(context.authorizableRequestContext(), payload, context.pushIntervalMs());
    }
}
