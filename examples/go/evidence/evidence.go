// Package evidence is what the produce and verify programs share: the Go types of the
// contract 2.0 records (struct tags name the .avsc fields), schema loading, Avro
// single-object encoding done by hand per the Avro specification, the contract's
// domain-separated SHA-256 digests and UUIDv7 event ids.
//
// Only github.com/hamba/avro/v2 is used for Avro; the schema always comes from the .avsc
// file given on the command line.
package evidence

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hamba/avro/v2"
)

// Library names the Avro implementation, for the programs' JSON output.
const Library = "github.com/hamba/avro/v2 v2.31.0"

// SchemaVersion is the record contract these types follow.
const SchemaVersion = "2.0"

// CaptureEvent is one captured LLM call (schemas/avro/CaptureEvent.avsc). A nil slice or
// pointer is Avro null in a ["null", T] union.
type CaptureEvent struct {
	SchemaVersion       string            `avro:"schema_version"`
	EventID             string            `avro:"event_id"`
	Stream              string            `avro:"stream"`
	CapturedAt          int64             `avro:"captured_at"`
	ContentKey          []byte            `avro:"content_key"`
	RequestBytes        []byte            `avro:"request_bytes"`
	RequestLength       int64             `avro:"request_length"`
	InputDigest         []byte            `avro:"input_digest"`
	InputBytes          []byte            `avro:"input_bytes"`
	PromptDigest        []byte            `avro:"prompt_digest"`
	PromptBytes         []byte            `avro:"prompt_bytes"`
	Retrieval           []RetrievedChunk  `avro:"retrieval"`
	Provider            Provider          `avro:"provider"`
	ModelID             *string           `avro:"model_id"`
	Params              *string           `avro:"params"`
	Fingerprint         *string           `avro:"fingerprint"`
	ResponseModel       *string           `avro:"response_model"`
	HTTPStatus          *int32            `avro:"http_status"`
	ResponseContentType *string           `avro:"response_content_type"`
	ResponseBytes       []byte            `avro:"response_bytes"`
	ResponseLength      *int64            `avro:"response_length"`
	ResponseDigest      []byte            `avro:"response_digest"`
	OutputDigest        []byte            `avro:"output_digest"`
	ErrorBytes          []byte            `avro:"error_bytes"`
	Outcome             string            `avro:"outcome"`
	Replay              ReplayContext     `avro:"replay"`
	Capture             CaptureProvenance `avro:"capture"`
}

// RetrievedChunk is one retrieved chunk that went into the prompt.
type RetrievedChunk struct {
	DocID       string  `avro:"doc_id"`
	DocVersion  *string `avro:"doc_version"`
	ChunkDigest []byte  `avro:"chunk_digest"`
	ChunkBytes  []byte  `avro:"chunk_bytes"`
}

// Provider is who the request went to.
type Provider struct {
	Name       string  `avro:"name"`
	Endpoint   string  `avro:"endpoint"`
	APIVersion *string `avro:"api_version"`
}

// ReplayContext holds the sampling settings; Seed is the integer seed as decimal text.
type ReplayContext struct {
	Seed          *string  `avro:"seed"`
	Temperature   *float64 `avro:"temperature"`
	TopP          *float64 `avro:"top_p"`
	Deterministic bool     `avro:"deterministic"`
}

// CaptureProvenance is how and where the capture was made.
type CaptureProvenance struct {
	Library       string  `avro:"library"`
	Host          *string `avro:"host"`
	RequestPolicy string  `avro:"request_policy"`
	Streamed      bool    `avro:"streamed"`
	ClosedEarly   bool    `avro:"closed_early"`
	Truncated     bool    `avro:"truncated"`
	StartedAt     int64   `avro:"started_at"`
	DurationUs    *int64  `avro:"duration_us"`
}

// EvidenceRecord is a sealed record on <prefix>.log (schemas/avro/EvidenceRecord.avsc).
type EvidenceRecord struct {
	Body CaptureEvent `avro:"body"`
	Seal Seal         `avro:"seal"`
}

// Seal is what the single writer adds.
type Seal struct {
	Seq             int64          `avro:"seq"`
	OccurredAt      int64          `avro:"occurred_at"`
	PrevDigest      []byte         `avro:"prev_digest"`
	RecordDigest    []byte         `avro:"record_digest"`
	Writer          WriterIdentity `avro:"writer"`
	IntakePartition int32          `avro:"intake_partition"`
	IntakeOffset    int64          `avro:"intake_offset"`
}

// WriterIdentity is which writer sealed the record.
type WriterIdentity struct {
	WriterID        string `avro:"writer_id"`
	TransactionalID string `avro:"transactional_id"`
	Version         string `avro:"version"`
}

// API is the Avro configuration. Its defaults are valid Avro but not the canonical bytes:
// hamba/avro writes each array as blocks of at most 100 items, each block with a negative
// count followed by its size in bytes. The Java and Python libraries (and the writer) write
// one block with a positive count and no size, and the record digest covers exact bytes, so:
// no block size header, and blocks long enough that an array is never split. Bodies up to
// the topics' 64 MiB message size decode.
var API = avro.Config{
	DisableBlockSizeHeader: true,
	BlockLength:            1 << 30,
	MaxByteSliceSize:       65 << 20,
}.Freeze()

// Schema is one parsed .avsc file with its single-object header.
type Schema struct {
	Avro        avro.Schema
	Canonical   string  // Parsing Canonical Form, as hamba/avro writes it
	Fingerprint [8]byte // CRC-64-AVRO of Canonical, little-endian
}

// LoadSchema parses one self-contained .avsc file on its own (own name cache, so two
// files that both define evidence.v2.CaptureEvent never meet).
func LoadSchema(path string) (*Schema, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := avro.ParseBytesWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	canonical := s.String()
	out := &Schema{Avro: s, Canonical: canonical}
	binary.LittleEndian.PutUint64(out.Fingerprint[:], CRC64Avro([]byte(canonical)))
	// Our spec-derived fingerprint must agree with the library's own.
	lib, err := s.FingerprintUsing(avro.CRC64AvroLE)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(lib, out.Fingerprint[:]) {
		return nil, fmt.Errorf("%s: CRC-64-AVRO %x disagrees with hamba/avro's %x", path, out.Fingerprint, lib)
	}
	return out, nil
}

// Field is the schema of the record field name (e.g. EvidenceRecord's "body").
func (s *Schema) Field(name string) (*Schema, error) {
	rec, ok := s.Avro.(*avro.RecordSchema)
	if !ok {
		return nil, errors.New("not a record schema")
	}
	for _, f := range rec.Fields() {
		if f.Name() == name {
			out := &Schema{Avro: f.Type(), Canonical: f.Type().String()}
			binary.LittleEndian.PutUint64(out.Fingerprint[:], CRC64Avro([]byte(out.Canonical)))
			return out, nil
		}
	}
	return nil, fmt.Errorf("record %s has no field %q", rec.FullName(), name)
}

// FingerprintHex is the header fingerprint as hex, in wire (little-endian) order.
func (s *Schema) FingerprintHex() string { return hex.EncodeToString(s.Fingerprint[:]) }

// crc64Empty is the Avro specification's EMPTY: the fingerprint of no bytes.
const crc64Empty uint64 = 0xc15d213aa4d7a795

var crc64Table = func() (t [256]uint64) {
	for i := range t {
		fp := uint64(i)
		for j := 0; j < 8; j++ {
			fp = (fp >> 1) ^ (crc64Empty & -(fp & 1))
		}
		t[i] = fp
	}
	return t
}()

// CRC64Avro is the 64-bit Rabin fingerprint of the Avro specification ("Schema
// Fingerprints"), over the UTF-8 bytes of a Parsing Canonical Form.
func CRC64Avro(data []byte) uint64 {
	fp := crc64Empty
	for _, b := range data {
		fp = (fp >> 8) ^ crc64Table[byte(fp)^b]
	}
	return fp
}

// Marker starts every single-object encoded message; HeaderSize adds the fingerprint.
var Marker = [2]byte{0xC3, 0x01}

const HeaderSize = 10

// EncodeSingleObject returns C3 01 || fingerprint || Avro binary of v.
func (s *Schema) EncodeSingleObject(v any) ([]byte, error) {
	body, err := API.Marshal(s.Avro, v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, HeaderSize+len(body))
	out = append(out, Marker[:]...)
	out = append(out, s.Fingerprint[:]...)
	return append(out, body...), nil
}

// DecodeSingleObject checks the header and decodes the body into v.
func (s *Schema) DecodeSingleObject(data []byte, v any) error {
	if len(data) < HeaderSize || data[0] != Marker[0] || data[1] != Marker[1] {
		return errors.New("not Avro single-object encoding (no C3 01 marker)")
	}
	if !bytes.Equal(data[2:HeaderSize], s.Fingerprint[:]) {
		return fmt.Errorf("unknown schema fingerprint %x", data[2:HeaderSize])
	}
	return API.Unmarshal(s.Avro, data[HeaderSize:], v)
}

// Domain prefixes of the contract's digests.
const (
	PrefixContentKey byte = 0x00
	PrefixResponse   byte = 0x01
	PrefixInput      byte = 0x02
	PrefixPrompt     byte = 0x03
	PrefixOutput     byte = 0x04
	PrefixRecord     byte = 0x05
	PrefixChunk      byte = 0x06
)

// Digest is sha256(prefix || data).
func Digest(prefix byte, data []byte) []byte {
	h := sha256.New()
	h.Write([]byte{prefix})
	h.Write(data)
	return h.Sum(nil)
}

// Genesis is prev_digest of the first record of every stream.
var Genesis = make([]byte, 32)

// RecordDigest is sha256(0x05 || prev || be64(seq) || be64(occurredAt) || bodyAvro).
func RecordDigest(prev []byte, seq, occurredAt int64, bodyAvro []byte) []byte {
	var be [16]byte
	binary.BigEndian.PutUint64(be[:8], uint64(seq))
	binary.BigEndian.PutUint64(be[8:], uint64(occurredAt))
	h := sha256.New()
	h.Write([]byte{PrefixRecord})
	h.Write(prev)
	h.Write(be[:])
	h.Write(bodyAvro)
	return h.Sum(nil)
}

// NewUUIDv7 returns a UUIDv7 (RFC 9562) in canonical lowercase text.
func NewUUIDv7() string {
	var u [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	if _, err := rand.Read(u[6:]); err != nil {
		panic(err)
	}
	u[6] = 0x70 | u[6]&0x0F
	u[8] = 0x80 | u[8]&0x3F
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// NowMicros is the current UTC time in microseconds since the Unix epoch.
func NowMicros() int64 { return time.Now().UnixMicro() }
