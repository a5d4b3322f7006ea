"""evidence_contract.note against golang.org/x/mod/sumdb/note's vectors and C2SP's rules.

The vectors are read at test time from golang.org/x/mod@v0.37.0 in the Go module cache
(tests.fixtures.tlog_vectors); no Go or no module proxy fails these tests.
"""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from evidence_contract import EvidenceError
from evidence_contract.note import (
    MAX_SIGNATURES,
    SIG_COSIGNATURE_V1,
    SIG_ED25519,
    Checkpoint,
    NoteError,
    Signature,
    SignerKey,
    VerifierKey,
    cosignature_timestamp,
    format_checkpoint,
    format_note,
    format_skey,
    format_vkey,
    generate_signer,
    key_id,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    parse_note,
    parse_skey,
    parse_vkey,
    sign,
    valid_key_name,
    verify,
)
from tests.fixtures import tlog_vectors

XMOD = tlog_vectors.note()
ROOT = bytes(range(32))


# --- golang.org/x/mod/sumdb/note ------------------------------------------------------------

def test_xmod_signer_key_gives_its_verifier_key_and_signature():
    signer = parse_skey(XMOD["peter_skey"])
    assert format_vkey(signer.verifier) == XMOD["peter_vkey"]
    assert format_skey(signer) == XMOD["peter_skey"]
    # Ed25519 is deterministic: the same bytes as Go's Sign.
    assert format_note(XMOD["text"], [sign(signer, XMOD["text"])]).decode() == XMOD["signed"]
    assert "seed" not in repr(signer) and XMOD["peter_skey"][-20:] not in repr(signer)


def test_xmod_open_one_known_one_unknown():
    peter, enoch = parse_vkey(XMOD["peter_vkey"]), parse_vkey(XMOD["enoch_vkey"])
    both = XMOD["text"] + "\n" + XMOD["peter_sig"] + XMOD["enoch_sig"]
    note = open_note(both, [peter])
    assert note.text == XMOD["text"]
    assert [s.name for s in note.verified] == ["PeterNeumann"]
    assert [(s.name, s.key_id) for s in note.signatures] == [("PeterNeumann", 0xC74F20A3),
                                                              ("EnochRoot", 0xAF0CFE78)]
    assert [s.name for s in open_note(both, [peter, enoch]).verified] == ["PeterNeumann", "EnochRoot"]
    with pytest.raises(NoteError, match="no signature from a known key"):
        open_note(both, [])


def test_xmod_invalid_signature_of_a_known_key_rejects_the_note():
    peter_sig = XMOD["peter_sig"]
    bad = XMOD["text"] + "\n" + peter_sig[:60] + "ABCD" + peter_sig[60:]
    with pytest.raises(NoteError, match="invalid signature for key PeterNeumann\\+c74f20a3"):
        open_note(bad, [parse_vkey(XMOD["peter_vkey"])])


@pytest.mark.parametrize("name", sorted(XMOD["bad_notes"]))
def test_xmod_malformed_notes(name):
    with pytest.raises(NoteError):
        open_note(XMOD["bad_notes"][name], [parse_vkey(XMOD["peter_vkey"])])


def test_xmod_malformed_utf8():
    with pytest.raises(NoteError, match="UTF-8"):
        parse_note(XMOD["invalid_utf8_note"])


@pytest.mark.parametrize("name", ["wrong length key, with adjusted key hash",
                                  "unknown algorithm, with adjusted key hash"])
def test_xmod_bad_verifier_keys(name):
    with pytest.raises(NoteError):
        parse_vkey(XMOD["bad_vkeys"][name])


@pytest.mark.parametrize("which,parse", [("peter_vkey", parse_vkey), ("peter_skey", parse_skey)])
def test_xmod_every_mangled_key_is_refused(which, parse):
    # As TestNewVerifier/TestNewSigner: every proper substring and every byte bumped by one.
    key = XMOD[which]
    parse(key)
    for i in range(len(key) + 1):
        for j in range(i + 1, len(key) + 1):
            if (i, j) != (0, len(key)):
                with pytest.raises(NoteError):
                    parse(key[i:j])
    for i in range(len(key)):
        with pytest.raises(NoteError):
            parse(key[:i] + chr(ord(key[i]) + 1) + key[i + 1:])


def test_too_many_signatures():
    peter = parse_vkey(XMOD["peter_vkey"])
    many = XMOD["text"] + "\n" + XMOD["peter_sig"] * MAX_SIGNATURES
    assert len(open_note(many, [peter]).verified) == 1  # duplicates count once
    with pytest.raises(NoteError, match="at most 100"):
        open_note(many + XMOD["peter_sig"], [peter])


def test_same_name_and_id_for_two_keys_is_ambiguous():
    peter = parse_vkey(XMOD["peter_vkey"])
    impostor = replace(peter, public_key=bytes(32))
    assert open_note(XMOD["signed"], [peter, peter]).verified  # the same key twice is one key
    with pytest.raises(NoteError, match="ambiguous key"):
        open_note(XMOD["signed"], [peter, impostor])


def test_a_key_sharing_only_the_name_or_only_the_id_is_ignored():
    peter = parse_vkey(XMOD["peter_vkey"])
    other = generate_signer("PeterNeumann").verifier  # same name, another ID
    renamed = replace(peter, name="PeterNeumann2")  # same ID, another name
    with pytest.raises(NoteError, match="no signature from a known key"):
        open_note(XMOD["signed"], [other, renamed])


# --- Our own signing, cosigning and checkpoints --------------------------------------------

def test_generated_keys_round_trip_through_their_text():
    for sig_type in (SIG_ED25519, SIG_COSIGNATURE_V1):
        signer = generate_signer("log.example/evidence", sig_type)
        assert parse_skey(format_skey(signer)) == signer
        assert parse_vkey(format_vkey(signer.verifier)) == signer.verifier
        assert format_vkey(signer.verifier).split("+")[1] == f"{signer.verifier.key_id:08x}"


def test_one_seed_has_another_key_id_per_signature_type():
    log = generate_signer("w.example/1")
    witness = SignerKey(log.name, SIG_COSIGNATURE_V1, log.seed)
    assert log.verifier.public_key == witness.verifier.public_key
    assert log.verifier.key_id != witness.verifier.key_id
    assert key_id(log.name, SIG_COSIGNATURE_V1, log.verifier.public_key) == witness.verifier.key_id


def test_cosignature_signs_the_timestamped_message():
    witness = generate_signer("witness.example/w1", SIG_COSIGNATURE_V1)
    text = format_checkpoint(Checkpoint("log.example/evidence", 42, ROOT))
    sig = sign(witness, text, timestamp=1_700_000_000)
    assert cosignature_timestamp(sig) == 1_700_000_000 and len(sig.data) == 72
    assert verify(witness.verifier, text, sig)
    assert not verify(witness.verifier, text.replace("42", "43"), sig)
    later = Signature(sig.name, sig.key_id, (1_700_000_001).to_bytes(8, "big") + sig.data[8:])
    assert not verify(witness.verifier, text, later)
    # A plain Ed25519 verifier of the same key never takes a cosignature (and the reverse).
    plain = SignerKey(witness.name, SIG_ED25519, witness.seed)
    assert not verify(plain.verifier, text, sig)
    assert not verify(witness.verifier, text, sign(plain, text))
    for bad in (-1, 1 << 63, None, True):
        with pytest.raises(ValueError):
            sign(witness, text, timestamp=bad)
    with pytest.raises(ValueError):
        sign(plain, text, timestamp=1)


def test_open_checkpoint_needs_the_log_and_checks_cosigners():
    log = generate_signer("log.example/evidence")
    witness = generate_signer("witness.example/w1", SIG_COSIGNATURE_V1)
    cp = Checkpoint(log.name, 7, ROOT, ("ext one",))
    text = format_checkpoint(cp)
    data = format_note(text, [sign(log, text), sign(witness, text, timestamp=5)])
    got, note = open_checkpoint(data, log.verifier, [witness.verifier])
    assert got == cp and len(note.verified) == 2
    assert len(open_checkpoint(data, log.verifier)[1].verified) == 1  # witness unknown: ignored
    with pytest.raises(NoteError):
        open_checkpoint(data, generate_signer(log.name).verifier)  # the wrong log key
    with pytest.raises(NoteError, match="not signed by"):
        open_checkpoint(format_note(text, [sign(witness, text, timestamp=5)]), log.verifier,
                        [witness.verifier])
    forged = Signature(witness.name, witness.verifier.key_id, bytes(72))
    with pytest.raises(NoteError, match="invalid signature"):
        open_checkpoint(format_note(text, [sign(log, text), forged]), log.verifier, [witness.verifier])
    other = generate_signer("log.example/other")
    with pytest.raises(NoteError, match="origin"):
        open_checkpoint(format_note(text, [sign(other, text)]), other.verifier)


@pytest.mark.parametrize("text", [
    "o\n01\n" + base64.b64encode(ROOT).decode() + "\n",       # leading zero
    "o\n+1\n" + base64.b64encode(ROOT).decode() + "\n",
    "o\n\u0661\n" + base64.b64encode(ROOT).decode() + "\n",   # a non-ASCII digit
    f"o\n{1 << 64}\n" + base64.b64encode(ROOT).decode() + "\n",
    "o\n1\n" + base64.b64encode(ROOT[:31]).decode() + "\n",
    "o\n1\n" + base64.b64encode(ROOT).decode()[:-2] + "\n",   # no padding
    "o\n1\n" + base64.b64encode(ROOT).decode()[:-2] + "9=\n",  # non-zero trailing bits
    "o\n1\n" + base64.b64encode(ROOT).decode() + "\n\n",      # an empty extension line
    "o\n1\n" + base64.b64encode(ROOT).decode(),               # no final newline
    "o\n1\n",
    "\n1\n" + base64.b64encode(ROOT).decode() + "\n",
])
def test_malformed_checkpoints(text):
    with pytest.raises(NoteError):
        parse_checkpoint(text)


@pytest.mark.parametrize("cp", [
    Checkpoint("", 1, ROOT), Checkpoint("o\nx", 1, ROOT), Checkpoint("o", -1, ROOT),
    Checkpoint("o", 1 << 64, ROOT), Checkpoint("o", 1, ROOT[:31]), Checkpoint("o", 1, ROOT, ("",)),
    Checkpoint("o\t", 1, ROOT),
])
def test_unformattable_checkpoints(cp):
    with pytest.raises(NoteError):
        format_checkpoint(cp)


def test_checkpoint_round_trip_with_extensions_and_the_empty_tree():
    for cp in (Checkpoint("log.example/x", 0, ROOT), Checkpoint("a b", (1 << 64) - 1, ROOT, ("e1", "e 2"))):
        assert parse_checkpoint(format_checkpoint(cp)) == cp


@pytest.mark.parametrize("name,ok", [
    ("example.com/foo", True), ("oid/1.3.6", True), ("", False), ("a+b", False), ("a b", False),
    ("a\u00a0b", False), ("a\u2028b", False), ("a\u3000b", False), ("a\x01b", False), (b"ab", False),
    ("a\ud800", False), ("caf\u00e9.example/\u4f60", True),
])
def test_key_names(name, ok):
    assert valid_key_name(name) is ok


def test_signature_lines_must_be_canonical_base64():
    line = XMOD["peter_sig"]
    b64 = line.split(" ")[2].strip()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    # 68 bytes end in 3 characters and "=": the last character has 2 unused bits; set one.
    last = alphabet[alphabet.index(b64[-2]) ^ 1]
    same_bytes = b64[:-2] + last + "="
    assert base64.b64decode(same_bytes) == base64.b64decode(b64)
    for bad in (b64.rstrip("="), same_bytes, b64 + "=", "!" + b64[1:]):
        with pytest.raises(NoteError):
            parse_note(XMOD["text"] + "\n\u2014 PeterNeumann " + bad + "\n")


def test_sign_and_format_refuse_malformed_texts():
    signer = generate_signer("log.example/x")
    for text in ("no newline", "tab\there\n", "cr\r\n"):
        with pytest.raises(NoteError):
            sign(signer, text)
        with pytest.raises(NoteError):
            format_note(text, [Signature(signer.name, 1, b"x")])
    with pytest.raises(NoteError):
        format_note("ok\n", [])


def test_note_error_is_an_evidence_error():
    assert issubclass(NoteError, EvidenceError)
    with pytest.raises(NoteError):
        SignerKey("bad name", SIG_ED25519, bytes(32))
    with pytest.raises(NoteError):
        SignerKey("ok", 0x02, bytes(32))
    with pytest.raises(NoteError):
        parse_vkey(format_vkey(VerifierKey("ok", 1, SIG_ED25519, bytes(32))))  # the ID is wrong
