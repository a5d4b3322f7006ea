import time
import uuid

import pytest

import evidence_contract as schemas
from evidence_contract import (
    GENESIS,
    MAX_SEED_DIGITS,
    SCHEMA_VERSION,
    SEED_RE,
    STREAM_ID_RE,
    SUPPORTED_SCHEMA_VERSIONS,
    EncodeError,
    body_bytes,
    new_event_id,
    now_micros,
    record_digest,
    seal,
    seed_text,
    valid_event_id,
    valid_seed,
    valid_stream_id,
)
from evidence_contract.vectors import committed_event

WRITER = {"writer_id": "w", "transactional_id": "t", "version": "0.1.0"}


def test_all_is_sorted_and_resolves():
    assert schemas.__all__ == sorted(schemas.__all__)
    for name in schemas.__all__:
        assert getattr(schemas, name) is not None


def test_new_event_id_is_canonical_uuid7():
    a, b = new_event_id(), new_event_id()
    assert a != b
    for s in (a, b):
        assert s == s.lower() and str(uuid.UUID(s)) == s and uuid.UUID(s).version == 7
        assert valid_event_id(s)


def test_new_event_ids_carry_the_clock_and_sort_in_the_order_made(monkeypatch):
    import time

    from evidence_contract import model

    now = time.time_ns()
    ids = [new_event_id() for _ in range(20_000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    ms = int(ids[0].replace("-", "")[:12], 16)
    assert abs(ms - now // 1_000_000) < 60_000
    assert {uuid.UUID(i).variant for i in ids} == {uuid.RFC_4122}
    # A clock stepped back (and standing still) still gives ids that sort after the last
    # and in order: each takes the next tick, 4096 to a millisecond; the random part differs.
    monkeypatch.setattr(model.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    frozen = [new_event_id() for _ in range(5000)]
    assert ids[-1] < frozen[0] and frozen == sorted(frozen) and len(set(frozen)) == 5000
    last_ms = int(ids[-1].replace("-", "")[:12], 16)
    assert int(frozen[-1].replace("-", "")[:12], 16) - last_ms <= 2  # 5000 ticks: ~1.2 ms


def test_a_forked_child_does_not_repeat_its_parents_ids():
    import os

    new_event_id()  # the parent holds unused random bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, "".join(new_event_id() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode()
    os.waitpid(pid, 0)
    os.close(read)
    parent = "".join(new_event_id() for _ in range(4))
    rand = lambda text: {text[i + 24:i + 36] for i in range(0, len(text), 36)}  # noqa: E731
    assert len(child) == 4 * 36 and not rand(child) & rand(parent)


def test_valid_event_id_rejects_non_canonical():
    good = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"
    assert valid_event_id(good)
    for bad in [good.upper(), "{" + good + "}", good.replace("-", ""), str(uuid.uuid4()), good + "\n", None]:
        assert not valid_event_id(bad)


def test_now_micros_is_epoch_micros():
    before = time.time_ns() // 1000
    assert before <= now_micros() <= time.time_ns() // 1000


@pytest.mark.parametrize("s", ["a", "tenant-a:support.chat", "A_b.c:d-e", "x" * 128, "0"])
def test_valid_stream_ids(s):
    assert valid_stream_id(s) and STREAM_ID_RE.fullmatch(s)


@pytest.mark.parametrize("s", ["", "x" * 129, "a b", "a/b", "a\n", "\u00e9", None, b"abc"])
def test_invalid_stream_ids(s):
    assert not valid_stream_id(s)


def test_schema_versions():
    assert SCHEMA_VERSION == "2.2" and SUPPORTED_SCHEMA_VERSIONS == {"2.0", "2.1", "2.2"}


@pytest.mark.parametrize("s", ["0", "-0", "7", "-1", "42", "9223372036854775808", "-" + "9" * 4300,
                               "1" + "0" * 4299])
def test_valid_seeds(s):
    assert valid_seed(s) and SEED_RE.fullmatch(s)


@pytest.mark.parametrize("s", ["", "-", "+1", "01", "-01", "1.0", "1e3", " 1", "1\n", "0x10",
                               "\u0661", "1" * (MAX_SEED_DIGITS + 1), 1, None, True])
def test_invalid_seeds(s):
    assert not valid_seed(s)


@pytest.mark.parametrize("value,text", [(0, "0"), (-5, "-5"), (2**63, "9223372036854775808"),
                                        (2**64 - 1, "18446744073709551615"), (True, None),
                                        (False, None), (1.0, None), ("1", None), (None, None)])
def test_seed_text(value, text):
    assert seed_text(value) == text


def test_seed_text_of_a_huge_int_is_none_rather_than_an_error():
    assert seed_text(10 ** 5000) is None


def test_seal_from_genesis_and_onwards():
    body = committed_event()
    first = seal(body, 0, GENESIS, 100, WRITER, 2, 40)
    s = first["seal"]
    assert first["body"] is body
    assert (s["seq"], s["prev_digest"], s["occurred_at"]) == (1, GENESIS, 100)
    assert (s["intake_partition"], s["intake_offset"], s["writer"]) == (2, 40, WRITER)
    assert s["record_digest"] == record_digest(GENESIS, 1, 100, body_bytes(body))

    second = seal(body, 1, s["record_digest"], 101, WRITER, 2, 41)
    assert second["seal"]["seq"] == 2 and second["seal"]["prev_digest"] == s["record_digest"]
    assert second["seal"]["record_digest"] != s["record_digest"]


def test_seal_rejects_invalid_body_and_head():
    body = committed_event()
    with pytest.raises(EncodeError):
        seal({**body, "outcome": "NOPE"}, 0, GENESIS, 1, WRITER, 0, 0)
    with pytest.raises(ValueError):
        seal(body, -1, GENESIS, 1, WRITER, 0, 0)
    with pytest.raises(ValueError):
        seal(body, 0, b"\x00" * 31, 1, WRITER, 0, 0)


def test_iso_micros_gives_people_a_utc_time_to_the_second():
    from evidence_contract import iso_micros

    assert iso_micros(1_796_268_000_999_999) == "2026-12-03T03:20:00Z"
    assert iso_micros(0) == "1970-01-01T00:00:00Z"
    assert iso_micros((1 << 63) - 1) == f"{(1 << 63) - 1} µs since the epoch"
