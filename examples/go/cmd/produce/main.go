// Command produce sends example CaptureEvents to <prefix>.intake with nothing but the
// schema file:
//
//	produce -bootstrap 127.0.0.1:9092 -topic-prefix evidence \
//	    -schema ../../schemas/avro/CaptureEvent.avsc -stream demo-go -count 10
//
// Each event is encoded by hamba/avro against the parsed .avsc, framed in Avro
// single-object encoding (C3 01, 8-byte little-endian CRC-64-AVRO fingerprint, body) and
// produced with franz-go keyed by its stream id (UTF-8). Prints one JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"evidence-store/examples/go/evidence"
)

const lang = "go"

type streamList []string

func (s *streamList) String() string     { return strings.Join(*s, ",") }
func (s *streamList) Set(v string) error { *s = append(*s, v); return nil }

func ptr[T any](v T) *T { return &v }

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// sampleEvent is the i-th example capture of stream: every 4th FAILED, every 3rd HASH_ONLY.
func sampleEvent(stream string, i int) evidence.CaptureEvent {
	failed := i%4 == 3
	hashOnly := i%3 == 2
	keep := !hashOnly
	var seed *string
	temperature := 0.7
	if i%2 == 0 {
		seed = ptr(strconv.FormatUint(math.MaxUint64-uint64(i), 10)) // >= 2^63: travels as text
		temperature = 0.0
	}
	userInput := []byte(fmt.Sprintf("question %d from %s: café ☕", i, lang))
	var chunks [][]byte
	for k := 0; k < 1+i%2; k++ {
		chunks = append(chunks, []byte(fmt.Sprintf("chunk %d.%d of the example corpus", i, k)))
	}
	prompt := []byte("System: be brief.\n\nContext: " + string(joinBytes(chunks, " ")) + "\n\nUser: " + string(userInput))

	params := map[string]any{"model": "example-model", "temperature": temperature}
	if seed != nil {
		params["seed"] = json.Number(*seed)
	}
	paramsJSON, _ := json.Marshal(params) // map keys are sorted: stable text
	reqFields := map[string]any{"messages": []chatMessage{{"user", string(prompt)}}}
	for k, v := range params {
		reqFields[k] = v
	}
	request, _ := json.Marshal(reqFields)
	output := fmt.Sprintf("answer %d to %s", i, stream)
	response, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("resp-%d", i), "model": "example-model-2025",
		"choices": []map[string]any{{"message": chatMessage{"assistant", output}}}})

	finished := evidence.NowMicros()
	e := evidence.CaptureEvent{
		SchemaVersion: evidence.SchemaVersion,
		EventID:       evidence.NewUUIDv7(),
		Stream:        stream,
		CapturedAt:    finished,
		ContentKey:    evidence.Digest(evidence.PrefixContentKey, request),
		RequestLength: int64(len(request)),
		InputDigest:   evidence.Digest(evidence.PrefixInput, userInput),
		PromptDigest:  evidence.Digest(evidence.PrefixPrompt, prompt),
		Retrieval:     []evidence.RetrievedChunk{},
		Provider: evidence.Provider{Name: "example", Endpoint: "https://llm.example.invalid/v1/chat/completions",
			APIVersion: ptr("2025-01-01")},
		ModelID: ptr("example-model"),
		Params:  ptr(string(paramsJSON)),
		Outcome: "COMMITTED",
		Replay:  evidence.ReplayContext{Seed: seed, Temperature: &temperature, Deterministic: seed != nil},
		Capture: evidence.CaptureProvenance{
			Library:       fmt.Sprintf("evidence-store-example-%s/1 (%s)", lang, evidence.Library),
			RequestPolicy: "VALUE", StartedAt: finished - 1500, DurationUs: ptr(int64(1500)),
		},
	}
	for k, c := range chunks {
		ch := evidence.RetrievedChunk{DocID: fmt.Sprintf("doc-%d", k), ChunkDigest: evidence.Digest(evidence.PrefixChunk, c)}
		if k == 0 {
			ch.DocVersion = ptr("v1")
		}
		if keep {
			ch.ChunkBytes = c
		}
		e.Retrieval = append(e.Retrieval, ch)
	}
	if keep {
		e.RequestBytes, e.InputBytes, e.PromptBytes = request, userInput, prompt
	} else {
		e.Capture.RequestPolicy = "HASH_ONLY"
	}
	if failed {
		e.Outcome = "FAILED"
		e.ErrorBytes = []byte("example: connection reset before a response arrived")
	} else {
		e.Fingerprint = ptr("fp_example")
		e.ResponseModel = ptr("example-model-2025")
		e.HTTPStatus = ptr(int32(200))
		e.ResponseContentType = ptr("application/json")
		e.ResponseBytes = response
		e.ResponseLength = ptr(int64(len(response)))
		e.ResponseDigest = evidence.Digest(evidence.PrefixResponse, response)
		e.OutputDigest = evidence.Digest(evidence.PrefixOutput, []byte(output))
	}
	return e
}

func joinBytes(parts [][]byte, sep string) []byte {
	var out []byte
	for i, p := range parts {
		if i > 0 {
			out = append(out, sep...)
		}
		out = append(out, p...)
	}
	return out
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "Kafka bootstrap servers, comma-separated")
	prefix := flag.String("topic-prefix", "evidence", "topic prefix: events go to <prefix>.intake")
	schemaPath := flag.String("schema", "", "path to schemas/avro/CaptureEvent.avsc (required)")
	count := flag.Int("count", 10, "events per stream")
	var streams streamList
	flag.Var(&streams, "stream", "stream id (repeatable, required)")
	flag.Parse()
	if *schemaPath == "" || len(streams) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	schema, err := evidence.LoadSchema(*schemaPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	topic := *prefix + ".intake"
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent by default in franz-go
		// A stream must stay on one partition whoever produces it: Kafka's murmur2 key hash.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		// One MiB above the topics' 64 MiB max.message.bytes: the broker decides what is too large.
		kgo.ProducerBatchMaxBytes(65<<20),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer cl.Close()

	var records []*kgo.Record
	ids := []string{}
	for i := 0; i < *count; i++ {
		for _, stream := range streams {
			e := sampleEvent(stream, i)
			value, err := schema.EncodeSingleObject(e)
			if err != nil {
				fmt.Fprintf(os.Stderr, "encode: %v\n", err)
				os.Exit(1)
			}
			records = append(records, &kgo.Record{Key: []byte(stream), Value: value})
			ids = append(ids, e.EventID)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := []string{}
	for _, r := range cl.ProduceSync(ctx, records...) {
		if r.Err != nil {
			errs = append(errs, r.Err.Error())
		}
	}
	out, _ := json.Marshal(map[string]any{"producer": lang, "library": evidence.Library, "topic": topic,
		"produced": len(ids), "fingerprint": schema.FingerprintHex(), "event_ids": ids, "errors": errs})
	fmt.Println(string(out))
	if len(errs) > 0 {
		os.Exit(1)
	}
}
