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
- ``VERIFY.md``     the commands, each with the digest it must print
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from evidence_contract import HEADER_SIZE, fingerprint, split_record
from evidence_contract.outputs import EXTRACTED

from audit.verify import extract_output


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


def build_export(message: bytes, partition: int,
                 offset: int) -> tuple[dict[str, bytes], list[dict[str, str]]]:
    """Return ``(files, checks)``: file name → bytes, and the checks VERIFY.md lists
    (each ``{"name", "command", "expected"}``; commands run in the export directory).

    The output text is the record contract's (``evidence_contract.outputs``).
    """
    stored_body, record = split_record(message)
    body, seal = record["body"], record["seal"]
    files: dict[str, bytes] = {"record.avro": bytes(message), "body.avro": stored_body}
    checks: list[dict[str, str]] = []

    def check(name: str, command: str, expected: bytes | str) -> None:
        exp = expected.hex() if isinstance(expected, (bytes, bytearray)) else expected
        checks.append({"name": name, "command": command, "expected": exp})

    check("the message is an EvidenceRecord in single-object encoding (marker c301 and the "
          "schema fingerprint from schemas/vectors.json)",
          "od -An -tx1 -N10 record.avro | tr -d ' \\n'; echo",
          b"\xc3\x01" + fingerprint("EvidenceRecord"))
    body_sha = hashlib.sha256(stored_body).digest()
    check(f"the body is stored in record.avro as bytes {HEADER_SIZE + 1} to "
          f"{HEADER_SIZE + len(stored_body)}",
          f"tail -c +{HEADER_SIZE + 1} record.avro | head -c {len(stored_body)} | sha256sum "
          "| cut -d' ' -f1", body_sha)
    check("body.avro is exactly those bytes", "sha256sum body.avro | cut -d' ' -f1", body_sha)
    if body["request_bytes"] is not None:
        files["request.bin"] = bytes(body["request_bytes"])
        check("content_key = sha256(0x00 || request bytes)",
              "{ printf '\\000'; cat request.bin; } | sha256sum | cut -d' ' -f1",
              body["content_key"])
    for kept, digest, prefix in (("input_bytes", "input_digest", 2),
                                 ("prompt_bytes", "prompt_digest", 3)):
        if body[kept] is not None and body[digest] is not None:
            name = kept.replace("_bytes", ".bin")
            files[name] = bytes(body[kept])
            check(f"{digest} = sha256(0x{prefix:02x} || {kept.replace('_bytes', '')} bytes)",
                  f"{{ printf '\\{prefix:03o}'; cat {name}; }} | sha256sum | cut -d' ' -f1",
                  body[digest])
    for i, chunk in enumerate(body["retrieval"]):
        if chunk["chunk_bytes"] is not None:
            name = f"chunk-{i}.bin"
            files[name] = bytes(chunk["chunk_bytes"])
            check(f"retrieval[{i}].chunk_digest = sha256(0x06 || chunk bytes)",
                  f"{{ printf '\\006'; cat {name}; }} | sha256sum | cut -d' ' -f1",
                  chunk["chunk_digest"])
    if body["response_bytes"] is not None:
        files["response.bin"] = bytes(body["response_bytes"])
        if body["response_digest"] is not None:
            check("response_digest = sha256(0x01 || response bytes)",
                  "{ printf '\\001'; cat response.bin; } | sha256sum | cut -d' ' -f1",
                  body["response_digest"])
    if body["error_bytes"] is not None:
        files["error.bin"] = bytes(body["error_bytes"])
    unverifiable = None
    if body["output_digest"] is not None and body["response_bytes"] is not None:
        found, reason = extract_output(body)
        if found.state == EXTRACTED:
            files["output.txt"] = found.text.encode("utf-8")
            check("output_digest = sha256(0x04 || UTF-8 output text)",
                  "{ printf '\\004'; cat output.txt; } | sha256sum | cut -d' ' -f1",
                  body["output_digest"])
        else:
            unverifiable = (f"it {reason}" if reason else
                            f"its {found.kind} response holds no output text")
    seq_be = seal["seq"].to_bytes(8, "big")
    at_be = seal["occurred_at"].to_bytes(8, "big")
    check(f"record_digest = sha256(0x05 || prev_digest || be64(seq={seal['seq']}) || "
          f"be64(occurred_at={seal['occurred_at']}) || body.avro)",
          "{ printf '\\005'; "
          f"printf '{_octal(bytes(seal['prev_digest']))}'; "
          f"printf '{_octal(seq_be)}'; printf '{_octal(at_be)}'; "
          "cat body.avro; } | sha256sum | cut -d' ' -f1",
          seal["record_digest"])

    doc = {
        "log": {"partition": partition, "offset": offset},
        "schema": {"name": "EvidenceRecord", "fingerprint": fingerprint("EvidenceRecord").hex()},
        "body": _jsonable(body),
        "seal": _jsonable(seal),
    }
    files["record.json"] = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()
    files["VERIFY.md"] = _verify_md(body, seal, checks, unverifiable).encode()
    return files, checks


def _verify_md(body: dict[str, Any], seal: dict[str, Any], checks: list[dict[str, str]],
               unverifiable: str | None) -> str:
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
    return "\n".join(lines)
