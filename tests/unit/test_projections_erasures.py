"""The erasure receipts' fold: signed receipts to rows, anything else a finding."""

from evidence_contract.erasure import ErasureRequest, receipt_text
from evidence_contract.note import format_note, generate_signer, sign
from projections.erasures import ERASURE_INVALID, ErasureRow, decode_receipt
from writer.erasures import receipt_headers, sign_receipt

LOG = "evidence-store.test/log"
KEY = generate_signer(LOG)
K1, K2 = "a" * 32, "b" * 32


def _msg(req=ErasureRequest("req-1", (K1, K2), 42, "art. 17"), key=KEY):
    return sign_receipt(key, req), receipt_headers(req)


def test_a_signed_receipt_gives_one_row_per_key_id():
    note, headers = _msg()
    [row] = decode_receipt(3, 9, note, headers, LOG, KEY.verifier)
    assert isinstance(row, ErasureRow) and row.request.reason == "art. 17"
    assert row.rows() == [("req-1", bytes.fromhex(K1), 42, note, 3, 9, "art. 17"),
                          ("req-1", bytes.fromhex(K2), 42, note, 3, 9, "art. 17")]
    # Without a key configured it is parsed, not verified.
    assert isinstance(decode_receipt(3, 9, note, headers, LOG, None)[0], ErasureRow)


def test_a_receipt_of_no_keys_is_one_row_with_a_null_key():
    note, headers = _msg(ErasureRequest("req-2", (), 1))
    [row] = decode_receipt(0, 0, note, headers, LOG, KEY.verifier)
    assert [r[1] for r in row.rows()] == [None]


def test_bad_receipts_are_findings_never_errors():
    note, headers = _msg()
    other = generate_signer(LOG)
    text = receipt_text(LOG, ErasureRequest("req-1", (K1,), 42))
    cases = [
        (None, headers),
        (b"garbage", headers),
        (sign_receipt(other, ErasureRequest("req-1", (K1,), 42)), headers),  # another key
        (note.replace(b"erased_at 42", b"erased_at 41"), headers),  # altered text
        (note, [("evidence-request-id", b"req-9")]),  # header and text disagree
        (format_note("another/log/erasures\nrequest r\nerased_at 1\n",
                     [sign(KEY, "another/log/erasures\nrequest r\nerased_at 1\n")]), []),
        (format_note(text + "extra line\n", [sign(KEY, text + "extra line\n")]), []),
    ]
    for value, hdrs in cases:
        [f] = decode_receipt(1, 5, value, hdrs, LOG, KEY.verifier)
        assert f.kind == ERASURE_INVALID and (f.partition, f.offset) == (1, 5), value
