"""Sealed content (record contract 2.1): envelopes, keyed commitments, key wrap, fixed vectors."""

import hashlib
import hmac
import json
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from evidence_contract import decode, digests, encode
from evidence_contract import envelope as fmt
from evidence_contract.merkle import LEAF_LABEL
from evidence_contract.sealing import (
    LocalKek,
    OpenError,
    SubjectKeys,
    derive,
    new_data_key,
    new_key_id,
    open_body,
    seal_body,
    unwrap_key,
    wrap_key,
)
from evidence_contract.vectors import (
    PATH,
    SEALED_DATA_KEY,
    SEALED_KEK,
    SEALED_KEY_ID,
    committed_event,
    encrypted_event,
)

KEYS = SubjectKeys(SEALED_KEY_ID, SEALED_DATA_KEY)
S, E = "tenant-a:support.chat", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"
VECTORS = json.loads(PATH.read_text())["sealed"]


def _hkdf_sha256(ikm: bytes, info: bytes, length: int = 32) -> bytes:
    # RFC 5869 by hand (stdlib only), to check the derivation independently of `cryptography`.
    prk = hmac.new(b"\x00" * 32, ikm, hashlib.sha256).digest()  # an empty salt is HashLen zeros
    out, t, i = b"", b"", 1
    while len(out) < length:
        t = hmac.new(prk, t + info + bytes([i]), hashlib.sha256).digest()
        out, i = out + t, i + 1
    return out[:length]


def test_rfc_3394_key_wrap_vector():
    # RFC 3394 section 4.6: a 256-bit key wrapped with a 256-bit KEK.
    kek = bytes.fromhex("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F")
    key = bytes.fromhex("00112233445566778899AABBCCDDEEFF000102030405060708090A0B0C0D0E0F")
    wrapped = bytes.fromhex("28C9F404C4B810F4CBCCB35CFB87F8263F5786E2D80ED326CBC7F0E71A99F43B"
                            "FB988B9B7A02DD21")
    assert wrap_key(kek, key) == wrapped
    assert unwrap_key(kek, wrapped) == key
    with pytest.raises(OpenError):
        unwrap_key(bytes(32), wrapped)
    with pytest.raises(OpenError):
        unwrap_key(kek, wrapped[:-1] + bytes([wrapped[-1] ^ 1]))


def test_derivation_is_rfc_5869_hkdf_sha256_with_an_empty_salt():
    for info in (fmt.AEAD_INFO, fmt.COMMITMENT_INFO):
        assert derive(SEALED_DATA_KEY, info) == _hkdf_sha256(SEALED_DATA_KEY, info)
    assert derive(SEALED_DATA_KEY, fmt.AEAD_INFO) != derive(SEALED_DATA_KEY, fmt.COMMITMENT_INFO)
    with pytest.raises(ValueError):
        derive(b"short", fmt.AEAD_INFO)


def test_commitments_are_hmac_of_the_prefix_and_the_bytes_under_the_commitment_key():
    ck = _hkdf_sha256(SEALED_DATA_KEY, fmt.COMMITMENT_INFO)
    for kind, prefix in fmt.COMMITMENT_PREFIXES.items():
        data = b"Say hi"
        got = KEYS.output_digest("Say hi") if kind == "output_digest" else getattr(KEYS, kind)(data)
        assert got == hmac.new(ck, prefix + data, hashlib.sha256).digest()
        assert len(got) == digests.DIGEST_SIZE


def test_commitment_prefixes_are_disjoint_from_every_other_domain():
    plain = {bytes([i]) for i in range(7)}  # content_key 0x00 .. chunk_digest 0x06
    tree = {b"\x00", b"\x01", LEAF_LABEL[:1]}  # RFC 6962 leaf and node, our leaf label
    prefixes = set(fmt.COMMITMENT_PREFIXES.values())
    assert len(prefixes) == len(fmt.COMMITMENT_PREFIXES)
    assert not prefixes & (plain | tree)


def test_a_commitment_is_not_the_plain_digest_and_depends_on_the_key():
    other = SubjectKeys(new_key_id(), new_data_key())
    req = b'{"messages":[{"role":"user","content":"my name is Ada"}]}'
    assert KEYS.content_key(req) != digests.content_key(req)
    assert KEYS.content_key(req) != other.content_key(req)
    assert KEYS.content_key(req) != KEYS.response_digest(req)  # kinds stay apart


def test_an_envelope_is_45_bytes_longer_and_opens_only_in_its_place():
    env = KEYS.seal(b"secret", S, E, "response_bytes")
    assert len(env) == len(b"secret") + fmt.OVERHEAD == len(b"secret") + 45
    assert env[0] == fmt.VERSION and env[1:17].hex() == SEALED_KEY_ID
    assert KEYS.open(env, S, E, "response_bytes") == b"secret"
    for stream, event_id, field in ((S, E, "request_bytes"), ("other", E, "response_bytes"),
                                    (S, "017f22e2-79b0-7cc3-98c4-dc0c0c07398e", "response_bytes")):
        with pytest.raises(OpenError):
            KEYS.open(env, stream, event_id, field)
    for i in (0, 5, 20, len(env) - 1):  # version, key id, nonce, tag
        bad = bytearray(env)
        bad[i] ^= 1
        with pytest.raises(OpenError):
            KEYS.open(bytes(bad), S, E, "response_bytes")
    with pytest.raises(OpenError):
        SubjectKeys(SEALED_KEY_ID, new_data_key()).open(env, S, E, "response_bytes")
    assert KEYS.seal(b"secret", S, E, "response_bytes") != env  # a fresh nonce each time


def test_the_published_envelope_vector_opens_with_the_published_aead_key():
    v = VECTORS["envelope"]
    env = bytes.fromhex(v["envelope_hex"])
    key = bytes.fromhex(VECTORS["aead_key_hex"])
    aad = bytes.fromhex(v["aad_hex"])
    assert aad == (b"evidence-store/v2 envelope\n" + env[:29]
                   + len(S).to_bytes(2, "big") + S.encode() + (36).to_bytes(2, "big") + E.encode()
                   + (14).to_bytes(2, "big") + b"response_bytes")
    assert AESGCM(key).decrypt(env[17:29], env[29:], aad) == bytes.fromhex(v["plaintext_hex"])
    assert env == KEYS.seal(bytes.fromhex(v["plaintext_hex"]), S, E, "response_bytes",
                            bytes.fromhex(v["nonce_hex"]))
    assert bytes.fromhex(VECTORS["wrapped_data_key_hex"]) == wrap_key(SEALED_KEK, SEALED_DATA_KEY)


def test_the_published_commitments_are_what_the_code_computes():
    for kind, cases in VECTORS["commitments"].items():
        for c in cases:
            got = (KEYS.output_digest(c["input_text"]) if kind == "output_digest"
                   else getattr(KEYS, kind)(bytes.fromhex(c["input_hex"])))
            assert got.hex() == c["commitment_hex"], kind


def test_an_encrypted_capture_round_trips_and_opens_to_the_plaintext():
    sealed = encrypted_event()
    data = encode("CaptureEvent", sealed)
    assert data.hex() == VECTORS["capture"]["encoded_hex"]
    assert decode(data) == ("CaptureEvent", sealed)
    assert sealed["encryption"] == {"scheme": fmt.SCHEME, "key_id": SEALED_KEY_ID}
    assert fmt.encrypted_body_problem(sealed) == ""
    plain, opened = committed_event(), open_body(sealed, KEYS)
    for name in ("request_bytes", "input_bytes", "prompt_bytes", "response_bytes", "params",
                 "error_bytes"):
        assert opened[name] == plain[name], name
    assert [c["chunk_bytes"] for c in opened["retrieval"]] == [c["chunk_bytes"]
                                                               for c in plain["retrieval"]]
    assert opened["request_length"] == len(plain["request_bytes"])
    assert sealed["request_length"] == len(sealed["request_bytes"]) - fmt.OVERHEAD


def test_an_encrypted_capture_holds_no_plaintext_and_confirms_no_guess():
    plain, data = committed_event(), encode("CaptureEvent", encrypted_event())
    contents = [plain["request_bytes"], plain["response_bytes"], plain["params"].encode(),
                b"Say hi", b"Greet warmly.", b"Hi!"]
    for c in contents:
        assert c not in data, c
    # Every plain digest of the right plaintext, under every plain prefix, matches nothing
    # stored: without the data key a correct guess cannot be confirmed.
    guesses = {bytes([p]) + c for p in range(7) for c in contents}
    plain_digests = {hashlib.sha256(g).digest() for g in guesses}
    _, rec = decode(data)
    stored = {rec[k] for k in ("content_key", "input_digest", "prompt_digest", "response_digest",
                               "output_digest")} | {c["chunk_digest"] for c in rec["retrieval"]}
    assert len(stored) == 6 and not stored & plain_digests


def test_shape_problems_of_encrypted_captures_are_named():
    good = encrypted_event()
    env = good["response_bytes"]
    cases = [
        ({"encryption": {"scheme": "rot13", "key_id": SEALED_KEY_ID}}, "encryption.scheme"),
        ({"encryption": {"scheme": fmt.SCHEME, "key_id": "ABC"}}, "encryption.key_id"),
        ({"response_bytes": b"plain text, not sealed at all, longer than 45 bytes"},
         "response_bytes is not an envelope"),
        ({"error_bytes": b"\x02" + env[1:]}, "error_bytes is not an envelope: envelope version"),
        ({"request_bytes": env[:1] + bytes(16) + env[17:]}, "request_bytes is sealed under key"),
        ({"params": "not base64!"}, "params of an encrypted capture"),
        ({"request_length": good["request_length"] + 1}, "request_length is"),
        ({"response_length": -1}, "response_length is -1"),
        ({"retrieval": [{**good["retrieval"][0], "chunk_bytes": b"short"}]},
         "retrieval[0].chunk_bytes is not an envelope"),
    ]
    for change, words in cases:
        assert words in fmt.encrypted_body_problem({**good, **change}), words


def test_seal_body_refuses_a_sealed_capture_and_open_body_a_wrong_key():
    with pytest.raises(ValueError):
        seal_body(encrypted_event(), KEYS)
    with pytest.raises(OpenError):
        open_body(encrypted_event(), SubjectKeys(SEALED_KEY_ID, new_data_key()))
    assert open_body(committed_event(), KEYS) == committed_event()  # plain: as it is


def test_key_material_never_shows_in_repr():
    kek = LocalKek(SEALED_KEK)
    assert SEALED_KEK.hex() not in repr(kek) and kek.kek_id.startswith("local:")
    assert SEALED_DATA_KEY.hex() not in repr(KEYS)
    assert kek.unwrap("k", kek.wrap("k", SEALED_DATA_KEY)) == SEALED_DATA_KEY


def test_the_contract_works_without_cryptography_but_for_sealing():
    # The plain client must not need the [encrypt] extra: block `cryptography` and import
    # everything else of the contract, the writer's shape check included.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'cryptography' or name.startswith('cryptography.'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import evidence_contract, evidence_contract.envelope, evidence_contract.keys\n"
        "import evidence_contract.codec, evidence_contract.vectors\n"
        "from evidence_contract.vectors import committed_event\n"
        "evidence_contract.encode('CaptureEvent', committed_event())\n"
        "import evidence_client, evidence_client.keystore\n"
        "evidence_client.Recorder('127.0.0.1:1', 's')  # the plain policy\n"
        "try:\n"
        "    import evidence_contract.sealing\n"
        "except ImportError:\n"
        "    print('sealing needs cryptography')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "sealing needs cryptography"
