package io.kip714.broker;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.StandardMBean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Moves pushes from the broker's request threads to kip714 without ever making them wait.
 *
 * <p>{@link #offer} takes a lock for a queue insert and nothing else: a full queue drops the push
 * (counted) instead of growing or blocking. One sender thread drains the queue in batches (up to
 * {@code kip714.batch.max.*}, after {@code kip714.linger.ms}), posts each batch over one keep-alive
 * HTTP/1.1 connection, and retries failures with exponential backoff until
 * {@code kip714.delivery.timeout.ms}. While it retries, new pushes queue up to the bound, so an
 * unreachable kip714 costs the broker at most the queue's memory.
 */
final class Forwarder implements ForwarderStatsMBean, AutoCloseable {
    static final String MBEAN_NAME = "kafka.server:type=kip714-forwarder";
    /** Kafka's THROTTLING_QUOTA_EXCEEDED: kip714 could not log the push now (its log is full); retry. */
    static final int THROTTLING_QUOTA_EXCEEDED = 89;

    private static final Logger LOG = LoggerFactory.getLogger(Forwarder.class);
    private static final long LOG_EVERY_NANOS = TimeUnit.SECONDS.toNanos(30);

    private final ForwarderConfig config;
    private final int brokerId;
    private final HttpClient client;
    private final Thread sender;

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final ArrayDeque<ForwardedPush> queue = new ArrayDeque<>();
    private long queuedBytes;
    private boolean closing;
    private long closeDeadlineNanos;

    private final AtomicLong received = new AtomicLong();
    private final AtomicLong forwarded = new AtomicLong();
    private final AtomicLong rejected = new AtomicLong();
    private final AtomicLong droppedQueueFull = new AtomicLong();
    private final AtomicLong droppedExpired = new AtomicLong();
    private final AtomicLong droppedAtClose = new AtomicLong();
    private final AtomicLong requests = new AtomicLong();
    private final AtomicLong failedRequests = new AtomicLong();
    private long lastWarningNanos = System.nanoTime() - LOG_EVERY_NANOS;
    private ObjectName mbean;

    Forwarder(ForwarderConfig config, int brokerId) {
        this.config = config;
        this.brokerId = brokerId;
        this.client = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofMillis(config.requestTimeoutMs))
                .build();
        this.sender = new Thread(this::run, "kip714-forwarder");
        this.sender.setDaemon(true);
    }

    /** Starts the sender thread and registers the counters in JMX. */
    void start() {
        registerMBean();
        sender.start();
        LOG.info("kip714 forwarder started: url={} broker_id={} queue.max.pushes={} queue.max.bytes={}",
                config.forwardUri, brokerId, config.queueMaxPushes, config.queueMaxBytes);
    }

    /** Queues one push; never blocks. Returns false when the push was dropped. */
    boolean offer(ForwardedPush push) {
        received.incrementAndGet();
        lock.lock();
        try {
            if (closing) {
                droppedAtClose.incrementAndGet();
                return false;
            }
            if (queue.size() < config.queueMaxPushes
                    && queuedBytes + push.payloadSize() <= config.queueMaxBytes) {
                queue.addLast(push);
                queuedBytes += push.payloadSize();
                changed.signal();
                return true;
            }
            droppedQueueFull.incrementAndGet();
        } finally {
            lock.unlock();
        }
        warn("kip714 forwarder queue full (kip714.queue.max.pushes={}, kip714.queue.max.bytes={}):"
                + " dropping pushes; {} dropped so far", config.queueMaxPushes, config.queueMaxBytes,
                getDropped());
        return false;
    }

    /**
     * Stops taking pushes, gives the queue up to {@code kip714.close.timeout.ms} to be delivered,
     * then drops (and counts) what is left and logs the final counters.
     */
    @Override
    public void close() {
        lock.lock();
        try {
            if (closing) {
                return;
            }
            closing = true;
            closeDeadlineNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.closeTimeoutMs);
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        try {
            sender.join(config.closeTimeoutMs + 1_000L);
            if (sender.isAlive()) {
                sender.interrupt();
                sender.join(1_000L);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        lock.lock();
        try {
            droppedAtClose.addAndGet(queue.size());
            queue.clear();
            queuedBytes = 0;
        } finally {
            lock.unlock();
        }
        unregisterMBean();
        LOG.info("kip714 forwarder stopped: received={} forwarded={} rejected={} dropped={}"
                        + " (queue_full={} expired={} at_close={}) requests={} failed_requests={}",
                getReceived(), getForwarded(), getRejected(), getDropped(), getDroppedQueueFull(),
                getDroppedExpired(), getDroppedAtClose(), getRequests(), getFailedRequests());
    }

    private void run() {
        try {
            List<ForwardedPush> batch;
            while ((batch = nextBatch()) != null) {
                deliver(batch);
            }
        } catch (InterruptedException e) {
            // close() gave up waiting; what is left is counted as dropped at close.
        } catch (RuntimeException | Error e) {
            LOG.error("kip714 forwarder stopped forwarding after an unexpected error", e);
            lock.lock();
            try {
                closing = true; // later pushes are counted as dropped, not queued forever
                droppedAtClose.addAndGet(queue.size());
                queue.clear();
                queuedBytes = 0;
            } finally {
                lock.unlock();
            }
        }
    }

    /** The next batch, after lingering for more pushes; null once closing and the queue is empty. */
    private List<ForwardedPush> nextBatch() throws InterruptedException {
        lock.lock();
        try {
            while (queue.isEmpty()) {
                if (closing) {
                    return null;
                }
                changed.await();
            }
            long lingerNanos = TimeUnit.MILLISECONDS.toNanos(config.lingerMs);
            while (!closing && lingerNanos > 0 && queue.size() < config.batchMaxPushes
                    && queuedBytes < config.batchMaxBytes) {
                lingerNanos = changed.awaitNanos(lingerNanos);
            }
            List<ForwardedPush> batch = new ArrayList<>();
            long bytes = 0;
            while (!queue.isEmpty() && batch.size() < config.batchMaxPushes) {
                ForwardedPush next = queue.peekFirst();
                if (!batch.isEmpty() && bytes + next.payloadSize() > config.batchMaxBytes) {
                    break;
                }
                queue.pollFirst();
                queuedBytes -= next.payloadSize();
                bytes += next.payloadSize();
                batch.add(next);
            }
            return batch;
        } finally {
            lock.unlock();
        }
    }

    /** Delivers a batch or counts every push of it as forwarded, rejected or dropped. */
    private void deliver(List<ForwardedPush> batch) throws InterruptedException {
        List<ForwardedPush> pending = new ArrayList<>(batch);
        try {
            attempt(pending);
        } catch (InterruptedException e) {
            droppedAtClose.addAndGet(pending.size());
            throw e;
        }
    }

    /** Tries until {@code batch} is empty; removes each push from it as it is counted. */
    private void attempt(List<ForwardedPush> batch) throws InterruptedException {
        int attempt = 0;
        while (!batch.isEmpty()) {
            if (expire(batch)) {
                return;
            }
            long waitMs;
            try {
                requests.incrementAndGet();
                HttpResponse<String> response = post(batch);
                int status = response.statusCode();
                if (status == 200) {
                    int[] codes = ForwardCodec.errorCodes(response.body(), batch.size());
                    if (codes == null) {
                        failedRequests.incrementAndGet();
                        rejected.addAndGet(batch.size());
                        warn("kip714 answered 200 without one error code per push; {} pushes rejected",
                                batch.size());
                        batch.clear();
                        return;
                    }
                    settle(batch, codes);
                    long throttle = ForwardCodec.throttleTimeMs(response.body());
                    waitMs = batch.isEmpty() ? throttle : Math.max(throttle, backoffMs(attempt));
                    if (waitMs > 0) {
                        sleep(waitMs);
                    }
                    attempt = batch.isEmpty() ? 0 : attempt + 1;
                    continue;
                }
                failedRequests.incrementAndGet();
                if (!retriable(status)) {
                    rejected.addAndGet(batch.size());
                    warn("kip714 refused a batch with HTTP {} ({}); {} pushes rejected", status,
                            abbreviate(response.body()), batch.size());
                    batch.clear();
                    return;
                }
                warn("kip714 answered HTTP {}; retrying {} pushes", status, batch.size());
                waitMs = Math.max(backoffMs(attempt), retryAfterMs(response));
            } catch (IOException e) {
                failedRequests.incrementAndGet();
                warn("kip714 unreachable at {} ({}); retrying {} pushes", config.forwardUri, e.toString(),
                        batch.size());
                waitMs = backoffMs(attempt);
            }
            attempt++;
            sleep(waitMs);
        }
    }

    /** Counts the answered pushes; leaves in {@code batch} only the ones kip714 asked to retry. */
    private void settle(List<ForwardedPush> batch, int[] codes) {
        List<ForwardedPush> retry = new ArrayList<>();
        for (int i = 0; i < codes.length; i++) {
            if (codes[i] == 0) {
                forwarded.incrementAndGet();
            } else if (codes[i] == THROTTLING_QUOTA_EXCEEDED) {
                retry.add(batch.get(i));
            } else {
                rejected.incrementAndGet();
                warn("kip714 rejected a push with error code {}", codes[i]);
            }
        }
        batch.clear();
        batch.addAll(retry);
    }

    /** Drops the batch if its oldest push is past the delivery timeout, or the close deadline passed. */
    private boolean expire(List<ForwardedPush> batch) {
        long now = System.nanoTime();
        long oldest = batch.get(0).acceptedNanos;
        for (ForwardedPush push : batch) {
            oldest = Math.min(oldest, push.acceptedNanos);
        }
        if (now - oldest > TimeUnit.MILLISECONDS.toNanos(config.deliveryTimeoutMs)) {
            droppedExpired.addAndGet(batch.size());
            warn("kip714 forwarder dropped {} pushes older than {} ms", batch.size(), config.deliveryTimeoutMs);
            batch.clear();
            return true;
        }
        lock.lock();
        try {
            if (closing && now - closeDeadlineNanos > 0) {
                droppedAtClose.addAndGet(batch.size());
                batch.clear();
                return true;
            }
        } finally {
            lock.unlock();
        }
        return false;
    }

    private HttpResponse<String> post(List<ForwardedPush> batch) throws IOException, InterruptedException {
        HttpRequest.Builder request = HttpRequest.newBuilder(config.forwardUri)
                .timeout(Duration.ofMillis(config.requestTimeoutMs))
                .header("Content-Type", ForwardCodec.CONTENT_TYPE)
                .POST(HttpRequest.BodyPublishers.ofByteArray(ForwardCodec.encode(brokerId, batch)));
        if (config.token != null) {
            request.header("Authorization", "Bearer " + config.token);
        }
        return client.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    /** 408, 429 and 5xx may succeed later; any other status will not. */
    static boolean retriable(int status) {
        return status == 408 || status == 429 || status >= 500;
    }

    /** Exponential backoff with ±20 % jitter, capped at {@code kip714.retry.backoff.max.ms}. */
    long backoffMs(int attempt) {
        long base = (long) config.retryBackoffMs << Math.min(attempt, 20);
        long capped = Math.min(base, config.retryBackoffMaxMs);
        double jitter = 0.8 + 0.4 * ThreadLocalRandom.current().nextDouble();
        return Math.max(1, (long) (capped * jitter));
    }

    private static long retryAfterMs(HttpResponse<String> response) {
        return response.headers().firstValue("Retry-After").map(value -> {
            try {
                return TimeUnit.SECONDS.toMillis(Long.parseLong(value.trim()));
            } catch (NumberFormatException e) {
                return 0L;
            }
        }).orElse(0L);
    }

    /** Sleeps, but wakes up at the close deadline so shutdown is never held by a backoff. */
    private void sleep(long ms) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        lock.lock();
        try {
            long left;
            while ((left = deadline - System.nanoTime()) > 0) {
                if (closing) {
                    long toClose = closeDeadlineNanos - System.nanoTime();
                    if (toClose <= 0) {
                        return;
                    }
                    left = Math.min(left, toClose);
                }
                changed.awaitNanos(left);
            }
        } finally {
            lock.unlock();
        }
    }

    /** Logs at most one warning per 30 s, so an outage cannot flood the broker's log. */
    private void warn(String format, Object... arguments) {
        long now = System.nanoTime();
        synchronized (this) {
            if (now - lastWarningNanos < LOG_EVERY_NANOS) {
                return;
            }
            lastWarningNanos = now;
        }
        LOG.warn(format, arguments);
    }

    private static String abbreviate(String body) {
        String flat = body == null ? "" : body.replaceAll("\\s+", " ").trim();
        return flat.length() > 200 ? flat.substring(0, 200) + "…" : flat;
    }

    private void registerMBean() {
        try {
            MBeanServer server = ManagementFactory.getPlatformMBeanServer();
            ObjectName name = new ObjectName(MBEAN_NAME);
            if (server.isRegistered(name)) {
                LOG.warn("{} is already registered (a second kip714 reporter?); its counters stay unregistered",
                        MBEAN_NAME);
                return;
            }
            server.registerMBean(new StandardMBean(this, ForwarderStatsMBean.class), name);
            mbean = name;
        } catch (JMException e) {
            LOG.warn("cannot register {}: {}", MBEAN_NAME, e.toString());
        }
    }

    private void unregisterMBean() {
        if (mbean == null) {
            return;
        }
        try {
            ManagementFactory.getPlatformMBeanServer().unregisterMBean(mbean);
        } catch (JMException e) {
            LOG.warn("cannot unregister {}: {}", MBEAN_NAME, e.toString());
        }
        mbean = null;
    }

    @Override
    public long getReceived() {
        return received.get();
    }

    @Override
    public long getForwarded() {
        return forwarded.get();
    }

    @Override
    public long getRejected() {
        return rejected.get();
    }

    @Override
    public long getDropped() {
        return droppedQueueFull.get() + droppedExpired.get() + droppedAtClose.get();
    }

    @Override
    public long getDroppedQueueFull() {
        return droppedQueueFull.get();
    }

    @Override
    public long getDroppedExpired() {
        return droppedExpired.get();
    }

    @Override
    public long getDroppedAtClose() {
        return droppedAtClose.get();
    }

    @Override
    public long getRequests() {
        return requests.get();
    }

    @Override
    public long getFailedRequests() {
        return failedRequests.get();
    }

    @Override
    public long getQueuedPushes() {
        lock.lock();
        try {
            return queue.size();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public long getQueuedBytes() {
        lock.lock();
        try {
            return queuedBytes;
        } finally {
            lock.unlock();
        }
    }
}
