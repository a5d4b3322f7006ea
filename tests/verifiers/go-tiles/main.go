// Command tilesverify reads a C2SP tlog-tiles log over HTTP with the Go ecosystem's own
// libraries, holding nothing but the log's prefix, its origin and its verifier key: what a
// witness or a monitor that has never seen evidence-store does.
//
//	tilesverify -prefix URL -vkey VKEY -origin ORIGIN [-entries] [-sizes 1,5,37]
//
// It fetches <prefix>/checkpoint, opens it with golang.org/x/mod/sumdb/note and the log's
// key, reads the tree's hash tiles (tlog.TileHashReader) and checks that tlog.TreeHash of the
// checkpoint's size is its root. With -entries it fetches every entry bundle
// (<prefix>/tile/entries/...), checks that the entries' RFC 6962 tree hash is the
// checkpoint's root, and that the level-0 tiles hold the entries' leaf hashes. With -sizes
// it prints the root of the tree of each of those sizes computed from the tiles, for the
// caller to compare with checkpoints of those sizes. Tile paths are golang.org/x/mod's
// (tile/8/L/N) without the height, which is tlog-tiles' spelling.
//
// It prints one JSON summary line and exits 0 when every check passes, or prints
// "FAIL <check>: <reason>" and exits 1 at the first failure.
package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const height = 8

func fail(check string, err error) {
	fmt.Printf("FAIL %s: %v\n", check, err)
	os.Exit(1)
}

// client fetches <prefix>/<path>; every answer but a 200 is an error.
type client struct {
	prefix  string
	http    *http.Client
	fetches int
}

func (c *client) get(path string) ([]byte, error) {
	c.fetches++
	resp, err := c.http.Get(c.prefix + "/" + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// tilePath is t's tlog-tiles path: x/mod's tile/<H>/<L>/<N>[.p/<W>] without the height,
// the data level (-1) named "entries".
func tilePath(t tlog.Tile) string {
	p := t.Path()
	prefix := fmt.Sprintf("tile/%d/", t.H)
	if !strings.HasPrefix(p, prefix) {
		panic("unexpected tile path " + p)
	}
	p = "tile/" + strings.TrimPrefix(p, prefix)
	return strings.Replace(p, "tile/data/", "tile/entries/", 1)
}

// tiles is a tlog.TileReader over HTTP; tiles read once are kept in memory.
type tiles struct {
	c     *client
	cache map[string][]byte
}

func (r *tiles) Height() int { return height }

func (r *tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		p := tilePath(t)
		data, ok := r.cache[p]
		if !ok {
			var err error
			if data, err = r.c.get(p); err != nil {
				return nil, err
			}
			if len(data) != t.W*tlog.HashSize {
				return nil, fmt.Errorf("%s: %d bytes, want %d", p, len(data), t.W*tlog.HashSize)
			}
			r.cache[p] = data
		}
		out[i] = data
	}
	return out, nil
}

func (r *tiles) SaveTiles([]tlog.Tile, [][]byte) {}

// parseCheckpoint reads a tlog-checkpoint body: origin, size, base64 root, extension lines.
func parseCheckpoint(text string) (string, int64, tlog.Hash, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var root tlog.Hash
	if len(lines) < 3 {
		return "", 0, root, fmt.Errorf("a checkpoint has at least 3 lines, got %d", len(lines))
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return "", 0, root, fmt.Errorf("bad size line %q", lines[1])
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		return "", 0, root, fmt.Errorf("bad root line %q", lines[2])
	}
	copy(root[:], raw)
	return lines[0], size, root, nil
}

// memHashes is a tlog.HashReader over stored hashes held in memory.
type memHashes []tlog.Hash

func (m memHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(m)) {
			return nil, fmt.Errorf("hash %d not stored", x)
		}
		out[i] = m[x]
	}
	return out, nil
}

// bundle splits an entry bundle into its uint16-length-prefixed entries.
func bundle(data []byte) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 2 {
			return nil, fmt.Errorf("the bundle ends inside a length")
		}
		n := int(binary.BigEndian.Uint16(data))
		if len(data) < 2+n {
			return nil, fmt.Errorf("the bundle ends inside entry %d", len(out))
		}
		out = append(out, data[2:2+n])
		data = data[2+n:]
	}
	return out, nil
}

func main() {
	prefix := flag.String("prefix", "", "the log's URL prefix (…/log)")
	vkey := flag.String("vkey", "", "the log's note verifier key")
	origin := flag.String("origin", "", "the checkpoint origin the log must sign")
	withEntries := flag.Bool("entries", false, "read and check every entry bundle")
	sizes := flag.String("sizes", "", "comma-separated tree sizes whose roots to print")
	flag.Parse()

	c := &client{prefix: strings.TrimSuffix(*prefix, "/"), http: &http.Client{Timeout: 30 * time.Second}}
	verifier, err := note.NewVerifier(*vkey)
	if err != nil {
		fail("vkey", err)
	}
	raw, err := c.get("checkpoint")
	if err != nil {
		fail("checkpoint", err)
	}
	n, err := note.Open(raw, note.VerifierList(verifier))
	if err != nil {
		fail("checkpoint signature", err)
	}
	gotOrigin, size, root, err := parseCheckpoint(n.Text)
	if err != nil {
		fail("checkpoint", err)
	}
	if gotOrigin != *origin {
		fail("checkpoint origin", fmt.Errorf("%q, want %q", gotOrigin, *origin))
	}

	tr := &tiles{c: c, cache: map[string][]byte{}}
	reader := tlog.TileHashReader(tlog.Tree{N: size, Hash: root}, tr)
	th, err := tlog.TreeHash(size, reader)
	if err != nil {
		fail("tree hash from tiles", err)
	}
	if th != root {
		fail("tree hash from tiles", fmt.Errorf("%s, checkpoint says %s", th, root))
	}

	summary := map[string]any{"ok": true, "origin": gotOrigin, "size": size,
		"root": base64.StdEncoding.EncodeToString(root[:]), "signatures": len(n.Sigs),
		"unverified_signatures": len(n.UnverifiedSigs)}

	if *sizes != "" {
		roots := map[string]string{}
		for _, s := range strings.Split(*sizes, ",") {
			k, err := strconv.ParseInt(s, 10, 64)
			if err != nil || k < 1 || k > size {
				fail("sizes", fmt.Errorf("%q is not a size in [1, %d]", s, size))
			}
			h, err := tlog.TreeHash(k, reader)
			if err != nil {
				fail("tree hash of size "+s, err)
			}
			roots[s] = base64.StdEncoding.EncodeToString(h[:])
		}
		summary["roots"] = roots
	}

	if *withEntries {
		// The entries are checked against the root by hashing them into a tree of our own,
		// not through the tiles: tlog.TileHashReader does not authenticate every tile it
		// returns (a full tile read after the tree-hash tiles is checked against its parent
		// only when the tree hash needed as many tiles as it has subtrees, so for most
		// sizes it is not: x/mod v0.37.0 tile.go, "Authenticate full tiles against their
		// parents" starts at len(stx) though the tree-hash tiles were deduplicated). The
		// leaf hash tiles are then compared with the entries' leaf hashes.
		all := sha256.New() // of every entry as a bundle holds it: the test's own digest
		var stored memHashes
		var leafTiles []tlog.Hash
		for start := int64(0); start < size; start += 1 << height {
			w := min(size-start, 1<<height)
			t := tlog.Tile{H: height, L: -1, N: start >> height, W: int(w)}
			data, err := c.get(tilePath(t))
			if err != nil {
				fail("entry bundle", err)
			}
			entries, err := bundle(data)
			if err != nil {
				fail("entry bundle "+tilePath(t), err)
			}
			if int64(len(entries)) != w {
				fail("entry bundle "+tilePath(t), fmt.Errorf("%d entries, want %d", len(entries), w))
			}
			for i, e := range entries {
				hs, err := tlog.StoredHashes(start+int64(i), e, stored)
				if err != nil {
					fail("entries", err)
				}
				stored = append(stored, hs...)
			}
			indexes := make([]int64, w)
			for i := range indexes {
				indexes[i] = tlog.StoredHashIndex(0, start+int64(i))
			}
			leaves, err := reader.ReadHashes(indexes)
			if err != nil {
				fail("leaf hashes of "+tilePath(t), err)
			}
			leafTiles = append(leafTiles, leaves...)
			all.Write(data)
		}
		eh, err := tlog.TreeHash(size, stored)
		if err != nil {
			fail("entries", err)
		}
		if eh != root {
			fail("entries", fmt.Errorf("the %d entries hash to %s, the checkpoint's root is %s", size, eh, root))
		}
		for i, leaf := range leafTiles {
			if leaf != stored[tlog.StoredHashIndex(0, int64(i))] {
				n := int64(i) >> height
				t := tlog.Tile{H: height, L: 0, N: n, W: int(min(size-n<<height, 1<<height))}
				fail("leaf tile", fmt.Errorf("%s holds another hash than entry %d's leaf hash", tilePath(t), i))
			}
		}
		summary["entries"] = size
		summary["entries_sha256"] = hex.EncodeToString(all.Sum(nil))
	}
	summary["fetches"] = c.fetches
	out, _ := json.Marshal(summary)
	fmt.Println(string(out))
}
