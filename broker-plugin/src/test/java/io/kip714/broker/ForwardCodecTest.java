package io.kip714.broker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The request framing's strings: cut to Kafka's int16 bound, never inside a character. */
class ForwardCodecTest {
    private static final int MAX = Short.MAX_VALUE;

    /** Decodes strictly, as kip714 does: a split character is an error, not a U+FFFD. */
    private static String strictUtf8(byte[] bytes) throws CharacterCodingException {
        return StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(bytes))
                .toString();
    }

    @Test
    void aStringWithinTheBoundIsKeptWhole() {
        byte[] bytes = "User:ålice €".getBytes(StandardCharsets.UTF_8);
        assertSame(bytes, ForwardCodec.truncateUtf8(bytes, MAX));
    }

    @Test
    void eachMultiByteCharacterAcrossTheBoundIsDroppedWhole() throws Exception {
        // 2-, 3- and 4-byte characters, each starting 1 to 3 bytes before the bound.
        for (String character : List.of("é", "€", "😀")) {
            int width = character.getBytes(StandardCharsets.UTF_8).length;
            for (int before = 1; before < width; before++) {
                String value = "a".repeat(MAX - before) + character + "tail";
                byte[] cut = ForwardCodec.truncateUtf8(value.getBytes(StandardCharsets.UTF_8), MAX);
                assertEquals(MAX - before, cut.length, character + " at " + before);
                assertEquals("a".repeat(MAX - before), strictUtf8(cut));
            }
        }
    }

    @Test
    void aCharacterEndingExactlyAtTheBoundIsKept() throws Exception {
        String value = "a".repeat(MAX - 4) + "😀" + "more";
        byte[] cut = ForwardCodec.truncateUtf8(value.getBytes(StandardCharsets.UTF_8), MAX);
        assertEquals(MAX, cut.length);
        assertTrue(strictUtf8(cut).endsWith("😀"));
    }

    @Test
    void anEncodedRequestHoldsTheCutStringAsValidUtf8() throws IOException {
        String clientId = "€".repeat(20_000); // 60,000 bytes
        ForwardedPush push = new ForwardedPush(1L, 2L, false, -1, 0L, -1, clientId, null, null,
                null, null, null, "OTLP", new byte[] {1}, 0L);
        DataInputStream in = new DataInputStream(
                new ByteArrayInputStream(ForwardCodec.encode(7, List.of(push))));
        in.skipBytes(1 + 4 + 4 + 16 + 1 + 4 + 8 + 4);
        int length = in.readShort();
        byte[] bytes = new byte[length];
        in.readFully(bytes);
        assertEquals(MAX / 3 * 3, length); // 10,922 whole characters
        assertEquals("€".repeat(MAX / 3), strictUtf8(bytes));
        for (int s = 0; s < 6; s++) {
            short next = in.readShort();
            in.skipBytes(Math.max(next, 0));
        }
        assertEquals(1, in.readInt());
        assertArrayEquals(new byte[] {1}, in.readNBytes(1));
    }
}
