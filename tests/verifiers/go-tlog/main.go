// Command tlogverify checks, with the Go ecosystem's own libraries, what evidence-store's
// Python transparency-log core (evidence_contract.merkle and evidence_contract.note) wrote:
// a checkpoint signed by the log's key and cosigned by a witness, the verifier keys, the
// leaves, and inclusion and consistency proofs.
//
//	tlogverify FILE.json
//	tlogverify extends FILE.json
//
// Nothing here is shared with the Python side: keys are parsed by golang.org/x/mod/sumdb/note
// and github.com/transparency-dev/formats/note, the checkpoint by formats/log, hashes and
// proofs by github.com/transparency-dev/merkle. It prints one JSON summary line and exits 0
// when every check passes, or prints "FAIL <check>: <reason>" and exits 1 at the first failure.
//
// "extends" is the outside auditor holding only a checkpoint a witness cosigned earlier: it
// takes that note, the log's latest checkpoint and the log's consistency proof between their
// sizes (FILE.json: extendsInput) and checks both signatures, the cosignature and that the
// latest tree extends the witnessed one. A log rewritten since fails it.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// leafLabel is the first part of every evidence-store leaf input (evidence_contract/merkle.py).
const leafLabel = "evidence-store/v2 record\n"

// input is the file the Python test writes; []byte fields are standard base64.
type input struct {
	Origin       string   `json:"origin"`
	LogVKey      string   `json:"log_vkey"`
	CosignerVKey string   `json:"cosigner_vkey"`
	Checkpoint   string   `json:"checkpoint"`
	LeafInputs   [][]byte `json:"leaf_inputs"`
	LeafHashes   [][]byte `json:"leaf_hashes"`
	Records      [][]byte `json:"records"`
	Inclusion    []struct {
		Index    uint64   `json:"index"`
		Size     uint64   `json:"size"`
		LeafHash []byte   `json:"leaf_hash"`
		Proof    [][]byte `json:"proof"`
		Root     []byte   `json:"root"`
	} `json:"inclusion"`
	Consistency []struct {
		First      uint64   `json:"first"`
		Second     uint64   `json:"second"`
		Proof      [][]byte `json:"proof"`
		FirstRoot  []byte   `json:"first_root"`
		SecondRoot []byte   `json:"second_root"`
	} `json:"consistency"`
}

// extendsInput is the file of "tlogverify extends"; proof hashes are standard base64.
type extendsInput struct {
	Origin       string   `json:"origin"`
	LogVKey      string   `json:"log_vkey"`
	CosignerVKey string   `json:"cosigner_vkey"`
	Witnessed    string   `json:"witnessed"`
	Latest       string   `json:"latest"`
	Proof        [][]byte `json:"proof"`
}

func extends(path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		fail("read", "%v", err)
	}
	var in extendsInput
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		fail("json", "%v", err)
	}
	logV, err := note.NewVerifier(in.LogVKey)
	if err != nil {
		fail("log_vkey", "%v", err)
	}
	cosV, err := fnote.NewVerifierForCosignatureV1(in.CosignerVKey)
	if err != nil {
		fail("cosigner_vkey", "%v", err)
	}
	old, _, oldNote, err := log.ParseCheckpoint([]byte(in.Witnessed), in.Origin, logV, cosV)
	if err != nil {
		fail("witnessed", "%v", err)
	}
	cosigned := false
	for _, s := range oldNote.Sigs {
		if s.Name == cosV.Name() && s.Hash == cosV.KeyHash() {
			cosigned = true
		}
	}
	if !cosigned {
		fail("witnessed", "no verified cosignature by %s+%08x", cosV.Name(), cosV.KeyHash())
	}
	latest, _, _, err := log.ParseCheckpoint([]byte(in.Latest), in.Origin, logV)
	if err != nil {
		fail("latest", "%v", err)
	}
	if latest.Size < old.Size {
		fail("consistency", "the log's latest tree (%d) is smaller than the witnessed one (%d)", latest.Size, old.Size)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old.Size, latest.Size, in.Proof, old.Hash, latest.Hash); err != nil {
		fail("consistency", "the log's tree of %d does not extend the witnessed tree of %d: %v", latest.Size, old.Size, err)
	}
	summary, _ := json.Marshal(map[string]any{
		"ok": true, "origin": old.Origin, "witnessed": old.Size, "latest": latest.Size,
	})
	fmt.Println(string(summary))
}

func fail(check string, format string, args ...any) {
	fmt.Printf("FAIL %s: %s\n", check, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// rootsOf returns the root of every prefix of the leaves (index = tree size), from a compact
// range: an implementation of the tree head independent of proof verification.
func rootsOf(leafHashes [][]byte) ([][]byte, error) {
	rf := compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}
	r := rf.NewEmptyRange(0)
	roots := [][]byte{rfc6962.DefaultHasher.EmptyRoot()}
	for _, h := range leafHashes {
		if err := r.Append(h, nil); err != nil {
			return nil, err
		}
		root, err := r.GetRootHash(nil)
		if err != nil {
			return nil, err
		}
		roots = append(roots, root)
	}
	return roots, nil
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "extends" {
		extends(os.Args[2])
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tlogverify FILE.json | tlogverify extends FILE.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("read", "%v", err)
	}
	var in input
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		fail("json", "%v", err)
	}

	// Keys. x/mod's NewVerifier recomputes the key ID from name, type and key; formats'
	// cosignature verifier derives it (type 0x04) but does not compare it with the text's.
	logV, err := note.NewVerifier(in.LogVKey)
	if err != nil {
		fail("log_vkey", "%v", err)
	}
	cosV, err := fnote.NewVerifierForCosignatureV1(in.CosignerVKey)
	if err != nil {
		fail("cosigner_vkey", "%v", err)
	}
	parts := strings.SplitN(in.CosignerVKey, "+", 3)
	if id, err := strconv.ParseUint(parts[1], 16, 32); err != nil || uint32(id) != cosV.KeyHash() {
		fail("cosigner_vkey", "key ID %s, want %08x", parts[1], cosV.KeyHash())
	}

	// The checkpoint: the log's signature, the origin, then the cosignature.
	cp, ext, n, err := log.ParseCheckpoint([]byte(in.Checkpoint), in.Origin, logV, cosV)
	if err != nil {
		fail("checkpoint", "%v", err)
	}
	if len(ext) != 0 {
		fail("checkpoint", "unexpected extension lines %q", ext)
	}
	var cosigned bool
	for _, s := range n.Sigs {
		if s.Name == cosV.Name() && s.Hash == cosV.KeyHash() {
			if _, err := fnote.CoSigV1Timestamp(s); err != nil {
				fail("cosignature", "%v", err)
			}
			cosigned = true
		}
	}
	if !cosigned {
		fail("cosignature", "no verified cosignature by %s+%08x", cosV.Name(), cosV.KeyHash())
	}

	// Leaves: RFC 6962 leaf hashes of the leaf inputs; each input is the label, 32 bytes of
	// record_digest and SHA-256 of the whole record (record_digest itself needs Avro: the
	// Python tests pin it).
	if uint64(len(in.LeafHashes)) != cp.Size || len(in.LeafInputs) != len(in.LeafHashes) {
		fail("leaves", "%d leaf hashes and %d inputs for a tree of %d", len(in.LeafHashes), len(in.LeafInputs), cp.Size)
	}
	for i, li := range in.LeafInputs {
		if got := rfc6962.DefaultHasher.HashLeaf(li); !bytes.Equal(got, in.LeafHashes[i]) {
			fail(fmt.Sprintf("leaf[%d]", i), "leaf hash %x, want %x", in.LeafHashes[i], got)
		}
	}
	for i, rec := range in.Records {
		li := in.LeafInputs[i]
		sum := sha256.Sum256(rec)
		if len(li) != len(leafLabel)+64 || !bytes.HasPrefix(li, []byte(leafLabel)) || !bytes.Equal(li[len(leafLabel)+32:], sum[:]) {
			fail(fmt.Sprintf("record[%d]", i), "leaf input is not label || record_digest || SHA-256(record)")
		}
	}
	roots, err := rootsOf(in.LeafHashes)
	if err != nil {
		fail("roots", "%v", err)
	}
	if !bytes.Equal(roots[cp.Size], cp.Hash) {
		fail("checkpoint_root", "root %x, the leaves give %x", cp.Hash, roots[cp.Size])
	}

	// Proofs: verified against the roots they claim, then those roots against the leaves.
	for i, p := range in.Inclusion {
		check := fmt.Sprintf("inclusion[%d]", i)
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, p.Size, p.LeafHash, p.Proof, p.Root); err != nil {
			fail(check, "%v", err)
		}
		if p.Size > cp.Size || !bytes.Equal(p.Root, roots[p.Size]) || !bytes.Equal(p.LeafHash, in.LeafHashes[p.Index]) {
			fail(check, "proves a leaf or root that is not the log's")
		}
	}
	for i, p := range in.Consistency {
		check := fmt.Sprintf("consistency[%d]", i)
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, p.First, p.Second, p.Proof, p.FirstRoot, p.SecondRoot); err != nil {
			fail(check, "%v", err)
		}
		if p.Second > cp.Size || !bytes.Equal(p.FirstRoot, roots[p.First]) || !bytes.Equal(p.SecondRoot, roots[p.Second]) {
			fail(check, "proves roots that are not the log's")
		}
	}

	summary, _ := json.Marshal(map[string]any{
		"ok": true, "origin": cp.Origin, "size": cp.Size, "signatures": len(n.Sigs),
		"inclusion": len(in.Inclusion), "consistency": len(in.Consistency),
	})
	fmt.Println(string(summary))
}
