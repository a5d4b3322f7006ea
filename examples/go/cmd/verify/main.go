// Command verify re-verifies every sealed record on <prefix>.log with nothing but the
// schema file:
//
//	verify -bootstrap 127.0.0.1:9092 -topic-prefix evidence \
//	    -schema ../../schemas/avro/EvidenceRecord.avsc
//
// It reads the whole log from offset 0 with isolation level read_committed, decodes each
// EvidenceRecord with hamba/avro and checks, per stream: seq 1, 2, 3, ... with no gap or
// repeat, prev_digest chaining (32 zero bytes for seq 1), record_digest, content_key over
// request_bytes, response_digest over response_bytes (and the input, prompt and chunk
// digests when their bytes are kept). The decoded body and record are re-encoded with
// hamba/avro and must be the exact bytes on the log.
//
// Prints one JSON line {"records", "streams", "errors", ...}; exits 1 on any error.
// -fingerprints prints each schema's Parsing Canonical Form and fingerprint instead.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"evidence-store/examples/go/evidence"
)

const (
	lang      = "go"
	maxErrors = 100
)

type head struct {
	partition int32
	seq       int64
	digest    []byte
}

type verifier struct {
	schema     *evidence.Schema
	bodySchema *evidence.Schema
	records    int
	errorCount int
	errors     []string
	heads      map[string]*head
}

func (v *verifier) errorf(format string, args ...any) {
	v.errorCount++
	if len(v.errors) < maxErrors {
		v.errors = append(v.errors, fmt.Sprintf(format, args...))
	}
}

func (v *verifier) add(partition int32, offset int64, key, value []byte) {
	v.records++
	where := fmt.Sprintf("partition %d offset %d", partition, offset)
	var rec evidence.EvidenceRecord
	if err := v.schema.DecodeSingleObject(value, &rec); err != nil {
		v.errorf("%s: does not decode: %v", where, err)
		return
	}
	b, s := &rec.Body, &rec.Seal
	where = fmt.Sprintf("stream %s seq %d (%s)", b.Stream, s.Seq, where)

	if !bytes.Equal(key, []byte(b.Stream)) {
		v.errorf("%s: message key %q is not the stream id", where, key)
	}
	// Canonical encoding: our bytes for the decoded values are the log's bytes.
	bodyAvro, err := evidence.API.Marshal(v.bodySchema.Avro, b)
	if err != nil {
		v.errorf("%s: body does not re-encode: %v", where, err)
		return
	}
	if !bytes.HasPrefix(value[evidence.HeaderSize:], bodyAvro) {
		v.errorf("%s: re-encoded body differs from the sealed bytes", where)
	}
	if all, err := evidence.API.Marshal(v.schema.Avro, &rec); err != nil || !bytes.Equal(all, value[evidence.HeaderSize:]) {
		v.errorf("%s: re-encoded record differs from the sealed bytes (%v)", where, err)
	}

	type named struct {
		name   string
		digest []byte
	}
	digests := []named{{"content_key", b.ContentKey}, {"input_digest", b.InputDigest},
		{"prompt_digest", b.PromptDigest}, {"response_digest", b.ResponseDigest},
		{"output_digest", b.OutputDigest}, {"prev_digest", s.PrevDigest}, {"record_digest", s.RecordDigest}}
	for k, c := range b.Retrieval {
		digests = append(digests, named{fmt.Sprintf("retrieval[%d].chunk_digest", k), c.ChunkDigest})
	}
	for _, d := range digests {
		// nil is Avro null (optional digests); plain bytes digests decode non-nil.
		if d.digest != nil && len(d.digest) != 32 {
			v.errorf("%s: %s is %d bytes, not 32", where, d.name, len(d.digest))
		}
	}
	if b.RequestBytes != nil {
		if !bytes.Equal(evidence.Digest(evidence.PrefixContentKey, b.RequestBytes), b.ContentKey) {
			v.errorf("%s: content_key does not match request_bytes", where)
		}
		if b.RequestLength != int64(len(b.RequestBytes)) {
			v.errorf("%s: request_length != len(request_bytes)", where)
		}
	}
	if b.ResponseBytes != nil {
		if !bytes.Equal(evidence.Digest(evidence.PrefixResponse, b.ResponseBytes), b.ResponseDigest) {
			v.errorf("%s: response_digest does not match response_bytes", where)
		}
		if b.ResponseLength == nil || *b.ResponseLength != int64(len(b.ResponseBytes)) {
			v.errorf("%s: response_length != len(response_bytes)", where)
		}
	}
	if b.InputBytes != nil && !bytes.Equal(evidence.Digest(evidence.PrefixInput, b.InputBytes), b.InputDigest) {
		v.errorf("%s: input_digest does not match input_bytes", where)
	}
	if b.PromptBytes != nil && !bytes.Equal(evidence.Digest(evidence.PrefixPrompt, b.PromptBytes), b.PromptDigest) {
		v.errorf("%s: prompt_digest does not match prompt_bytes", where)
	}
	for k, c := range b.Retrieval {
		if c.ChunkBytes != nil && !bytes.Equal(evidence.Digest(evidence.PrefixChunk, c.ChunkBytes), c.ChunkDigest) {
			v.errorf("%s: retrieval[%d].chunk_digest does not match chunk_bytes", where, k)
		}
	}
	if !bytes.Equal(evidence.RecordDigest(s.PrevDigest, s.Seq, s.OccurredAt, bodyAvro), s.RecordDigest) {
		v.errorf("%s: record_digest does not verify", where)
	}

	h := v.heads[b.Stream]
	if h == nil {
		h = &head{partition: partition, digest: evidence.Genesis}
		v.heads[b.Stream] = h
	}
	if h.partition != partition {
		v.errorf("%s: stream is on partitions %d and %d", where, h.partition, partition)
	}
	if s.Seq != h.seq+1 {
		v.errorf("%s: expected seq %d", where, h.seq+1)
	}
	if !bytes.Equal(s.PrevDigest, h.digest) {
		v.errorf("%s: prev_digest does not link to seq %d", where, h.seq)
	}
	h.seq, h.digest = s.Seq, s.RecordDigest
}

// readLog calls add for every committed message of topic from offset 0, in offset order
// per partition, and returns once each partition is read up to its last stable offset.
func readLog(ctx context.Context, seeds []string, topic string, add func(int32, int64, []byte, []byte)) error {
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListCommittedOffsets(ctx, topic) // read_committed: the last stable offsets
	}
	if err == nil {
		err = ends.Error()
	}
	admCl.Close()
	if err != nil {
		return fmt.Errorf("listing offsets of %s: %w", topic, err)
	}
	if _, ok := ends[topic]; !ok {
		return fmt.Errorf("topic %s not found", topic)
	}
	end := map[int32]int64{}
	assign := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			end[o.Partition] = o.Offset
			assign[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(end) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers take offsets too: keep them, so that a partition whose last
		// offset is a commit marker is seen to be read to the end.
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(65<<20),
		kgo.FetchMaxPartitionBytes(65<<20),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	next := map[int32]int64{}
	for len(end) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			var left []string
			for p := range end {
				left = append(left, fmt.Sprint(p))
			}
			sort.Strings(left)
			return fmt.Errorf("reading %s timed out; partitions %s not at end", topic, strings.Join(left, ","))
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("%s[%d]: %w", t, p, err)) })
		if ferr != nil {
			return ferr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if _, open := end[r.Partition]; !open || r.Offset >= end[r.Partition] {
				return
			}
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				add(r.Partition, r.Offset, r.Key, r.Value)
			}
			if next[r.Partition] >= end[r.Partition] {
				delete(end, r.Partition)
			}
		})
	}
	return nil
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "Kafka bootstrap servers, comma-separated")
	prefix := flag.String("topic-prefix", "evidence", "topic prefix: records are read from <prefix>.log")
	schemaPath := flag.String("schema", "", "path to schemas/avro/EvidenceRecord.avsc (required)")
	capturePath := flag.String("capture-schema", "", "CaptureEvent.avsc: check it is the record's body schema")
	timeout := flag.Float64("timeout", 60, "give up reading after this many seconds")
	fingerprints := flag.Bool("fingerprints", false, "print each schema's canonical form and fingerprint, then exit")
	flag.Parse()
	if *schemaPath == "" {
		flag.Usage()
		os.Exit(2)
	}
	schema, err := evidence.LoadSchema(*schemaPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var capture *evidence.Schema
	if *capturePath != "" {
		if capture, err = evidence.LoadSchema(*capturePath); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if *fingerprints {
		for _, s := range []struct {
			path   string
			schema *evidence.Schema
		}{{*schemaPath, schema}, {*capturePath, capture}} {
			if s.schema != nil {
				out, _ := json.Marshal(map[string]any{"verifier": lang, "library": evidence.Library, "schema": s.path,
					"fingerprint": s.schema.FingerprintHex(), "canonical_form": s.schema.Canonical})
				fmt.Println(string(out))
			}
		}
		return
	}

	v := &verifier{schema: schema, heads: map[string]*head{}, errors: []string{}}
	// The record's body is its first field; its schema is CaptureEvent's, inline.
	if v.bodySchema, err = schema.Field("body"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if capture != nil && capture.Canonical != v.bodySchema.Canonical {
		v.errorf("the record's body schema is not CaptureEvent.avsc (canonical forms differ)")
	}
	topic := *prefix + ".log"
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*timeout*float64(time.Second)))
	defer cancel()
	if err := readLog(ctx, strings.Split(*bootstrap, ","), topic, v.add); err != nil {
		v.errorf("%v", err)
	}
	out, _ := json.Marshal(map[string]any{"verifier": lang, "library": evidence.Library, "topic": topic,
		"fingerprint": schema.FingerprintHex(), "records": v.records, "streams": len(v.heads),
		"error_count": v.errorCount, "errors": v.errors})
	fmt.Println(string(out))
	if v.errorCount > 0 {
		os.Exit(1)
	}
}
