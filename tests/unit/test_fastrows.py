"""The projector's two row paths, held to each other: the pure one (``projections.rows.
record_row``, the reference) and the compiled one (``evidence_rows_native``, built from
native/rows/ by ``make unit``).

For every message, vectors, generated records and mutations of them: where the pure path
raises, the compiled one answers None (the pure path then words the error); where the compiled
one answers, its row equals the pure row value for value and type for type, its COPY tuple is
byte for byte what psycopg's binary ``write_row`` writes for the pure row, and its leaf hash is
the tree's. The compiled module is always built (native/toolchain.sh installs Rust where there
is none): the native half fails, never skips, when it is missing.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import fastavro
import psycopg
import pytest
from psycopg import postgres
from psycopg._copy_base import BinaryFormatter
from psycopg.adapt import Transformer

from evidence_contract import GENESIS, canonical_body_bytes, encode_sealed
from evidence_contract._avro import BY_FINGERPRINT, HISTORY, RECORD_FOR_CAPTURE, SCHEMAS
from evidence_contract.codec import MARKER
from evidence_contract.merkle import record_leaf_hash
from projections import fastrows
from projections.fold import Record, Undecodable, decode_message, decode_messages, fold
from projections.rows import RECORD_COLUMNS, RECORD_TYPES, record_row
from projections.pg import Connection
from projections.records import RecordStore
from projections.tlog import row_leaf_hash
from tests.fixtures.log import WRITER, make_body

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "schemas" / "vectors.json").read_text())
# Contract 2.0: its CaptureEvent, and the EvidenceRecord a 2.0 capture is sealed under (1.0's
# is in the history too, and not what a 2.0 body is sealed with).
_CAPTURE_2_0 = next(s for s in HISTORY if s.name == "CaptureEvent")
OLD = {"CaptureEvent": _CAPTURE_2_0,
       "EvidenceRecord": BY_FINGERPRINT[RECORD_FOR_CAPTURE[_CAPTURE_2_0.fingerprint]]}
# Contract 2.1 (no trace, no telemetry): its CaptureEvent fingerprint and its EvidenceRecord's.
_CAPTURE_2_1 = bytes.fromhex("dcad4f6e8bfbc7de")
_RECORD_2_1 = RECORD_FOR_CAPTURE[_CAPTURE_2_1]


@pytest.fixture(scope="module")
def native() -> Any:
    try:
        import evidence_rows_native
    except ImportError:
        pytest.fail("evidence_rows_native is not built: `make unit` (or native/rows/build.sh "
                    ".venv/bin/python) builds it, installing a Rust toolchain if there is none")
    return evidence_rows_native


@pytest.fixture
def compiled(native: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The projection's decode on the compiled path, whatever EVIDENCE_NATIVE says."""
    monkeypatch.setattr(fastrows, "_native", native)
    monkeypatch.setattr(fastrows, "decode", native.decode)
    return native


# --- records -------------------------------------------------------------------------------


def _seal(body: dict[str, Any], seq: int = 1, prev: bytes = GENESIS, at: int = 1_700_000_000_000_000,
          old: bool = False, v2_1: bool = False) -> bytes:
    cap_fp = OLD["CaptureEvent"].fingerprint if old else _CAPTURE_2_1 if v2_1 else None
    avro = canonical_body_bytes(body, cap_fp)
    seal = {"seq": seq, "occurred_at": at, "prev_digest": prev,
            # not the chain's digest: the projection does not recompute it, and this one
            # exists for any occurred_at, the out-of-range ones included
            "record_digest": hashlib.sha256(avro).digest(), "writer": dict(WRITER),
            "intake_partition": 0, "intake_offset": seq}
    return encode_sealed(avro, seal, OLD["EvidenceRecord"].fingerprint if old
                         else _RECORD_2_1 if v2_1 else None)


def _raw(record: dict[str, Any], old: bool = False) -> bytes:
    """Any record fastavro writes (a digest of any size included), framed."""
    schema = OLD["EvidenceRecord"] if old else SCHEMAS["EvidenceRecord"]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema.parsed, record)
    return MARKER + schema.fingerprint + out.getvalue()


def _body(rng: random.Random, i: int) -> dict[str, Any]:
    """A valid body with each optional field sometimes null and odd values mixed in."""
    b = make_body(rng.choice(["s", "ten-a:chat", "ströme/ü", "流-" + "x" * rng.randint(0, 300),
                              "emoji-\U0001f600"]), i,
                  response=rng.choice([None, b"", b'{"ok":true}', rng.randbytes(2000)]))
    pick = lambda *xs: rng.choice(xs)  # noqa: E731
    b["request_bytes"] = pick(b["request_bytes"], None, b"")
    b["input_digest"], b["input_bytes"] = pick((None, None), (rng.randbytes(32), b"in"))
    b["prompt_digest"], b["prompt_bytes"] = pick((None, None), (rng.randbytes(32), None))
    b["retrieval"] = [{"doc_id": f"d{k}", "doc_version": pick(None, "v1"),
                       "chunk_digest": rng.randbytes(32), "chunk_bytes": pick(None, b"c")}
                      for k in range(pick(0, 0, 1, 3))]
    b["provider"]["api_version"] = pick(None, "2024-01-01")
    for k in ("model_id", "params", "fingerprint", "response_model", "response_content_type"):
        b[k] = pick(b[k], None, "", "ünï")
    b["http_status"] = pick(200, None, 0, -1, 2**31 - 1, -2**31)
    b["response_length"] = pick(b["response_length"], None, 2**62 - 1)
    b["output_digest"] = pick(b["output_digest"], None)
    b["error_bytes"] = pick(None, b"boom")
    b["outcome"] = pick("COMMITTED", "FAILED", "UNKNOWN")
    b["replay"] = {"seed": pick(None, "0", "-0", "1", "-1", str(2**63), str(2**64 + 7),
                                "-" + "9" * 40, "1" + "0" * 4299, str(rng.getrandbits(200))),
                   "temperature": pick(None, 0.0, -0.0, 0.7, float("inf"), 1e-300),
                   "top_p": pick(None, 1.0, float("-inf")), "deterministic": pick(True, False)}
    c = b["capture"]
    c["request_policy"] = pick("VALUE", "HASH_ONLY")
    c["streamed"], c["closed_early"], c["truncated"] = (pick(True, False) for _ in range(3))
    c["host"] = pick(None, "h")
    b["captured_at"] = pick(b["captured_at"], 0, -1, -62135596800000000, 253402300799999999)
    b["encryption"] = pick(None, None, {"scheme": "aes256gcm-hmacsha256/v1",
                                        "key_id": rng.randbytes(16).hex()})
    b["trace"] = pick(None, None, {"trace_id": rng.randbytes(16), "span_id": rng.randbytes(8)})
    return b


def _generated(n: int = 300, seed: int = 14) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = _body(rng, i)
        old = body["encryption"] is None and rng.random() < 0.3
        v2_1 = not old and rng.random() < 0.2
        if old or v2_1:
            del body["trace"], body["telemetry"]
            body["schema_version"] = "2.1"
        if old:
            del body["encryption"]
            body["schema_version"] = "2.0"
        at = rng.choice([1_700_000_000_000_000 + i, 0, -5, 253402300799999999])
        out.append(_seal(body, rng.randint(1, 2**40), rng.randbytes(32), at, old, v2_1))
    return out


def _odd() -> list[bytes]:
    """Records the pure path takes or refuses in ways the compiled one must not guess at."""
    base = make_body("s", 1)
    out = []
    for eid in (base["event_id"].upper(), "{" + base["event_id"] + "}",
                base["event_id"].replace("-", ""), "urn:uuid:" + base["event_id"], "not-a-uuid",
                base["event_id"][:-1] + "g"):
        out.append(_seal({**base, "event_id": eid}))
    for key_id in ("AB" * 16, "ab cd", "abc", "", "zz"):
        out.append(_seal({**base, "encryption": {"scheme": "x", "key_id": key_id}}))
    for seed in ("01", "+1", "1.0", " 1", "1" * 4301, "", "٣"):
        out.append(_seal({**base, "replay": {**base["replay"], "seed": seed}}))
    for at in (-62135596800000001, 253402300800000000, -2**62, 2**62 - 1):
        out.append(_seal({**base, "captured_at": at}))
        out.append(_seal(base, at=at))
    # wrong digest sizes, in every digest field
    rec = {"body": {**base, "retrieval": [{"doc_id": "d", "doc_version": None,
                                           "chunk_digest": bytes(32), "chunk_bytes": None}]},
           "seal": {"seq": 1, "occurred_at": 5, "prev_digest": bytes(32),
                    "record_digest": bytes(32), "writer": dict(WRITER), "intake_partition": 0,
                    "intake_offset": 0}}
    out.append(_raw(rec))
    for path in ("content_key", "input_digest", "prompt_digest", "response_digest",
                 "output_digest"):
        for size in (0, 31, 33):
            out.append(_raw({**rec, "body": {**rec["body"], path: bytes(size)}}))
    for size in (31, 33):
        chunk = [{**rec["body"]["retrieval"][0], "chunk_digest": bytes(size)}]
        out.append(_raw({**rec, "body": {**rec["body"], "retrieval": chunk}}))
        for k in ("prev_digest", "record_digest"):
            out.append(_raw({**rec, "seal": {**rec["seal"], k: bytes(size)}}))
    old = {k: v for k, v in rec["body"].items() if k != "encryption"}
    out.append(_raw({**rec, "body": old}, old=True))
    out.append(_raw({**rec, "body": {**old, "content_key": bytes(3)}}, old=True))
    out.append(_raw(rec)[:-1] + b"\x80\x00")  # a padded varint (intake_offset)
    out.append(_raw(rec) + b"\x00")  # trailing bytes
    out.append(MARKER + OLD["EvidenceRecord"].fingerprint + _raw(rec)[10:])  # 2.1 body, 2.0 fp
    out += [b"", b"\xc3", b"\xc3\x01" + bytes(8), b"garbage" * 5]
    out += [bytes.fromhex(r["encoded_hex"]) for r in VECTORS["records"]]  # CaptureEvents too
    out.append(bytes.fromhex(VECTORS["sealed"]["capture"]["encoded_hex"]))
    return out


def _mutants(values: list[bytes], seed: int = 3) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for v in values:
        out += [v[:k] for k in sorted(rng.sample(range(len(v)), min(25, len(v))))]
        for _ in range(25):
            i = rng.randrange(len(v))
            out.append(v[:i] + bytes([v[i] ^ (1 << rng.randrange(8))]) + v[i + 1:])
        i = rng.randrange(10, len(v))
        out.append(v[:i] + bytes([rng.randrange(256)]) + v[i:])
    return out


# --- the comparison ------------------------------------------------------------------------

_TX = Transformer()
_TX.set_dumper_types([postgres.types[t].oid for t in RECORD_TYPES], psycopg.pq.Format.BINARY)


def _psycopg_copy(rows: list[tuple[Any, ...]]) -> bytes:
    """What psycopg's binary COPY writes for ``rows`` with ``write_row``, framing included."""
    f = BinaryFormatter(_TX)
    return b"".join(bytes(f.write_row(r)) for r in rows) + bytes(f.end())


def _typed(row: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    return [(type(v), v, getattr(v, "tzinfo", None)) for v in row]


def _pure(value: bytes, partition: int, offset: int) -> tuple[Any, ...] | Exception:
    try:
        return record_row(value, partition, offset)
    except Exception as e:  # DecodeError, and what uuid/datetime raise past it
        return e


def _check(native: Any, value: bytes, partition: int = 0, offset: int = 0) -> str:
    pure = _pure(value, partition, offset)
    got = native.decode(value, partition, offset)
    if isinstance(pure, Exception):
        assert got is None, f"native decoded what the pure path refuses: {pure!r}"
        return "refused"
    if got is None:
        return "left"
    row, copy, leaf = got
    assert _typed(row) == _typed(pure)
    assert row[-1] is value  # the message itself, not a copy
    assert fastrows.COPY_SIGNATURE + copy + fastrows.COPY_TRAILER == _psycopg_copy([pure])
    assert leaf == row_leaf_hash(pure) == record_leaf_hash(value)
    return "decoded"


# --- the native half -----------------------------------------------------------------------


def test_the_vectors_decode_alike(native):
    seen = [_check(native, bytes.fromhex(r["encoded_hex"]), 3, 99) for r in VECTORS["records"]]
    assert seen.count("decoded") == sum(r["schema"] == "EvidenceRecord"
                                        for r in VECTORS["records"])
    assert seen.count("left") == 0


def test_generated_records_all_decode_natively_and_alike(native):
    values = _generated()
    assert [_check(native, v, i % 7, 10**12 + i) for i, v in enumerate(values)] \
        == ["decoded"] * len(values)
    # of every contract version, with and without a trace
    rows = [record_row(v, 0, 0) for v in values]
    at = {name: RECORD_COLUMNS.index(name) for name in ("schema_version", "trace_id", "mapped")}
    assert {r[at["schema_version"]] for r in rows} == {"2.0", "2.1", "2.2"}
    assert any(r[at["trace_id"]] is not None for r in rows)
    assert any(r[at["trace_id"]] is None and r[at["schema_version"]] == "2.2" for r in rows)
    assert not any(r[at["mapped"]] for r in rows)


def test_a_record_with_a_trace_has_its_ids_in_the_row_on_both_paths(native):
    from evidence_contract.vectors import traced_event

    e = traced_event()
    row = record_row(_seal(e), 0, 0)
    assert _check(native, _seal(e)) == "decoded"
    got = dict(zip(RECORD_COLUMNS, row))
    assert (got["trace_id"], got["span_id"]) == (e["trace"]["trace_id"], e["trace"]["span_id"])
    assert got["mapped"] is False and got["corroborates"] is None


def test_a_record_mapped_from_telemetry_is_the_pure_paths_and_says_so(native):
    import uuid

    from evidence_contract.vectors import mapped_event

    e = mapped_event()
    value = _seal(e)
    assert _check(native, value) == "left"
    got = dict(zip(RECORD_COLUMNS, record_row(value, 0, 0)))
    assert got["mapped"] is True and got["trace_id"] == e["trace"]["trace_id"]
    assert got["corroborates"] == uuid.UUID(e["telemetry"]["corroborates"])
    assert got["response_bytes"] is None and got["content_key"] == e["telemetry"]["span_digest"]
    # and it copies as psycopg writes it
    assert _psycopg_copy([record_row(value, 0, 0)])
    no_claim = {**e, "telemetry": {**e["telemetry"], "corroborates": None}}
    assert dict(zip(RECORD_COLUMNS, record_row(_seal(no_claim), 0, 0)))["corroborates"] is None


def test_odd_records_are_refused_or_decoded_alike(native):
    seen = [_check(native, v) for v in _odd()]
    assert "refused" in seen and "decoded" in seen


def test_mutated_records_are_refused_or_decoded_alike(native):
    seen = [_check(native, v) for v in _mutants(_generated(40, seed=5) + _odd()[:12])]
    assert seen.count("refused") > len(seen) // 2


def test_a_large_record_decodes_alike(native):
    body = make_body("big", 1, response=random.Random(1).randbytes(3 << 20))
    assert _check(native, _seal(body)) == "decoded"


def test_what_is_not_a_plain_bytes_message_is_left_to_the_pure_path(native):
    value = _generated(1)[0]
    assert native.decode(bytearray(value), 0, 0) is None
    assert native.decode(value, True, 0) is None
    assert native.decode(value, 2**31, 0) is None
    assert native.decode(value, 0, 2**63) is None


def test_a_batch_is_each_message_decoded_and_copies_as_psycopg_does(native):
    values = _generated(30, seed=9) + [b"garbage", _odd()[0]]
    got = native.decode_batch([(v, 1, i) for i, v in enumerate(values)])
    assert len(got) == len(values)
    for i, (v, g) in enumerate(zip(values, got)):
        one = native.decode(v, 1, i)
        assert (g is None) == (one is None)
        if g is not None:
            assert _typed(g[0]) == _typed(one[0]) and g[1:] == one[1:]
    rows = [g[0] for g in got if g is not None]
    copies = b"".join(g[1] for g in got if g is not None)
    assert fastrows.COPY_SIGNATURE + copies + fastrows.COPY_TRAILER == _psycopg_copy(rows)


def test_the_projection_folds_the_same_on_both_paths(compiled, monkeypatch):
    values = _generated(60, seed=2) + [b"garbage"]
    native_msgs = [decode_message(0, i, v) for i, v in enumerate(values)]
    assert any(isinstance(m, Record) and m.copy is not None for m in native_msgs)
    monkeypatch.setattr(fastrows, "decode", lambda *a: None)
    pure_msgs = [decode_message(0, i, v) for i, v in enumerate(values)]
    assert all(not isinstance(m, Record) or m.copy is None for m in pure_msgs)
    assert [getattr(m, "row", None) for m in native_msgs] == \
        [getattr(m, "row", None) for m in pure_msgs]
    assert [getattr(m, "reason", None) for m in native_msgs] == \
        [getattr(m, "reason", None) for m in pure_msgs]
    assert fold({}, native_msgs) == fold({}, pure_msgs)


def test_decode_messages_is_decode_message_of_each(compiled):
    batch = [(0, i, v) for i, v in enumerate(_generated(20, seed=4) + [b"junk"])]
    batch.append((1, 0, None))
    assert decode_messages(batch) == [decode_message(p, o, v) for p, o, v in batch]
    assert isinstance(decode_messages(batch)[-1], Undecodable)


def test_the_selection_takes_the_module_when_asked(native):
    assert fastrows.select("1") is native and fastrows.select("auto") is native
    assert fastrows.select("0") is None


# --- the selection, without the module ----------------------------------------------------


def test_a_missing_module_is_the_pure_path_unless_native_is_required(monkeypatch):
    monkeypatch.setitem(sys.modules, "evidence_rows_native", None)  # import raises
    assert fastrows.select(None) is None and fastrows.select("0") is None
    with pytest.raises(ImportError, match="EVIDENCE_NATIVE=1"):
        fastrows.select("1")


def test_a_module_for_other_schemas_is_not_used(monkeypatch):
    stale = types.SimpleNamespace(FINGERPRINTS=(bytes(8),))
    monkeypatch.setitem(sys.modules, "evidence_rows_native", stale)
    assert fastrows.select(None) is None
    with pytest.raises(ImportError, match="rebuild"):
        fastrows.select("1")


def test_a_module_that_makes_rows_of_other_columns_is_not_used(monkeypatch, native):
    """A build from before the 2.2 columns (44 of them) would COPY short rows."""
    stale = types.SimpleNamespace(FINGERPRINTS=native.FINGERPRINTS[1:], COLUMNS=44)
    monkeypatch.setitem(sys.modules, "evidence_rows_native", stale)
    assert fastrows.select(None) is None
    with pytest.raises(ImportError, match="44 columns, the records table has 48"):
        fastrows.select("1")
    assert native.COLUMNS == len(RECORD_COLUMNS) == 48


# --- the COPY: compiled tuples and write_row in one stream ---------------------------------


class _Copy:
    """psycopg's own binary formatter behind a Copy's write/write_row, recording the stream."""

    def __init__(self) -> None:
        self.formatter = BinaryFormatter(Transformer())
        self.stream = bytearray()

    def set_types(self, types_: Any) -> None:
        self.formatter.transformer.set_dumper_types(
            [postgres.types[t].oid for t in types_], psycopg.pq.Format.BINARY)

    def write(self, data: Any) -> None:
        self.stream += self.formatter.write(data)

    def write_row(self, row: Any) -> None:
        self.stream += self.formatter.write_row(row)


class _Conn:
    def __init__(self) -> None:
        self.copies: list[_Copy] = []
        self.info = types.SimpleNamespace(encoding="utf-8")

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        yield self

    @contextmanager
    def copy(self, sql: str) -> Iterator[_Copy]:
        c = _Copy()
        self.copies.append(c)
        yield c
        c.stream += c.formatter.end()


def _records(conn: Any) -> RecordStore:
    db = Connection.__new__(Connection)
    db._conn = conn
    return RecordStore(db, None, {})


def _stream(messages: list[Any]) -> bytes:
    conn = _Conn()
    assert _records(conn).copy_messages("g", iter(messages)) == messages
    [c] = conn.copies
    return bytes(c.stream)


def test_one_copy_mixes_compiled_tuples_and_rows(compiled):
    values = _generated(12, seed=8)
    rows = [record_row(v, 0, i) for i, v in enumerate(values)]
    compiled = [decode_message(0, i, v) for i, v in enumerate(values)]
    plain = [Record(0, i, r) for i, r in enumerate(rows)]
    mixed = [compiled[0], plain[1], Undecodable(0, 99, "x"), *compiled[2:7], *plain[7:]]
    assert all(m.copy is not None for m in compiled)
    # Whatever the mix, one signature, every tuple once, one trailer.
    for batch in (compiled, plain, mixed, plain[:1] + compiled[1:], []):
        stream = _stream(batch)
        records = [m for m in batch if isinstance(m, Record)]
        want = _psycopg_copy([m.row for m in records])
        assert stream.startswith(fastrows.COPY_SIGNATURE) and stream.endswith(b"\xff\xff")
        assert len(stream) == len(want)
        body = stream[len(fastrows.COPY_SIGNATURE):-2]
        tuples = sorted(_psycopg_copy([m.row])[19:-2] for m in records)
        assert sorted(_split(body)) == tuples


def _split(body: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(body):
        start = pos
        n = int.from_bytes(body[pos:pos + 2], "big", signed=True)
        pos += 2
        for _ in range(n):
            size = int.from_bytes(body[pos:pos + 4], "big", signed=True)
            pos += 4 + max(size, 0)
        out.append(body[start:pos])
    return out


def test_another_encoding_copies_every_row_with_write_row(compiled):
    values = _generated(3, seed=1)
    batch = [decode_message(0, i, v) for i, v in enumerate(values)]
    conn = _Conn()
    conn.info.encoding = "latin-1"
    _records(conn).copy_messages("g", batch)
    assert bytes(conn.copies[0].stream) == _psycopg_copy([m.row for m in batch])


def test_the_leaf_hash_is_the_trees(native):
    values = _generated(20, seed=6)
    rows = [record_row(v, 0, i) for i, v in enumerate(values)]
    for row, value in zip(rows, values):
        assert native.leaf_hash(row[11], value) == record_leaf_hash(value) == row_leaf_hash(row)
    assert native.leaf_hash(bytes(31), values[0]) is None


def test_growing_with_the_compiled_leaves_grows_the_same_trees(compiled):
    from projections import tlog

    values = _generated(40, seed=7)
    msgs = [decode_message(0, i, v) for i, v in enumerate(values)]
    rows = [m.row for m in msgs]
    plain, fast = tlog.grow({}, rows), tlog.grow({}, rows, [m.leaf for m in msgs])
    assert fast.nodes == plain.nodes
    assert {s: cr.root() for s, cr in fast.trees.items()} == \
        {s: cr.root() for s, cr in plain.trees.items()}


def test_the_choice_is_logged_once_on_the_first_message(monkeypatch):
    lines = []
    monkeypatch.setattr(fastrows, "log", lambda level, event, **f: lines.append((event, f)))
    monkeypatch.setattr(fastrows, "decode", fastrows._first)
    value = _generated(1)[0]
    first = fastrows.decode(value, 0, 0)
    assert fastrows.decode(value, 0, 0) == first  # the module's answer (None: pure)
    assert [(e, f["implementation"]) for e, f in lines] == [("row_path", fastrows.IMPLEMENTATION)]
