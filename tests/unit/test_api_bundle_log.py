"""api.routers.bundles.log_path alone, over a fake read model: which entry and which deployment
checkpoint a bundle's path takes, and that a projection whose hashes do not prove it serves
no path; what it serves verifies with evidence_contract.bundle."""

from __future__ import annotations

import asyncio
import base64

from api.evidence import Served
from api.routers.bundles import log_path
from evidence_contract.bundle import Trust, parse_bundle, verify_bundle
from evidence_contract.merkle import CompactRange, MerkleTree, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, format_checkpoint, format_note, generate_signer, sign,
)
from tests.unit.test_schemas_bundle import FIRST, LOG, STREAM, TREE, doc

WITNESS = generate_signer("witness.example/log-w1", SIG_COSIGNATURE_V1)


def signed(origin: str, size: int, root: bytes, signer=LOG) -> bytes:
    text = format_checkpoint(Checkpoint(origin, size, root))
    return format_note(text, [sign(signer, text)])


FORGED = signed(f"{LOG.name}/{STREAM}", 1, TREE.root(1), generate_signer(LOG.name))
ENTRIES = [signed(f"{LOG.name}/other:a", 3, b"\x03" * 32), FORGED,
           signed(f"{LOG.name}/{STREAM}", 1, TREE.root(1)),
           signed(f"{LOG.name}/{STREAM}", 2, TREE.root(2))]
DEPLOYMENT = MerkleTree([leaf_hash(e) for e in ENTRIES])


def deployment(size: int) -> tuple[int, bytes, bytes, list[str]]:
    text = format_checkpoint(Checkpoint(LOG.name, size, DEPLOYMENT.root(size)))
    cosig = sign(WITNESS, text, 1_796_000_000).line()
    return size, DEPLOYMENT.root(size), format_note(text, [sign(LOG, text)]), [cosig]


class FakeDb:
    def __init__(self, cosigned, latest, lie: bool = False):
        self.cosigned, self.latest, self.lie = cosigned, latest, lie
        self.log = {(lv, i): h for lv, i, h in CompactRange().extend_nodes(
            leaf_hash(e) for e in ENTRIES)}
        self.stream = {(lv, i): h for lv, i, h in CompactRange().extend_nodes(
            TREE.leaf_hash(i) for i in range(2))}

    async def log_cover(self, stream, seq, max_cosignatures, candidates):
        if self.latest is None:
            return None, None, []
        found = sorted((int(e.split(b"\n")[1]), i, e) for i, e in enumerate(ENTRIES)
                       if e.startswith(f"{LOG.name}/{stream}\n".encode())
                       and i < self.latest[0] and int(e.split(b"\n")[1]) >= seq)
        return self.cosigned, self.latest, [(i, n, e) for n, i, e in found][:candidates]

    async def log_path_nodes(self, log_wanted, stream, stream_wanted):
        log = {w: (b"\x00" * 32 if self.lie else self.log[w]) for w in log_wanted
               if w in self.log}
        return log, {w: self.stream[w] for w in stream_wanted if w in self.stream}


def served(seq: int = 1) -> Served:
    d = doc(seq)
    return Served(STREAM, seq, "e", None, None, base64.b64decode(d["record_b64"]), {},
                  b"", bytes.fromhex(d["leaf_hash"]), "projection", None, False)


def path(db, stream_size: int = 2):
    return asyncio.run(log_path(db, LOG.verifier, served(), stream_size))


def test_the_first_entry_that_opens_and_the_latest_cosigned_checkpoint_holding_it():
    got, reason = path(FakeDb(deployment(3), deployment(4)))
    assert reason is None
    assert got["entry_index"] == 2  # entry 1 is of the stream but not signed by the log key
    assert got["entry"].encode() == ENTRIES[2]
    assert got["checkpoint"].startswith(f"{LOG.name}\n3\n")  # cosigned, though 4 is latest
    assert got["record_inclusion"]["tree_size"] == 1
    v = verify_bundle(parse_bundle(doc(1, log=got)),
                      Trust(LOG.verifier, log_witnesses=(WITNESS.verifier,), min_log_witnesses=1))
    assert (v.log.entry_index, v.log.checkpoint.size) == (2, 3) and v.record == FIRST


def test_the_latest_when_no_cosigned_checkpoint_holds_the_entry():
    got, reason = path(FakeDb(deployment(2), deployment(4)))
    assert reason is None and got["checkpoint"].startswith(f"{LOG.name}\n4\n")
    got, _ = path(FakeDb(None, deployment(4)))
    assert got["checkpoint"].startswith(f"{LOG.name}\n4\n")


def test_no_path_and_why():
    none, reason = path(FakeDb(None, None))
    assert none is None and reason.startswith("the deployment log has no checkpoint yet")
    none, reason = path(FakeDb(None, deployment(2)))  # only the forged entry is within 2
    assert none is None and f"no checkpoint of stream {STREAM} covering #1" in reason
    none, reason = path(FakeDb(deployment(4), deployment(4), lie=True))
    assert none is None and "do not prove" in reason


def test_a_path_the_projection_does_not_prove_is_logged_as_an_event(caplog):
    with caplog.at_level("WARNING", logger="evidence.api"):
        path(FakeDb(deployment(4), deployment(4), lie=True))
    [line] = [r for r in caplog.records if r.getMessage() == "bundle_log_path_unproven"]
    assert line.levelname == "WARNING"
    assert {k: line.evidence_fields[k] for k in ("stream", "seq", "entry_index", "tree_size")} \
        == {"stream": STREAM, "seq": 1, "entry_index": 2, "tree_size": 4}
    assert line.evidence_fields["error"]


def test_the_entry_of_the_bundles_size_reuses_its_inclusion():
    got, _ = path(FakeDb(deployment(4), deployment(4)), stream_size=1)
    assert got["entry_index"] == 2 and got["record_inclusion"] is None
