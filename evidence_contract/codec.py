"""Avro single-object encoding of the record contract.

A message is ``0xC3 0x01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's Parsing Canonical Form, then the Avro binary body. The fingerprint names the schema,
so any reader holding ``schemas/`` decodes a message without a registry.

Every digest field is Avro ``bytes`` of exactly 32 bytes (``DIGEST_FIELDS``); Avro itself
cannot say so, so this module does: ``encode`` refuses and ``decode`` rejects a digest of any
other length, and ``wrong_size_digest`` names the field for the writer's rejection.

Errors: a record that does not fit its schema raises ``EncodeError``; bytes that are not a
whole message of a known schema raise ``DecodeError``. Both wrap fastavro's error with
``from e``; this module is the one place that translates them.
"""

from __future__ import annotations

import functools
import io
import os
import re
from typing import Any

import fastavro
from fastavro.validation import validate

from ._avro import BY_FINGERPRINT, RECORD_FOR_CAPTURE, SCHEMA_NAMES, SCHEMAS, _Loaded
from ._fastread import compile_reader
from ._fastwrite import compile_writer
from ._fastwrite import varint as _varint_long  # zig-zag varint, one definition
from .digest_fields import _DIGEST_PATHS, _misfit  # noqa: F401 - tests walk them here
from .digest_fields import DIGEST_FIELDS, first_misfit
from .digests import DIGEST_SIZE
from .errors import DecodeError, EncodeError, TruncatedError

__all__ = [
    "DIGEST_FIELDS",
    "HEADER_SIZE",
    "MARKER",
    "SCHEMA_NAMES",
    "body_bytes",
    "canonical_body_bytes",
    "decode",
    "encode",
    "encode_sealed",
    "fingerprint",
    "parsing_canonical_form",
    "peek_ids",
    "read_body",
    "read_canonical_body",
    "record_fingerprint_for",
    "schema_name_for",
    "split_record",
    "wrong_size_digest",
]

MARKER = b"\xc3\x01"
"""The two bytes every single-object-encoded message starts with."""

_HEADER_SIZE = len(MARKER) + 8
HEADER_SIZE = _HEADER_SIZE
"""Bytes before the Avro body: the marker and the 8-byte fingerprint."""


def _schema(schema_name: str) -> _Loaded:
    try:
        return SCHEMAS[schema_name]
    except KeyError:
        raise ValueError(f"unknown schema {schema_name!r}; expected one of {SCHEMA_NAMES}") from None


_FAST_BY_FP = {fp: compile_reader(s.parsed) for fp, s in BY_FINGERPRINT.items() if s.reader is None}
"""Per fingerprint of a schema read as written, the strict canonical reader of
``schemas._fastread`` (None: no fast path). A resolved schema (``reader``) has none."""
_FAST = {name: _FAST_BY_FP[schema.fingerprint] for name, schema in SCHEMAS.items()}
# The generated writer of each current schema (schemas._fastwrite); None: fastavro writes.
_FAST_WRITE = {name: compile_writer(schema.parsed) for name, schema in SCHEMAS.items()}
"""The same for the current schemas, by name."""


def native_writers(mode: str | None) -> dict[str, Any]:
    """The compiled twins of the generated writers, by schema name, for
    ``EVIDENCE_NATIVE=mode``: ``evidence_seal_native.AvroWriter`` (built from native/seal by
    ``make``), whose ``write(record)`` gives the same bytes as the generated writer or None
    where it does not write a record (the pure path then decides). Empty for ``0``, and for
    ``auto`` (unset) when the module is not installed or is a build from before the writer;
    ``1`` makes either an ``ImportError``. A schema the compiled writer refuses is written
    the pure way."""
    if mode == "0":
        return {}
    try:
        from evidence_seal_native import AvroWriter  # type: ignore[import-not-found]
    except ImportError as e:
        if mode == "1":
            raise ImportError("EVIDENCE_NATIVE=1 but evidence_seal_native (with its AvroWriter) "
                              "is not installed (make builds it: native/seal/build.sh)") from e
        return {}
    out = {}
    for name, schema in SCHEMAS.items():
        if _FAST_WRITE[name] is None:
            continue  # fastavro writes it: nothing to be the twin of
        try:
            out[name] = AvroWriter(schema.parsed)
        except ValueError:
            continue
    return out


_NATIVE_WRITE = native_writers(os.environ.get("EVIDENCE_NATIVE") or "auto")
"""The compiled writer of each current schema that has one (:func:`native_writers`)."""


def fingerprint(schema_name: str) -> bytes:
    """Return the 8-byte single-object header fingerprint (CRC-64-AVRO, little-endian)."""
    return _schema(schema_name).fingerprint


def parsing_canonical_form(schema_name: str) -> str:
    """Return the schema's Parsing Canonical Form, the text its fingerprint covers."""
    return _schema(schema_name).canonical


def wrong_size_digest(schema_name: str, record: dict[str, Any]) -> str | None:
    """Name the first digest field of ``record`` that is not exactly 32 bytes, or None.

    ``record`` must have the schema's shape (it was decoded, or encoded successfully);
    the answer reads e.g. ``"retrieval[1].chunk_digest must be exactly 32 bytes, got 31
    bytes"``. The fields are ``DIGEST_FIELDS`` (``evidence_contract.digest_fields``).
    """
    return first_misfit(_schema(schema_name).name, record)


_LEAVES = (str, bytes, int, float)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def _same(read: Any, given: Any) -> bool:
    """``read`` (decoded from the bytes) is exactly ``given``, bool never standing for int."""
    if type(read) is dict and type(given) is dict:
        # The common case, every encode: the generic rules below, inlined for a record's
        # scalar fields (``read`` comes from the reader: plain dicts, lists and scalars).
        if not given.keys() <= read.keys():
            return False
        for k, v in read.items():
            if k not in given:
                if v is not None:
                    return False
                continue
            g = given[k]
            if v is None or type(v) in _LEAVES:
                # read is no bool here (type(True) is bool): a given bool is never the same
                if type(g) is bool or not v == g:
                    return False
            elif not _same(v, g):
                return False
        return True
    if isinstance(read, dict):
        # A key left out of ``given`` read back as its default (null: every default is).
        return (isinstance(given, dict) and given.keys() <= read.keys()
                and all(_same(v, given[k]) if k in given else v is None
                        for k, v in read.items()))
    if isinstance(read, list):
        return (isinstance(given, (list, tuple)) and len(read) == len(given)
                and all(_same(a, b) for a, b in zip(read, given)))
    if isinstance(read, bool) or isinstance(given, bool):
        return type(read) is bool and type(given) is bool and read == given
    return read == given


def _avro_binary(schema: _Loaded, record: dict[str, Any]) -> bytes:
    if not isinstance(record, dict):
        raise EncodeError(f"{schema.name} record must be a dict, not {type(record).__name__}")
    # The common case: the generated writer, strict, which writes only a record the schema
    # allows (schemas._fastwrite), compiled where it is built (native_writers: ~8x faster,
    # the same bytes; None where it does not write the record). Anything the generated
    # writer refuses takes fastavro's path, which decides and words the error.
    native = _NATIVE_WRITE.get(schema.name)
    if native is not None:
        data = native.write(record)
        if data is not None and wrong_size_digest(schema.name, record) is None:
            return data
    write = _FAST_WRITE.get(schema.name)
    if write is not None:
        try:
            data = write(record)
        except Exception:  # noqa: BLE001 - any failure here only means "ask fastavro"
            data = None
        if data is not None and wrong_size_digest(schema.name, record) is None:
            return data
    try:
        # strict=True catches missing and unknown fields, so a nullable field must be given
        # explicitly rather than defaulted.
        out = io.BytesIO()
        # strict_allow_default: a field added with a default (``encryption``, 2.1; ``trace``
        # and ``telemetry``, 2.2) may be left out, so callers written before it keep working.
        fastavro.schemaless_writer(out, schema.parsed, record, strict_allow_default=True)
        data = out.getvalue()
        # What the writer would silently accept (a wrong-size fixed, an int out of range, a
        # bool for an int) does not read back as the same values. Reading back with the
        # strict reader (~20 µs) proves the common case; fastavro's validate() (~10x slower)
        # decides, and words the error, only when that proof fails.
        fast = _FAST.get(schema.name)
        got = fast(data, 0) if fast is not None else None
        if got is None or got[1] != len(data) or not _same(got[0], record):
            validate(record, schema.parsed, raise_errors=True)
    except Exception as e:  # fastavro raises ValidationError, ValueError, TypeError, ...
        raise EncodeError(f"{schema.name} record does not match its schema: {e}") from e
    misfit = wrong_size_digest(schema.name, record)
    if misfit:
        raise EncodeError(f"{schema.name} record does not match its schema: {misfit}")
    return data


def encode(schema_name: str, record: dict[str, Any]) -> bytes:
    """Return the single-object encoding of ``record`` under schema ``schema_name``."""
    schema = _schema(schema_name)
    return MARKER + schema.fingerprint + _avro_binary(schema, record)


def body_bytes(body: dict[str, Any]) -> bytes:
    """Return the Avro binary of a CaptureEvent dict, no framing: what record_digest covers."""
    return _avro_binary(SCHEMAS["CaptureEvent"], body)


def _as_bytes(data: object) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"data must be bytes, bytearray or memoryview, not {type(data).__name__}")


def _header(data: bytes) -> _Loaded:
    if len(data) < _HEADER_SIZE:
        raise DecodeError(f"message too short for a single-object header: {len(data)} bytes")
    if data[:2] != MARKER:
        raise DecodeError(f"not a single-object encoding: marker {data[:2].hex()} != c301")
    fp = data[2:_HEADER_SIZE]
    try:
        return BY_FINGERPRINT[fp]
    except KeyError:
        raise DecodeError(f"unknown schema fingerprint {fp.hex()}") from None


def _read(schema: _Loaded, fo: io.BytesIO) -> dict[str, Any]:
    try:
        return fastavro.schemaless_reader(
            fo, schema.parsed, schema.reader.parsed if schema.reader is not None else None)
    except Exception as e:
        # Garbage can make fastavro raise almost anything (EOFError, UnicodeDecodeError,
        # IndexError for a bad union/enum index, ...); all of it means "not a valid body".
        raise DecodeError(f"malformed {schema.name} body: {type(e).__name__}: {e}") from e


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    """Return ``(schema_name, record)`` for a single-object-encoded message.

    Raises ``DecodeError`` unless ``data`` is exactly one whole message of a known schema,
    every digest field exactly 32 bytes.
    """
    data = _as_bytes(data)
    schema = _header(data)
    fast = _FAST_BY_FP.get(schema.fingerprint)
    # The strict reader (schemas._fastread) gives fastavro's answer, ~3x faster, for
    # canonical bytes, which is every record the writer seals; anything else, including
    # every error, is left to fastavro so errors read the same.
    got = fast(data, _HEADER_SIZE) if fast is not None else None
    if got is not None and got[1] == len(data):
        record = got[0]
    else:
        fo = io.BytesIO(data)
        fo.seek(_HEADER_SIZE)
        record = _read(schema, fo)
        # Avro binary is not self-delimiting; without this check appended bytes would go unseen.
        if fo.tell() != len(data):
            raise DecodeError(f"{len(data) - fo.tell()} trailing bytes after the {schema.name} body")
    misfit = wrong_size_digest(schema.name, record)
    if misfit:
        raise DecodeError(f"malformed {schema.name}: {misfit}")
    return schema.name, record


def split_record(data: bytes) -> tuple[bytes, dict[str, Any]]:
    """Return ``(stored_body_bytes, record)`` for an encoded EvidenceRecord.

    ``stored_body_bytes`` is the Avro binary of the body exactly as it is stored: ``body`` is
    the first field, so it is a byte prefix of the record's Avro binary. A record sealed
    under an earlier contract (2.0, 2.1) is read with its own schema: its body has
    none of the keys added since (2.0: ``encryption``; 2.0 and 2.1: ``trace``, ``telemetry``). Verifiers recompute
    ``record_digest`` over these bytes rather than over a re-encoding, so a body whose stored
    bytes differ from ``body_bytes(record["body"])`` can be detected, not masked.
    """
    data = _as_bytes(data)
    name, record = decode(data)
    if name != "EvidenceRecord":
        raise DecodeError(f"expected an EvidenceRecord, got a {name}")
    fo = io.BytesIO(data)
    fo.seek(_HEADER_SIZE)
    try:
        fastavro.schemaless_reader(fo, _header(data).body_parsed, None)
    except Exception as e:  # pragma: no cover - decode() has read these bytes already
        raise DecodeError(f"malformed EvidenceRecord body: {type(e).__name__}: {e}") from e
    return data[_HEADER_SIZE : fo.tell()], record


# --- Fast paths for the writer -----------------------------------------------------------
# The writer handles every capture once: it decodes the body (validation needs the values),
# keeps canonical body bytes, and appends a Seal. encode() validates strictly (~0.5 ms a
# record); these functions skip what the writer has already established.


def schema_name_for(fp: bytes) -> str | None:
    """Return the name of the schema whose 8-byte fingerprint is ``fp``, or None (current
    and earlier versions alike)."""
    schema = BY_FINGERPRINT.get(bytes(fp))
    return None if schema is None else schema.name


def record_fingerprint_for(capture_fp: bytes) -> bytes:
    """The EvidenceRecord fingerprint a CaptureEvent under ``capture_fp`` is sealed with: the
    same contract version (a 2.0 or 2.1 capture becomes a record of its version, byte for byte)."""
    return RECORD_FOR_CAPTURE[bytes(capture_fp)]


def _capture_schema(data: bytes, start: int) -> _Loaded:
    # The CaptureEvent version named by the message's header; the current one for a body
    # without a header (or with another schema's).
    if start >= _HEADER_SIZE:
        found = BY_FINGERPRINT.get(bytes(data[start - 8:start]))
        if found is not None and found.name == "CaptureEvent":
            return found
    return SCHEMAS["CaptureEvent"]


def read_body(data: bytes, start: int = _HEADER_SIZE) -> tuple[dict[str, Any], int]:
    """Decode one CaptureEvent Avro binary starting at ``data[start]``; return (record, end).

    Raises ``TruncatedError`` (a ``DecodeError``) when the bytes ran out before the body
    did, and ``DecodeError`` for any other malformed body. Trailing bytes and digest sizes
    (``wrong_size_digest``) are the caller's to judge (``end < len(data)``). The body is
    read with the CaptureEvent version the header before ``start`` names (an earlier
    one's dict lacks the fields added since).
    """
    data = _as_bytes(data)
    fo = io.BytesIO(data)
    fo.seek(start)
    try:
        record = fastavro.schemaless_reader(fo, _capture_schema(data, start).parsed, None)
    except Exception as e:
        # The reader consumed everything and still wanted more: a cut-off message, told
        # apart from garbage by where the reader stopped, not by the error's text.
        cls = TruncatedError if fo.tell() >= len(data) else DecodeError
        # The text goes into a rejection's reason: the same bytes must give the same text,
        # so the object address fastavro's messages can carry ("<... at 0x7f...>") goes.
        text = _ADDRESS.sub(" at 0x…>", str(e))
        raise cls(f"malformed CaptureEvent body: {type(e).__name__}: {text}") from e
    return record, fo.tell()


def read_canonical_body(data: bytes, start: int = _HEADER_SIZE) -> tuple[dict[str, Any], int] | None:
    """Decode a CaptureEvent body at ``data[start]`` if its bytes are canonical Avro binary.

    Returns ``(record, end)`` such that ``data[start:end] == canonical_body_bytes(record)``
    and ``record`` equals what ``read_body`` returns, in one pass and without re-encoding;
    or None when that cannot be shown (non-canonical, truncated, malformed: take
    ``read_body`` and ``canonical_body_bytes`` to find out which). See ``schemas._fastread``.
    """
    data = _as_bytes(data)
    fast = _FAST_BY_FP.get(_capture_schema(data, start).fingerprint)
    if fast is None:  # pragma: no cover - only if the schema outgrew the reader
        return None
    return fast(data, start)


def canonical_body_bytes(body: dict[str, Any], capture_fp: bytes | None = None) -> bytes:
    """Return the Avro binary of a CaptureEvent dict that came from ``read_body``/``decode``.

    No validation (the values came out of the decoder, so they fit the schema); for dicts
    built by hand use ``body_bytes``. Avro binary written by fastavro is canonical: minimal
    varints and each non-empty array as one block. ``capture_fp`` names the version the body
    was read with (default: the current one): a CaptureEvent fingerprint, or the fingerprint
    of the EvidenceRecord it is the body of (a sealed record's header, ``record[2:10]``: the
    body of a 1.0 record has no CaptureEvent of its own among the schemas).
    """
    schema = SCHEMAS["CaptureEvent"] if capture_fp is None else BY_FINGERPRINT[bytes(capture_fp)]
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out, schema.body_parsed if schema.name == "EvidenceRecord" else schema.parsed, body)
    return out.getvalue()


def _avro_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _varint_long(len(b)) + b


@functools.lru_cache(maxsize=64)
def _writer_identity(writer_id: str, transactional_id: str, version: str) -> bytes:
    # The same for every record a writer seals: encode it once.
    return _avro_string(writer_id) + _avro_string(transactional_id) + _avro_string(version)


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


_EVIDENCE_RECORD_HEADER = MARKER + SCHEMAS["EvidenceRecord"].fingerprint
_DIGEST_LENGTH = _varint_long(DIGEST_SIZE)  # a digest is Avro bytes: its length, then itself


def _check_int(name: str, v: object, lo: int, hi: int) -> None:
    if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
        return  # an int subclass in range
    raise EncodeError(f"Seal.{name} must be an int in [{lo}, {hi}], got {v!r}")


def encode_sealed(body_avro: bytes, seal: dict[str, Any],
                  record_fp: bytes | None = None) -> bytes:
    """Return the single-object EvidenceRecord whose body is the Avro binary ``body_avro``.

    ``body`` is EvidenceRecord's first field, so the record's Avro binary is ``body_avro``
    followed by the Avro binary of ``seal``; the Seal is written here by hand (a fixed shape
    of longs, ints, two 32-byte digests as Avro bytes and three strings). The result is
    byte-identical to ``encode("EvidenceRecord", {"body": ..., "seal": seal})`` when
    ``body_avro`` is the canonical binary of that body. Raises ``EncodeError`` for a seal
    that does not fit, a digest of any length but 32 included. ``record_fp`` is the
    EvidenceRecord version (``record_fingerprint_for`` the capture's; default: current).
    """
    try:
        seq, occurred_at = seal["seq"], seal["occurred_at"]
        prev, digest = seal["prev_digest"], seal["record_digest"]
        w = seal["writer"]
        part, off = seal["intake_partition"], seal["intake_offset"]
        # Straight-line checks, as this runs once per sealed record: a plain int in range
        # passes at once; anything else (bool, an int subclass, out of range) is judged
        # by _check_int.
        if not (type(seq) is int and _LONG_MIN <= seq <= _LONG_MAX):
            _check_int("seq", seq, _LONG_MIN, _LONG_MAX)
        if not (type(occurred_at) is int and _LONG_MIN <= occurred_at <= _LONG_MAX):
            _check_int("occurred_at", occurred_at, _LONG_MIN, _LONG_MAX)
        if not (type(part) is int and _INT_MIN <= part <= _INT_MAX):
            _check_int("intake_partition", part, _INT_MIN, _INT_MAX)
        if not (type(off) is int and _LONG_MIN <= off <= _LONG_MAX):
            _check_int("intake_offset", off, _LONG_MIN, _LONG_MAX)
        for name, v in (("prev_digest", prev), ("record_digest", digest)):
            if not isinstance(v, (bytes, bytearray)) or len(v) != DIGEST_SIZE:
                raise EncodeError(f"Seal.{name} must be exactly {DIGEST_SIZE} bytes")
        parts = [
            _EVIDENCE_RECORD_HEADER if record_fp is None else MARKER + bytes(record_fp),
            _as_bytes(body_avro),
            _varint_long(seq), _varint_long(occurred_at),
            _DIGEST_LENGTH, bytes(prev), _DIGEST_LENGTH, bytes(digest),
            _writer_identity(w["writer_id"], w["transactional_id"], w["version"]),
            _varint_long(part), _varint_long(off),
        ]
    except (KeyError, TypeError, AttributeError) as e:
        raise EncodeError(f"Seal does not match its schema: {type(e).__name__}: {e}") from e
    return b"".join(parts)


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    shift = n = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    n = (n >> 1) ^ -(n & 1)
    if n < 0 or pos + n > len(data):
        raise DecodeError("string length out of range")
    return data[pos:pos + n].decode("utf-8"), pos + n


def peek_ids(record: bytes) -> tuple[str, str]:
    """Return (stream, event_id) of an EvidenceRecord or CaptureEvent without decoding it all.

    The body starts with schema_version, event_id and stream, three Avro strings; reading
    just those keeps the writer's rebuild of its dedup window on start-up cheap. The bytes
    are trusted to be a record of ours (they come from the log): nothing else is checked.
    """
    try:
        _, pos = _read_string(record, _HEADER_SIZE)
        event_id, pos = _read_string(record, pos)
        stream, _ = _read_string(record, pos)
    except (IndexError, UnicodeDecodeError) as e:
        raise DecodeError(f"not a record body: {e}") from e
    return stream, event_id
