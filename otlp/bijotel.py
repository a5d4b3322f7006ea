"""BIJOTEL's replay claims checked on BIJOTEL's own basis.

BIJOTEL 2.17.0 (``bijotel.replay.recorder``) defines ``prompt_hash`` as SHA-256 (hex) of the
prompt string's UTF-8, or of ``json.dumps(messages, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`` for a messages list, and ``output_hash`` as SHA-256 (hex) of the output
text's UTF-8 (not RFC 8785, not the response bytes). ``bijotel.replay.verifier.verify_replay``
compares a replayed output's hash with the sealed ``output_hash``; :func:`verify_replay_claim`
gives the same answers from a :class:`otlp.model.BijotelClaims`.

A claim is verified when the content the span carries hashes to it, mismatched when the content
is there and hashes to something else, unverifiable when the span carries no content to hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otlp.attributes import any_value
from otlp.messages import text_of_message
from otlp.model import BijotelClaims, MappedCall

Verdict = Literal["verified", "mismatched", "unverifiable"]


def prompt_hash(prompt: str | list[dict[str, Any]]) -> str:
    """BIJOTEL's prompt_hash of a prompt string or a messages list."""
    if isinstance(prompt, str):
        return hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    encoded = json.dumps(prompt, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def output_hash(text: str) -> str:
    """BIJOTEL's output_hash of an output text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def prompt_candidates(call: MappedCall) -> list[str | list[dict[str, Any]]]:
    """The prompts BIJOTEL may have hashed, from the content the call carries: the messages
    list as carried; the same messages in the OpenAI ``{"role", "content"}`` shape (what
    BIJOTEL's docs call the GenAI messages shape), system instructions first; and, for a
    single text message, its text (the prompt-string form)."""
    if call.input_messages is None or not isinstance(call.input_messages.value, list):
        return []
    carried = call.input_messages.value
    candidates: list[str | list[dict[str, Any]]] = [carried]
    flat: list[dict[str, Any]] = []
    system = call.system_instructions.value if call.system_instructions else None
    if isinstance(system, str):
        flat.append({"role": "system", "content": system})
    elif isinstance(system, list):
        text = "".join(t for part in system for t in text_of_message(
            {"parts": [part]} if isinstance(part, dict) else part))
        flat.append({"role": "system", "content": text})
    for message in carried:
        if isinstance(message, dict):
            flat.append({"role": message.get("role"),
                         "content": "".join(text_of_message(message))})
    if flat != carried:
        candidates.append(flat)
    texts = [m["content"] for m in flat]
    if len(texts) == 1:
        candidates.append(texts[0])
    return candidates


@dataclass(frozen=True)
class ClaimCheck:
    """The verdict on BIJOTEL's two hash claims of one call."""

    prompt: Verdict
    output: Verdict


def check_claims(call: MappedCall) -> ClaimCheck | None:
    """The verdicts on a call's ``prompt_hash`` and ``output_hash`` claims (None: no claims).

    A claim that is absent is unverifiable, as is one whose content the span does not carry.
    """
    claims = call.bijotel
    if claims is None:
        return None
    if claims.prompt_hash is None or not (candidates := prompt_candidates(call)):
        prompt: Verdict = "unverifiable"
    elif any(prompt_hash(c) == claims.prompt_hash.lower() for c in candidates):
        prompt = "verified"
    else:
        prompt = "mismatched"
    if claims.output_hash is None or call.output_text is None:
        output: Verdict = "unverifiable"
    elif output_hash(call.output_text) == claims.output_hash.lower():
        output = "verified"
    else:
        output = "mismatched"
    return ClaimCheck(prompt=prompt, output=output)


@dataclass(frozen=True)
class Claim:
    """One ``bijotel.replay.*`` attribute as carried (its value as text) and its verdict."""

    name: str
    value: str
    verdict: Verdict


def claims(call: MappedCall) -> list[Claim]:
    """Every ``bijotel.replay.*`` attribute of the call's span (or log record), in the order
    the item carried them, each with its verdict.

    ``prompt_hash`` and ``output_hash`` have :func:`check_claims`'s verdicts; ``seed``,
    ``temperature`` and ``top_p`` are compared with the conventions' request attributes the
    item also carries (``gen_ai.request.*``), ``model_version`` with ``gen_ai.response.model``;
    a claim with nothing to compare with (``deterministic``, BIJOTEL's own judgement, or an
    attribute this release does not know) is unverifiable.
    """
    if call.bijotel is None:
        return []
    item = (Span if call.source == "span" else LogRecord).FromString(call.span_bytes)
    hashes = check_claims(call) or ClaimCheck("unverifiable", "unverifiable")
    p = call.params
    basis: dict[str, object] = {"seed": p.seed, "temperature": p.temperature, "top_p": p.top_p,
                                "model_version": call.response_model}
    out = []
    for kv in item.attributes:
        if not kv.key.startswith(_CLAIM_PREFIX):
            continue
        field = kv.key[len(_CLAIM_PREFIX):]
        value = any_value(kv.value)
        verdict: Verdict
        if field == "prompt_hash":
            verdict = hashes.prompt
        elif field == "output_hash":
            verdict = hashes.output
        elif basis.get(field) is None:
            verdict = "unverifiable"
        else:
            claimed = getattr(call.bijotel, field)
            verdict = "verified" if claimed == basis[field] else "mismatched"
        out.append(Claim(kv.key, _text(value), verdict))
    return out


_CLAIM_PREFIX = "bijotel.replay."


def _text(value: object) -> str:
    """An attribute value as text: a string as is, a bool as JSON's true/false, a number's
    shortest decimal, anything else (arrays, maps, bytes) as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, bytes):
        return value.hex()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=lambda b: b.hex() if isinstance(b, bytes) else str(b))


@dataclass(frozen=True)
class ReplayVerdict:
    """BIJOTEL's ``ReplayResult``, field for field."""

    match: bool
    original_hash: str | None
    replay_hash: str
    deterministic: bool
    model_version: str | None
    reason: str | None = None


def verify_replay_claim(claims: BijotelClaims | None, replayed_output: str) -> ReplayVerdict:
    """A replayed output against a call's sealed ``output_hash``, on BIJOTEL's basis, with
    the answers (and reasons) of BIJOTEL's ``verify_replay``."""
    original = claims.output_hash if claims else None
    deterministic = bool(claims.deterministic) if claims else False
    model_version = claims.model_version if claims else None
    replay = output_hash(replayed_output)
    if original is None:
        return ReplayVerdict(False, None, replay, deterministic, model_version, (
            "chain entry has no bijotel.replay.output_hash "
            "(logged before v2.7.0 or replay metadata not attached)"))
    if original == replay:
        return ReplayVerdict(True, original, replay, deterministic, model_version, None)
    if not deterministic:
        reason = ("output hash mismatch — original call did not record a seed "
                  "(deterministic=False); replay drift is expected")
    else:
        reason = ("output hash mismatch — re-execute against the SAME model "
                  f"version that produced the original ({model_version!r}) "
                  "and verify the prompt hash before treating this as tampering")
    return ReplayVerdict(False, original, replay, deterministic, model_version, reason)
