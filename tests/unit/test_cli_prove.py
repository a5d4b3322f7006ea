"""``evidence prove``'s leaf: from the record's bytes when served, else from the hashes served
for a redacted record, checked against each other (pure: no API)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from cli.prove import LEAF_FROM_BYTES, LEAF_FROM_HASHES, _leaf
from cli.tlog import CliError
from evidence_contract import GENESIS, encode, seal
from evidence_contract.merkle import record_leaf_hash
from evidence_contract.vectors import committed_event

W = {"writer_id": "w", "transactional_id": "tx", "version": "0"}
MESSAGE = encode("EvidenceRecord", seal(committed_event(), 0, GENESIS, 1, W, 0, 0))


def _served(**over):
    """A redacted record as the API serves it: no message, its hashes instead."""
    from evidence_contract import decode

    _name, rec = decode(MESSAGE)
    return {"record_b64": None, "record_digest": rec["seal"]["record_digest"].hex(),
            "record_sha256": hashlib.sha256(MESSAGE).hexdigest(),
            "record_leaf_hash": record_leaf_hash(MESSAGE).hex(), **over}


def test_the_leaf_of_the_bytes_and_of_the_served_hashes_agree():
    leaf, source, digest = _leaf({"record_b64": base64.b64encode(MESSAGE).decode()}, 1)
    assert (leaf, source) == (record_leaf_hash(MESSAGE), LEAF_FROM_BYTES)
    assert digest == _served()["record_digest"]
    assert _leaf(_served(), 1) == (record_leaf_hash(MESSAGE), LEAF_FROM_HASHES, digest)


@pytest.mark.parametrize("over, words", [
    ({"record_leaf_hash": "00" * 32}, "is not the leaf of its record_digest"),
    ({"record_digest": "11" * 32}, "is not the leaf of its record_digest"),
    ({"record_sha256": "zz"}, "malformed"),
    ({"record_leaf_hash": None}, "served neither"),
    ({"record_b64": base64.b64encode(b"not a record").decode()}, "no sealed record"),
])
def test_served_hashes_that_disagree_are_refused(over, words):
    with pytest.raises(CliError, match=words) as e:
        _leaf(_served(**over), 7)
    assert e.value.code == 1
