"""Replay verification: compare a re-execution with what a record sealed (pure).

A caller re-executes a recorded call somewhere else (a harness, an auditor's sandbox) and hands
over what came back; :func:`verify` hashes it with the record contract's digest functions and
compares it with the digest the record carries:

    replayed_output   (text)   output_digest   = sha256(0x04 || utf8(text))
    replayed_response (bytes)  response_digest = sha256(0x01 || bytes)

On BIJOTEL's basis (:func:`verify_bijotel`, for a record mapped from a span that carried
BIJOTEL's replay claims) the replayed text is compared with the ``bijotel.replay.output_hash``
claim the way BIJOTEL's own ``verify_replay`` does (sha256(utf8(text)), hex, no prefix), with its
answers and reasons:

    replayed_output   (text)   bijotel.replay.output_hash = sha256(utf8(text))

A mismatch is an answer, not an error: :func:`verify` never raises and returns a
:class:`VerifyResult` for any input, hostile ones included, so the API can always answer 200
when the record exists. ``reason`` is None on a match and otherwise says what differed and what
to do next: a deterministic record (a seed was sent) should be re-executed against the same
model version; a non-deterministic one is expected to drift; a record without the digest being
compared cannot be verified that way at all.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from evidence_contract import output_digest, response_digest
from evidence_contract.outputs import KINDS, wire_format

__all__ = ["BIJOTEL_OUTPUT_HASH", "NoBijotelClaim", "Original", "VerifyResult", "verify",
           "verify_bijotel"]

OUTPUT, RESPONSE = "output_digest", "response_digest"

# Outcomes as counted by the API's metrics.
MATCH, MISMATCH, NO_DIGEST, INVALID = "match", "mismatch", "no_digest", "invalid"


@dataclass(frozen=True, slots=True)
class Original:
    """What verification needs of a sealed record (a slice of a ``records`` row)."""

    stream: str | None = None
    seq: int | None = None
    output_digest: bytes | None = None
    response_digest: bytes | None = None
    deterministic: bool | None = None
    seed: int | Decimal | None = None
    """Any size (the records column is numeric, so a Decimal from the database)."""
    model_version: str | None = None
    outcome: str | None = None
    endpoint: str | None = None
    """The provider endpoint called: its path names the wire format."""
    telemetry_record: bytes | None = None
    """A record mapped from telemetry: its log message, whose telemetry holds the claims the
    span made (null for any other record)."""


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The verdict; ``compared`` names the digest compared (None if the input was unusable)."""

    match: bool
    original_hash: str | None
    replay_hash: str | None
    compared: str | None
    deterministic: bool | None
    model_version: str | None
    stream: str | None
    seq: int | None
    reason: str | None
    bijotel: dict[str, Any] | None = None
    """On BIJOTEL's basis (:func:`verify_bijotel`): BIJOTEL's own answer and the claim's
    verdict at mapping time; absent from :meth:`to_dict` otherwise."""

    @property
    def outcome(self) -> str:
        """``match``, ``mismatch``, ``no_digest`` or ``invalid`` (for metrics)."""
        if self.match:
            return MATCH
        if self.compared is None or self.replay_hash is None:
            return INVALID
        return NO_DIGEST if self.original_hash is None else MISMATCH

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: that deep-copies, and this runs on every verify request.
        out = {name: getattr(self, name) for name in _RESULT_FIELDS}
        if self.bijotel is not None:
            out["bijotel"] = self.bijotel
        return out


_RESULT_FIELDS = tuple(f.name for f in fields(VerifyResult) if f.name != "bijotel")


def _is_digest(value: object, size: int) -> bool:
    return isinstance(value, (bytes, bytearray, memoryview)) and len(value) == size


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_seed(value: object) -> int | None:
    """A seed of any size: an int, or the Decimal a numeric column gives, if integral."""
    if isinstance(value, Decimal):
        return int(value) if value.is_finite() and value == value.to_integral_value() else None
    return _opt_int(value)


def _opt_bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _unknown_format(endpoint: object) -> str | None:
    """Why no output digest can be computed for a record that called ``endpoint``; None if
    its path names a wire format the record contract defines (or no endpoint is known)."""
    if not isinstance(endpoint, str):
        return None
    try:
        path = urlsplit(endpoint).path
    except ValueError:  # not a URL at all
        return (f"the output digest cannot be recomputed: the endpoint {endpoint[:200]!r} "
                f"does not parse as a URL")
    if wire_format(path) is not None:
        return None
    return (f"the output digest cannot be recomputed for this wire format: the endpoint path "
            f"{path or '/'!r} is none the record contract defines ({', '.join(KINDS)})")


def verify(original: object, replayed_output: object = None,
           replayed_response: object = None) -> VerifyResult:
    """Compare exactly one of ``replayed_output`` (str) or ``replayed_response`` (bytes) with
    the matching digest of ``original`` (an :class:`Original`, or anything with its
    attributes). Never raises."""
    try:
        return _verify(original, replayed_output, replayed_response)
    except Exception as e:  # noqa: BLE001 - the contract is "never raises"; say what broke
        return VerifyResult(False, None, None, None, None, None, None, None,
                            f"verification could not run: {type(e).__name__}")


def _verify(original: object, replayed_output: object, replayed_response: object) -> VerifyResult:
    stream = _opt_str(getattr(original, "stream", None))
    seq = _opt_int(getattr(original, "seq", None))
    deterministic = _opt_bool(getattr(original, "deterministic", None))
    model_version = _opt_str(getattr(original, "model_version", None))
    seed = _opt_seed(getattr(original, "seed", None))
    outcome = _opt_str(getattr(original, "outcome", None))

    def result(match: bool, original_hash: str | None, replay_hash: str | None,
               compared: str | None, reason: str | None) -> VerifyResult:
        return VerifyResult(match, original_hash, replay_hash, compared, deterministic,
                            model_version, stream, seq, reason)

    if (replayed_output is None) == (replayed_response is None):
        return result(False, None, None, None,
                      "give exactly one of replayed_output (text) or replayed_response (bytes)")

    # 1. Hash what the caller replayed, with the contract's own digest function.
    if replayed_output is not None:
        compared, kind = OUTPUT, "output"
        if not isinstance(replayed_output, str):
            return result(False, None, None, compared,
                          f"replayed_output must be text, not {type(replayed_output).__name__}")
        try:
            replay = output_digest(replayed_output)
        except UnicodeEncodeError:
            return result(False, None, None, compared,
                          "replayed_output is not valid Unicode text (it contains a lone "
                          "surrogate) and has no UTF-8 encoding to hash")
        sealed = getattr(original, "output_digest", None)
    else:
        compared, kind = RESPONSE, "response"
        if not isinstance(replayed_response, (bytes, bytearray, memoryview)):
            return result(False, None, None, compared,
                          f"replayed_response must be bytes, not {type(replayed_response).__name__}")
        replay = response_digest(replayed_response)
        sealed = getattr(original, "response_digest", None)
    replay_hash = replay.hex()

    # 2. The record may not carry that digest at all (a failed call, or no extracted output).
    if not _is_digest(sealed, len(replay)):
        return result(False, None, replay_hash, compared,
                      _no_digest_reason(original, kind, outcome, len(replay)))
    sealed = bytes(sealed)
    original_hash = sealed.hex()

    # 3. Compare. Digests are public, but compare_digest costs nothing and removes the question.
    if hmac.compare_digest(sealed, replay):
        return result(True, original_hash, replay_hash, compared, None)
    return result(False, original_hash, replay_hash, compared,
                  _mismatch_reason(kind, deterministic, seed, model_version))


def _mismatch_reason(kind: str, deterministic: bool | None, seed: int | None,
                     model_version: str | None) -> str:
    """What a replayed ``kind`` ("output" or "response") that differs from the sealed digest
    means: a difference to re-check under the same model and seed when the record is
    deterministic, expected drift when it is not."""
    compared = OUTPUT if kind == "output" else RESPONSE
    if deterministic:
        model = model_version or "not recorded"
        seed_text = f" (seed {seed})" if seed is not None else ""
        reason = (f"{compared} mismatch: the record is deterministic{seed_text}; re-execute "
                  f"against the same model version ({model}) with the same seed and "
                  f"parameters before treating this as a difference")
    else:
        reason = (f"{compared} mismatch: the original call recorded no seed "
                  f"(deterministic=false), so replay drift is expected")
    if kind == "response":
        reason += ("; response bodies also carry per-call ids and timestamps, so compare "
                   "replayed_output to check the model's text")
    return reason


def _no_digest_reason(original: object, kind: str, outcome: str | None, size: int) -> str:
    """Why a replayed ``kind`` ("output" or "response") cannot be verified against
    ``original``, which has no digest of that kind, and what to compare instead."""
    compared = OUTPUT if kind == "output" else RESPONSE
    why = f" (outcome {outcome})" if outcome and outcome != "COMMITTED" else ""
    if kind == "output":
        unknown = None if why else _unknown_format(getattr(original, "endpoint", None))
        why = f" ({unknown})" if unknown else why
        other, other_input = getattr(original, "response_digest", None), "replayed_response_b64"
    else:
        other, other_input = getattr(original, "output_digest", None), "replayed_output"
    hint = (f"; it has the other digest, so compare {other_input} instead"
            if _is_digest(other, size) else "; it has no digest to compare at all")
    return (f"the record has no {compared}{why}, so a replayed {kind} cannot be verified "
            f"against it{hint}")


BIJOTEL_OUTPUT_HASH = "bijotel.replay.output_hash"
_BIJOTEL_PREFIX = "bijotel.replay."


class NoBijotelClaim(ValueError):
    """The record carries no ``bijotel.replay.output_hash`` claim, so BIJOTEL's basis does not
    apply to it (the message says what the record is and what to compare instead)."""


def verify_bijotel(original: object, replayed_output: str) -> VerifyResult:
    """Compare ``replayed_output`` with the ``bijotel.replay.output_hash`` claim of
    ``original`` (an :class:`Original` whose ``telemetry_record`` is set) on BIJOTEL's basis.

    ``match``, ``original_hash`` (the claimed hash), ``replay_hash`` and ``reason`` are what
    BIJOTEL's ``verify_replay`` answers for the span's attributes (``otlp.bijotel``: the same
    rule); ``bijotel`` adds its whole answer (its ``deterministic`` and ``model_version`` are
    the claims', not the record's) and ``claim_verdict``, the claim's verdict when it was mapped:
    ``VERIFIED`` only when the span carried the output text and it hashed to the claim.
    Raises :class:`NoBijotelClaim` for a record without that claim; never anything else."""
    try:
        return _verify_bijotel(original, _telemetry(original), replayed_output)
    except NoBijotelClaim:
        raise  # the caller answers 422: the basis does not apply to the record
    except Exception as e:  # noqa: BLE001 - as verify(): an answer, never an error
        return VerifyResult(False, None, None, BIJOTEL_OUTPUT_HASH, None, None,
                            _opt_str(getattr(original, "stream", None)),
                            _opt_int(getattr(original, "seq", None)),
                            f"verification could not run: {type(e).__name__}")


def _telemetry(original: object) -> dict[str, Any]:
    """The telemetry mapping of a record with a ``bijotel.replay.output_hash`` claim;
    :class:`NoBijotelClaim` saying why not otherwise."""
    stream = _opt_str(getattr(original, "stream", None))
    what = f"record {stream} #{_opt_int(getattr(original, 'seq', None))}"
    record = getattr(original, "telemetry_record", None)
    if not isinstance(record, (bytes, bytearray, memoryview)):
        raise NoBijotelClaim(
            f"{what} was captured at the wire, not mapped from telemetry: it carries no "
            f"{BIJOTEL_OUTPUT_HASH} claim to compare on BIJOTEL's basis; omit basis to compare "
            f"with its own digests")
    from evidence_contract import decode

    telemetry = decode(bytes(record))[1]["body"]["telemetry"]
    names = [c["name"] for c in telemetry["claims"]]
    if BIJOTEL_OUTPUT_HASH in names:
        return telemetry
    source = "log event" if telemetry["source"] == "LOG_EVENT" else "span"
    origin = (f"{what} was mapped from a {telemetry['dialect']} {source} "
              f"(scope {telemetry['scope_name']!r})")
    if any(n.startswith(_BIJOTEL_PREFIX) for n in names):
        raise NoBijotelClaim(
            f"{origin} whose BIJOTEL replay claims have no {BIJOTEL_OUTPUT_HASH}: BIJOTEL's "
            f"verify_replay cannot verify it either (its chain entry has no output_hash: "
            f"logged before BIJOTEL 2.7.0 or replay metadata not attached); omit basis to "
            f"compare with the record's own output_digest")
    raise NoBijotelClaim(
        f"{origin} that made no BIJOTEL replay claims ({BIJOTEL_OUTPUT_HASH}); omit basis to "
        f"compare with the record's own output_digest")


def _verify_bijotel(original: object, telemetry: dict[str, Any],
                    replayed_output: str) -> VerifyResult:
    from otlp.bijotel import verify_replay_claim
    from otlp.model import BijotelClaims

    claims: dict[str, dict[str, Any]] = {}
    for c in telemetry["claims"]:  # a span's attribute keys are unique; keep the first anyway
        claims.setdefault(c["name"], c)
    claim = claims[BIJOTEL_OUTPUT_HASH]
    deterministic = claims.get(_BIJOTEL_PREFIX + "deterministic")
    model_version = claims.get(_BIJOTEL_PREFIX + "model_version")
    answer = verify_replay_claim(BijotelClaims(
        prompt_hash=None, output_hash=claim["value"], seed=None, temperature=None, top_p=None,
        model_version=model_version["value"] if model_version else None,
        deterministic=_bijotel_bool(deterministic["value"]) if deterministic else None),
        replayed_output)
    bijotel = {"match": answer.match, "original_hash": answer.original_hash,
               "replay_hash": answer.replay_hash, "deterministic": answer.deterministic,
               "model_version": answer.model_version, "reason": answer.reason,
               "claim": BIJOTEL_OUTPUT_HASH, "claim_verdict": claim["verdict"]}
    return VerifyResult(answer.match, answer.original_hash, answer.replay_hash,
                        BIJOTEL_OUTPUT_HASH,
                        _opt_bool(getattr(original, "deterministic", None)),
                        _opt_str(getattr(original, "model_version", None)),
                        _opt_str(getattr(original, "stream", None)),
                        _opt_int(getattr(original, "seq", None)), answer.reason, bijotel)


def _bijotel_bool(text: str) -> bool:
    """A ``deterministic`` claim as BIJOTEL's ``bool()`` reads the attribute it came from
    (kept as text: a boolean as true/false, a number in decimal): false, zero and the empty
    string are false."""
    return text not in ("false", "0", "0.0", "-0.0", "")
