"""What the API serves as evidence is checked first, and the log is the truth.

The read model is untrusted: anyone with database access can change a row. So before the API
serves a record's response (``GET /replay/{content_key}``) or the record with its proofs (the
bundle routes), it checks the row against the record it was projected from, as the log sealed
it (:func:`check_row`, pure):

- the stored message (``record_bytes``) decodes to a sealed record of the row's stream and
  seq, its ``record_digest`` recomputes over its body, and it hashes to the leaf the
  projected tree holds for it;
- the served columns agree with it: the content key, and the response bytes (for a plain
  record of a redacted stream, masked bytes are served and only the record is checked);
- for a plain record, the sealed ``response_digest`` recomputes from the response bytes.

On any disagreement (:func:`served`) the row is not served: the API reads the record from the
log itself, at the row's partition and offset, checks that it is the record the row names,
and serves *that* (``Evidence-Source: log``), counts it
(``evidence_api_projection_altered_total``), logs it, and records a ``projection_altered``
finding in the live generation's ``findings`` (``GET /streams/{stream}`` lists it; a rebuild,
``evidence projections rebuild --accept-differences``, replaces the altered generation). When
the log cannot be read (no Kafka configured, or unreachable) the answer is a 503 that says
why: evidence that fails its check is never served as if it were good.

A client that does not trust the API either verifies the bundle itself
(``evidence_contract.bundle``); this check is what keeps every other reader honest too.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Any

from evidence_contract import DecodeError, split_record
from evidence_contract.digests import record_digest as _record_digest
from evidence_contract.digests import response_digest as _response_digest
from evidence_contract.merkle import compose_leaf_input, leaf_hash

from server.logs import event_logger

from .errors import Unavailable

__all__ = ["LogReader", "SERVE_COLUMNS", "Served", "check_row", "served"]

log = event_logger("evidence.api")

SERVE_COLUMNS = ("stream", "seq", "record_digest", "event_id", "response_content_type",
                 "response_bytes", "key_id", "erased_at_us", "erasure_request_id",
                 "record_bytes", "log_partition", "log_offset", "leaf_hash")
"""A served row: the record's names, its response, ``ERASED_COLUMNS``, the stored message,
its log position and the projected tree's leaf for it (``api.db.Database.served_row``)."""

FINDING_KIND = "projection_altered"


@dataclass(frozen=True)
class Served:
    """A record as the API may serve it, checked."""

    stream: str
    seq: int
    event_id: str
    content_type: str | None
    response: bytes | None      # what GET /replay serves: masked on a redacted stream
    record: bytes               # the log message, verbatim
    body: dict[str, Any]        # its decoded body
    record_digest: bytes
    leaf_hash: bytes
    source: str                 # "projection", or "log" when the row failed its check
    problem: str | None         # why the row failed, when it did
    encrypted: bool


def _record_problem(record: bytes, stream: str, seq: int) -> tuple[str | None, Any, bytes]:
    """(problem or None, decoded record, leaf hash) of a stored message."""
    try:
        body_avro, decoded = split_record(record)
    except DecodeError as e:
        return f"its record bytes are no sealed record ({e})", None, b""
    body, seal = decoded["body"], decoded["seal"]
    if body["stream"] != stream or seal["seq"] != seq:
        return (f"its record bytes are {body['stream']} #{seal['seq']}", decoded, b"")
    sealed = bytes(seal["record_digest"])
    if _record_digest(seal["prev_digest"], seq, seal["occurred_at"], body_avro) != sealed:
        return "its record_digest does not recompute over the record's body", decoded, b""
    leaf = leaf_hash(compose_leaf_input(sealed, hashlib.sha256(record).digest()))
    if body.get("encryption") is None and body["response_bytes"] is not None \
            and body["response_digest"] is not None \
            and _response_digest(body["response_bytes"]) != bytes(body["response_digest"]):
        return "its sealed response_digest does not recompute", decoded, leaf
    return None, decoded, leaf


def check_row(row: tuple[Any, ...], content_key: bytes | None, redacted: bool
              ) -> tuple[str | None, Any, bytes]:
    """``(problem, decoded record, leaf hash)`` of a ``SERVE_COLUMNS`` row: ``problem`` is
    None when the row agrees with its record (see the module docstring). Pure."""
    r = dict(zip(SERVE_COLUMNS, row))
    problem, decoded, leaf = _record_problem(bytes(r["record_bytes"]), r["stream"], r["seq"])
    if problem is not None:
        return problem, decoded, leaf
    body, seal = decoded["body"], decoded["seal"]
    if r["leaf_hash"] is not None and bytes(r["leaf_hash"]) != leaf:
        return "its record bytes do not hash to the projected tree's leaf", decoded, leaf
    if bytes(r["record_digest"]) != bytes(seal["record_digest"]):
        return "its record_digest column is not the sealed record's", decoded, leaf
    if content_key is not None and bytes(body["content_key"]) != content_key:
        return "its content_key column is not the sealed record's", decoded, leaf
    if str(r["event_id"]) != body["event_id"]:
        return "its event_id column is not the sealed record's", decoded, leaf
    plain_redacted = redacted and body.get("encryption") is None
    column = None if r["response_bytes"] is None else bytes(r["response_bytes"])
    sealed = None if body["response_bytes"] is None else bytes(body["response_bytes"])
    if not plain_redacted and column != sealed:
        return "its response bytes are not the sealed record's", decoded, leaf
    return None, decoded, leaf


def _served(r: dict[str, Any], record: bytes, decoded: Any, leaf: bytes, response: bytes | None,
            source: str, problem: str | None) -> Served:
    body = decoded["body"]
    return Served(r["stream"], r["seq"], body["event_id"], r["response_content_type"], response,
                  record, body, bytes(decoded["seal"]["record_digest"]), leaf, source, problem,
                  body.get("encryption") is not None)


async def served(app: Any, row: tuple[Any, ...], content_key: bytes | None,
                 redaction: Any, *, verifiable: bool = False) -> Served:
    """The row checked, or on a disagreement the record read from the log (see the module
    docstring). Raises :class:`~api.errors.Unavailable` when the row fails and the log
    cannot be read or does not hold the record; with ``verifiable`` (a bundle, which its
    reader verifies) it answers the row as it is instead, ``problem`` saying what failed,
    so the reader's own check refuses it with the tamper error rather than a 503."""
    r = dict(zip(SERVE_COLUMNS, row))
    redacted = redaction is not None and redaction.covers(r["stream"])
    problem, decoded, leaf = check_row(row, content_key, redacted)
    if problem is None:
        response = None if r["response_bytes"] is None else bytes(r["response_bytes"])
        return _served(r, bytes(r["record_bytes"]), decoded, leaf, response, "projection", None)
    where = f"record {r['stream']} #{r['seq']} (log partition {r['log_partition']} offset " \
            f"{r['log_offset']})"
    app.state.metrics.count_altered()
    log("warning", "projection_copy_altered", record=where, problem=problem,
        served="the log's copy")
    await _record_finding(app, r, problem)
    try:
        record = await app.state.log_reader.read(r["log_partition"], r["log_offset"],
                                                 f"{where}, whose projected copy fails its "
                                                 f"check ({problem})")
    except Unavailable:
        if not verifiable or decoded is None:
            raise
        response = None if r["response_bytes"] is None else bytes(r["response_bytes"])
        return _served(r, bytes(r["record_bytes"]), decoded, leaf, response, "projection",
                       problem)
    log_problem, decoded, leaf = _record_problem(record, r["stream"], r["seq"])
    if log_problem is not None:
        raise Unavailable(f"the projection's copy of {where} fails its check ({problem}) and "
                          f"the log's message at that position does too ({log_problem}): "
                          f"rebuild the projections", retry_after=30)
    body = decoded["body"]
    if content_key is not None and bytes(body["content_key"]) != content_key:
        raise Unavailable(f"the projection's copy of {where} fails its check ({problem}): the "
                          f"log's record has another content key; rebuild the projections",
                          retry_after=30)
    response = None if body["response_bytes"] is None else bytes(body["response_bytes"])
    if response is not None and redacted and body.get("encryption") is None:
        response = redaction.mask_response(response, body["capture"]["streamed"],
                                           body["response_content_type"])
    return _served(r, record, decoded, leaf, response, "log", problem)


async def _record_finding(app: Any, r: dict[str, Any], problem: str) -> None:
    """A ``projection_altered`` finding in the live generation, once per record; a failure
    to write it is logged (the answer still comes from the log)."""
    try:
        await app.state.db.add_finding(r["stream"], r["seq"], FINDING_KIND,
                                       f"the API found the projected row altered: {problem}; "
                                       f"served the log's record instead",
                                       r["log_partition"], r["log_offset"])
    except Exception as e:  # noqa: BLE001 - reporting must not stop the log's answer
        log("warning", "finding_not_recorded", stream=r["stream"], seq=r["seq"], error=str(e))


class LogReader:
    """Reads one message of ``<prefix>.log`` by position, off the event loop
    (:func:`audit.kafka_log.fetch_message`: a consumer per read, which is the rare path)."""

    def __init__(self, bootstrap: str | None, topic: str, timeout: float = 10.0) -> None:
        self.bootstrap, self.topic, self.timeout = bootstrap, topic, timeout

    async def read(self, partition: int, offset: int, why: str) -> bytes:
        if not self.bootstrap:
            raise Unavailable(f"{why}; this API has no Kafka configured "
                              f"(EVIDENCE_KAFKA_BOOTSTRAP) to read the log's copy, so it serves "
                              f"nothing rather than altered evidence", retry_after=30)
        from audit.errors import AuditError
        from audit.kafka_log import fetch_message

        try:
            return await asyncio.to_thread(fetch_message, self.bootstrap, self.topic, partition,
                                           offset, self.timeout)
        except AuditError as e:
            raise Unavailable(f"{why}; the log's copy cannot be read ({e})",
                              retry_after=5) from e
