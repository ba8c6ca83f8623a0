package io.kip714.broker;

import java.net.URI;
import java.net.URISyntaxException;
import java.util.Map;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Range;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.types.Password;

/**
 * The plugin's broker properties ({@code kip714.*} in server.properties), validated with Kafka's
 * own {@link ConfigDef} so a typo stops the broker at start instead of silently dropping data.
 */
public final class ForwarderConfig {
    public static final String URL = "kip714.url";
    public static final String TOKEN = "kip714.token";
    public static final String QUEUE_MAX_PUSHES = "kip714.queue.max.pushes";
    public static final String QUEUE_MAX_BYTES = "kip714.queue.max.bytes";
    public static final String BATCH_MAX_PUSHES = "kip714.batch.max.pushes";
    public static final String BATCH_MAX_BYTES = "kip714.batch.max.bytes";
    public static final String LINGER_MS = "kip714.linger.ms";
    public static final String REQUEST_TIMEOUT_MS = "kip714.request.timeout.ms";
    public static final String RETRY_BACKOFF_MS = "kip714.retry.backoff.ms";
    public static final String RETRY_BACKOFF_MAX_MS = "kip714.retry.backoff.max.ms";
    public static final String DELIVERY_TIMEOUT_MS = "kip714.delivery.timeout.ms";
    public static final String CLOSE_TIMEOUT_MS = "kip714.close.timeout.ms";

    /** The path kip714 serves forwarded pushes on, below {@code kip714.url}. */
    public static final String FORWARD_PATH = "/v1/telemetry/forward";

    static final ConfigDef DEFINITION = new ConfigDef()
            .define(URL, Type.STRING, ConfigDef.NO_DEFAULT_VALUE, new ConfigDef.NonEmptyString(),
                    Importance.HIGH, "Base URL of kip714's HTTP listener, e.g. http://kip714.internal:8714;"
                            + " pushes are posted to <url>" + FORWARD_PATH + ".")
            .define(TOKEN, Type.PASSWORD, null, Importance.HIGH,
                    "Bearer token kip714 expects (its forward.token); unset sends no Authorization header.")
            .define(QUEUE_MAX_PUSHES, Type.INT, 10_000, Range.atLeast(1), Importance.MEDIUM,
                    "Most pushes waiting to be forwarded; a push beyond it is dropped and counted.")
            .define(QUEUE_MAX_BYTES, Type.LONG, 64L * 1024 * 1024, Range.atLeast(1), Importance.MEDIUM,
                    "Most payload bytes waiting to be forwarded; a push beyond it is dropped and counted.")
            .define(BATCH_MAX_PUSHES, Type.INT, 500, Range.atLeast(1), Importance.LOW,
                    "Most pushes in one HTTP request.")
            .define(BATCH_MAX_BYTES, Type.INT, 4 * 1024 * 1024, Range.atLeast(1), Importance.LOW,
                    "Most payload bytes in one HTTP request (a larger single push goes alone).")
            .define(LINGER_MS, Type.INT, 100, Range.atLeast(0), Importance.LOW,
                    "How long a batch waits for more pushes before it is sent.")
            .define(REQUEST_TIMEOUT_MS, Type.INT, 10_000, Range.atLeast(1), Importance.LOW,
                    "Connect and response timeout of one HTTP request.")
            .define(RETRY_BACKOFF_MS, Type.INT, 100, Range.atLeast(1), Importance.LOW,
                    "First wait before a failed request is retried; doubles per attempt.")
            .define(RETRY_BACKOFF_MAX_MS, Type.INT, 5_000, Range.atLeast(1), Importance.LOW,
                    "Longest wait between retries.")
            .define(DELIVERY_TIMEOUT_MS, Type.INT, 120_000, Range.atLeast(1), Importance.LOW,
                    "A push not delivered this long after the broker accepted it is dropped and counted.")
            .define(CLOSE_TIMEOUT_MS, Type.INT, 5_000, Range.atLeast(0), Importance.LOW,
                    "How long broker shutdown waits for queued pushes to be delivered.");

    final URI forwardUri;
    final String token;
    final int queueMaxPushes;
    final long queueMaxBytes;
    final int batchMaxPushes;
    final int batchMaxBytes;
    final int lingerMs;
    final int requestTimeoutMs;
    final int retryBackoffMs;
    final int retryBackoffMaxMs;
    final int deliveryTimeoutMs;
    final int closeTimeoutMs;

    private ForwarderConfig(AbstractConfig config) {
        forwardUri = forwardUri(config.getString(URL));
        Password password = config.getPassword(TOKEN);
        token = password == null || password.value().isEmpty() ? null : password.value();
        queueMaxPushes = config.getInt(QUEUE_MAX_PUSHES);
        queueMaxBytes = config.getLong(QUEUE_MAX_BYTES);
        batchMaxPushes = config.getInt(BATCH_MAX_PUSHES);
        batchMaxBytes = config.getInt(BATCH_MAX_BYTES);
        lingerMs = config.getInt(LINGER_MS);
        requestTimeoutMs = config.getInt(REQUEST_TIMEOUT_MS);
        retryBackoffMs = config.getInt(RETRY_BACKOFF_MS);
        retryBackoffMaxMs = Math.max(retryBackoffMs, config.getInt(RETRY_BACKOFF_MAX_MS));
        deliveryTimeoutMs = config.getInt(DELIVERY_TIMEOUT_MS);
        closeTimeoutMs = config.getInt(CLOSE_TIMEOUT_MS);
    }

    /**
     * Reads the {@code kip714.*} keys out of the broker's configuration (other keys are ignored).
     *
     * @throws ConfigException a key is missing or invalid
     */
    public static ForwarderConfig parse(Map<String, ?> brokerConfigs) {
        return new ForwarderConfig(new AbstractConfig(DEFINITION, brokerConfigs, false));
    }

    /** The broker's node id ({@code node.id}, or {@code broker.id} on ZooKeeper brokers), -1 if neither. */
    static int brokerId(Map<String, ?> brokerConfigs) {
        for (String key : new String[] {"node.id", "broker.id"}) {
            Object value = brokerConfigs.get(key);
            if (value != null) {
                try {
                    return Integer.parseInt(value.toString().trim());
                } catch (NumberFormatException e) {
                    throw new ConfigException(key, value, "not an integer");
                }
            }
        }
        return -1;
    }

    private static URI forwardUri(String base) {
        String trimmed = base.endsWith("/") ? base.substring(0, base.length() - 1) : base;
        URI uri;
        try {
            uri = new URI(trimmed + FORWARD_PATH);
        } catch (URISyntaxException e) {
            throw new ConfigException(URL, base, e.getMessage());
        }
        if (!"http".equals(uri.getScheme()) && !"https".equals(uri.getScheme()) || uri.getHost() == null) {
            throw new ConfigException(URL, base, "expected an http:// or https:// URL with a host");
        }
        return uri;
    }
}
