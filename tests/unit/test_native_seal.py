"""The writer's two seal paths, held to the same vectors: the pure Python one (the reference)
and the compiled one (``evidence_seal_native``, built from native/seal/ by ``make unit``).

Every case runs through a :class:`writer.Sealer` of each path fed the same messages in the
same order, and the outcomes must be equal byte for byte: the sealed record, the new head and
the re-encoding flag, or the rejection's reason and text, or the duplicate; then the heads and
trees of the open transaction. The compiled module is always built (native/toolchain.sh
installs Rust where there is none): the native half fails, never skips, when it is missing.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import fastavro
import pytest

import writer.native as native_sel
from evidence_contract import (
    chunk_digest,
    content_key,
    encode,
    fingerprint,
    input_digest,
    prompt_digest,
    response_digest,
)
from evidence_contract._avro import HISTORY
from evidence_contract.merkle import CompactRange
from evidence_contract.topics import partition_for
from evidence_contract.vectors import (
    committed_event,
    encrypted_event,
    failed_event,
    mapped_event,
    traced_event,
    truncated_event,
)
from tests.fixtures.writer import encode_raw_capture, make_capture
from tests.unit.test_writer_core import _bad_cases
from topics import MIB
from writer import Duplicate, Rejection, Sealed, Sealer
from writer.checkpoints import record_leaf
from writer.native import NativeSealError
from writer.reasons import Reason

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "schemas" / "vectors.json").read_text())
MAX = 16 * MIB
W = {"writer_id": "w-1", "transactional_id": "tx", "version": "0.1.0"}
PARTITIONS = 6


@pytest.fixture(scope="module")
def native_module() -> Any:
    try:
        import evidence_seal_native
    except ImportError:
        pytest.fail("evidence_seal_native is not built: `make unit` (or native/seal/build.sh "
                    ".venv/bin/python) builds it, installing a Rust toolchain if there is none")
    return evidence_seal_native


class _Counting:
    """A Kernel that counts how often the compiled path took a message."""

    def __init__(self, kernel: Any) -> None:
        self.kernel, self.taken = kernel, 0

    def check(self, *args: Any) -> Any:
        got = self.kernel.check(*args)
        self.taken += got is not None
        return got

    def seal(self, *args: Any) -> Any:
        return self.kernel.seal(*args)


def _sealer(native: bool, max_bytes: int = MAX) -> Sealer:
    s = Sealer(W, max_bytes, 3_600_000_000, 10_000, partitions=PARTITIONS, native=native)
    for p in range(PARTITIONS):
        s.assign(p, {}, s.new_window())
    if native:
        s.kernel = _Counting(s.kernel)
    return s


def _home(key: bytes | None) -> int:
    try:
        return partition_for(key.decode("utf-8"), PARTITIONS) if key else 0
    except UnicodeDecodeError:
        return 0


Message = tuple[bytes | None, bytes | None, int]
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _same(outcome: Any) -> Any:
    """``outcome``, less what differs between two runs of one path: a fastavro error quoted in
    a rejection may name a buffer object by its address."""
    if isinstance(outcome, Rejection):
        return Rejection(outcome.reason, _ADDRESS.sub(" at 0x…", outcome.text))
    return outcome


def _run_both(msgs: list[Message], max_bytes: int = MAX,
              plain: bool = True) -> tuple[list[Any], Sealer]:
    """Both paths over ``msgs`` (value, key, partition); asserts equal outcomes and state and
    returns the outcomes and the native sealer. ``plain``: no capture is encrypted, so every
    one sealed as it came must have been the compiled path's."""
    pure, fast = _sealer(False, max_bytes), _sealer(True, max_bytes)
    outcomes = []
    for i, (value, key, p) in enumerate(msgs):
        now = 1_700_000_000_000_000 + i * 7 - (i % 5) * 11  # steps back now and then
        a = pure.handle(value, key, p, 100 + i, now)
        before = fast.kernel.taken
        b = fast.handle(value, key, p, 100 + i, now)
        assert type(a) is type(b) and _same(a) == _same(b), (i, a, b)
        # Every capture sealed as it came is the compiled path's: it handles the common case.
        if plain and isinstance(a, Sealed) and not a.reencoded:
            assert fast.kernel.taken == before + 1, (i, a)
        outcomes.append(a)
    assert pure.pending_state() == fast.pending_state()
    for s in (pure, fast):
        s.commit()
    for p, stream in {(p, o.head.stream) for (_, _, p), o in zip(msgs, outcomes)
                      if isinstance(o, Sealed)}:
        assert pure.trees.tree(p, stream).range.root() == fast.trees.tree(p, stream).range.root()
    return outcomes, fast


def _msg(value: bytes, stream: str) -> Message:
    return value, stream.encode(), partition_for(stream, PARTITIONS)


def _encode_old(event: dict[str, Any], version: str, fp: str, drop: tuple[str, ...]) -> bytes:
    old = next(s for s in HISTORY if s.fingerprint.hex() == fp)
    out = io.BytesIO()
    body = {k: v for k, v in event.items() if k not in drop}
    fastavro.schemaless_writer(out, old.parsed, {**body, "schema_version": version})
    return b"\xc3\x01" + old.fingerprint + out.getvalue()


def _encode_2_0(event: dict[str, Any]) -> bytes:
    return _encode_old(event, "2.0", "97daea93ce13a290", ("encryption", "trace", "telemetry"))


def _encode_2_1(event: dict[str, Any]) -> bytes:
    return _encode_old(event, "2.1", "dcad4f6e8bfbc7de", ("trace", "telemetry"))


# -- the contract's vectors ---------------------------------------------------------------
def test_schemas_vectors_seal_the_same_and_natively(native_module):
    captures = [r for r in VECTORS["records"] if r["schema"] == "CaptureEvent"]
    assert len(captures) == 5
    msgs = [_msg(bytes.fromhex(r["encoded_hex"]), r["record"]["stream"]) for r in captures]
    outcomes, fast = _run_both(msgs, plain=False)
    assert all(isinstance(o, Sealed) for o in outcomes)
    # All but the capture mapped from telemetry, which is left to the pure path.
    assert fast.kernel.taken == 4
    # The EvidenceRecord vectors' bodies are these captures' bodies, byte for byte.
    for o, r in zip(outcomes, captures):
        assert o.record[10:10 + len(r["body_hex"]) // 2].hex() == r["body_hex"]


def test_the_vectors_of_the_record_digest_hold_in_the_compiled_seal(native_module):
    seq1, seq2 = (r for r in VECTORS["records"] if r["schema"] == "EvidenceRecord")
    kernel_cache: dict[tuple[str, ...], Any] = {}
    for r in (seq1, seq2):
        seal = r["record"]["seal"]
        w = seal["writer"]
        key = (w["writer_id"], w["transactional_id"], w["version"])
        kernel = kernel_cache.setdefault(key, native_module.Kernel(*key))
        body = bytes.fromhex(r["body_hex"])
        encoded = bytes.fromhex(r["encoded_hex"])
        value = b"\xc3\x01" + fingerprint("CaptureEvent") + body
        record, digest, leaf = kernel.seal(value, encoded[2:10], bytes.fromhex(seal["prev_digest"]),
                                           seal["seq"], seal["occurred_at"],
                                           seal["intake_partition"], seal["intake_offset"])
        assert record == encoded
        assert digest.hex() == r["record_digest_hex"] == seal["record_digest"]
        assert leaf == record_leaf(record, digest)


def test_an_encrypted_capture_is_left_to_the_pure_path(native_module):
    e = encrypted_event()
    value = bytes.fromhex(VECTORS["sealed"]["capture"]["encoded_hex"])
    assert value == encode("CaptureEvent", e)
    outcomes, fast = _run_both([_msg(value, e["stream"])], plain=False)
    assert isinstance(outcomes[0], Sealed) and fast.kernel.taken == 0


def test_2_0_captures_seal_as_2_0_records_on_both_paths(native_module):
    msgs = [_msg(_encode_2_0(e), e["stream"]) for e in (committed_event(), failed_event(),
                                                         truncated_event())]
    outcomes, fast = _run_both(msgs)
    assert all(isinstance(o, Sealed) and o.record[2:10].hex() == "854b3d02a904fe84"
               for o in outcomes)
    assert fast.kernel.taken == 3


def test_2_1_captures_seal_as_2_1_records_on_both_paths(native_module):
    msgs = [_msg(_encode_2_1(e), e["stream"]) for e in (committed_event(), failed_event(),
                                                         truncated_event())]
    outcomes, fast = _run_both(msgs)
    assert all(isinstance(o, Sealed) and o.record[2:10].hex() == "598d7a24f41b9228"
               for o in outcomes)
    assert fast.kernel.taken == 3


def test_a_capture_with_a_trace_is_sealed_natively_and_the_same(native_module):
    e = traced_event()
    outcomes, fast = _run_both([_msg(encode("CaptureEvent", e), e["stream"])])
    assert isinstance(outcomes[0], Sealed) and fast.kernel.taken == 1
    assert outcomes[0].record[2:10] == fingerprint("EvidenceRecord")


def _mapped_events() -> list[dict[str, Any]]:
    """Captures mapped from telemetry, valid and broken: each left to the pure path."""
    m = mapped_event()
    return [m, {**m, "event_id": "017f22e2-79b4-7000-8000-0000000000a1", "outcome": "FAILED"},
            {**m, "telemetry": {**m["telemetry"], "dialect": "otel"}},
            {**m, "trace": None}, {**m, "content_key": content_key(b"rebuilt")},
            {**m, "response_digest": response_digest(b"x"), "response_length": 1},
            {**m, "telemetry": {**m["telemetry"], "span_digest": b"\x01" * 31}}]


def test_captures_mapped_from_telemetry_are_left_to_the_pure_path(native_module):
    msgs = [_msg(encode_raw_capture(e), e["stream"]) for e in _mapped_events()]
    outcomes, fast = _run_both(msgs, plain=False)
    assert fast.kernel.taken == 0
    assert [type(o).__name__ if not isinstance(o, Rejection) else o.reason.value
            for o in outcomes] == ["Sealed", "Sealed", "BAD_TELEMETRY", "BAD_TELEMETRY",
                                   "BAD_TELEMETRY", "BAD_TELEMETRY", "BAD_DIGEST"]


# -- the writer's unit vectors ------------------------------------------------------------
def _writer_cases() -> list[tuple[str, bytes | None, bytes | None, int]]:
    """test_writer_core's bad messages, and captures shaped like its rule tests."""
    out: list[tuple[str, bytes | None, bytes | None, int]] = []
    for value, key, reason in _bad_cases():
        out.append((f"bad:{reason.value}", value, key, 1 * MIB if reason.value == "OVERSIZED"
                    else MAX))
    return out


@pytest.mark.parametrize("name,value,key,max_bytes", _writer_cases(),
                         ids=[c[0] for c in _writer_cases()])
def test_writer_core_bad_messages_get_the_same_rejection(native_module, name, value, key,
                                                         max_bytes):
    p = _home(key)
    [outcome], fast = _run_both([(value, key, p)], max_bytes)
    assert isinstance(outcome, Rejection) and fast.kernel.taken == 0


S = "tenant-a:chat"


def _chunk(data: bytes = b"chunk text", digest: bytes | None = None, kept: bool = True):
    return {"doc_id": "kb/a", "doc_version": "v1" if kept else None,
            "chunk_digest": chunk_digest(data) if digest is None else digest,
            "chunk_bytes": data if kept else None}


def _truncated(**kw: Any) -> dict[str, Any]:
    e = make_capture(S, **kw)
    e.update(request_bytes=None, response_bytes=None)
    e["capture"] = {**e["capture"], "truncated": True}
    return e


def _rule_events() -> list[dict[str, Any]]:
    """One capture per rule of ``writer.capture._check_semantics``, valid and broken."""
    failed = make_capture(S, outcome="FAILED", response_bytes=None, response_digest=None,
                          response_length=None, error_bytes=b"boom", http_status=500)
    hash_only = make_capture(S, request_bytes=None)
    hash_only["capture"] = {**hash_only["capture"], "request_policy": "HASH_ONLY"}
    kept = make_capture(S, input_bytes=b"user said", input_digest=input_digest(b"user said"),
                        prompt_bytes=b"rendered", prompt_digest=prompt_digest(b"rendered"))
    untruncated = {**_truncated(), "capture": {**_truncated()["capture"], "truncated": False}}
    seeds = [("42", True), (str(2**64), True), ("-" + "9" * 300, True), ("-0", True),
             ("0", True), ("9" * 4300, True), ("1" * 4301, True), ("42", False), (None, True),
             ("abc", True), ("042", True), ("4.2", True), ("", True), ("+1", True),
             ("\u0661", True), ("1\n", True)]
    events = [
        make_capture(S), failed, hash_only, kept, untruncated,
        {**hash_only, "request_length": -7}, {**hash_only, "request_length": 12345},
        {**failed, "response_length": 0}, {**failed, "response_digest": response_digest(b"x")},
        {**failed, "response_digest": response_digest(b"x"), "response_length": 1},
        _truncated(), {**_truncated(), "response_digest": None},
        {**_truncated(), "response_length": None}, _truncated(response_length=-1),
        {**untruncated, "response_bytes": b"x", "response_length": 1,
         "response_digest": response_digest(b"x")},
        _truncated(retrieval=[_chunk(kept=False), _chunk()]),
        _truncated(retrieval=[_chunk(kept=False)]),
        {**_truncated(outcome="UNKNOWN", response_digest=None, response_length=None),
         "error_bytes": b"e" * 65536},
        {**_truncated(outcome="UNKNOWN", response_digest=None, response_length=None),
         "error_bytes": b"e" * 65537},
        {**kept, "input_digest": input_digest(b"other")},
        {**kept, "prompt_digest": prompt_digest(b"other")},
        {**kept, "input_digest": prompt_digest(b"user said")},
        {**kept, "input_digest": None}, {**kept, "prompt_digest": None},
        {**kept, "input_bytes": None, "prompt_bytes": None},
        make_capture(S, retrieval=[_chunk(), _chunk(b"other chunk")]),
        make_capture(S, retrieval=[_chunk(), _chunk(b"x", digest=chunk_digest(b"y"))]),
        make_capture(S, retrieval=[_chunk(b"x", digest=prompt_digest(b"x"))]),
        make_capture(S, retrieval=[_chunk(b"x", digest=chunk_digest(b"y"), kept=False)]),
        make_capture(S, retrieval=[_chunk(), _chunk(digest=b"\x01" * 31, kept=False)]),
        make_capture(S, request_length=5), make_capture(S, response_length=1),
        make_capture(S, request_length=-1), make_capture(S, response_length=None),
        make_capture(S, response_digest=None), make_capture(S, schema_version="2.0"),
        make_capture(S, schema_version="2.3"), make_capture(S, event_id="not-a-uuid"),
        make_capture("a b"), make_capture("x" * 128), make_capture("x" * 129),
        make_capture("sp\u00e9cial"), make_capture(S, http_status=-5),
        make_capture(S, response_content_type="t\u00e9xt/\U0001f600"),
    ]
    for field, size in (("content_key", 31), ("content_key", 0), ("input_digest", 16),
                        ("prompt_digest", 64), ("response_digest", 31), ("output_digest", 1),
                        ("output_digest", 32)):
        events.append({**make_capture(S), field: b"\x07" * size})
    for seed, deterministic in seeds:
        events.append(make_capture(S, replay={"seed": seed, "temperature": 0.5, "top_p": None,
                                              "deterministic": deterministic}))
    # trace (record contract 2.2): the compiled path checks it as BAD_TRACE does.
    ok_trace = {"trace_id": b"\x01" * 16, "span_id": b"\x02" * 8}
    for trace in (ok_trace, {**ok_trace, "trace_id": bytes(16)}, {**ok_trace, "span_id": bytes(8)},
                  {**ok_trace, "trace_id": b"\x01" * 15}, {**ok_trace, "trace_id": b"\x01" * 17},
                  {**ok_trace, "span_id": b"\x02" * 7}, {**ok_trace, "span_id": b"\x02" * 9},
                  {"trace_id": b"\x00" * 15 + b"\x01", "span_id": b"\x00" * 7 + b"\x01"}):
        events.append(make_capture(S, trace=trace))
    events.append(make_capture(S, trace=ok_trace, schema_version="2.1"))
    events.append(make_capture(S, trace=ok_trace, schema_version="2.0"))
    return events


def test_each_rule_of_the_writer_core_gets_the_same_outcome(native_module):
    msgs = [_msg(encode_raw_capture(e), e["stream"]) for e in _rule_events()]
    outcomes, fast = _run_both(msgs)
    sealed = sum(isinstance(o, Sealed) for o in outcomes)
    assert sealed >= 20 and fast.kernel.taken >= sealed
    reasons = {o.reason for o in outcomes if isinstance(o, Rejection)}
    assert len(reasons) >= 10 and Reason.BAD_TRACE in reasons


# -- the differential run -----------------------------------------------------------------
def _generated(rng: random.Random, i: int) -> tuple[bytes, str]:
    """A valid capture of one of several shapes (2.0, 2.1 and 2.2, chunks, input, seeds,
    truncated, a trace, sizes from empty to 20 kB)."""
    stream = f"tenant-{i % 7}:s.{i % 3}"
    kw: dict[str, Any] = {"response": os.urandom(rng.choice((0, 1, 100, 1000, 20_000)))}
    if i % 4 == 1:
        kw["retrieval"] = [_chunk(os.urandom(rng.randrange(1, 300)), kept=rng.random() < .7)
                           for _ in range(rng.randrange(1, 4))]
    if i % 5 == 2:
        kw.update(input_bytes=b"in", input_digest=input_digest(b"in"))
    if i % 6 == 3:
        kw["replay"] = {"seed": str(rng.randrange(-10**30, 10**30)), "temperature": 0.0,
                        "top_p": 1.0, "deterministic": True}
    if i % 7 == 6:
        kw["trace"] = {"trace_id": rng.randbytes(16), "span_id": rng.randbytes(8)}
    e = make_capture(stream, **kw)
    if i % 9 == 4:
        e = {**e, "request_bytes": None, "response_bytes": None,
             "capture": {**e["capture"], "truncated": True}}
    if i % 8 == 5:
        return _encode_2_0({**e, "trace": None}), stream
    if i % 10 == 7:
        return _encode_2_1({**e, "trace": None}), stream
    return encode_raw_capture(e), stream


def _mutate(rng: random.Random, value: bytes) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:  # cut anywhere
        return value[:rng.randrange(len(value))]
    if kind == 1:  # a few flipped bits anywhere
        b = bytearray(value)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 2:  # a flipped bit in the last 40% (digests, bodies, seal-ish tail fields)
        b = bytearray(value)
        b[rng.randrange(len(b) * 3 // 5, len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 3:  # trailing bytes
        return value + bytes([rng.randrange(256)]) * rng.randrange(1, 3)
    if kind == 4:  # a byte inserted in the body
        i = rng.randrange(10, len(value))
        return value[:i] + bytes([rng.randrange(256)]) + value[i:]
    b = bytearray(value)  # a byte of the header
    b[rng.randrange(10)] = rng.randrange(256)
    return bytes(b)


def test_a_differential_run_over_generated_and_mutated_captures(native_module):
    rng = random.Random(14)
    sent: list[tuple[bytes, str]] = []
    msgs: list[Message] = []
    for n in range(3000):
        if sent and rng.random() < 0.1:
            value, stream = rng.choice(sent)  # sent again: a duplicate, unless it was bad
        else:
            value, stream = _generated(rng, n)
            sent.append((value, stream))
        key, p = stream.encode(), partition_for(stream, PARTITIONS)
        roll = rng.random()
        if roll < 0.45:
            value = _mutate(rng, value)
        elif roll < 0.50:
            p = (p + rng.randrange(1, PARTITIONS)) % PARTITIONS  # wrong partition
        elif roll < 0.53:
            key = rng.choice((None, b"", stream.encode() + b"x"))
        elif roll < 0.56 and value[10] == 0x06:
            value = value[:10] + b"\x86\x00" + value[11:]  # not canonical: re-encoded
        msgs.append((value, key, p))
    outcomes, fast = _run_both(msgs)
    sealed = sum(isinstance(o, Sealed) for o in outcomes)
    kinds = {type(o) for o in outcomes}
    assert kinds == {Sealed, Rejection, Duplicate}
    assert fast.kernel.taken > 500 and sealed > 500
    reasons = {o.reason.value for o in outcomes if isinstance(o, Rejection)}
    assert {"TRUNCATED", "MALFORMED", "WRONG_PARTITION", "KEY_MISMATCH",
            "UNKNOWN_FINGERPRINT", "DIGEST_MISMATCH"} <= reasons, reasons


def test_oversize_is_left_to_the_pure_path_at_the_limit(native_module):
    value = encode_raw_capture(make_capture(S))
    limit = len(value) + 64 * 1024
    for max_bytes in (limit, limit - 1):
        [o], fast = _run_both([_msg(value, S)], max_bytes)
        assert isinstance(o, Sealed) == (max_bytes == limit)
        assert fast.kernel.taken == (max_bytes == limit)


# -- selection ----------------------------------------------------------------------------
def _choose(monkeypatch: pytest.MonkeyPatch, setting: str, module: Any = None):
    real = native_sel.importlib.import_module

    def fake(name: str) -> Any:
        if name != native_sel.MODULE:
            return real(name)
        if module is None:
            raise ImportError(f"No module named {name!r}")
        return module

    monkeypatch.setattr(native_sel.importlib, "import_module", fake)
    return native_sel._choose(setting)


def test_without_the_module_auto_is_pure_and_1_is_an_error(monkeypatch):
    off = _choose(monkeypatch, "auto")
    assert not off.on and "not installed" in off.why
    with pytest.raises(NativeSealError, match="EVIDENCE_NATIVE=1"):
        _choose(monkeypatch, "1")
    assert not _choose(monkeypatch, "0").on
    with pytest.raises(NativeSealError, match="expected 0, 1 or auto"):
        _choose(monkeypatch, "yes")


def _check_and_seal_only(native_module: Any, seal: Any = None) -> Any:
    """A module like ``native_module`` whose Kernel has only ``check`` and ``seal`` (no
    Merkle append), its seals passed through ``seal`` when given."""

    class Kernel:
        def __init__(self, *a: str) -> None:
            self.k = native_module.Kernel(*a)

        def check(self, *a: Any) -> Any:
            return self.k.check(*a)

        def seal(self, *a: Any) -> Any:
            got = self.k.seal(*a)
            return got if seal is None else seal(got)

    return type("Module", (), {"RECORD_FOR_CAPTURE": native_module.RECORD_FOR_CAPTURE,
                               "LEAF_LABEL": native_module.LEAF_LABEL, "Kernel": Kernel})


def test_a_module_that_disagrees_with_the_contract_is_refused(monkeypatch, native_module):
    class Wrong:
        RECORD_FOR_CAPTURE = {bytes(8): bytes(8)}
        LEAF_LABEL = native_module.LEAF_LABEL
        Kernel = native_module.Kernel

    refused = _choose(monkeypatch, "auto", Wrong)
    assert not refused.on and "fingerprint" in refused.why
    with pytest.raises(NativeSealError, match="refused"):
        _choose(monkeypatch, "1", Wrong)

    def lying(got: Any) -> Any:
        record, digest, leaf = got
        return record[:-1] + b"\x02", digest, leaf

    refused = _choose(monkeypatch, "auto", _check_and_seal_only(native_module, lying))
    assert not refused.on and "differently" in refused.why

    Old = _check_and_seal_only(native_module)  # a build from before the compiled Merkle append
    refused = _choose(monkeypatch, "auto", Old)
    assert not refused.on and "Merkle append" in refused.why


def test_the_compiled_merkle_append_makes_the_pure_ranges(native_module):
    rng = random.Random(9)
    pure, compiled = CompactRange(), CompactRange()
    merge = native_module.Kernel("w", "t", "0").append_leaf
    for i in range(1100):
        leaf = rng.randbytes(32)
        pure.append(leaf)
        compiled.append_with(merge, leaf)
        assert (compiled.size, compiled.nodes) == (pure.size, pure.nodes), i
    assert compiled.root() == pure.root()
    # A restored range appends the same.
    restored = CompactRange(pure.size, pure.nodes)
    leaf = rng.randbytes(32)
    restored.append_with(merge, leaf)
    pure.append(leaf)
    assert restored.nodes == pure.nodes


@pytest.mark.parametrize("nodes,size,leaf,match", [
    ([], 0, b"\x00" * 31, "32 bytes"),
    ([b"\x00" * 32], 3, b"\x00" * 32, "compact range"),
    ([b"\x00" * 31], 1, b"\x00" * 32, "node is 32 bytes"),
    (["not bytes"], 1, b"\x00" * 32, "not bytes"),
])
def test_the_compiled_merkle_append_refuses_what_is_no_range_and_changes_nothing(
        native_module, nodes, size, leaf, match):
    before = list(nodes)
    with pytest.raises(ValueError, match=match):
        native_module.append_leaf(nodes, size, leaf)
    assert nodes == before


def test_the_compiled_path_is_selected_by_default_and_logged(native_module, caplog):
    native_sel._selected.cache_clear()
    caplog.set_level("INFO", logger="evidence.writer")
    chosen = native_sel.select({})
    assert chosen.on and chosen.module is native_module
    assert not native_sel.select({"EVIDENCE_NATIVE": "0"}).on
    logged = [r for r in caplog.records if r.getMessage() == "native_seal"]
    assert len(logged) == 2
    assert isinstance(Sealer(W, MAX, 1, 1, native=None).kernel, native_module.Kernel) \
        or os.environ.get("EVIDENCE_NATIVE") == "0"
    assert Sealer(W, MAX, 1, 1, native=False).kernel is None


def test_the_writer_unit_tests_pass_on_the_other_path(native_module):
    """The writer's own unit tests run here on the path this process does not default to
    (they take the compiled one by default when it is built)."""
    env = {**os.environ, "EVIDENCE_NATIVE": "0" if os.environ.get("EVIDENCE_NATIVE") != "0"
           else "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         "tests/unit/test_writer_core.py", "tests/unit/test_writer_shell.py",
         "tests/unit/test_writer_checkpoints.py", "tests/unit/test_writer_encrypted.py",
         "tests/unit/test_writer_erasures.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def test_a_build_from_before_this_contract_version_is_refused(monkeypatch, native_module):
    """A module that knows 2.0 and 2.1 only would send every 2.2 capture to the pure path
    unnoticed: it is refused, naming the contract it lacks."""

    class Older:
        RECORD_FOR_CAPTURE = {c: r for c, r in native_module.RECORD_FOR_CAPTURE.items()
                              if c != fingerprint("CaptureEvent")}
        LEAF_LABEL = native_module.LEAF_LABEL
        Kernel = native_module.Kernel

    assert len(Older.RECORD_FOR_CAPTURE) == 2
    refused = _choose(monkeypatch, "auto", Older)
    assert not refused.on and "older than this writer" in refused.why and "2.2" in refused.why
    assert native_sel._refusal(native_module) == ""
