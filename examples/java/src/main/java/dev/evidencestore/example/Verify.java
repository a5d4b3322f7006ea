package dev.evidencestore.example;

import static dev.evidencestore.example.Evidence.*;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Re-verify every sealed record on {@code <prefix>.log} with nothing but the schema file.
 *
 * <pre>
 * java -cp target/evidence-example.jar dev.evidencestore.example.Verify \
 *     --bootstrap 127.0.0.1:9092 --topic-prefix evidence \
 *     --schema ../../schemas/avro/EvidenceRecord.avsc
 * </pre>
 *
 * Reads the whole log from offset 0 with isolation level read_committed, decodes each
 * EvidenceRecord with Avro's BinaryMessageDecoder and checks, per stream: seq 1, 2, 3, ...
 * with no gap or repeat, prev_digest chaining (32 zero bytes for seq 1), record_digest,
 * content_key over request_bytes, response_digest over response_bytes (and the input, prompt
 * and chunk digests when their bytes are kept). The decoded body and record are re-encoded
 * with Avro Java and must be the exact bytes on the log.
 *
 * <p>Prints one JSON line {records, streams, errors, ...}; exits 1 on any error.
 * {@code --fingerprints} prints each schema's Parsing Canonical Form and fingerprint instead.
 */
public final class Verify {
    private static final String LANG = "java";
    private static final int MAX_ERRORS = 100;

    private final Schema schema;
    private final Schema bodySchema;
    private final BinaryMessageDecoder<GenericRecord> decoder;
    private final BinaryMessageEncoder<GenericRecord> encoder;
    private int records;
    private int errorCount;
    private final List<String> errors = new ArrayList<>();

    private static final class Head {
        final int partition;
        long seq;
        byte[] digest = GENESIS;

        Head(int partition) {
            this.partition = partition;
        }
    }

    private final Map<String, Head> heads = new HashMap<>();

    Verify(Schema schema) {
        this.schema = schema;
        this.bodySchema = schema.getField("body").schema();
        this.decoder = new BinaryMessageDecoder<>(GenericData.get(), schema);
        this.encoder = new BinaryMessageEncoder<>(GenericData.get(), schema);
    }

    void error(String msg) {
        errorCount++;
        if (errors.size() < MAX_ERRORS) errors.add(msg);
    }

    void add(int partition, long offset, byte[] key, byte[] value) {
        records++;
        String where = "partition " + partition + " offset " + offset;
        GenericRecord rec;
        try {
            rec = decoder.decode(value);
        } catch (Exception e) {
            error(where + ": does not decode: " + e);
            return;
        }
        GenericRecord body = (GenericRecord) rec.get("body");
        GenericRecord seal = (GenericRecord) rec.get("seal");
        String stream = body.get("stream").toString();
        long seq = (Long) seal.get("seq");
        long occurredAt = (Long) seal.get("occurred_at");
        byte[] prev = bytes(seal.get("prev_digest"));
        byte[] recordDigest = bytes(seal.get("record_digest"));
        where = "stream " + stream + " seq " + seq + " (" + where + ")";

        if (key == null || !Arrays.equals(key, utf8(stream))) {
            error(where + ": message key " + (key == null ? "null" : new String(key, StandardCharsets.UTF_8))
                    + " is not the stream id");
        }
        // Canonical encoding: Avro Java's bytes for the decoded values are the log's bytes.
        byte[] bodyAvro = avroBinary(bodySchema, body);
        if (value.length < HEADER_SIZE + bodyAvro.length
                || !Arrays.equals(value, HEADER_SIZE, HEADER_SIZE + bodyAvro.length, bodyAvro, 0, bodyAvro.length)) {
            error(where + ": re-encoded body differs from the sealed bytes");
        }
        try {
            if (!Arrays.equals(bytes(encoder.encode(rec)), value)) {
                error(where + ": re-encoded record differs from the sealed bytes");
            }
        } catch (java.io.IOException e) {
            error(where + ": record does not re-encode: " + e);
        }

        List<Object[]> digests = new ArrayList<>(List.of(
                new Object[] {"content_key", bytes(body.get("content_key"))},
                new Object[] {"input_digest", bytes(body.get("input_digest"))},
                new Object[] {"prompt_digest", bytes(body.get("prompt_digest"))},
                new Object[] {"response_digest", bytes(body.get("response_digest"))},
                new Object[] {"output_digest", bytes(body.get("output_digest"))},
                new Object[] {"prev_digest", prev},
                new Object[] {"record_digest", recordDigest}));
        @SuppressWarnings("unchecked")
        List<GenericRecord> retrieval = (List<GenericRecord>) body.get("retrieval");
        for (int k = 0; k < retrieval.size(); k++) {
            digests.add(new Object[] {"retrieval[" + k + "].chunk_digest", bytes(retrieval.get(k).get("chunk_digest"))});
        }
        for (Object[] d : digests) {
            byte[] b = (byte[]) d[1];
            if (b != null && b.length != 32) error(where + ": " + d[0] + " is " + b.length + " bytes, not 32");
        }

        byte[] request = bytes(body.get("request_bytes"));
        if (request != null) {
            if (!Arrays.equals(digest(CONTENT_KEY, request), bytes(body.get("content_key")))) {
                error(where + ": content_key does not match request_bytes");
            }
            if ((Long) body.get("request_length") != request.length) {
                error(where + ": request_length != len(request_bytes)");
            }
        }
        byte[] response = bytes(body.get("response_bytes"));
        if (response != null) {
            if (!Arrays.equals(digest(RESPONSE, response), bytes(body.get("response_digest")))) {
                error(where + ": response_digest does not match response_bytes");
            }
            Object length = body.get("response_length");
            if (length == null || (Long) length != response.length) {
                error(where + ": response_length != len(response_bytes)");
            }
        }
        checkKept(where, "input", INPUT, bytes(body.get("input_bytes")), bytes(body.get("input_digest")));
        checkKept(where, "prompt", PROMPT, bytes(body.get("prompt_bytes")), bytes(body.get("prompt_digest")));
        for (int k = 0; k < retrieval.size(); k++) {
            byte[] chunk = bytes(retrieval.get(k).get("chunk_bytes"));
            if (chunk != null && !Arrays.equals(digest(CHUNK, chunk), bytes(retrieval.get(k).get("chunk_digest")))) {
                error(where + ": retrieval[" + k + "].chunk_digest does not match chunk_bytes");
            }
        }
        if (!Arrays.equals(recordDigest(prev, seq, occurredAt, bodyAvro), recordDigest)) {
            error(where + ": record_digest does not verify");
        }

        Head head = heads.computeIfAbsent(stream, s -> new Head(partition));
        if (head.partition != partition) {
            error(where + ": stream is on partitions " + head.partition + " and " + partition);
        }
        if (seq != head.seq + 1) error(where + ": expected seq " + (head.seq + 1));
        if (!Arrays.equals(prev, head.digest)) error(where + ": prev_digest does not link to seq " + head.seq);
        head.seq = seq;
        head.digest = recordDigest;
    }

    private void checkKept(String where, String name, byte prefix, byte[] data, byte[] digest) {
        if (data != null && !Arrays.equals(digest(prefix, data), digest)) {
            error(where + ": " + name + "_digest does not match " + name + "_bytes");
        }
    }

    /** Every committed message from offset 0 up to each partition's last stable offset. */
    void readLog(String bootstrap, String topic, Duration timeout) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, "verify-" + UUID.randomUUID());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, 65 * 1024 * 1024);
        long deadline = System.nanoTime() + timeout.toNanos();
        try (KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, timeout);
            if (infos == null || infos.isEmpty()) {
                error("topic " + topic + " not found");
                return;
            }
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo p : infos) parts.add(new TopicPartition(topic, p.partition()));
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            // Under read_committed, endOffsets are the last stable offsets.
            Map<TopicPartition, Long> end = new HashMap<>(consumer.endOffsets(parts, timeout));
            while (true) {
                end.entrySet().removeIf(e -> consumer.position(e.getKey(), timeout) >= e.getValue());
                if (end.isEmpty()) return;
                if (System.nanoTime() > deadline) {
                    error("reading " + topic + " timed out; partitions " + end.keySet() + " not at end");
                    return;
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    Long stop = end.get(new TopicPartition(r.topic(), r.partition()));
                    if (stop != null && r.offset() < stop) add(r.partition(), r.offset(), r.key(), r.value());
                }
            }
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, List<String>> args;
        try {
            args = parseArgs(argv, Set.of("fingerprints"));
            arg(args, "schema", null);
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.err.println("usage: Verify --schema EvidenceRecord.avsc [--capture-schema CaptureEvent.avsc] "
                    + "[--bootstrap HOST:PORT] [--topic-prefix PREFIX] [--timeout SECONDS] [--fingerprints]");
            System.exit(2);
            return;
        }
        String schemaPath = arg(args, "schema", null);
        String capturePath = arg(args, "capture-schema", "");
        Schema schema = loadSchema(schemaPath);
        Schema capture = capturePath.isEmpty() ? null : loadSchema(capturePath);
        if (args.containsKey("fingerprints")) {
            for (Object[] s : new Object[][] {{schemaPath, schema}, {capturePath, capture}}) {
                if (s[1] == null) continue;
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("verifier", LANG);
                out.put("library", LIBRARY);
                out.put("schema", s[0]);
                out.put("fingerprint", hex(fingerprint((Schema) s[1])));
                out.put("canonical_form", canonicalForm((Schema) s[1]));
                System.out.println(json(out));
            }
            System.exit(0);
        }
        Verify v = new Verify(schema);
        if (capture != null && !canonicalForm(capture).equals(canonicalForm(v.bodySchema))) {
            v.error("the record's body schema is not CaptureEvent.avsc (canonical forms differ)");
        }
        String topic = arg(args, "topic-prefix", "evidence") + ".log";
        try {
            v.readLog(arg(args, "bootstrap", "127.0.0.1:9092"), topic,
                    Duration.ofMillis((long) (Double.parseDouble(arg(args, "timeout", "60")) * 1000)));
        } catch (Exception e) {
            v.error("reading " + topic + ": " + e);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("verifier", LANG);
        out.put("library", LIBRARY);
        out.put("topic", topic);
        out.put("fingerprint", hex(fingerprint(schema)));
        out.put("records", v.records);
        out.put("streams", v.heads.size());
        out.put("error_count", v.errorCount);
        out.put("errors", v.errors);
        System.out.println(json(out));
        System.exit(v.errorCount == 0 ? 0 : 1);
    }
}
