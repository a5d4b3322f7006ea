"""The divergence harness, pure parts: sample records, compare what the API serves with the
log, and tally live re-executions.

Two assertions, one of which is allowed to fail:

- **Reconstruction** (must pass). A record read from ``evidence.log`` is the evidence; what
  the API serves for it must be the same bytes: ``GET /replay/{content_key}?stream=&seq=``
  the verbatim response, ``GET /streams/{s}/records/{seq}?include=bytes`` every digest, the
  request, response and error bodies and the log message itself. Any difference fails.
- **Live divergence** (information). The user's re-executor is run on the recorded request;
  its response is compared with the recorded one by ``response_digest`` and, through the
  provider adapter, by ``output_digest``. The match rate, by model id and by fingerprint, is
  a measurement: a jump says a provider changed something it did not announce.
"""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from evidence_contract import output_digest, record_digest, response_digest

from audit.verify import extract_output

__all__ = ["LiveTally", "Sampler", "Served", "check_reconstruction", "summary"]

_DIGESTS = ("content_key", "response_digest", "output_digest", "input_digest",
            "prompt_digest")


class Sampler:
    """Keeps ``n`` records chosen uniformly from a stream of them (reservoir sampling), or
    every record when ``n`` is None. Seeded, so a run can be repeated."""

    def __init__(self, n: int | None, seed: int | None = None) -> None:
        self.n = n
        self.seen = 0
        self.kept: list[Any] = []
        self._rng = random.Random(seed)

    def offer(self, item: Any) -> None:
        self.seen += 1
        if self.n is None or len(self.kept) < self.n:
            self.kept.append(item)
            return
        j = self._rng.randrange(self.seen)
        if j < self.n:
            self.kept[j] = item


@dataclass(frozen=True)
class Served:
    """What the API answered for one record."""

    replay_status: int | None            # None when the record has no response to serve
    replay_body: bytes | None
    replay_headers: Mapping[str, str]
    record_status: int
    record_json: Mapping[str, Any] | None


def _hex(b: Any) -> str | None:
    return None if b is None else bytes(b).hex()


def _b64(b: Any) -> str | None:
    return None if b is None else base64.b64encode(bytes(b)).decode("ascii")


def replay_expected(body: Mapping[str, Any]) -> bool:
    """Whether ``/replay`` must serve this record (a COMMITTED record with response bytes)."""
    return body["outcome"] == "COMMITTED" and body["response_bytes"] is not None


def check_reconstruction(message: bytes, stored_body: bytes, record: Mapping[str, Any],
                         served: Served) -> list[str]:
    """Every difference between the log's record and what the API served (empty: identical).

    ``message`` is the log message, ``stored_body``/``record`` what ``split_record`` gives.
    """
    body, seal = record["body"], record["seal"]
    # The record must first be the evidence it claims to be.
    problems = _evidence_problems(stored_body, body, seal)
    if replay_expected(body):
        problems += _replay_problems(body, seal, served)
    if served.record_status != 200 or served.record_json is None:
        problems.append(f"/streams/{body['stream']}/records/{seal['seq']} answered "
                        f"{served.record_status}")
        return problems
    return problems + _record_problems(message, body, seal, served.record_json)


def _evidence_problems(stored_body: bytes, body: Mapping[str, Any],
                       seal: Mapping[str, Any]) -> list[str]:
    """The log record's own digests that do not recompute."""
    problems = []
    if record_digest(bytes(seal["prev_digest"]), seal["seq"], seal["occurred_at"],
                     stored_body) != bytes(seal["record_digest"]):
        problems.append("the log record's record_digest does not recompute")
    if body["response_bytes"] is not None and body["response_digest"] is not None and \
            response_digest(body["response_bytes"]) != bytes(body["response_digest"]):
        problems.append("the log record's response_digest does not recompute")
    return problems


def _replay_problems(body: Mapping[str, Any], seal: Mapping[str, Any],
                     served: Served) -> list[str]:
    """How ``/replay`` differs from the recorded response and the record it names."""
    if served.replay_status != 200:
        return [f"/replay answered {served.replay_status}, not the recorded response"]
    problems = []
    if served.replay_body != bytes(body["response_bytes"]):
        problems.append(
            f"/replay served {len(served.replay_body or b'')} bytes that differ from the "
            f"{len(body['response_bytes'])} recorded response bytes (response_digest "
            f"{_hex(response_digest(served.replay_body or b''))[:16]}… served, "
            f"{_hex(body['response_digest'])[:16]}… recorded)")
    h = {k.lower(): v for k, v in served.replay_headers.items()}
    if h.get("evidence-source") == "log":
        # The API found its row altered and answered from the log (api.evidence).
        problems.append("/replay served the log's copy: the API found the projected "
                        "row altered (Evidence-Finding: "
                        f"{h.get('evidence-finding')})")
    for name, want in (("evidence-stream", body["stream"]),
                       ("evidence-seq", str(seal["seq"])),
                       ("evidence-record-digest", _hex(seal["record_digest"]))):
        if h.get(name) != want:
            problems.append(f"/replay header {name} is {h.get(name)!r}, the log says "
                            f"{want!r}")
    return problems


def _record_problems(message: bytes, body: Mapping[str, Any], seal: Mapping[str, Any],
                     r: Mapping[str, Any]) -> list[str]:
    """The fields of ``/streams/{s}/records/{seq}?include=bytes`` that differ from the log."""
    want: dict[str, Any] = {
        "stream": body["stream"], "seq": seal["seq"], "event_id": body["event_id"],
        "occurred_at_us": seal["occurred_at"], "outcome": body["outcome"],
        "prev_digest": _hex(seal["prev_digest"]), "record_digest": _hex(seal["record_digest"]),
        **{k: _hex(body[k]) for k in _DIGESTS},
        "request_b64": _b64(body["request_bytes"]), "response_b64": _b64(body["response_bytes"]),
        "error_b64": _b64(body["error_bytes"]), "record_b64": _b64(message),
        "input_b64": _b64(body["input_bytes"]), "prompt_b64": _b64(body["prompt_bytes"]),
        "model_id": body["model_id"], "fingerprint": body["fingerprint"],
        "request_length": body["request_length"], "response_length": body["response_length"],
        "truncated": body["capture"]["truncated"],
    }
    problems = []
    seed = body["replay"]["seed"]
    served_seed = (r.get("replay") or {}).get("seed")
    if served_seed != (None if seed is None else int(seed)):
        problems.append(f"record field replay.seed served as {served_seed!r} differs from the "
                        f"log's {seed!r}")
    for name, value in want.items():
        if r.get(name) != value:
            shown = r.get(name)
            if isinstance(shown, str) and len(shown) > 40:
                shown = shown[:40] + "…"
            problems.append(f"record field {name} served as {shown!r} differs from the log")
    return problems


# -- live divergence -----------------------------------------------------------------------


@dataclass
class _Bucket:
    runs: int = 0
    response_match: int = 0
    output_match: int = 0
    output_compared: int = 0
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        ok = self.runs - self.errors
        return {"runs": self.runs, "errors": self.errors,
                "response_match": self.response_match,
                "response_match_rate": round(self.response_match / ok, 4) if ok else None,
                "output_compared": self.output_compared, "output_match": self.output_match,
                "output_match_rate": (round(self.output_match / self.output_compared, 4)
                                      if self.output_compared else None)}


@dataclass
class LiveTally:
    """Live re-execution results, overall and by model id and by fingerprint.

    The live output text is the record contract's (``evidence_contract.outputs``) unless
    ``output_text`` is given; a wire format the contract does not define is not compared.
    """

    output_text: Callable[[Mapping[str, Any]], str | None] | None = None
    total: _Bucket = field(default_factory=_Bucket)
    by_model: dict[str, _Bucket] = field(default_factory=dict)
    by_fingerprint: dict[str, _Bucket] = field(default_factory=dict)
    divergent: list[dict[str, Any]] = field(default_factory=list)

    def add(self, body: Mapping[str, Any], seq: int, live: bytes | None,
            error: str | None = None) -> dict[str, Any]:
        """Record one re-execution (``live`` the response bytes, or ``error``)."""
        buckets = (self.total,
                   self.by_model.setdefault(str(body["model_id"]), _Bucket()),
                   self.by_fingerprint.setdefault(str(body["fingerprint"]), _Bucket()))
        result: dict[str, Any] = {"stream": body["stream"], "seq": seq,
                                  "model_id": body["model_id"],
                                  "fingerprint": body["fingerprint"]}
        for b in buckets:
            b.runs += 1
        if live is None:
            for b in buckets:
                b.errors += 1
            result.update(status="error", error=error)
            self.divergent.append(result)
            return result
        recorded = body["response_digest"]
        response_ok = recorded is not None and response_digest(live) == bytes(recorded)
        output_ok = None
        if body["output_digest"] is not None:
            answered = {**body, "response_bytes": live}
            if self.output_text is None:
                found, unknown = extract_output(answered)
                text, comparable = found.text, unknown is None
            else:
                comparable = True
                try:
                    text = self.output_text(answered)
                except Exception:  # noqa: BLE001 - an unparseable live answer is a divergence
                    text = None
            if comparable:
                output_ok = (text is not None
                             and output_digest(text) == bytes(body["output_digest"]))
        for b in buckets:
            b.response_match += response_ok
            if output_ok is not None:
                b.output_compared += 1
                b.output_match += output_ok
        result.update(status="match" if response_ok else "diverged",
                      response_match=response_ok, output_match=output_ok,
                      live_response_digest=response_digest(live).hex())
        if not response_ok:
            self.divergent.append(result)
        return result

    def to_dict(self) -> dict[str, Any]:
        return {"overall": self.total.to_dict(),
                "by_model_id": {k: v.to_dict() for k, v in sorted(self.by_model.items())},
                "by_fingerprint": {k: v.to_dict()
                                   for k, v in sorted(self.by_fingerprint.items())},
                "divergent": self.divergent[:1000]}


def summary(report: Mapping[str, Any]) -> list[str]:
    """A short human summary of a harness report."""
    rec = report["reconstruction"]
    lines = [f"sampled {report['sampled']} of {report['log_records']} log records"
             + (f" (stream {report['stream']})" if report.get("stream") else ""),
             f"reconstruction: {rec['checked'] - rec['failed']}/{rec['checked']} byte-identical"
             + ("" if rec["failed"] == 0 else f", {rec['failed']} FAILED")]
    for f in rec["failures"][:20]:
        lines.append(f"  - {f['stream']}#{f['seq']}: {'; '.join(f['problems'])}")
    live = report.get("live")
    if live:
        o = live["overall"]
        rate = "n/a" if o["response_match_rate"] is None else f"{o['response_match_rate']:.1%}"
        out_rate = ("n/a" if o["output_match_rate"] is None
                    else f"{o['output_match_rate']:.1%}")
        lines.append(f"live divergence (information, not a failure): {o['runs']} runs, "
                     f"response match {rate}, output match {out_rate}, {o['errors']} errors")
        for title, key in (("model_id", "by_model_id"), ("fingerprint", "by_fingerprint")):
            for name, b in live[key].items():
                r = "n/a" if b["response_match_rate"] is None else f"{b['response_match_rate']:.1%}"
                lines.append(f"  {title} {name}: {b['runs']} runs, response match {r}")
    lines.append("RECONSTRUCTION OK" if rec["failed"] == 0 else "RECONSTRUCTION FAILED")
    return lines

