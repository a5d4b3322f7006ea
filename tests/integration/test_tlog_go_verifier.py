"""Our tree heads, proofs, checkpoints and cosignatures, checked by the Go ecosystem's libraries.

tests/verifiers/go-tlog (golang.org/x/mod/sumdb/note, github.com/transparency-dev/formats,
github.com/transparency-dev/merkle, pinned by its go.sum) reads a JSON file that
evidence_contract.merkle and evidence_contract.note wrote: a chain of sealed records, their
leaf inputs and hashes, a checkpoint signed by the log's key and cosigned by a witness, both
verifier keys, and inclusion and consistency proofs. It must accept all of it, and reject each
forgery below at the check that should catch it; our own verifiers reject the same forgeries.

The build is cached under build/verifiers/go-tlog/<hash of the sources>, so a warm run builds
nothing. Go comes from tests.fixtures.toolchains (PATH, /usr/local/go, or the toolchain module
from the Go module proxy); without one the test fails: it is never skipped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

import evidence_contract as contract
from evidence_contract import vectors
from evidence_contract.merkle import (
    CompactRange,
    MerkleTree,
    ProofError,
    leaf_hash,
    leaf_input,
    verify_consistency,
    verify_inclusion,
)
from evidence_contract.note import (
    SIG_COSIGNATURE_V1,
    SIG_ED25519,
    Checkpoint,
    NoteError,
    SignerKey,
    format_checkpoint,
    format_note,
    format_vkey,
    open_checkpoint,
    parse_vkey,
    sign,
)
from tests.fixtures import toolchains
from tests.fixtures.builds import one_builder

BUILD_TIMEOUT = 600  # a cold build downloads the pinned modules
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 120)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "tests" / "verifiers" / "go-tlog"
CACHE = ROOT / "build" / "verifiers" / "go-tlog"  # build/ is gitignored

ORIGIN = "log.evidence-store.example/tenant-a:support.chat"
WITNESS = "witness.example/w1"
SIZE = 37  # not a power of two, with perfect subtrees of 32, 4 and 1
COSIGNED_AT = 1_700_000_000


def _key(name: str, sig_type: int, label: bytes) -> SignerKey:
    # Fixed seeds: a failure reproduces byte for byte.
    return SignerKey(name, sig_type, hashlib.sha256(b"go-tlog test key " + label).digest())


LOG = _key(ORIGIN, SIG_ED25519, b"log")
COSIGNER = _key(WITNESS, SIG_COSIGNATURE_V1, b"witness")


def _sources_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(SRC.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(SRC).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def tlogverify() -> Path:
    with one_builder(CACHE):
        return _build_tlogverify()


def _build_tlogverify() -> Path:
    try:
        go = toolchains.go()
    except OSError as e:  # no Go installed and the toolchain could not be fetched
        pytest.fail(f"no Go toolchain for the independent tlog verifier (Go 1.25+): {e}")
    final = CACHE / _sources_hash()
    binary = final / "tlogverify"
    if binary.exists():
        return binary
    tmp = CACHE / f".tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        # go.sum pins every module; -mod=readonly fails rather than change it, and
        # GOTOOLCHAIN=local fails on a too-old Go rather than download another.
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        with toolchains.one_go_build():
            proc = subprocess.run([go, "build", "-trimpath", "-o", str(tmp / "tlogverify"), "."],
                                  cwd=SRC, env=env, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT)
        if proc.returncode != 0:
            pytest.fail(f"go build (tests/verifiers/go-tlog) failed:\n{proc.stderr[-6000:]}")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in CACHE.iterdir():
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return binary


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _records(n: int) -> list[bytes]:
    """A chain of ``n`` sealed records, committed and failed captures in turn."""
    out, head = [], contract.GENESIS
    writer = {"writer_id": "writer-0", "transactional_id": "evidence-writer-0", "version": "0.2.0"}
    for seq in range(n):
        body = vectors.committed_event() if seq % 2 == 0 else vectors.failed_event()
        record = contract.seal(body, seq, head, 1_700_000_000_000_000 + seq, writer, 0, seq)
        head = record["seal"]["record_digest"]
        out.append(contract.encode("EvidenceRecord", record))
    return out


def _checkpoint_note(root: bytes, size: int = SIZE, log: SignerKey = LOG) -> str:
    text = format_checkpoint(Checkpoint(ORIGIN, size, root))
    return format_note(text, [sign(log, text), sign(COSIGNER, text, timestamp=COSIGNED_AT)]).decode()


INCLUSION = [(i, SIZE) for i in range(SIZE)] + [(0, 1), (1, 2), (6, 7), (15, 16), (16, 17), (30, 32)]
CONSISTENCY = [(m, SIZE) for m in range(1, SIZE + 1)] + [(1, 2), (3, 7), (16, 32), (31, 33)]


@pytest.fixture(scope="module")
def log_doc() -> dict[str, Any]:
    records = _records(SIZE)
    inputs = [leaf_input(r) for r in records]
    hashes = [leaf_hash(li) for li in inputs]
    tree = MerkleTree(hashes)
    frontier = CompactRange()
    frontier.extend(hashes)
    assert frontier.root() == tree.root()
    return {
        "origin": ORIGIN,
        "log_vkey": format_vkey(LOG.verifier),
        "cosigner_vkey": format_vkey(COSIGNER.verifier),
        "checkpoint": _checkpoint_note(tree.root()),
        "leaf_inputs": [_b64(li) for li in inputs],
        "leaf_hashes": [_b64(h) for h in hashes],
        "records": [_b64(r) for r in records],
        "inclusion": [{"index": i, "size": n, "leaf_hash": _b64(hashes[i]), "root": _b64(tree.root(n)),
                       "proof": [_b64(p) for p in tree.inclusion_proof(i, n)]} for i, n in INCLUSION],
        "consistency": [{"first": m, "second": n, "first_root": _b64(tree.root(m)),
                         "second_root": _b64(tree.root(n)),
                         "proof": [_b64(p) for p in tree.consistency_proof(m, n)]} for m, n in CONSISTENCY],
        "_tree": tree,  # for the forgeries; not written
    }


def _run(binary: Path, doc: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    path = tmp_path / "tlog.json"
    path.write_text(json.dumps({k: v for k, v in doc.items() if not k.startswith("_")}))
    proc = subprocess.run([str(binary), str(path)], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


def test_go_verifies_checkpoint_cosignature_leaves_and_proofs(tlogverify, log_doc, tmp_path):
    rc, out = _run(tlogverify, log_doc, tmp_path)
    assert rc == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary == {"ok": True, "origin": ORIGIN, "size": SIZE, "signatures": 2,
                       "inclusion": len(INCLUSION), "consistency": len(CONSISTENCY)}
    # ... and so do we.
    cp, note = open_checkpoint(log_doc["checkpoint"], LOG.verifier, [COSIGNER.verifier])
    assert cp.root_hash == log_doc["_tree"].root() and len(note.verified) == 2


def test_go_verifies_an_mldsa44_cosignature(tlogverify, log_doc, tmp_path):
    from evidence_contract.note import SIG_MLDSA44

    pq = _key(WITNESS + "-pq", SIG_MLDSA44, b"ML-DSA-44 witness")
    text = format_checkpoint(Checkpoint(ORIGIN, SIZE, log_doc["_tree"].root()))
    note = format_note(text, [sign(LOG, text), sign(pq, text, timestamp=COSIGNED_AT)]).decode()
    doc = {**log_doc, "cosigner_vkey": format_vkey(pq.verifier), "checkpoint": note}
    rc, out = _run(tlogverify, doc, tmp_path)
    assert rc == 0, out
    _tamper_cosignature_time(doc)  # the timestamp is signed: Go refuses the note
    rc, out = _run(tlogverify, doc, tmp_path)
    assert rc == 1 and out.startswith("FAIL checkpoint"), out


def _flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[0] ^= 1
    return _b64(bytes(raw))


def _tamper_checkpoint_root(doc):
    text, sigs = doc["checkpoint"].split("\n\n", 1)
    origin, size, root = text.split("\n")
    doc["checkpoint"] = f"{origin}\n{size}\n{_flip(root)}\n\n{sigs}"


def _resign_wrong_root(doc):
    doc["checkpoint"] = _checkpoint_note(bytes(32))


def _wrong_log_key(doc):
    doc["log_vkey"] = format_vkey(_key(ORIGIN, SIG_ED25519, b"another log").verifier)


def _wrong_cosigner_key(doc):
    doc["cosigner_vkey"] = format_vkey(_key(WITNESS, SIG_COSIGNATURE_V1, b"another witness").verifier)


def _tamper_cosignature_time(doc):
    text, sigs = doc["checkpoint"].split("\n\n", 1)
    log_line, witness_line = sigs.splitlines()
    prefix, b64 = witness_line.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(b64))
    raw[4 + 7] ^= 1  # the timestamp's last byte, after the key ID
    doc["checkpoint"] = f"{text}\n\n{log_line}\n{prefix} {_b64(bytes(raw))}\n"


def _inclusion_for_another_size(doc):
    tree, entry = doc["_tree"], doc["inclusion"][5]  # leaf 5 of SIZE
    entry["proof"] = [_b64(p) for p in tree.inclusion_proof(5, SIZE - 1)]


def _tamper_inclusion_root(doc):
    doc["inclusion"][3]["root"] = _flip(doc["inclusion"][3]["root"])


def _consistency_for_another_size(doc):
    tree, entry = doc["_tree"], doc["consistency"][10]  # 11 -> SIZE
    entry["proof"] = [_b64(p) for p in tree.consistency_proof(11, SIZE - 1)]


def _tamper_consistency_first_root(doc):
    doc["consistency"][20]["first_root"] = _flip(doc["consistency"][20]["first_root"])


def _tamper_leaf(doc):
    doc["leaf_hashes"][9] = _flip(doc["leaf_hashes"][9])


def _tamper_record(doc):
    doc["records"][4] = _flip(doc["records"][4])


FORGERIES: list[tuple[str, Callable[[dict], None], str]] = [
    ("tampered checkpoint root", _tamper_checkpoint_root, "checkpoint"),
    ("validly signed wrong root", _resign_wrong_root, "checkpoint_root"),
    ("wrong log key", _wrong_log_key, "checkpoint"),
    ("wrong cosigner key", _wrong_cosigner_key, "cosignature"),
    ("tampered cosignature timestamp", _tamper_cosignature_time, "checkpoint"),
    ("inclusion proof for another size", _inclusion_for_another_size, "inclusion[5]"),
    ("tampered inclusion root", _tamper_inclusion_root, "inclusion[3]"),
    ("consistency proof for another size", _consistency_for_another_size, "consistency[10]"),
    ("tampered consistency first root", _tamper_consistency_first_root, "consistency[20]"),
    ("tampered leaf hash", _tamper_leaf, "leaf[9]"),
    ("tampered record", _tamper_record, "record[4]"),
]


def _python_rejects(doc: dict[str, Any]) -> bool:
    """Whether our own verifiers reject the document (what Go checks, in Python)."""
    d = base64.b64decode
    try:
        cp, note = open_checkpoint(doc["checkpoint"], parse_vkey(doc["log_vkey"]),
                                   [parse_vkey(doc["cosigner_vkey"])])
        if len(note.verified) != 2:  # the cosignature is required here, as in Go
            return True
        hashes = [d(h) for h in doc["leaf_hashes"]]
        if any(leaf_hash(d(li)) != h for li, h in zip(doc["leaf_inputs"], hashes)):
            return True
        if any(leaf_input(d(r)) != d(li) for r, li in zip(doc["records"], doc["leaf_inputs"])):
            return True
        tree = MerkleTree(hashes)
        if tree.root() != cp.root_hash:
            return True
        for p in doc["inclusion"]:
            verify_inclusion(p["index"], p["size"], d(p["leaf_hash"]), [d(x) for x in p["proof"]],
                             d(p["root"]))
            if d(p["root"]) != tree.root(p["size"]):
                return True
        for p in doc["consistency"]:
            verify_consistency(p["first"], p["second"], [d(x) for x in p["proof"]],
                               d(p["first_root"]), d(p["second_root"]))
            if (d(p["first_root"]), d(p["second_root"])) != (tree.root(p["first"]), tree.root(p["second"])):
                return True
    except (NoteError, ProofError, contract.DecodeError):
        return True
    return False


@pytest.mark.parametrize("name,forge,check", FORGERIES, ids=[f[0] for f in FORGERIES])
def test_go_rejects_each_forgery_where_it_should(tlogverify, log_doc, tmp_path, name, forge, check):
    doc = json.loads(json.dumps({k: v for k, v in log_doc.items() if not k.startswith("_")}))
    doc["_tree"] = log_doc["_tree"]
    forge(doc)
    rc, out = _run(tlogverify, doc, tmp_path)
    assert rc == 1, f"Go accepted a forgery ({name}):\n{out}"
    assert out.startswith(f"FAIL {check}: "), out
    assert _python_rejects(doc), f"our verifiers accepted a forgery Go rejects ({name})"


def test_python_accepts_what_go_accepts(log_doc):
    assert not _python_rejects(log_doc)
