"""ML-DSA-44 witness cosignatures (c2sp.org/tlog-cosignature, type 0x06) in evidence_contract.note.

The pinned vector was made by Go's github.com/transparency-dev/formats v0.1.1
(``note.NewMLDSASigner(skey).SignSubtree(1700000000, "example.com/log", 0, 12345, root)``,
over filippo.io/mldsa) with the seed SHA-256(:data:`SEED_LABEL`): an implementation that
shares nothing with ours. Our key derivation must give its verifier key, and its signature
must verify here. The reverse direction (our signature verified by Go's formats and x/mod)
is tests/integration/test_tlog_go_verifier.py::test_go_verifies_an_mldsa44_cosignature.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import replace

import pytest

from evidence_contract.note import (
    COSIGNATURE_TYPES,
    SIG_COSIGNATURE_V1,
    SIG_ED25519,
    SIG_MLDSA44,
    Checkpoint,
    NoteError,
    Signature,
    SignerKey,
    cosignature_timestamp,
    format_checkpoint,
    format_note,
    format_skey,
    format_vkey,
    generate_signer,
    key_id,
    open_checkpoint,
    open_note,
    parse_note,
    parse_skey,
    parse_vkey,
    sign,
    subtree_message,
    verify,
)

SEED_LABEL = b"evidence-store ML-DSA-44 cosignature vector"
GO_NAME = "witness.example/mldsa"
GO_SKEY = "PRIVATE+KEY+witness.example/mldsa+476fa939+BpSVOllPRlGruuLv0E8Fu+/TG8Y0MaC6lbxDeFoWTqUF"
GO_TEXT = "example.com/log\n12345\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n"
GO_TIMESTAMP = 1_700_000_000
GO_VKEY_B64 = (
    "BiUA53/Hcsff5ZtuYGsiYQAmURXNKh1i6FKWeKviHEDOt9ARd7sjaqK/efPM1PXeW4yqmg/rHTDvoPjJaM2AvCTQ"
    "fn9ZqML0cH1qOljnEpeAos6wD+y4trHmuaLCeyD5Uy9wmXr1aeh20tctCEswHF2R5XFy3YfM9hgm8YdnAV4J7nDR"
    "Mmo+0+qt6cTqw9m2AYLQbtx7bnC3dwTJdi9BHmubO2J7ZJF3lrycWefOpO9bWk2GEbkTxg9fxX7s9912iS0/gny3"
    "wYaLQHE8BayMgHEnZzE0V5D1RUFOv6zus+1nM3T98KhqKYuZdtH26KuP4eAF7I7zlTT9FeoxbW72bzacm/QQBU6f"
    "nEriQUJd3EpCWR076s5TAfYglcAhAMYWtLAOyofgKHWSLWxlo50q4KvHM04rjTA+pBdk8DdlQZBQYjOXvH4EXdd6"
    "dVh/o66PQrlnEUcoie8n5nDzq4MkQwiFGdLgW3hyEVc5NnuUCoP27DICgBCFxQatD7PpCjxBkQdV8P3yoDN4FWbv"
    "H9A+wDQWmvH/5jNZ3BkJ2TDMMv794W6ySRY7D4z0Bsiwmh8GmduAv0FflY6qM8mU1Y4hWZiA1riBJPBKDo2EGlY2"
    "6JHMyIiI9Z9a8d/uWJGRp5Cb+1cbT55PJqooojMnG2e/9lYD0VNhFiP3speogRtXHhAJitlADprdrYJa8kgQJChT"
    "0Sn6s7OcgnXsJ/ykLFzo4IotY2jTagHKWBcWIPf1nP4ryWRgCVbuL9cuR4qnqSLt7aRbbAGZh2V6WE+RlOFUfw4j"
    "JD5H2Wil4itlYXi1JYi+L5StsvFmwzNYA09/sTkoNXjL3ri5vfREzso0zT465xozcj66nTQ1B/cZS1VFZyO+ZZgH"
    "Jf44C/KteV2A8xPTMfzgpB9lLrzJD8MPXVBh07D657+ZapFYgyb5i24R+vyFfDVXA/glu2ToWJKJa/j1cOhlN0bN"
    "d4M9+jHdxmUkC2dMecf3aMzPuOVWRXtq4N0Wey8YYK5JfSXwwAnVBUTgIcOfRjyCweptdFNeOLLlzyxtN+qjt3Jb"
    "KNZ5ksoCNskX/da/jPoEiz8FAm0+/w52VetD0wl0EDmbRviSu5hpLAZ6js39rO/rl+Zyo/obvZeizBC2ptLfSwBC"
    "4hOLd13celLLj3/tC7CmxpidRWh4okf5xIDihZqMyVwDqjJhvd1qbMENoKZrZYFc5Mu1t9S9uvs3D0DZzZbkXUCE"
    "1ZmEGp9ZcPpf+LYMF8zRJurVG4fqL0MYHc8ak9xOtYR/4hZ6id8WPPsQIgB4sHOPGYbopCbvYMOnaKLfM+jINOta"
    "iIskp1Oj2gJUu1OyY3GDRFYCdAnP0uan5AhhfwvAvQ/6VXdAe2YGWdZ1KGQzONv86R34nE5quZ1uvZI0fa+vyEPk"
    "zmzBv9qmIWQgEEmsjcoIOw9HWM1zspNXUiQa+PcsRcxRx4s6Tn4f2zkrR47bgjfDq3AmKHcOl9PBCkDNEZ+XnC6j"
    "Kbuvuorv/8VWhfH8P33OJx41wyPUymkFBnDw7q2XWlJl47GbCRLlixn0nDrjQ/lFT4ndwqOWsWQJzaKlpp3GSkCA"
    "ddbyg/5xwfNc1BXLdckh7V+afaQULxfLJrGc7g0oagUfxC4dIEgGpOr4PcI/41YYQXabWL7j1Z+Xa6/vFl8SqIJ8"
    "SrcDfkfBLfbs96Oxv4gtfiRtrYjm9rBW4WKUTli+7de88RKeEjAYJZnhIOlDED+I6yUyB6kG+BUbBio="
)
GO_SIG_B64 = (
    "R2+pOQAAAABlU/EAzMMd5JFxa9nEPh9DiLY/V5V1bcVzEWEf9V3dmqe23RQkV7hpTUUmUTfZS7uR15RrPsDuZUaS"
    "v2hAfMY7r5nww2zyBiCVGsD+isEVjqyQ4D5cwzqI4H7MQAPxoMSwhPHm+62PN6dvFl82tkcnqJi3lBqniEN4CCfB"
    "4TPNtEP5fFRODAF5HHJ5X+lSZQ+krsH8Rvw8I6iY6DgJdyEZwlH1K3H1taK5bFc/tILftCbcM99sRzyjsg3dSoDX"
    "6BBC8soKOp2pwxmxiuXrBe/4c96u2xcg3IVZTzc7ipLmPP985zp22tByqlGpgjmB6SvT77DHkeZOF2XGIg3VpQr/"
    "A8FaJIE/C3b1F5NSWymN5510bAb9zDPtaTynZCz4kpiLWMWSrvHb9Drw/u2b48iCFVn3F2t/RUeGiiuflME2AqMq"
    "GJmFPyI4X6R03tA5YugImMjCiXjBXlUn+DHVgJiOUaR7iHPzF6JjZwoM0znWjqvdUKXSPDqUGIS5zez5YvMtttah"
    "048Elwb/pUnA1h7TiASsV7tmqV8xe56TKPjNZVzjqpC3ahRqwOdQ2aASZD7nxqkHhOS7Na6lMhWAdktKyQXoXEKB"
    "+ooGIOC1T8wkydwPEaj1xY3pT+3A5oHhQ87CRr4ZA72lDxtit3W/ztSsm8JRQcWGmFBY6Z50GNDMYryWKdyFZfDo"
    "9gYLFQ+0KrrVH0M0q7jHz+T+YbDm17JyiL79SbkCq3xB+QrVUmOr9OyMrmNHvLt9xAN0tM8UH1KKbUh9UqCirxFV"
    "dllEQfMcuNUbujQkIAzvmVkXZjBFRxbqU+wdnAXGdy1F5hup5n2Ip2ajOF5ihI8+TvVTPArI16G5jfLrfbbqfulj"
    "EG/tz5Uistf6huP+d3fFxM0xykku7v37BbiBxdQpBQlO/QmdChjU8Do9O3hCt2ttjRl3c6dhWfLHP58jmXUnTot2"
    "Qv9oXOOKLhg2mo0HqUFHMgjOWc8CnLr2iRQ5jk+hVe0q0R0Zn+MR932zgLkg0hYty/2e8NmRLVXtPYzF1DcL5R9I"
    "DAw82IMTZpsi+LlZir6galk2BAv5QKi9HK7dJ1S0PX+LXqYoQTF6ZmUgXzMAP8gF2uDdhpkRAsbRC0L1T1dPYitT"
    "+wr1V9dAjLK5HnClLGMK8pkrmUxACHsMxudIvS+M9TC4E/1kC2h/kBf4yJLP1AhIFXSuFLHgcZrWWrstd/Hv6waG"
    "tOmyp6lHNOpfYFsS6qFMkJi2VuijJ+/epcxfFO2uXUYj2bmWg0bsazG/Ujh0GQuRwU6U9wz6dhXXsybPV4tNez/M"
    "LManRtU//BOCZYgAFkWvMBaFp9FlYw9OVNA9uSxqIsoL69Da4QlWuUtDbekdQ9rlqdd6NEe4J5dsjUjK9DVOh0mK"
    "hsikyHhOCALJyUn/MuIT7FLVAS3C61OgE/8GdfF5sE9BqpnhegipslcvLEBiVIH++3QHD/BGva0EzLmRDG79poRU"
    "cA8+eRWSIqqcUjl3ZbzpPbhrQjcMZh7ohHY/JjYuZEVfljstq4Ja4lqfLjDNkt9InVMUf/b6jsk3mPeU6j/YRRX2"
    "HRBhzNrRQYzNuP74mo8JHuksJzHkCquD00jB/vxTHuGixV43sRE07wYSYE6Rftu/Qi3fn39WRvolEP1vsmIrLwlJ"
    "iiKt6X4f8TX4g3Goq9DbwHUbwHXKe5U//Ci1RHsJUyeysHnPuG6KMoxzlsiwtBl4V2QdJiZjKMyu/UFQjrIIBUU7"
    "zwbPSvlrKaf1aDH1q6TH/Q2ZJD33bYQWv9/TReW6OIA5J4dKR9LEgZoCZLaTATMKRBK8aMwC63w3LygYzUuIAuER"
    "DTxR5NbYtd4oWBkw/YJHiEpmxSDOLAdo8r2ZCc5NjI7CXYCoy7bOF8swy51Jf2zsH8do1BhuItqBuCn6M5QTefBf"
    "5crgVR3tcAS57PexRSqtwTy/8P2S2h7OQ2xpnvWPEZkPYF8DVvIYBP8k+JhbWB/wD3pAZAIdD0rtk4k5xngxjQlR"
    "1uUpZ7U5xu60fa48KNBZi++w4wZBkQHyyeXx1z97B3uwIY7AyaEf1Q5xI0bMVoCvUKoUnFCIq1Sg51E08GXTeI8t"
    "tQELxPV4wQDy9nCS2+F06Erq9lbBUKr+9ccx3rfHfx76iUJLfOlGH0MrDO4e98a7Ffjk73UvSexGrZc3maiY4OJk"
    "PHLYdcfetS1pd78O/lOucSx3FjiudFa4g08SMPZqutiuIFNJ6b7H5sfmcgBPYnjnCeQLBoPUq/KrHAAKjx2pIfAt"
    "sCEcH8YvHqo2tvtSfvFdg0EMGY1JCm+t8ewOvFKTR2Tw9ZBd4sb5KDGWQFPtjAfke3/FKxY8apqzVcyypIvAa+dB"
    "Y3WgldCYI0G9nze/73EknkWS7h7wNBYyIiBAoGrw0WssRwmtR+3dILT6KmLBR2UvKx4paLakyUSMHXgCzat4xMwY"
    "e+sQc3cj3+TC3233xRB4JqZPxlEmInokKGXxLf7EaGPOE4LgyW3UI4a9NnL6QNOpVVRBVxqp4yrJ5DVMwjQv16rR"
    "Nf0WiniAidG4RFZIStzwXJ5xUrk9+LY+BzeO1FQ8I/b68xufHy0XMOnNc3J94skrOqt8kQK1NTrW85SZUAny/Vqj"
    "/Kt9LW2H9TZKK8glEd+7v2v+zsLs49lkObPTvwxSocrR2JzImvw8IIEnnce6kd2DfyoV8VK5JCJGLvsDA+hdRMcE"
    "UVUZ7PKlC7ofqEozNT/na0r+H02Kgk/ALbZfLP7YOdY59e5bMpgLJM6nlc7LGKMBKFtoisQVe1zEwt/SK5bsBQgM"
    "eHIlJVuiTnx261YrV1/y8Rgd5y1KOM/mAXajmsiIUqdcstK5D6CDosfI8hjNl9eFAVvkKYPpX+XG9yhPwo8iaLKm"
    "hejrYNpAxLJU87DfpEXnSRVP80n58en6sTtRJLL8SusYlv/geJmE054/kcnoT828ApihM2a0vfiLFbEifvJjIZJg"
    "7y9XTCtb+9yfuhp1+a1wFQuZJRP2lIxRjVs9NVRp+3l8ruF1jn7rvJ8DnEFyzn2ppvqsrx69B6R40t5QWXxRuLjv"
    "6o9JvwwusJggpODqaXuj4f7AxH84VDPXkhsTb1/9OIyGkny2a6gJLTZISVNWg6mvy+UlL0RUXXB0i5+go6Wsv9D3"
    "/gEDKSswUVV2en6Gh4q9xtoFCx8nOF9obH2DhJGWnbS/0+Xv+fwAAAAAAAAAAAAAAAAAAAwdLUI="
)
GO_KEY_ID = "476fa939"
GO_VKEY = f"{GO_NAME}+{GO_KEY_ID}+{GO_VKEY_B64}"
GO_NOTE = f"{GO_TEXT}\n\u2014 {GO_NAME} {GO_SIG_B64}\n"

ROOT = hashlib.sha256(b"root").digest()


def _checkpoint(size: int = 12345, origin: str = "example.com/log", root: bytes = ROOT,
                extensions: tuple[str, ...] = ()) -> str:
    return format_checkpoint(Checkpoint(origin, size, root, extensions))


@pytest.fixture(scope="module")
def witness() -> SignerKey:
    return generate_signer("witness.example/pq", SIG_MLDSA44)


# --- Go's vector ----------------------------------------------------------------------------

def test_go_signer_key_gives_go_verifier_key():
    signer = parse_skey(GO_SKEY)
    assert signer.seed == hashlib.sha256(SEED_LABEL).digest()
    assert signer.sig_type == SIG_MLDSA44
    assert format_vkey(signer.verifier) == GO_VKEY
    assert format_skey(signer) == GO_SKEY
    assert GO_SKEY.rsplit("+", 1)[1] not in repr(signer)


def test_go_vkey_parses_as_an_mldsa_cosignature_key():
    key = parse_vkey(GO_VKEY)
    assert (key.name, key.sig_type, len(key.public_key)) == (GO_NAME, SIG_MLDSA44, 1312)
    assert key.key_id == int(GO_KEY_ID, 16) == key_id(GO_NAME, SIG_MLDSA44, key.public_key)
    assert format_vkey(key) == GO_VKEY


def test_go_cosignature_verifies_and_carries_its_timestamp():
    key = parse_vkey(GO_VKEY)
    note = open_note(GO_NOTE, [key])
    (sig,) = note.verified
    assert len(sig.data) == 8 + 2420
    assert cosignature_timestamp(sig) == GO_TIMESTAMP
    assert verify(key, GO_TEXT, sig)


@pytest.mark.parametrize("text", [
    GO_TEXT.replace("12345", "12346"),
    GO_TEXT.replace("example.com/log", "example.com/other"),
    _checkpoint(root=bytes(32)),
    "not a checkpoint\n",
])
def test_go_cosignature_fails_on_another_checkpoint(text):
    key = parse_vkey(GO_VKEY)
    (sig,) = parse_note(GO_NOTE).signatures
    assert not verify(key, text, sig)
    with pytest.raises(NoteError, match="invalid signature"):
        open_note(text + "\n" + sig.line(), [key])


def test_go_cosignature_fails_with_another_timestamp_or_cosigner_name():
    key = parse_vkey(GO_VKEY)
    (sig,) = parse_note(GO_NOTE).signatures
    later = replace(sig, data=struct.pack(">Q", GO_TIMESTAMP + 1) + sig.data[8:])
    assert not verify(key, GO_TEXT, later)
    # The same public key under another name: ML-DSA-44 cosignatures commit to the name.
    renamed = replace(key, name="witness.example/other",
                      key_id=key_id("witness.example/other", SIG_MLDSA44, key.public_key))
    assert not verify(renamed, GO_TEXT, replace(sig, name=renamed.name, key_id=renamed.key_id))


# --- the signed message ---------------------------------------------------------------------

def test_subtree_message_is_the_specs_cosigned_message():
    msg = subtree_message("w", 7, "log.example", 0, 5, ROOT)
    assert msg == (b"subtree/v1\n\x00" + b"\x01w" + (7).to_bytes(8, "big")
                   + b"\x0blog.example" + bytes(8) + (5).to_bytes(8, "big") + ROOT)


@pytest.mark.parametrize("args, reason", [
    (("w", 7, "log", 1, 5, ROOT), "timestamp 0"),
    (("", 0, "log", 0, 5, ROOT), "1 to 255 bytes"),
    (("w", 0, "o" * 256, 0, 5, ROOT), "1 to 255 bytes"),
    (("w", 0, "log", 6, 5, ROOT), "no subtree"),
    (("w", 1 << 63, "log", 0, 5, ROOT), "no subtree"),
    (("w", 0, "log", 0, 5, ROOT[:31]), "32 bytes"),
])
def test_subtree_message_refuses_what_the_spec_forbids(args, reason):
    with pytest.raises(NoteError, match=reason):
        subtree_message(*args)


# --- our own keys ---------------------------------------------------------------------------

def test_round_trip_of_keys_and_cosignature(witness):
    assert parse_skey(format_skey(witness)) == witness
    vkey = parse_vkey(format_vkey(witness.verifier))
    assert vkey == witness.verifier and vkey.sig_type in COSIGNATURE_TYPES
    text = _checkpoint()
    sig = sign(witness, text, timestamp=1_234)
    assert cosignature_timestamp(sig) == 1_234
    assert verify(vkey, text, sig)
    assert open_note(format_note(text, [sig]), [vkey]).verified == (sig,)


def test_a_log_checkpoint_cosigned_with_mldsa_opens_with_its_witness(witness):
    log = generate_signer("log.example/evidence")
    text = _checkpoint(origin=log.name)
    note = format_note(text, [sign(log, text), sign(witness, text, timestamp=99)])
    cp, opened = open_checkpoint(note, log.verifier, [witness.verifier])
    assert cp.size == 12345
    assert [s.name for s in opened.verified] == [log.name, witness.name]


def test_extension_lines_are_not_signed(witness):
    # tlog-cosignature: "checkpoint extension lines are not included in the signed message".
    sig = sign(witness, _checkpoint(extensions=("ext one",)), timestamp=5)
    assert verify(witness.verifier, _checkpoint(), sig)


def test_an_mldsa_key_signs_only_checkpoints_with_a_timestamp(witness):
    with pytest.raises(ValueError, match="timestamp"):
        sign(witness, _checkpoint())
    with pytest.raises(NoteError, match="checkpoint"):
        sign(witness, "just a note\n", timestamp=1)
    long_name = generate_signer("w" * 256, SIG_MLDSA44)
    with pytest.raises(NoteError, match="255 bytes"):
        sign(long_name, _checkpoint(), timestamp=1)


def test_one_seed_has_another_key_and_id_per_type(witness):
    ed = SignerKey(witness.name, SIG_COSIGNATURE_V1, witness.seed)
    assert ed.verifier.key_id != witness.verifier.key_id
    assert len(ed.verifier.public_key) == 32 and len(witness.verifier.public_key) == 1312
    # An Ed25519 cosignature is no ML-DSA-44 one, whatever the key ID says.
    text = _checkpoint()
    ed_sig = sign(ed, text, timestamp=1)
    assert not verify(witness.verifier, text,
                      Signature(witness.name, witness.verifier.key_id, ed_sig.data))


@pytest.mark.parametrize("raw, reason", [
    (bytes([SIG_MLDSA44]) + bytes(32), "holds 32 key bytes, not 1312"),
    (bytes([SIG_ED25519]) + bytes(1312), "holds 1312 key bytes, not 32"),
    (bytes([0x02]) + bytes(32), "type is not one of"),
])
def test_parse_vkey_names_a_wrong_size_or_type(raw, reason):
    kid = key_id("w.example", raw[0], raw[1:])
    with pytest.raises(NoteError, match=reason):
        parse_vkey(f"w.example+{kid:08x}+{base64.b64encode(raw).decode()}")


def test_cosignature_timestamp_refuses_other_lengths():
    with pytest.raises(NoteError, match="ML-DSA-44"):
        cosignature_timestamp(Signature("w", 1, bytes(8 + 100)))
