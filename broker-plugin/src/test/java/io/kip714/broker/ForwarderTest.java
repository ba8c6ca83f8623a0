package io.kip714.broker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The forwarder against a real HTTP server on 127.0.0.1 (the JDK's own). */
class ForwarderTest {
    private HttpServer server;
    private final ConcurrentLinkedQueue<Request> requests = new ConcurrentLinkedQueue<>();
    private final List<Forwarder> forwarders = new ArrayList<>();

    /** One request as the server saw it. */
    static final class Request {
        final String authorization;
        final int brokerId;
        final List<String> clientIds = new ArrayList<>();
        final List<byte[]> payloads = new ArrayList<>();

        Request(String authorization, byte[] body) throws IOException {
            this.authorization = authorization;
            DataInputStream in = new DataInputStream(new ByteArrayInputStream(body));
            assertEquals(ForwardCodec.VERSION, in.readByte());
            brokerId = in.readInt();
            int count = in.readInt();
            for (int i = 0; i < count; i++) {
                in.readLong();
                in.readLong();
                in.readByte();
                in.readInt();
                in.readLong();
                in.readInt();
                clientIds.add(readString(in));
                for (int s = 0; s < 6; s++) {
                    readString(in);
                }
                byte[] payload = new byte[in.readInt()];
                in.readFully(payload);
                payloads.add(payload);
            }
            assertEquals(-1, in.read(), "nothing after the last push");
        }

        int size() {
            return payloads.size();
        }
    }

    static String readString(DataInputStream in) throws IOException {
        short length = in.readShort();
        if (length < 0) {
            return null;
        }
        byte[] bytes = new byte[length];
        in.readFully(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** Starts a server whose reply to the n-th request (from 0) {@code reply} decides: status and body. */
    private int serve(Function<Request, Object[]> reply) throws IOException {
        server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.createContext(ForwarderConfig.FORWARD_PATH, exchange -> {
            byte[] body;
            try (InputStream in = exchange.getRequestBody()) {
                body = in.readAllBytes();
            }
            Request request = new Request(exchange.getRequestHeaders().getFirst("Authorization"), body);
            requests.add(request);
            Object[] answer = reply.apply(request);
            byte[] out = ((String) answer[1]).getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders((Integer) answer[0], out.length);
            try (OutputStream os = exchange.getResponseBody()) {
                os.write(out);
            }
        });
        server.start();
        return server.getAddress().getPort();
    }

    static Object[] allOk(Request request) {
        return new Object[] {200, codes(Collections.nCopies(request.size(), 0))};
    }

    static String codes(List<Integer> codes) {
        StringBuilder json = new StringBuilder("{\"error_codes\":[");
        for (int i = 0; i < codes.size(); i++) {
            json.append(i == 0 ? "" : ",").append(codes.get(i));
        }
        return json.append("],\"throttle_time_ms\":0}").toString();
    }

    private Forwarder forwarder(int port, Map<String, Object> overrides) {
        Map<String, Object> configs = new HashMap<>();
        configs.put(ForwarderConfig.URL, "http://127.0.0.1:" + port);
        configs.put(ForwarderConfig.TOKEN, "s3cret");
        configs.put(ForwarderConfig.RETRY_BACKOFF_MS, "10");
        configs.put(ForwarderConfig.RETRY_BACKOFF_MAX_MS, "50");
        configs.put(ForwarderConfig.LINGER_MS, "0");
        configs.put("node.id", "7");
        configs.putAll(overrides);
        Forwarder forwarder = new Forwarder(ForwarderConfig.parse(configs), ForwarderConfig.brokerId(configs));
        forwarders.add(forwarder);
        forwarder.start();
        return forwarder;
    }

    static ForwardedPush push(int i) {
        return new ForwardedPush(1L, i, false, 1000, System.currentTimeMillis(), 40000 + i, "client-" + i,
                "apache-kafka-java", "4.4.0", "127.0.0.1", "User:ANONYMOUS", "PLAINTEXT", "OTLP",
                new byte[] {(byte) i, 1, 2}, System.nanoTime());
    }

    static void await(BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "condition not met within 20 s");
            Thread.sleep(5);
        }
    }

    static int closedPort() throws IOException {
        try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return socket.getLocalPort();
        }
    }

    @AfterEach
    void tearDown() {
        forwarders.forEach(Forwarder::close);
        if (server != null) {
            server.stop(0);
        }
    }

    @Test
    void pushesQueuedTogetherGoInOneRequestWithTheBrokerIdAndToken() throws Exception {
        int port = serve(ForwarderTest::allOk);
        Map<String, Object> overrides = new HashMap<>();
        overrides.put(ForwarderConfig.LINGER_MS, "60000"); // only a full batch leaves before close
        overrides.put(ForwarderConfig.BATCH_MAX_PUSHES, "5");
        Forwarder forwarder = forwarder(port, overrides);
        for (int i = 0; i < 10; i++) {
            assertTrue(forwarder.offer(push(i)));
        }
        await(() -> forwarder.getForwarded() == 10);
        assertEquals(2, requests.size());
        for (Request request : requests) {
            assertEquals(5, request.size());
            assertEquals(7, request.brokerId);
            assertEquals("Bearer s3cret", request.authorization);
        }
        List<String> clientIds = new ArrayList<>();
        requests.forEach(r -> clientIds.addAll(r.clientIds));
        assertEquals(List.of("client-0", "client-1", "client-2", "client-3", "client-4", "client-5",
                "client-6", "client-7", "client-8", "client-9"), clientIds, "queue order is kept");
    }

    @Test
    void batchBytesBoundSplitsRequestsButALargerPushStillGoesAlone() throws Exception {
        int port = serve(ForwarderTest::allOk);
        Map<String, Object> overrides = new HashMap<>();
        overrides.put(ForwarderConfig.LINGER_MS, "60000");
        overrides.put(ForwarderConfig.BATCH_MAX_BYTES, "2");
        Forwarder forwarder = forwarder(port, overrides);
        forwarder.offer(push(0)); // 3 payload bytes > batch.max.bytes
        await(() -> forwarder.getForwarded() == 1);
        assertEquals(1, requests.size());
    }

    @Test
    void serverErrorsAreRetriedWithBackoffUntilAccepted() throws Exception {
        int[] calls = {0};
        int port = serve(request -> calls[0]++ < 2 ? new Object[] {503, "busy"} : allOk(request));
        Forwarder forwarder = forwarder(port, new HashMap<>());
        forwarder.offer(push(1));
        await(() -> forwarder.getForwarded() == 1);
        assertEquals(3, requests.size());
        assertEquals(2, forwarder.getFailedRequests());
        assertEquals(0, forwarder.getDropped());
    }

    @Test
    void perPushErrorCodesRetryOnlyThrottledPushesAndRejectTheRest() throws Exception {
        int[] calls = {0};
        int port = serve(request -> calls[0]++ == 0
                ? new Object[] {200, codes(List.of(0, 89, 42))}
                : allOk(request));
        Map<String, Object> overrides = new HashMap<>();
        overrides.put(ForwarderConfig.LINGER_MS, "60000");
        overrides.put(ForwarderConfig.BATCH_MAX_PUSHES, "3");
        Forwarder forwarder = forwarder(port, overrides);
        for (int i = 0; i < 3; i++) {
            forwarder.offer(push(i));
        }
        await(() -> forwarder.getForwarded() == 2);
        assertEquals(1, forwarder.getRejected());
        List<Request> seen = new ArrayList<>(requests);
        assertEquals(2, seen.size());
        assertEquals(List.of("client-1"), seen.get(1).clientIds, "only the throttled push is sent again");
    }

    @Test
    void anUnauthorizedBatchIsRejectedNotRetried() throws Exception {
        int port = serve(request -> new Object[] {401, "{\"error\":\"bad token\"}"});
        Forwarder forwarder = forwarder(port, new HashMap<>());
        forwarder.offer(push(1));
        await(() -> forwarder.getRejected() == 1);
        Thread.sleep(100);
        assertEquals(1, requests.size());
        assertEquals(0, forwarder.getForwarded());
    }

    @Test
    void anUnreachableServerFillsTheQueueAndFurtherPushesAreDroppedAndCounted() throws Exception {
        Map<String, Object> overrides = new HashMap<>();
        overrides.put(ForwarderConfig.QUEUE_MAX_PUSHES, "5");
        overrides.put(ForwarderConfig.CLOSE_TIMEOUT_MS, "100");
        Forwarder forwarder = forwarder(closedPort(), overrides);
        int accepted = 0;
        for (int i = 0; i < 100; i++) {
            accepted += forwarder.offer(push(i)) ? 1 : 0;
        }
        // At most the queue bound plus the batch the sender holds (which it took from a full queue).
        assertTrue(accepted >= 5 && accepted <= 2 * 5, "accepted " + accepted);
        assertEquals(100 - accepted, forwarder.getDroppedQueueFull());
        assertTrue(forwarder.getQueuedPushes() <= 5);
        forwarder.close();
        assertEquals(100, forwarder.getReceived());
        assertEquals(0, forwarder.getForwarded());
        assertEquals(100, forwarder.getDropped(), "every push is accounted for");
        assertEquals(accepted, forwarder.getDroppedAtClose());
        assertFalse(forwarder.offer(push(101)), "a closed forwarder takes nothing");
    }

    @Test
    void theQueueByteBoundDropsTooLargeBacklogs() throws Exception {
        Map<String, Object> overrides = new HashMap<>();
        overrides.put(ForwarderConfig.QUEUE_MAX_BYTES, "7"); // two 3-byte payloads fit, a third does not
        overrides.put(ForwarderConfig.CLOSE_TIMEOUT_MS, "0");
        overrides.put(ForwarderConfig.LINGER_MS, "60000");
        Forwarder forwarder = forwarder(closedPort(), overrides);
        assertTrue(forwarder.offer(push(0)));
        assertTrue(forwarder.offer(push(1)));
        assertFalse(forwarder.offer(push(2)));
        assertEquals(6, forwarder.getQueuedBytes());
        assertEquals(1, forwarder.getDroppedQueueFull());
    }

    @Test
    void pushesOlderThanTheDeliveryTimeoutAreDroppedAsExpired() throws Exception {
        Map<String, Object> overrides = new HashMap<>();
        overrides.put(ForwarderConfig.DELIVERY_TIMEOUT_MS, "200");
        Forwarder forwarder = forwarder(closedPort(), overrides);
        forwarder.offer(push(1));
        await(() -> forwarder.getDroppedExpired() == 1);
        assertTrue(forwarder.getFailedRequests() >= 1);
    }

    @Test
    void closeDeliversWhatIsQueuedWhenTheServerIsUp() throws Exception {
        int port = serve(ForwarderTest::allOk);
        Map<String, Object> overrides = new HashMap<>();
        overrides.put(ForwarderConfig.LINGER_MS, "60000"); // nothing leaves before close
        Forwarder forwarder = forwarder(port, overrides);
        for (int i = 0; i < 3; i++) {
            forwarder.offer(push(i));
        }
        forwarder.close();
        assertEquals(3, forwarder.getForwarded());
        assertEquals(0, forwarder.getDropped());
    }

    @Test
    void theCountersAreInJmxWhileTheForwarderRuns() throws Exception {
        Forwarder forwarder = forwarder(closedPort(), new HashMap<>());
        forwarder.offer(push(1));
        javax.management.ObjectName name = new javax.management.ObjectName(Forwarder.MBEAN_NAME);
        javax.management.MBeanServer jmx = java.lang.management.ManagementFactory.getPlatformMBeanServer();
        assertEquals(1L, jmx.getAttribute(name, "Received"));
        forwarder.close();
        assertFalse(jmx.isRegistered(name));
    }

    @Test
    void backoffDoublesWithJitterUpToTheCap() {
        Map<String, Object> configs = new HashMap<>();
        configs.put(ForwarderConfig.URL, "http://127.0.0.1:1");
        configs.put(ForwarderConfig.RETRY_BACKOFF_MS, "100");
        configs.put(ForwarderConfig.RETRY_BACKOFF_MAX_MS, "1000");
        Forwarder forwarder = new Forwarder(ForwarderConfig.parse(configs), 1);
        for (int i = 0; i < 50; i++) {
            long first = forwarder.backoffMs(0);
            long third = forwarder.backoffMs(2);
            long late = forwarder.backoffMs(40);
            assertTrue(first >= 80 && first <= 120, "attempt 0: " + first);
            assertTrue(third >= 320 && third <= 480, "attempt 2: " + third);
            assertTrue(late >= 800 && late <= 1200, "capped: " + late);
        }
    }

    @Test
    void configRefusesAMissingOrBadUrl() {
        assertThrowsConfig(new HashMap<>());
        Map<String, Object> configs = new HashMap<>();
        configs.put(ForwarderConfig.URL, "ftp://host");
        assertThrowsConfig(configs);
        configs.put(ForwarderConfig.URL, "http://host:8714/");
        assertEquals("http://host:8714/v1/telemetry/forward", ForwarderConfig.parse(configs).forwardUri.toString());
        assertNull(ForwarderConfig.parse(configs).token);
        configs.put("node.id", "x");
        assertThrowsConfig(configs, true);
    }

    private static void assertThrowsConfig(Map<String, Object> configs) {
        assertThrowsConfig(configs, false);
    }

    private static void assertThrowsConfig(Map<String, Object> configs, boolean brokerId) {
        try {
            if (brokerId) {
                ForwarderConfig.brokerId(configs);
            } else {
                ForwarderConfig.parse(configs);
            }
        } catch (ConfigException expected) {
            return;
        }
        throw new AssertionError("expected a ConfigException for " + configs);
    }

    @Test
    void remotePortComesFromKafkasConnectionId() {
        assertEquals(54321, ForwardedPush.remotePort("127.0.0.1:9092-127.0.0.1:54321-0"));
        assertEquals(40000, ForwardedPush.remotePort("0:0:0:0:0:0:0:1:9092-0:0:0:0:0:0:0:1:40000-3"));
        assertEquals(ForwardedPush.UNKNOWN, ForwardedPush.remotePort("garbage"));
        assertEquals(ForwardedPush.UNKNOWN, ForwardedPush.remotePort(null));
    }

    @Test
    void replyParsingNeedsOneCodePerPush() {
        assertArrayEquals(new int[] {0, 89}, ForwardCodec.errorCodes("{\"error_codes\": [0, 89]}", 2));
        assertNull(ForwardCodec.errorCodes("{\"error_codes\": [0]}", 2));
        assertNull(ForwardCodec.errorCodes("{}", 1));
        assertEquals(250, ForwardCodec.throttleTimeMs("{\"throttle_time_ms\": 250}"));
    }
}
