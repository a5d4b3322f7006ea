import hashlib
import struct

import pytest

from evidence_contract import (
    GENESIS,
    chunk_digest,
    content_key,
    input_digest,
    output_digest,
    prompt_digest,
    record_digest,
    response_digest,
)

BYTE_DIGESTS = [
    (content_key, 0x00),
    (response_digest, 0x01),
    (input_digest, 0x02),
    (prompt_digest, 0x03),
    (chunk_digest, 0x06),
]
SAMPLES = [b"", b"abc", bytes(range(256)), b"\x00" * 1000]


def expected(prefix: int, data: bytes) -> bytes:
    return hashlib.sha256(bytes([prefix]) + data).digest()


@pytest.mark.parametrize("fn,prefix", BYTE_DIGESTS)
@pytest.mark.parametrize("data", SAMPLES)
def test_byte_digest_is_sha256_of_prefix_and_bytes(fn, prefix, data):
    assert fn(data) == expected(prefix, data)
    assert fn(bytearray(data)) == fn(memoryview(data)) == fn(data)
    assert len(fn(data)) == 32


@pytest.mark.parametrize("text", ["", "Hi!", "h\u00e9llo \u4f60\u597d \U0001f642", "\x00\n"])
def test_output_digest_is_over_utf8(text):
    assert output_digest(text) == expected(0x04, text.encode("utf-8"))


def test_record_digest_layout():
    prev = bytes(range(32))
    body = b"\x06avro-body"
    want = hashlib.sha256(b"\x05" + prev + struct.pack(">Q", 7) + struct.pack(">Q", 1234567) + body).digest()
    assert record_digest(prev, 7, 1234567, body) == want


def test_record_digest_be64_is_unsigned_big_endian():
    want = hashlib.sha256(b"\x05" + GENESIS + b"\x80" + b"\x00" * 7 + b"\xff" * 8).digest()
    assert record_digest(GENESIS, 2**63, 2**64 - 1, b"") == want


def test_genesis_is_32_zero_bytes():
    assert GENESIS == b"\x00" * 32


def test_same_bytes_differ_under_every_prefix():
    data = b"same bytes"
    digests = {fn(data) for fn, _ in BYTE_DIGESTS}
    digests.add(output_digest(data.decode()))
    digests.add(record_digest(GENESIS, 0, 0, data))
    digests.add(hashlib.sha256(data).digest())  # and none equals the unprefixed hash
    assert len(digests) == 8


@pytest.mark.parametrize("fn,_", BYTE_DIGESTS)
@pytest.mark.parametrize("bad", ["text", None, 1, [1, 2]])
def test_byte_digests_reject_non_bytes(fn, _, bad):
    with pytest.raises(TypeError, match="bytes"):
        fn(bad)


@pytest.mark.parametrize("bad", [b"text", None, 1])
def test_output_digest_rejects_non_str(bad):
    with pytest.raises(TypeError, match="str"):
        output_digest(bad)


def test_output_digest_rejects_lone_surrogate():
    with pytest.raises(UnicodeEncodeError):
        output_digest("\ud800")


@pytest.mark.parametrize(
    "args,error",
    [
        ((b"\x00" * 31, 1, 0, b""), ValueError),
        ((b"\x00" * 33, 1, 0, b""), ValueError),
        (("\x00" * 32, 1, 0, b""), TypeError),
        ((GENESIS, 1, 0, "body"), TypeError),
        ((GENESIS, -1, 0, b""), ValueError),
        ((GENESIS, 1, 2**64, b""), ValueError),
        ((GENESIS, 1.0, 0, b""), TypeError),
        ((GENESIS, True, 0, b""), TypeError),
    ],
)
def test_record_digest_rejects_bad_arguments(args, error):
    with pytest.raises(error):
        record_digest(*args)
