package io.kip714.broker;

import java.net.InetAddress;
import java.nio.ByteBuffer;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.network.ClientInformation;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

/**
 * One accepted push with what the broker knew about its client, copied out of the request so the
 * broker's buffers are free as soon as {@code exportMetrics} returns.
 */
final class ForwardedPush {
    static final int UNKNOWN = -1;

    final long instanceMsb;
    final long instanceLsb;
    final boolean terminating;
    final int pushIntervalMs;
    final long receivedTimeMs;
    final int sourcePort;
    final String clientId;
    final String softwareName;
    final String softwareVersion;
    final String sourceAddress;
    final String principal;
    final String listener;
    final String contentType;
    final byte[] payload;
    /** {@link System#nanoTime()} when the broker handed the push over: the delivery deadline counts from it. */
    final long acceptedNanos;

    ForwardedPush(long instanceMsb, long instanceLsb, boolean terminating, int pushIntervalMs,
            long receivedTimeMs, int sourcePort, String clientId, String softwareName,
            String softwareVersion, String sourceAddress, String principal, String listener,
            String contentType, byte[] payload, long acceptedNanos) {
        this.instanceMsb = instanceMsb;
        this.instanceLsb = instanceLsb;
        this.terminating = terminating;
        this.pushIntervalMs = pushIntervalMs;
        this.receivedTimeMs = receivedTimeMs;
        this.sourcePort = sourcePort;
        this.clientId = clientId;
        this.softwareName = softwareName;
        this.softwareVersion = softwareVersion;
        this.sourceAddress = sourceAddress;
        this.principal = principal;
        this.listener = listener;
        this.contentType = contentType;
        this.payload = payload;
        this.acceptedNanos = acceptedNanos;
    }

    /**
     * The push as the broker's {@code ClientTelemetryExporterPlugin} hands it over.
     *
     * <p>{@code RequestContext} (the class every Kafka broker passes) also carries the client's
     * ApiVersions software name and version and its connection id
     * ({@code localHost:localPort-remoteHost:remotePort-index}), which holds the source port.
     */
    static ForwardedPush of(AuthorizableRequestContext context, ClientTelemetryPayload payload,
            int pushIntervalMs) {
        Uuid id = payload.clientInstanceId();
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        String softwareName = null;
        String softwareVersion = null;
        int port = UNKNOWN;
        if (context instanceof RequestContext) {
            RequestContext request = (RequestContext) context;
            ClientInformation info = request.clientInformation;
            if (info != null) {
                softwareName = known(info.softwareName());
                softwareVersion = known(info.softwareVersion());
            }
            port = remotePort(request.connectionId);
        }
        InetAddress address = context.clientAddress();
        return new ForwardedPush(
                id.getMostSignificantBits(),
                id.getLeastSignificantBits(),
                payload.isTerminating(),
                pushIntervalMs,
                System.currentTimeMillis(),
                port,
                context.clientId(),
                softwareName,
                softwareVersion,
                address == null ? null : address.getHostAddress(),
                context.principal() == null ? null : context.principal().toString(),
                context.listenerName(),
                payload.contentType(),
                bytes,
                System.nanoTime());
    }

    int payloadSize() {
        return payload.length;
    }

    private static String known(String value) {
        return value == null || value.isEmpty() || ClientInformation.UNKNOWN_NAME_OR_VERSION.equals(value)
                ? null : value;
    }

    /** The remote port of a Kafka connection id; IPv6 hosts hold ':' but never '-'. */
    static int remotePort(String connectionId) {
        if (connectionId == null) {
            return UNKNOWN;
        }
        String[] parts = connectionId.split("-");
        if (parts.length < 2) {
            return UNKNOWN;
        }
        String remote = parts[1];
        int colon = remote.lastIndexOf(':');
        if (colon < 0) {
            return UNKNOWN;
        }
        try {
            int port = Integer.parseInt(remote.substring(colon + 1));
            return port >= 0 && port <= 65535 ? port : UNKNOWN;
        } catch (NumberFormatException e) {
            return UNKNOWN;
        }
    }
}
