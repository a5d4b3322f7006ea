"""The witness service: poll the log, cosign what extends what it cosigned, refuse the rest.

One :class:`Witness` holds the configuration, its key and its state directory. It

- **polls** (``poll_once``, every ``interval`` seconds in ``run``) each followed stream's
  ``GET /streams/{s}/checkpoint`` on the log's API, opens the note with the log key, fetches
  ``GET /streams/{s}/proof/consistency?first=<last cosigned size>&second=<new size>``,
  checks it (:func:`witness.core.check`), and for a checkpoint that extends the last one
  (1) writes its cosigned note to its state directory, then (2) submits it to
  ``POST /streams/{s}/checkpoint/cosignatures``. The order is the point: the witness never
  hands out a cosignature it could forget. A note the log already serves with this witness's
  cosignature is not submitted again; one it does not (a 409 while the log had not projected
  it, the API down) is, on the next poll.
- **refuses** every other checkpoint loudly: an ``error`` log line ``checkpoint_refused``
  with the reason, a record in ``refusals.jsonl`` (with the note as the log signed it: the
  evidence), and no cosignature; its state stays as it was.
- **serves** on ``listen`` (127.0.0.1 by default) ``GET /checkpoints`` (the origins it keeps,
  JSON), ``GET /checkpoints/<origin>`` (the last note it cosigned), ``GET /refusals`` (JSON), ``GET /key`` (its verifier key) and the C2SP
  tlog-witness push API ``POST /add-checkpoint`` (https://c2sp.org/tlog-witness: 200 with the
  cosignature line; 400 a malformed body or an old size above the checkpoint's; 403 no
  valid log signature; 404 an origin that is neither the log's own (the deployment
  checkpoint, origin = the log key's name) nor one of its streams; 409 ``text/x.tlog.size`` with the size
  it last cosigned when the old size is not that; 422 a consistency proof that does not
  verify, or the same size with another root: a fork).

Transport errors of the log's API are retried on the next poll; they are not refusals.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import unquote, urlsplit

from evidence_contract.note import (
    NoteError, SignerKey, VerifierKey, format_vkey, parse_checkpoint, parse_note,
)
from evidence_contract.tlog import checkpoint_origin
from server.logs import event_logger

from witness.core import (
    Cosigned, Opened, Refusal, check, cosign,
    open_checkpoint_for, open_log_checkpoint, parse_add_checkpoint,
)
from witness.state import StateDir

__all__ = ["Witness", "WitnessConfig"]

log = event_logger("evidence.witness")

_MAX_BODY = 16 * 1024  # an add-checkpoint body: a checkpoint and a proof are < 4 KiB


@dataclass
class WitnessConfig:
    """What a witness needs: the log it follows and its own key and state."""

    key: SignerKey
    log_key: VerifierKey
    state_dir: Path
    log_url: str | None = None
    api_key: str | None = None
    streams: Sequence[str] = ()
    interval: float = 5.0
    listen: tuple[str, int] = ("127.0.0.1", 0)
    timeout: float = 10.0


@dataclass
class _Answer:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


@dataclass
class Witness:
    config: WitnessConfig
    state: StateDir = field(init=False)

    def __post_init__(self) -> None:
        self.state = StateDir(self.config.state_dir).open()
        self._lock = threading.Lock()  # one decision at a time: the poller and pushes
        self._stop = threading.Event()
        self._client: Any = None
        self._server: ThreadingHTTPServer | None = None
        self._refused = {(r.get("origin"), r.get("tree_size"), r.get("root"), r.get("kind"))
                         for r in self.state.refusals()}

    # --- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.config.key.name

    def _ours(self, note: bytes) -> bool:
        me = (self.config.key.name, self.config.key.verifier.key_id)
        try:
            return any((s.name, s.key_id) == me for s in parse_note(note).signatures)
        except NoteError:
            return False

    # --- refusals -------------------------------------------------------------------------
    def _refuse(self, stream: str | None, data: bytes, refusal: Refusal,
                opened: Opened | None, last: Cosigned | None, via: str) -> None:
        cp = opened.checkpoint if opened else None
        origin = cp.origin if cp else (checkpoint_origin(self.config.log_key.name, stream)
                                       if stream else None)
        ident = (origin, cp.size if cp else None, cp.root_hash.hex() if cp else None,
                 refusal.kind)
        if ident in self._refused:  # said and recorded once; the state is unchanged anyway
            return
        self._refused.add(ident)
        record = {"witness": self.name, "origin": origin, "stream": stream,
                  "tree_size": ident[1], "root": ident[2], "kind": refusal.kind,
                  "reason": refusal.reason, "via": via, "log_signed": opened is not None,
                  "last_cosigned": None if last is None else {"size": last.size,
                                                              "root": last.root.hex()},
                  "note": data.decode("utf-8", errors="replace")}
        self.state.refuse(record)
        log("error", "checkpoint_refused", witness=self.name, origin=origin,
            tree_size=ident[1], kind=refusal.kind, reason=refusal.reason, via=via)

    # --- polling --------------------------------------------------------------------------
    def _http(self):
        if self._client is None:
            import httpx

            headers = {"Authorization": f"Bearer {self.config.api_key}"} \
                if self.config.api_key else {}
            self._client = httpx.Client(base_url=self.config.log_url.rstrip("/"),
                                        headers=headers, timeout=self.config.timeout)
        return self._client

    def poll_once(self) -> dict[str, str]:
        """Follow every configured stream once; returns stream -> what happened."""
        return {s: self.follow(s) for s in self.config.streams}

    def follow(self, stream: str) -> str:
        """One poll of one stream: ``cosigned``, ``unchanged``, ``refused``, ``none`` (no
        checkpoint yet) or ``unavailable`` (the API did not answer as it should)."""
        import httpx

        try:
            r = self._http().get(f"/streams/{stream}/checkpoint")
        except httpx.HTTPError as e:
            log("warning", "log_unreachable", stream=stream, error=f"{type(e).__name__}: {e}")
            return "unavailable"
        if r.status_code == 404:
            return "none"
        if r.status_code != 200:
            log("warning", "checkpoint_unavailable", stream=stream, status=r.status_code,
                body=r.text[:200])
            return "unavailable"
        served = r.content
        opened = open_log_checkpoint(served, self.config.log_key, stream)
        with self._lock:
            origin = checkpoint_origin(self.config.log_key.name, stream)
            last = self.state.load(origin)
            if isinstance(opened, Refusal):
                self._refuse(stream, served, opened, None, last, "poll")
                return "refused"
            cp = opened.checkpoint
            proof: list[bytes] | None = None
            if last is not None and cp.size > last.size:
                proof = self._consistency(stream, last.size, cp.size)
                if proof is None:
                    return "unavailable"
            refusal = check(last, cp, proof)
            if refusal is not None:
                self._refuse(stream, served, refusal, opened, last, "poll")
                return "refused"
            if last is not None and last.size == cp.size:
                if not self._ours(served):
                    self._submit(stream, last.note)
                return "unchanged"
            note = cosign(self.config.key, opened, int(time.time()))
            self.state.save(Cosigned(origin, cp.size, cp.root_hash, note))  # (1) remember
        log("info", "checkpoint_cosigned", witness=self.name, origin=origin, tree_size=cp.size,
            previous=last.size if last else 0)
        self._submit(stream, note)                                         # (2) then hand out
        return "cosigned"

    def _consistency(self, stream: str, first: int, second: int) -> list[bytes] | None:
        import httpx

        try:
            r = self._http().get(f"/streams/{stream}/proof/consistency",
                                 params={"first": first, "second": second})
        except httpx.HTTPError as e:
            log("warning", "log_unreachable", stream=stream, error=f"{type(e).__name__}: {e}")
            return None
        if r.status_code != 200:
            # A log that serves a checkpoint it cannot prove consistent is not answering; the
            # witness waits (and never cosigns without a proof).
            log("warning", "consistency_proof_unavailable", stream=stream, first=first,
                second=second, status=r.status_code, body=r.text[:200])
            return None
        try:
            return [bytes.fromhex(h) for h in r.json()["hashes"]]
        except (ValueError, KeyError, TypeError):
            return [b"malformed"]  # fails verification: a refusal, with ProofError's reason

    def _submit(self, stream: str, note: bytes) -> bool:
        import httpx

        try:
            r = self._http().post(f"/streams/{stream}/checkpoint/cosignatures", content=note,
                                  headers={"content-type": "text/plain"})
        except httpx.HTTPError as e:
            log("warning", "cosignature_not_submitted", stream=stream,
                error=f"{type(e).__name__}: {e}")
            return False
        if r.status_code != 202:
            log("warning", "cosignature_not_submitted", stream=stream, status=r.status_code,
                body=r.text[:300])
            return False
        return True

    # --- the push API (c2sp.org/tlog-witness) ---------------------------------------------
    def add_checkpoint(self, body: bytes) -> _Answer:
        try:
            req = parse_add_checkpoint(body)
        except ValueError as e:
            return _Answer(400, f"{e}\n".encode())
        try:
            origin = parse_checkpoint(parse_note(req.checkpoint).text).origin
        except NoteError as e:
            return _Answer(400, f"not a signed checkpoint: {e}\n".encode())
        # The log's own origin (the deployment checkpoint the publisher pushes) or a stream's.
        opened = open_checkpoint_for(origin, req.checkpoint, self.config.log_key)
        if opened is None:
            return _Answer(404, f"unknown origin {origin!r}\n".encode())
        if isinstance(opened, Refusal):
            log("warning", "add_checkpoint_forbidden", origin=origin, reason=opened.reason)
            return _Answer(403, f"{opened.reason}\n".encode())
        cp, stream = opened.checkpoint, opened.stream
        if req.old_size > cp.size:
            return _Answer(400, b"the old size is larger than the checkpoint's\n")
        if req.old_size == 0 and req.proof:
            return _Answer(400, b"no consistency proof goes with old size 0\n")
        with self._lock:
            last = self.state.load(origin)
            known = last.size if last else 0
            if req.old_size != known:
                return _Answer(409, f"{known}\n".encode(), "text/x.tlog.size")
            refusal = check(last, cp, req.proof)
            if refusal is not None:
                self._refuse(stream, req.checkpoint, refusal, opened, last, "add-checkpoint")
                # tlog-witness: a proof that does not verify, or the same size with another
                # root (a fork), is 422; 409 is only for an old size that is not ours.
                return _Answer(422, f"{refusal.reason}\n".encode())
            if last is not None and last.size == cp.size:
                note = last.note
            else:
                note = cosign(self.config.key, opened, int(time.time()))
                self.state.save(Cosigned(origin, cp.size, cp.root_hash, note))
        if last is None or last.size != cp.size:
            log("info", "checkpoint_cosigned", witness=self.name, origin=origin,
                tree_size=cp.size, previous=known, via="add-checkpoint")
        mine = [s for s in parse_note(note).signatures
                if (s.name, s.key_id) == (self.name, self.config.key.verifier.key_id)]
        return _Answer(200, "".join(s.line() for s in mine).encode())

    # --- reads ----------------------------------------------------------------------------
    def checkpoint(self, origin: str) -> bytes | None:
        last = self.state.load(origin)
        return last.note if last else None

    def refusals(self) -> list[dict[str, Any]]:
        return list(self.state.refusals())

    # --- running --------------------------------------------------------------------------
    def serve(self) -> tuple[str, int]:
        """Start the HTTP endpoint in a thread; returns the (host, port) it listens on."""
        self._server = ThreadingHTTPServer(self.config.listen, _Handler)
        self._server.daemon_threads = True
        self._server.witness = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, name="witness-http",
                         daemon=True).start()
        host, port = self._server.server_address[:2]
        log("info", "witness_listening", witness=self.name, host=host, port=port,
            key=format_vkey(self.config.key.verifier))
        return host, port

    def run(self, once: bool = False) -> None:
        """Poll every ``interval`` seconds until :meth:`stop` (or once)."""
        log("info", "witness_started", witness=self.name, log=self.config.log_key.name,
            streams=list(self.config.streams), log_url=self.config.log_url)
        while not self._stop.is_set():
            if self.config.log_url and self.config.streams:
                self.poll_once()
            if once:
                return
            self._stop.wait(self.config.interval)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._client is not None:
            self._client.close()


class _Handler(BaseHTTPRequestHandler):
    server_version = "evidence-witness"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        log("debug", "http", line=format % args)

    def _send(self, a: _Answer) -> None:
        self.send_response(a.status)
        self.send_header("Content-Type", a.content_type)
        self.send_header("Content-Length", str(len(a.body)))
        self.end_headers()
        self.wfile.write(a.body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        w: Witness = self.server.witness  # type: ignore[attr-defined]
        path = urlsplit(self.path).path
        if path == "/checkpoints":
            body = json.dumps({"origins": w.state.origins()}).encode()
            self._send(_Answer(200, body, "application/json"))
        elif path.startswith("/checkpoints/"):
            origin = unquote(path[len("/checkpoints/"):])
            note = w.checkpoint(origin)
            self._send(_Answer(200, note) if note is not None else
                       _Answer(404, f"no checkpoint cosigned for {origin!r}\n".encode()))
        elif path == "/refusals":
            body = json.dumps({"witness": format_vkey(w.config.key.verifier),
                               "refusals": w.refusals()}, indent=1).encode()
            self._send(_Answer(200, body, "application/json"))
        elif path == "/key":
            self._send(_Answer(200, (format_vkey(w.config.key.verifier) + "\n").encode()))
        else:
            self._send(_Answer(404, b"not found\n"))

    def do_POST(self) -> None:  # noqa: N802
        w: Witness = self.server.witness  # type: ignore[attr-defined]
        if urlsplit(self.path).path != "/add-checkpoint":
            self._send(_Answer(404, b"not found\n"))
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(_Answer(411, b"a Content-Length is required\n"))
            return
        if not 0 <= length <= _MAX_BODY:
            self._send(_Answer(413, f"a body is at most {_MAX_BODY} bytes\n".encode()))
            self.close_connection = True
            return
        self._send(w.add_checkpoint(self.rfile.read(length)))
