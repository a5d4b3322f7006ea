"""Response bodies of the REST API's proofs: RFC 9162 inclusion and consistency proofs, the
evidence bundle (a record with every proof a reader needs offline), and a witness's accepted
cosignature. Re-exported by :mod:`api.models`, where the routes import them from."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, WithJsonSchema

__all__ = ["BundleConsistency", "BundleInclusion", "BundleLog", "ConsistencyProof",
           "CosignatureAccepted", "EvidenceBundle", "HexHash", "InclusionProof", "LogInclusion"]


_HEX_HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
HexHash = Annotated[str, WithJsonSchema(_HEX_HASH)]


class InclusionProof(BaseModel):
    """RFC 9162 §2.1.3 inclusion proof of record ``seq`` (leaf ``seq - 1``)."""

    leaf_index: int = Field(description="seq - 1")
    tree_size: int = Field(description="the size of the tree the proof is for")
    leaf_hash: HexHash = Field(description="SHA-256(0x00 || leaf_input) of the record, hex")
    hashes: list[HexHash] = Field(description="the inclusion path, leaf up (RFC 9162 order)")


class ConsistencyProof(BaseModel):
    """RFC 9162 §2.1.4 consistency proof from the tree of ``first`` leaves to ``second``."""

    first: int
    second: int
    tree_size: int = Field(description="= second")
    hashes: list[HexHash] = Field(description="the proof nodes, hex (RFC 9162 order)")


class BundleInclusion(BaseModel):
    leaf_index: int = Field(description="seq - 1")
    tree_size: int = Field(description="the size of the bundle's checkpoint")
    hashes: list[HexHash] = Field(description="the inclusion path, leaf up (RFC 9162 order)")


class BundleConsistency(BaseModel):
    first: int = Field(description="the known_size asked for")
    second: int = Field(description="the size of the bundle's checkpoint")
    hashes: list[HexHash] = Field(description="the proof nodes, hex (RFC 9162 order)")


class LogInclusion(BaseModel):
    leaf_index: int = Field(description="the leaf's index in the tree")
    tree_size: int = Field(description="the size of the tree the proof is for")
    hashes: list[HexHash] = Field(description="the inclusion path, leaf up (RFC 9162 order)")


class BundleLog(BaseModel):
    """The path from the record to a deployment checkpoint the witnesses cosigned
    (docs/witnessing.md): record -> stream checkpoint = entry of the deployment tree ->
    deployment checkpoint."""

    entry_index: int = Field(description="the entry's index in the deployment tree")
    entry: str = Field(description="the entry: the first checkpoint of the record's stream "
                                   "that covers the record, verbatim as the log signed it")
    record_inclusion: LogInclusion | None = Field(description=(
        "the record's path in the entry's tree (leaf seq - 1); null when the entry is of "
        "the bundle's checkpoint size: `inclusion` is that path"))
    checkpoint: str = Field(description="the deployment checkpoint (origin = the log key's "
                                        "name) with every cosignature held for it")
    entry_inclusion: LogInclusion = Field(description=(
        "the path of the entry's leaf, SHA-256(0x00 || entry), in the deployment tree of the "
        "checkpoint's size"))


class EvidenceBundle(BaseModel):
    """A record and what proves it (``evidence_contract.bundle``): verify it with the log's
    key; nothing in it needs trusting the API."""

    stream: str
    seq: int
    event_id: str
    content_type: str | None = Field(description="the recorded response Content-Type")
    content: str = Field(description="plain | encrypted | redacted (record_b64 withheld)")
    record_b64: str | None = Field(description="the log message verbatim (single-object "
                                               "Avro); null on a redacted stream")
    leaf_hash: HexHash = Field(description="the record's Merkle leaf hash")
    source: str = Field(description="projection, or log when the projected row failed the "
                                    "API's check and the log's copy is served")
    finding: str | None = Field(description="what the projected row got wrong, when it failed "
                                            "the API's check (null otherwise)")
    checkpoint: str | None = Field(description="the stream's latest signed checkpoint note "
                                               "with its cosignatures; null before the first")
    inclusion: BundleInclusion | None = Field(description="null until a checkpoint covers "
                                                          "the record")
    consistency: BundleConsistency | None = Field(description="with known_size: the proof "
                                                              "from that size")
    log: BundleLog | None = Field(None, description="the path to a witnessed deployment "
                                                    "checkpoint; null until one covers the "
                                                    "record (log_reason says why)")
    log_reason: str | None = Field(None, description="why log is null (null when it is not)")


class CosignatureAccepted(BaseModel):
    stream: str
    tree_size: int
    witnesses: list[str] = Field(description="the witnesses whose cosignatures were taken")
