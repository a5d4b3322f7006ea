"""An export of one record for a reader outside the team (pure: bytes in, files out).

The files let anyone recompute every digest and the chain link with ``printf`` and
``sha256sum`` alone (octal escapes, so POSIX ``sh`` works as well as bash):

- ``record.avro``   the log message, verbatim (single-object encoding)
- ``body.avro``     the Avro binary of the body, as stored (bytes 11.. of record.avro)
- ``request.bin``   the request body bytes (when the capture kept them)
- ``input.bin``, ``prompt.bin``, ``chunk-<i>.bin``  the end-user input, the rendered prompt
                    and each retrieved chunk (when the capture kept them)
- ``response.bin``  the verbatim response body (when there is one)
- ``error.bin``     the verbatim provider error body (when there is one)
- ``output.txt``    the output text, as the record contract extracts it for the wire format
                    (``evidence_contract.outputs``); when it cannot, VERIFY.md says why
- ``record.json``   every field, digests and bytes as hex
- ``checkpoint.note``  the stream's signed checkpoint with every cosignature the log holds,
                    byte for byte as the log serves it (when the export has a :class:`TreeProof`)
- ``inclusion.json`` the RFC 9162 inclusion proof of the record in that checkpoint's tree
- ``log.vkey``, ``witnesses.vkey``  the log's and the witnesses' verifier keys (note format)
- ``VERIFY.md``     the commands, each with what it must print

With a proof, VERIFY.md also folds the inclusion proof from the record file to the
checkpoint's root with ``printf``/``sha256sum``/``awk`` (the leaf is ``SHA-256(0x00 ||
"evidence-store/v2 record\n" || record_digest || SHA-256(record.avro))``, see
``evidence_contract.merkle``), and checks the log's Ed25519 signature and each witness's
``cosignature/v1`` with ``openssl pkeyutl -verify -rawin`` (OpenSSL 3), the public key in PEM
built from the verifier key. ``evidence verify DIR`` checks the same without a shell.

An encrypted record (contract 2.1) keeps envelopes and keyed commitments: no content file is
written and no content digest is checked (only a holder of the subject's key could), and
VERIFY.md says so. An *erased* one (its key destroyed, :class:`Erased`) says when and under
which request, adds the log's signed receipt (``erasure.note``, checked against the log key
with the checkpoint's commands) and lists what still verifies: the header, the body bytes,
``record_digest``, the chain link, the inclusion proof and the signatures.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from evidence_contract import HEADER_SIZE, fingerprint, split_record
from evidence_contract.outputs import EXTRACTED

from evidence_contract.merkle import LEAF_LABEL
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, VerifierKey, cosignature_timestamp, format_vkey, parse_note,
)

from audit.verify import extract_output

__all__ = ["Erased", "TreeProof", "build_export", "inclusion_steps"]

# An Ed25519 SubjectPublicKeyInfo is these 12 DER bytes, then the 32-byte key (RFC 8410).
_ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")

_HEX2BIN = ("hex2bin() { printf \"$(printf %s \"$1\" | awk '{ h = \"0123456789abcdef\"; "
            "for (i = 1; i < length($0); i += 2) printf \"\\\\%03o\", "
            "(index(h, substr($0, i, 1)) - 1) * 16 + index(h, substr($0, i + 1, 1)) - 1 }')\"; }")


@dataclass(frozen=True)
class TreeProof:
    """What ties an exported record to a signed, witnessed checkpoint."""

    checkpoint: bytes                    # the note as the log serves it, cosignatures and all
    tree_size: int
    hashes: Sequence[bytes]              # the inclusion proof, RFC 9162 order
    log_key: VerifierKey
    witness_keys: Sequence[VerifierKey] = field(default_factory=tuple)


@dataclass(frozen=True)
class Erased:
    """The erasure of an exported record's key: when (µs), under which request, and the
    log's signed receipt (``evidence_contract.erasure``) when the caller has it."""

    erased_at: int
    request_id: str
    receipt: bytes | None = None


def inclusion_steps(index: int, size: int, hashes: Sequence[bytes]) -> list[tuple[str, bytes]]:
    """Each proof hash with its side, ``"left"`` (node = H(p || r)) or ``"right"`` (H(r || p)),
    as RFC 9162 §2.1.3.2 folds it: what a shell needs to fold the proof without the algorithm."""
    fn, sn, out = index, size - 1, []
    for p in hashes:
        if fn & 1 or fn == sn:
            out.append(("left", bytes(p)))
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            out.append(("right", bytes(p)))
        fn, sn = fn >> 1, sn >> 1
    return out


def _octal(b: bytes) -> str:
    return "".join(f"\\{byte:03o}" for byte in b)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


class _Checks:
    """The checks VERIFY.md lists, in order; called as ``check(name, command, expected)``,
    an expected value in bytes is shown as hex."""

    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []

    def __call__(self, name: str, command: str, expected: bytes | str) -> None:
        exp = expected.hex() if isinstance(expected, (bytes, bytearray)) else expected
        self.items.append({"name": name, "command": command, "expected": exp})


def build_export(message: bytes, partition: int, offset: int,
                 proof: TreeProof | None = None, erased: Erased | None = None
                 ) -> tuple[dict[str, bytes], list[dict[str, str]]]:
    """Return ``(files, checks)``: file name → bytes, and the checks VERIFY.md lists
    (each ``{"name", "command", "expected"}``; commands run in the export directory).

    The output text is the record contract's (``evidence_contract.outputs``). With ``proof``
    the checkpoint, the inclusion proof and the keys are added, with their checks. An
    encrypted record's content is not exported (module docstring); ``erased`` says its key
    was destroyed.
    """
    stored_body, record = split_record(message)
    body, seal = record["body"], record["seal"]
    encryption = body.get("encryption")
    if erased is not None and encryption is None:
        raise ValueError("only an encrypted record can be erased: this one is plain")
    files: dict[str, bytes] = {"record.avro": bytes(message), "body.avro": stored_body}
    check = _Checks()
    header = _framing_checks(check, message, stored_body)
    unverifiable = None
    if encryption is None:
        unverifiable = _content_checks(files, check, body)
    record_digest_cmd = _record_digest_check(check, seal)
    if proof is not None:
        _tree_checks(files, check, proof, message, seal["seq"], record_digest_cmd)
        if erased is not None and erased.receipt is not None:
            _receipt_check(files, check, proof, erased, encryption["key_id"])

    doc = {
        "log": {"partition": partition, "offset": offset},
        "schema": {"name": "EvidenceRecord", "fingerprint": header[2:].hex()},
        "body": _jsonable(body),
        "seal": _jsonable(seal),
    }
    files["record.json"] = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    files["VERIFY.md"] = _verify_md(body, seal, check.items, unverifiable, proof,
                                    erased).encode()
    return files, check.items


def _framing_checks(check: _Checks, message: bytes, stored_body: bytes) -> bytes:
    """Check the single-object header and where the body lies in the message; return the
    header."""
    # split_record accepted it: an EvidenceRecord of a schema version the contract reads
    # (the current one, schemas/avro/, or an earlier one, schemas/avro/history/)
    header = bytes(message[:HEADER_SIZE])
    version = "the current" if header[2:] == fingerprint("EvidenceRecord") else "an earlier"
    check(f"the message is an EvidenceRecord in single-object encoding (marker c301 and the "
          f"fingerprint of {version} EvidenceRecord schema, schemas/avro/)",
          "od -An -tx1 -N10 record.avro | tr -d ' \\n'; echo", header)
    body_sha = hashlib.sha256(stored_body).digest()
    check(f"the body is stored in record.avro as bytes {HEADER_SIZE + 1} to "
          f"{HEADER_SIZE + len(stored_body)}",
          f"tail -c +{HEADER_SIZE + 1} record.avro | head -c {len(stored_body)} | sha256sum "
          "| cut -d' ' -f1", body_sha)
    check("body.avro is exactly those bytes", "sha256sum body.avro | cut -d' ' -f1", body_sha)
    return header


def _digest_cmd(prefix: int, name: str) -> str:
    """The shell command that prints sha256(prefix byte || the bytes of file ``name``)."""
    return f"{{ printf '\\{prefix:03o}'; cat {name}; }} | sha256sum | cut -d' ' -f1"


def _content_checks(files: dict[str, bytes], check: _Checks, body: dict[str, Any]) -> str | None:
    """Write a plain record's content files, each with the check of the digest sealed over
    it; return why the output digest cannot be checked, or None."""
    if body["request_bytes"] is not None:
        files["request.bin"] = bytes(body["request_bytes"])
        check("content_key = sha256(0x00 || request bytes)", _digest_cmd(0, "request.bin"),
              body["content_key"])
    # A 1.0 body has no input_bytes, prompt_bytes or chunk_bytes (2.0 added them).
    for kept, digest, prefix in (("input_bytes", "input_digest", 2),
                                 ("prompt_bytes", "prompt_digest", 3)):
        if body.get(kept) is not None and body[digest] is not None:
            name = kept.replace("_bytes", ".bin")
            files[name] = bytes(body[kept])
            check(f"{digest} = sha256(0x{prefix:02x} || {kept.replace('_bytes', '')} bytes)",
                  _digest_cmd(prefix, name), body[digest])
    for i, chunk in enumerate(body["retrieval"]):
        if chunk.get("chunk_bytes") is not None:
            name = f"chunk-{i}.bin"
            files[name] = bytes(chunk["chunk_bytes"])
            check(f"retrieval[{i}].chunk_digest = sha256(0x06 || chunk bytes)",
                  _digest_cmd(6, name), chunk["chunk_digest"])
    if body["response_bytes"] is not None:
        files["response.bin"] = bytes(body["response_bytes"])
        if body["response_digest"] is not None:
            check("response_digest = sha256(0x01 || response bytes)",
                  _digest_cmd(1, "response.bin"), body["response_digest"])
    if body["error_bytes"] is not None:
        files["error.bin"] = bytes(body["error_bytes"])
    if body["output_digest"] is None or body["response_bytes"] is None:
        return None
    found, reason = extract_output(body)
    if found.state != EXTRACTED:
        return f"it {reason}" if reason else f"its {found.kind} response holds no output text"
    files["output.txt"] = found.text.encode("utf-8")
    check("output_digest = sha256(0x04 || UTF-8 output text)", _digest_cmd(4, "output.txt"),
          body["output_digest"])
    return None


def _mapped_md(body: dict[str, Any]) -> list[str]:
    """What VERIFY.md says of a record mapped from telemetry (contract 2.2)."""
    t = body["telemetry"]
    span = bytes(t["span_digest"]).hex()
    same = "equal to it" if bytes(body["content_key"]).hex() == span else "NOT equal to it"
    return [
        "## Mapped from telemetry, not captured at the wire", "",
        f"This record was mapped from an OpenTelemetry {t['source'].lower().replace('_', ' ')} "
        f"({t['dialect']} conventions, instrumentation scope `{t['scope_name']}`"
        + (f" {t['scope_version']}" if t["scope_version"] else "") + "): it keeps no request "
        "or response bytes, and what it says of the call is what the span said. Its "
        f"`content_key` is the span's digest, `telemetry.span_digest` = `{span}` ({same}): "
        "sha256(0x08 || the span's deterministic protobuf serialization); "
        f"`telemetry.otlp_digest` = `{bytes(t['otlp_digest']).hex()}` is sha256(0x07 || the "
        "OTLP request body as received). Neither can be recomputed from this export: the span "
        "and the request are not in the record." + (
            f" The span named the gateway capture `{t['corroborates']}`, which holds the wire "
            "bytes: export that record to verify them." if t["corroborates"] else ""), ""]


def _record_digest_check(check: _Checks, seal: dict[str, Any]) -> str:
    """Check the chain link ``record_digest``; return the command that prints it."""
    seq_be = seal["seq"].to_bytes(8, "big")
    at_be = seal["occurred_at"].to_bytes(8, "big")
    record_digest_cmd = ("{ printf '\\005'; "
                         f"printf '{_octal(bytes(seal['prev_digest']))}'; "
                         f"printf '{_octal(seq_be)}'; printf '{_octal(at_be)}'; "
                         "cat body.avro; } | sha256sum | cut -d' ' -f1")
    check(f"record_digest = sha256(0x05 || prev_digest || be64(seq={seal['seq']}) || "
          f"be64(occurred_at={seal['occurred_at']}) || body.avro)",
          record_digest_cmd, seal["record_digest"])
    return record_digest_cmd


def _receipt_check(files: dict[str, bytes], check: _Checks, proof: TreeProof, erased: Erased,
                   key_id: str) -> None:
    from evidence_contract.erasure import open_receipt

    # Never export a receipt that does not verify, nor one that does not name this key.
    req = open_receipt(erased.receipt, proof.log_key)
    if req.request_id != erased.request_id:
        raise ValueError(f"the receipt is of request {req.request_id}, not {erased.request_id}")
    if key_id not in req.key_ids:
        raise ValueError(f"the receipt of {req.request_id} does not name key {key_id}")
    files["erasure.note"] = bytes(erased.receipt)
    text_lines = len(bytes(erased.receipt).split(b"\n\n", 1)[0].split(b"\n"))
    check(f"the log ({proof.log_key.name}, log.vkey) signed erasure.note, the receipt of "
          f"request {req.request_id}, naming this record's key (Ed25519 over its {text_lines} "
          f"lines of text)",
          _log_signature_cmd(proof.log_key.name, "erasure.note", text_lines, "erasure"),
          "Signature Verified Successfully")


def _pem_cmd(vkey_file: str, line: int, pem: str) -> str:
    # The verifier key is <name>+<id>+<base64(type || key)>; its base64 may hold '+', so
    # everything after the second '+' is the key; the last 32 bytes are the Ed25519 key.
    return (f"{{ echo '-----BEGIN PUBLIC KEY-----'; {{ printf '{_octal(_ED25519_SPKI)}'; "
            f"sed -n {line}p {vkey_file} | cut -d+ -f3- | base64 -d | tail -c 32; }} | base64; "
            f"echo '-----END PUBLIC KEY-----'; }} > {pem}")


def _log_signature_cmd(log_name: str, note: str, text_lines: int, stem: str,
                       sig: str | None = None) -> str:
    """The commands that check the log's Ed25519 signature over the first ``text_lines``
    lines of ``note`` (writing ``<stem>.txt`` and the signature to ``sig``, else
    ``<stem>.sig``), with the key of log.vkey."""
    sig = sig or f"{stem}.sig"
    return "\n".join([_pem_cmd("log.vkey", 1, "log.pem"),
                      f"head -n {text_lines} {note} > {stem}.txt",
                      f"grep -F '\u2014 {log_name} ' {note} | head -n 1 | "
                      f"cut -d' ' -f3 | base64 -d | tail -c 64 > {sig}",
                      f"openssl pkeyutl -verify -pubin -inkey log.pem -rawin -in {stem}.txt "
                      f"-sigfile {sig}"])


def _tree_checks(files: dict[str, bytes], check: _Checks, proof: TreeProof, message: bytes,
                 seq: int, record_digest_cmd: str) -> None:
    from evidence_contract.merkle import record_leaf_hash, verify_inclusion
    from evidence_contract.tlog import open_stream_checkpoint

    cp, note, _ = open_stream_checkpoint(proof.checkpoint, proof.log_key, None,
                                         proof.witness_keys)
    leaf = record_leaf_hash(message)
    # Never export a proof that does not verify: the reader would blame the wrong party.
    verify_inclusion(seq - 1, proof.tree_size, leaf, list(proof.hashes), cp.root_hash)
    files["checkpoint.note"] = bytes(proof.checkpoint)
    files["inclusion.json"] = (json.dumps({
        "leaf_index": seq - 1, "tree_size": proof.tree_size, "leaf_hash": leaf.hex(),
        "hashes": [bytes(h).hex() for h in proof.hashes]}, indent=2) + "\n").encode()
    files["log.vkey"] = (format_vkey(proof.log_key) + "\n").encode()
    log_id = (proof.log_key.name, proof.log_key.key_id)
    cosigners = [k for k in proof.witness_keys
                 if any((s.name, s.key_id) == (k.name, k.key_id) for s in note.verified)
                 and (k.name, k.key_id) != log_id]
    if cosigners:
        files["witnesses.vkey"] = "".join(format_vkey(k) + "\n" for k in cosigners).encode()

    check(f"checkpoint.note commits to a tree of {cp.size} records (line 2) with this root "
          "(line 3, base64, shown in hex)",
          "echo \"$(sed -n 2p checkpoint.note) $(sed -n 3p checkpoint.note | base64 -d "
          "| od -An -tx1 | tr -d ' \\n')\"", f"{cp.size} {cp.root_hash.hex()}")
    check(f"the record is leaf {seq - 1} of that tree: its leaf hash sha256(0x00 || "
          f"\"evidence-store/v2 record\\n\" || record_digest || sha256(record.avro)), folded "
          f"with the {len(proof.hashes)} hashes of inclusion.json (RFC 9162: each step is "
          "sha256(0x01 || left || right)), gives the checkpoint's root",
          _fold_cmd(record_digest_cmd, seq - 1, proof), cp.root_hash)
    check(f"the log ({proof.log_key.name}, log.vkey) signed checkpoint.note (Ed25519 over its "
          "first three lines)",
          _log_signature_cmd(proof.log_key.name, "checkpoint.note", 3, "checkpoint", "log.sig"),
          "Signature Verified Successfully")
    for i, k in enumerate(cosigners, 1):
        sig = next(s for s in note.verified if (s.name, s.key_id) == (k.name, k.key_id))
        _cosignature_check(check, i, k.name, cosignature_timestamp(sig))


def _fold_cmd(record_digest_cmd: str, index: int, proof: TreeProof) -> str:
    """The commands that hash the record's leaf and fold the inclusion proof over it, printing
    the root they reach (hex)."""
    fold = [_HEX2BIN, f"rd=$({record_digest_cmd})",
            "h=$({ printf '" + _octal(b"\x00" + LEAF_LABEL) + "'; hex2bin \"$rd\"; "
            "hex2bin \"$(sha256sum record.avro | cut -d' ' -f1)\"; } | sha256sum | cut -d' ' -f1)"]
    for side, h in inclusion_steps(index, proof.tree_size, proof.hashes):
        pair = (f"hex2bin {h.hex()}; hex2bin \"$h\"" if side == "left"
                else f"hex2bin \"$h\"; hex2bin {h.hex()}")
        fold.append(f"h=$({{ printf '\\001'; {pair}; }} | sha256sum | cut -d' ' -f1)")
    fold.append("echo \"$h\"")
    return "\n".join(fold)


def _cosignature_check(check: _Checks, i: int, name: str, ts: int) -> None:
    """Check the ``cosignature/v1`` of the witness on line ``i`` of witnesses.vkey."""
    check(f"witness {name} (witnesses.vkey line {i}) cosigned it at {ts} "
          "(cosignature/v1: Ed25519 over \"cosignature/v1\\ntime <t>\\n\" and the three "
          "lines; the signature line holds key id, be64(t), signature)",
          "\n".join([_pem_cmd("witnesses.vkey", i, f"witness-{i}.pem"),
                     f"grep -F '\u2014 {name} ' checkpoint.note | head -n 1 | cut -d' ' "
                     f"-f3 | base64 -d > witness-{i}.sig",
                     f"t=$(printf '%d' \"0x$(tail -c +5 witness-{i}.sig | head -c 8 | od -An "
                     "-tx1 | tr -d ' \\n')\")",
                     f"{{ printf 'cosignature/v1\\ntime %d\\n' \"$t\"; head -n 3 "
                     f"checkpoint.note; }} > witness-{i}.msg",
                     f"tail -c 64 witness-{i}.sig > witness-{i}.ed25519",
                     f"openssl pkeyutl -verify -pubin -inkey witness-{i}.pem -rawin -in "
                     f"witness-{i}.msg -sigfile witness-{i}.ed25519"]),
          "Signature Verified Successfully")


def _content_md(body: dict[str, Any], erased: Erased | None, proof: bool) -> list[str]:
    """What VERIFY.md says of an encrypted record's content."""
    enc = body["encryption"]
    if erased is None:
        return ["## The content: encrypted", "",
                f"The record's content is sealed under the data key `{enc['key_id']}` "
                f"(scheme `{enc['scheme']}`): every content field of `record.avro` is an",
                "AES-256-GCM envelope and `content_key` and the other content digests are",
                "keyed commitments (HMAC-SHA-256 under a key derived from the data key). Only a",
                "holder of that key can open them or recompute the commitments, so no content",
                "file is exported and no content digest is checked here. The checks above",
                "cover the sealed bytes: the header, the body, `record_digest` and the chain"
                + (", the inclusion proof and the signatures." if proof else "."), ""]
    from datetime import datetime, timezone

    when = datetime.fromtimestamp(erased.erased_at / 1e6, tz=timezone.utc).isoformat()
    return ["## The content: erased", "",
            f"The record's content was **erased** at {when} (`erased_at` {erased.erased_at} "
            f"µs) under request `{erased.request_id}`: the data key `{enc['key_id']}` that "
            "sealed it was destroyed, so nobody can read the content any more, nor check a "
            "guess against its keyed commitments (`content_key` and the other content",
            "digests are HMAC-SHA-256 under a key derived from the destroyed key). No content",
            "file is exported and no content digest is checked.", "",
            "What still verifies, and is checked above: the single-object header, the body",
            "bytes, `record_digest` over the sealed (encrypted) body and the chain link (below)"
            + ((", the inclusion proof in the signed checkpoint and the log's and the "
                "witnesses' signatures" + (", and the log's signed erasure receipt "
                                           "(`erasure.note`), which names the destroyed key id."
                                           if erased.receipt is not None else "."))
               if proof else "."),
            ""]


def _verify_md(body: dict[str, Any], seal: dict[str, Any], checks: list[dict[str, str]],
               unverifiable: str | None, proof: TreeProof | None = None,
               erased: Erased | None = None) -> str:
    lines = [
        f"# Verifying record {body['stream']} #{seal['seq']}",
        "",
        "Run each command in this directory with any POSIX shell; it must print the hex on",
        "the `expected:` line. Only `printf`, `cat`, `sha256sum`, `od`, `tail`, `head`, `cut`",
        "and `tr` are used. Every digest is SHA-256 over a one-byte domain prefix and the bytes",
        "(0x00 request, 0x01 response, 0x02 end-user input, 0x03 prompt, 0x04 output text,",
        "0x05 chain link, 0x06 retrieved chunk).",
        "",
    ]
    for i, c in enumerate(checks, 1):
        lines += [f"## {i}. {c['name']}", "", "```sh", c["command"], "```", "",
                  f"expected: `{c['expected']}`", ""]
    if body.get("encryption") is not None:
        lines += _content_md(body, erased, proof is not None)
    if body.get("telemetry") is not None:
        lines += _mapped_md(body)
    if unverifiable is not None:
        lines += ["## output_digest: not checked", "",
                  f"The record seals an output_digest, but {unverifiable}; there is no "
                  "output.txt.", ""]
    prev = bytes(seal["prev_digest"]).hex()
    lines += [
        "## The chain",
        "",
        f"This record's `prev_digest` is `{prev}`."
        + (" Seq 1 chains from 32 zero bytes." if seal["seq"] == 1 else
           f" Export seq {seal['seq'] - 1} of the same stream and check that its "
           "`record_digest` (check above, in that export) is this value; repeat down to seq 1."),
        "",
        "To decode every field yourself, use the Avro schema `EvidenceRecord.avsc` from the",
        "project's `schemas/avro/` with any Avro library: `record.avro` is single-object",
        "encoded (2-byte marker, 8-byte fingerprint, then the Avro binary).",
        "",
    ]
    if proof is None:
        lines += ["## The Merkle tree", "",
                  "This export has no checkpoint: no signed checkpoint covered the record when "
                  "it was made. Export it again later to prove it is in the log.", ""]
    else:
        lines += [
            "## The Merkle tree and the witnesses",
            "",
            "The checks on `checkpoint.note` prove that the log's key signed a tree of the",
            "stream that holds this very record file, and that witnesses cosigned that tree.",
            "Use keys you got from the log operator and the witnesses yourself, not only the",
            "copies in `log.vkey` and `witnesses.vkey`. The Merkle commands need `awk` and",
            "`od` as well; the signature commands need OpenSSL 3 (`pkeyutl -rawin`).",
            "`evidence verify .` runs the same checks without a shell.",
            "",
            "A witness only cosigns a tree that extends the last one it cosigned. If you kept",
            "an earlier witnessed checkpoint, ask the log for a consistency proof",
            "(`evidence prove STREAM --consistency OLD NEW`) or ask a witness: a log rewritten",
            "since cannot produce one.",
            "",
        ]
    return "\n".join(lines)
