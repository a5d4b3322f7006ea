"""Erasure requests and receipts: the contract's formats and the writer's pure decisions."""

import json

import pytest

from evidence_contract.erasure import (
    CONTROL_ERASE,
    ErasureError,
    ErasureRequest,
    decode_request,
    encode_request,
    open_receipt,
    parse_receipt,
    receipt_text,
    valid_request_id,
)
from evidence_contract.note import NoteError, generate_signer
from evidence_contract.tlog import CONTROL_HEADER
from writer.erasures import (
    DUPLICATE,
    INVALID,
    ISSUED,
    REFUSED,
    Receipts,
    is_erase_request,
    receipt_headers,
    sign_receipt,
)

LOG = "evidence-store.test/log"
K1, K2 = "a" * 32, "0" * 31 + "1"


def test_request_round_trips_and_sorts_key_ids():
    req = ErasureRequest("req-1", (K1, K2), 1_700_000_000_000_000, "GDPR art. 17")
    assert req.key_ids == (K2, K1)
    assert decode_request(encode_request(req)) == req
    assert "subject" not in json.loads(encode_request(req))


@pytest.mark.parametrize("value", [
    b"", b"[]", b"{}", b'{"request_id": "r", "key_ids": ["xyz"], "erased_at": 1}',
    b'{"request_id": "bad id", "key_ids": [], "erased_at": 1}',
    b'{"request_id": "r", "key_ids": [], "erased_at": -1}',
    b'{"request_id": "r", "key_ids": [], "erased_at": 1, "subject": "ada"}',
    b'\xff',
])
def test_bad_requests_are_refused(value):
    with pytest.raises(ErasureError):
        decode_request(value)


def test_request_ids():
    assert valid_request_id("retention:short:2024-05") and valid_request_id("erase-0a1b")
    assert not valid_request_id("") and not valid_request_id("a b")
    assert not valid_request_id("a\nb") and not valid_request_id("x" * 201)


def test_receipt_text_is_the_agreed_format():
    req = ErasureRequest("req-1", (K1, K2), 42)
    assert receipt_text(LOG, req) == (f"{LOG}/erasures\nrequest req-1\nerased_at 42\n"
                                      f"key {K2}\nkey {K1}\n")
    assert parse_receipt(LOG, receipt_text(LOG, req)) == req
    assert receipt_text(LOG, ErasureRequest("r", (), 1)) == f"{LOG}/erasures\nrequest r\nerased_at 1\n"


def test_signed_receipt_opens_with_the_log_key_only():
    key, other = generate_signer(LOG), generate_signer(LOG)
    req = ErasureRequest("req-1", (K1,), 42, "reason is not signed")
    note = sign_receipt(key, req)
    assert open_receipt(note, key.verifier) == ErasureRequest("req-1", (K1,), 42)
    with pytest.raises((ErasureError, NoteError)):
        open_receipt(note, other.verifier)
    forged = note.replace(b"erased_at 42", b"erased_at 43")
    with pytest.raises((ErasureError, NoteError)):
        open_receipt(forged, key.verifier)
    assert b"reason" not in note


def test_headers_mark_requests():
    assert is_erase_request([(CONTROL_HEADER, CONTROL_ERASE.encode())])
    assert not is_erase_request([(CONTROL_HEADER, b"checkpoint")]) and not is_erase_request(None)
    assert receipt_headers(ErasureRequest("r", (), 1, "why")) == [
        ("evidence-request-id", b"r"), ("evidence-reason", b"why")]


def _value(rid="req-1", keys=(K1,)):
    return encode_request(ErasureRequest(rid, keys, 42))


def test_receipts_issue_once_per_request_id_and_partition():
    key = generate_signer(LOG)
    r = Receipts(key, LOG)
    r.assign(0, set())
    r.assign(1, {"old"})
    first = r.handle(0, _value())
    assert first.outcome == ISSUED and open_receipt(first.note, key.verifier).request_id == "req-1"
    assert r.handle(0, _value()).outcome == DUPLICATE  # within the open transaction
    r.commit()
    assert r.handle(0, _value()).outcome == DUPLICATE  # committed
    assert r.handle(1, _value("old")).outcome == DUPLICATE  # read back on assignment
    assert r.handle(1, _value("new")).outcome == ISSUED


def test_an_aborted_receipt_is_issued_again():
    r = Receipts(generate_signer(LOG), LOG)
    r.assign(0, ())
    assert r.handle(0, _value()).outcome == ISSUED
    r.abort()
    assert r.handle(0, _value()).outcome == ISSUED
    r.revoke(0)
    r.commit()
    r.assign(0, ())
    assert r.handle(0, _value()).outcome == ISSUED


def test_without_a_log_key_requests_are_refused_and_bad_ones_invalid():
    r = Receipts(None, LOG)
    r.assign(0, ())
    d = r.handle(0, _value())
    assert d.outcome == REFUSED and d.request_id == "req-1" and "log key" in d.detail
    assert Receipts(generate_signer(LOG), LOG).handle(0, b"nonsense").outcome == INVALID


def test_the_log_key_must_name_the_log():
    with pytest.raises(ValueError):
        Receipts(generate_signer("another/log"), LOG)
