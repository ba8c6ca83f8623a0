package io.kip714.broker;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The forward request's binary framing and the reply's per-push error codes (docs/plugin.md).
 *
 * <p>Big-endian, as Kafka's own protocol:
 * <pre>
 * request := version:int8(=1) broker_id:int32 count:int32 push[count]
 * push    := client_instance_id:16 bytes  flags:int8 (0x01 terminating)
 *            push_interval_ms:int32 (-1 unknown)  received_time_ms:int64  source_port:int32 (-1 unknown)
 *            7 x string: client_id software_name software_version source_address principal listener content_type
 *            payload_length:int32  payload
 * string  := length:int16 (-1 = null)  UTF-8 bytes
 * </pre>
 * The reply is JSON: {@code {"error_codes":[0, 89, ...], "throttle_time_ms": 0}}, one Kafka error
 * code per push, in request order.
 */
final class ForwardCodec {
    static final byte VERSION = 1;
    static final String CONTENT_TYPE = "application/x-kip714-forward";
    static final int FLAG_TERMINATING = 0x01;

    private static final Pattern ERROR_CODES = Pattern.compile("\"error_codes\"\\s*:\\s*\\[([^\\]]*)\\]");
    private static final Pattern THROTTLE = Pattern.compile("\"throttle_time_ms\"\\s*:\\s*(\\d+)");

    private ForwardCodec() {
    }

    static byte[] encode(int brokerId, List<ForwardedPush> pushes) {
        int size = 9;
        for (ForwardedPush push : pushes) {
            size += 64 + push.payloadSize();
        }
        ByteArrayOutputStream buffer = new ByteArrayOutputStream(size);
        try (DataOutputStream out = new DataOutputStream(buffer)) {
            out.writeByte(VERSION);
            out.writeInt(brokerId);
            out.writeInt(pushes.size());
            for (ForwardedPush push : pushes) {
                out.writeLong(push.instanceMsb);
                out.writeLong(push.instanceLsb);
                out.writeByte(push.terminating ? FLAG_TERMINATING : 0);
                out.writeInt(push.pushIntervalMs);
                out.writeLong(push.receivedTimeMs);
                out.writeInt(push.sourcePort);
                writeString(out, push.clientId);
                writeString(out, push.softwareName);
                writeString(out, push.softwareVersion);
                writeString(out, push.sourceAddress);
                writeString(out, push.principal);
                writeString(out, push.listener);
                writeString(out, push.contentType);
                out.writeInt(push.payload.length);
                out.write(push.payload);
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e); // a ByteArrayOutputStream does not fail
        }
        return buffer.toByteArray();
    }

    private static void writeString(DataOutputStream out, String value) throws IOException {
        if (value == null) {
            out.writeShort(-1);
            return;
        }
        // Kafka bounds these by its own int16 strings; anything longer is cut, not refused.
        byte[] bytes = truncateUtf8(value.getBytes(StandardCharsets.UTF_8), Short.MAX_VALUE);
        out.writeShort(bytes.length);
        out.write(bytes);
    }

    /**
     * The longest prefix of {@code utf8} of at most {@code max} bytes that ends between two
     * characters, so that kip714, which refuses invalid UTF-8, still reads the cut string.
     */
    static byte[] truncateUtf8(byte[] utf8, int max) {
        if (utf8.length <= max) {
            return utf8;
        }
        int end = max;
        // A UTF-8 continuation byte is 10xxxxxx: cutting before one would split its character.
        while (end > 0 && (utf8[end] & 0xC0) == 0x80) {
            end--;
        }
        return Arrays.copyOf(utf8, end);
    }

    /** The per-push error codes of a 200 reply, or null when the reply does not hold exactly {@code count}. */
    static int[] errorCodes(String body, int count) {
        Matcher matcher = ERROR_CODES.matcher(body);
        if (!matcher.find()) {
            return null;
        }
        String list = matcher.group(1).trim();
        String[] items = list.isEmpty() ? new String[0] : list.split(",");
        if (items.length != count) {
            return null;
        }
        int[] codes = new int[count];
        try {
            for (int i = 0; i < count; i++) {
                codes[i] = Integer.parseInt(items[i].trim());
            }
        } catch (NumberFormatException e) {
            return null;
        }
        return codes;
    }

    /** The reply's {@code throttle_time_ms}, 0 when absent. */
    static long throttleTimeMs(String body) {
        Matcher matcher = THROTTLE.matcher(body);
        if (!matcher.find()) {
            return 0;
        }
        try {
            return Long.parseLong(matcher.group(1));
        } catch (NumberFormatException e) {
            return 0;
        }
    }
}
