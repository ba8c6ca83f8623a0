package io.kip714.broker;

/** The forwarder's counters as the broker's JMX shows them ({@code kafka.server:type=kip714-forwarder}). */
public interface ForwarderStatsMBean {
    /** Pushes the broker handed to the plugin. */
    long getReceived();

    /** Pushes kip714 acknowledged (logged durably). */
    long getForwarded();

    /** Pushes kip714 refused for good (bad token, malformed, too large). */
    long getRejected();

    /** All pushes dropped without an acknowledgement: the sum of the three reasons below. */
    long getDropped();

    /** Dropped because the queue was at {@code kip714.queue.max.pushes} or {@code kip714.queue.max.bytes}. */
    long getDroppedQueueFull();

    /** Dropped because they were not delivered within {@code kip714.delivery.timeout.ms}. */
    long getDroppedExpired();

    /** Dropped because the broker shut down before they were delivered. */
    long getDroppedAtClose();

    /** HTTP requests sent, successful or not. */
    long getRequests();

    /** HTTP requests that failed (connection error, timeout, non-200) and were retried or given up. */
    long getFailedRequests();

    /** Pushes waiting in the queue now. */
    long getQueuedPushes();

    /** Payload bytes waiting in the queue now. */
    long getQueuedBytes();
}
