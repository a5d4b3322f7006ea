package dev.evidencestore.example;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;

/**
 * What Produce and Verify share: schema loading and fingerprints, the contract's
 * domain-separated SHA-256 digests, UUIDv7 event ids and a little JSON output.
 */
final class Evidence {
    private Evidence() {}

    private static final java.util.Properties VERSIONS = new java.util.Properties();

    static {
        try (var in = Evidence.class.getResourceAsStream("/evidence-example.properties")) {
            VERSIONS.load(in);
        } catch (IOException | NullPointerException e) {
            throw new ExceptionInInitializerError("evidence-example.properties is missing from the jar");
        }
    }

    static final String LIBRARY = "org.apache.avro:avro " + VERSIONS.getProperty("avro.version");
    static final String SCHEMA_VERSION = "2.0";

    static final byte CONTENT_KEY = 0x00, RESPONSE = 0x01, INPUT = 0x02, PROMPT = 0x03,
            OUTPUT = 0x04, RECORD = 0x05, CHUNK = 0x06;

    /** prev_digest of the first record of every stream. */
    static final byte[] GENESIS = new byte[32];

    /** Single-object encoding: C3 01 and the 8-byte fingerprint. */
    static final int HEADER_SIZE = 10;

    /** Parse one self-contained .avsc file on its own. */
    static Schema loadSchema(String path) throws IOException {
        return new Schema.Parser().parse(new File(path));
    }

    /** CRC-64-AVRO of the Parsing Canonical Form, little-endian: the single-object header bytes. */
    static byte[] fingerprint(Schema schema) {
        try {
            return SchemaNormalization.parsingFingerprint("CRC-64-AVRO", schema);
        } catch (NoSuchAlgorithmException e) {
            throw new AssertionError(e);
        }
    }

    static String canonicalForm(Schema schema) {
        return SchemaNormalization.toParsingForm(schema);
    }

    /** Plain Avro binary of a generic datum, no framing. */
    static byte[] avroBinary(Schema schema, Object datum) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        BinaryEncoder enc = EncoderFactory.get().binaryEncoder(out, null);
        try {
            new GenericDatumWriter<Object>(schema, GenericData.get()).write(datum, enc);
            enc.flush();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out.toByteArray();
    }

    /** sha256(prefix || data). */
    static byte[] digest(byte prefix, byte[] data) {
        MessageDigest md = sha256();
        md.update(prefix);
        md.update(data);
        return md.digest();
    }

    /** sha256(0x05 || prev || be64(seq) || be64(occurredAt) || bodyAvro). */
    static byte[] recordDigest(byte[] prev, long seq, long occurredAt, byte[] bodyAvro) {
        MessageDigest md = sha256();
        md.update(RECORD);
        md.update(prev);
        md.update(ByteBuffer.allocate(16).putLong(seq).putLong(occurredAt).array());
        md.update(bodyAvro);
        return md.digest();
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new AssertionError(e);
        }
    }

    private static final SecureRandom RANDOM = new SecureRandom();

    /** A UUIDv7 (RFC 9562) in canonical lowercase text. */
    static String uuid7() {
        long ms = System.currentTimeMillis();
        long msb = (ms << 16) | 0x7000L | (RANDOM.nextInt() & 0x0FFFL);
        long lsb = (RANDOM.nextLong() & 0x3FFFFFFFFFFFFFFFL) | 0x8000000000000000L;
        return new UUID(msb, lsb).toString();
    }

    static long nowMicros() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** The bytes of an Avro bytes value as the generic API returns it, or null. */
    static byte[] bytes(Object v) {
        if (v == null) return null;
        ByteBuffer b = ((ByteBuffer) v).duplicate();
        byte[] out = new byte[b.remaining()];
        b.get(out);
        return out;
    }

    static String hex(byte[] b) {
        return HexFormat.of().formatHex(b);
    }

    /** A minimal JSON writer for the programs' one-line output (strings, numbers, lists, maps). */
    static String json(Object v) {
        StringBuilder sb = new StringBuilder();
        writeJson(sb, v);
        return sb.toString();
    }

    private static void writeJson(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map<?, ?> m) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!first) sb.append(',');
                first = false;
                writeJson(sb, e.getKey().toString());
                sb.append(':');
                writeJson(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof List<?> l) {
            sb.append('[');
            for (int i = 0; i < l.size(); i++) {
                if (i > 0) sb.append(',');
                writeJson(sb, l.get(i));
            }
            sb.append(']');
        } else {
            String s = v.toString();
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    case '\r' -> sb.append("\\r");
                    case '\t' -> sb.append("\\t");
                    default -> {
                        if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                    }
                }
            }
            sb.append('"');
        }
    }

    /** Tiny --name value argument parsing; repeated names accumulate. */
    static Map<String, List<String>> parseArgs(String[] args, java.util.Set<String> flags) {
        Map<String, List<String>> out = new java.util.LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) throw new IllegalArgumentException("unexpected argument " + a);
            String name = a.substring(2);
            if (flags.contains(name)) {
                out.computeIfAbsent(name, k -> new java.util.ArrayList<>()).add("true");
                continue;
            }
            if (i + 1 >= args.length) throw new IllegalArgumentException(a + " needs a value");
            out.computeIfAbsent(name, k -> new java.util.ArrayList<>()).add(args[++i]);
        }
        return out;
    }

    static String arg(Map<String, List<String>> args, String name, String dflt) {
        List<String> v = args.get(name);
        if (v == null || v.isEmpty()) {
            if (dflt == null) throw new IllegalArgumentException("--" + name + " is required");
            return dflt;
        }
        return v.get(v.size() - 1);
    }
}
