package dev.evidencestore.example;

import static dev.evidencestore.example.Evidence.*;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Produce example CaptureEvents to {@code <prefix>.intake} with nothing but the schema file.
 *
 * <pre>
 * java -cp target/evidence-example.jar dev.evidencestore.example.Produce \
 *     --bootstrap 127.0.0.1:9092 --topic-prefix evidence \
 *     --schema ../../schemas/avro/CaptureEvent.avsc --stream demo-java --count 10
 * </pre>
 *
 * Each event is a GenericRecord built against the parsed .avsc and encoded by Avro's
 * BinaryMessageEncoder (single-object encoding: C3 01, CRC-64-AVRO fingerprint, body), then
 * produced keyed by its stream id (UTF-8). Prints one JSON line.
 */
public final class Produce {
    private static final String LANG = "java";

    private Produce() {}

    /** The i-th example capture of a stream: every 4th FAILED, every 3rd HASH_ONLY. */
    static GenericRecord sampleEvent(Schema schema, String stream, int i) {
        boolean failed = i % 4 == 3;
        boolean hashOnly = i % 3 == 2;
        boolean keep = !hashOnly;
        // Seeds may be >= 2^63, so they travel as decimal text.
        String seed = i % 2 == 0
                ? BigInteger.ONE.shiftLeft(64).subtract(BigInteger.valueOf(1L + i)).toString() : null;
        double temperature = seed != null ? 0.0 : 0.7;
        byte[] userInput = utf8("question " + i + " from " + LANG + ": café ☕");
        List<byte[]> chunks = new ArrayList<>();
        for (int k = 0; k < 1 + i % 2; k++) chunks.add(utf8("chunk " + i + "." + k + " of the example corpus"));
        StringBuilder context = new StringBuilder();
        for (byte[] c : chunks) context.append(context.length() > 0 ? " " : "").append(new String(c, java.nio.charset.StandardCharsets.UTF_8));
        String promptText = "System: be brief.\n\nContext: " + context + "\n\nUser: " + new String(userInput, java.nio.charset.StandardCharsets.UTF_8);
        byte[] prompt = utf8(promptText);

        Map<String, Object> params = new LinkedHashMap<>();
        params.put("model", "example-model");
        params.put("temperature", temperature);
        if (seed != null) params.put("seed", new BigInteger(seed));
        Map<String, Object> req = new LinkedHashMap<>(params);
        req.put("messages", List.of(Map.of("role", "user", "content", promptText)));
        byte[] request = utf8(json(req));
        String output = "answer " + i + " to " + stream;
        Map<String, Object> message = new LinkedHashMap<>();
        message.put("role", "assistant");
        message.put("content", output);
        Map<String, Object> resp = new LinkedHashMap<>();
        resp.put("id", "resp-" + i);
        resp.put("model", "example-model-2025");
        resp.put("choices", List.of(Map.of("message", message)));
        byte[] response = utf8(json(resp));

        // Nested record and enum schemas come from the .avsc itself.
        Schema chunkSchema = schema.getField("retrieval").schema().getElementType();
        Schema providerSchema = schema.getField("provider").schema();
        Schema replaySchema = schema.getField("replay").schema();
        Schema captureSchema = schema.getField("capture").schema();
        Schema outcomeSchema = schema.getField("outcome").schema();
        Schema policySchema = captureSchema.getField("request_policy").schema();

        List<GenericRecord> retrieval = new ArrayList<>();
        for (int k = 0; k < chunks.size(); k++) {
            retrieval.add(new GenericRecordBuilder(chunkSchema)
                    .set("doc_id", "doc-" + k)
                    .set("doc_version", k == 0 ? "v1" : null)
                    .set("chunk_digest", buf(digest(CHUNK, chunks.get(k))))
                    .set("chunk_bytes", keep ? buf(chunks.get(k)) : null)
                    .build());
        }
        long finished = nowMicros();
        return new GenericRecordBuilder(schema)
                .set("schema_version", SCHEMA_VERSION)
                .set("event_id", uuid7())
                .set("stream", stream)
                .set("captured_at", finished)
                .set("content_key", buf(digest(CONTENT_KEY, request)))
                .set("request_bytes", keep ? buf(request) : null)
                .set("request_length", (long) request.length)
                .set("input_digest", buf(digest(INPUT, userInput)))
                .set("input_bytes", keep ? buf(userInput) : null)
                .set("prompt_digest", buf(digest(PROMPT, prompt)))
                .set("prompt_bytes", keep ? buf(prompt) : null)
                .set("retrieval", retrieval)
                .set("provider", new GenericRecordBuilder(providerSchema)
                        .set("name", "example")
                        .set("endpoint", "https://llm.example.invalid/v1/chat/completions")
                        .set("api_version", "2025-01-01")
                        .build())
                .set("model_id", "example-model")
                .set("params", json(params))
                .set("fingerprint", failed ? null : "fp_example")
                .set("response_model", failed ? null : "example-model-2025")
                .set("http_status", failed ? null : 200)
                .set("response_content_type", failed ? null : "application/json")
                .set("response_bytes", failed ? null : buf(response))
                .set("response_length", failed ? null : (long) response.length)
                .set("response_digest", failed ? null : buf(digest(RESPONSE, response)))
                .set("output_digest", failed ? null : buf(digest(OUTPUT, utf8(output))))
                .set("error_bytes", failed ? buf(utf8("example: connection reset before a response arrived")) : null)
                .set("outcome", new GenericData.EnumSymbol(outcomeSchema, failed ? "FAILED" : "COMMITTED"))
                .set("replay", new GenericRecordBuilder(replaySchema)
                        .set("seed", seed)
                        .set("temperature", temperature)
                        .set("top_p", null)
                        .set("deterministic", seed != null)
                        .build())
                .set("capture", new GenericRecordBuilder(captureSchema)
                        .set("library", "evidence-store-example-" + LANG + "/1 (" + LIBRARY + ")")
                        .set("host", null)
                        .set("request_policy", new GenericData.EnumSymbol(policySchema, hashOnly ? "HASH_ONLY" : "VALUE"))
                        .set("streamed", false)
                        .set("closed_early", false)
                        .set("truncated", false)
                        .set("started_at", finished - 1500)
                        .set("duration_us", 1500L)
                        .build())
                .build();
    }

    private static ByteBuffer buf(byte[] b) {
        return ByteBuffer.wrap(b);
    }

    public static void main(String[] argv) throws Exception {
        Map<String, List<String>> args;
        String bootstrap, prefix, schemaPath;
        int count;
        List<String> streams;
        try {
            args = parseArgs(argv, Set.of());
            bootstrap = arg(args, "bootstrap", "127.0.0.1:9092");
            prefix = arg(args, "topic-prefix", "evidence");
            schemaPath = arg(args, "schema", null);
            count = Integer.parseInt(arg(args, "count", "10"));
            streams = args.get("stream");
            if (streams == null) throw new IllegalArgumentException("--stream is required (repeatable)");
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.err.println("usage: Produce --schema CaptureEvent.avsc --stream ID [--stream ID ...] "
                    + "[--count N] [--bootstrap HOST:PORT] [--topic-prefix PREFIX]");
            System.exit(2);
            return;
        }
        Schema schema = loadSchema(schemaPath);
        BinaryMessageEncoder<GenericRecord> encoder = new BinaryMessageEncoder<>(GenericData.get(), schema);
        String topic = prefix + ".intake";

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        // One MiB above the topics' 64 MiB max.message.bytes: the broker decides what is too large.
        props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, 65 * 1024 * 1024);
        // The default partitioner hashes keys with murmur2: a stream stays on one partition.
        List<String> ids = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                for (String stream : streams) {
                    GenericRecord event = sampleEvent(schema, stream, i);
                    byte[] value = bytes(encoder.encode(event));
                    sent.add(producer.send(new ProducerRecord<>(topic, utf8(stream), value)));
                    ids.add(event.get("event_id").toString());
                }
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) {
                try {
                    f.get(60, TimeUnit.SECONDS);
                } catch (Exception e) {
                    errors.add(e.toString());
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("producer", LANG);
        out.put("library", LIBRARY);
        out.put("topic", topic);
        out.put("produced", ids.size());
        out.put("fingerprint", hex(fingerprint(schema)));
        out.put("event_ids", ids);
        out.put("errors", errors);
        System.out.println(json(out));
        System.exit(errors.isEmpty() ? 0 : 1);
    }
}
