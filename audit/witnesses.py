"""Asking witnesses what they cosigned and what they refused (the audit's HTTP module).

**Any C2SP tlog-witness** (litewitness, omniwitness, ours) is asked with the one route the
spec gives, ``POST <url>/add-checkpoint`` (:func:`ask_witness`): the auditor shows it the
newest deployment checkpoint the log signed whose root is the tree topic's entries' tree
(:class:`audit.logtree.DeploymentAudit`), first with ``old 0`` to learn the size ``W`` the
witness holds (``409``, ``text/x.tlog.size``), then with ``old W`` and the consistency proof
the auditor computed itself from the entries. The witness checks that proof against the root
*it* stored for ``W``:

- ``200`` with a cosignature: the tree the auditor read extends the one the witness saw;
  every entry (every stream checkpoint) in it is then a witnessed checkpoint, checked
  against the log's records (``rewritten_since_witnessed``);
- ``422``: the tree topic is not an extension of what the witness cosigned: the deployment
  log was rewritten (``witness_refused``); so is a witness that holds a larger tree than any
  the log signed (a rollback).

The witness cosigns what it is shown (the spec lets anyone submit a log-signed checkpoint),
so the audit moves the witness forward exactly as the publisher would; it never shows a
witness a checkpoint the log did not sign.

**Our witness** (``evidence witness run``) also serves ``GET /checkpoints`` (the origins it keeps),
``GET /checkpoints/<origin>`` (the last note it cosigned) and ``GET /refusals``. Everything it
says is verified before the audit uses it (:func:`audit.tlog.open_witnessed`): the log key's
signature and, when the auditor gave witness keys, a witness's cosignature. A witness that
does not answer, or answers with a note that does not verify, stops the audit
(:class:`~audit.errors.AuditError`): the auditor asked for that check.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import quote

from evidence_contract.note import NoteError, VerifierKey, format_vkey, parse_note, verify
from evidence_contract.tlog import checkpoint_origin
from publisher.core import add_checkpoint_body, read_answer

from audit.errors import AuditError
from audit.logtree import DeploymentAudit
from audit.tlog import TreeAudit, open_witnessed

__all__ = ["ask_witness", "load_checkpoint_file", "load_witness"]

_ROUNDS = 6
"""How often a witness is asked again when it moved on between two requests (409 with a
new size) or was busy (503, 429): the publisher pushes concurrently."""


def _get(client, url: str, path: str):
    import httpx

    try:
        r = client.get(url.rstrip("/") + path)
    except httpx.HTTPError as e:
        raise AuditError(f"the witness at {url} does not answer ({type(e).__name__}: {e})") from e
    return r


def _post(client, url: str, body: bytes):
    import httpx

    try:
        return client.post(url.rstrip("/") + "/add-checkpoint", content=body)
    except httpx.HTTPError as e:
        raise AuditError(f"the witness at {url} does not answer ({type(e).__name__}: {e})") from e


def _cosigners(text: str, body: bytes, keys: list[VerifierKey], source: str) -> list[str]:
    """The witness keys whose cosignature in a 200 answer verifies (names only, marked
    unverified, when the auditor gave no witness key)."""
    try:
        lines = parse_note(text.encode("utf-8") + b"\n" + body).signatures
    except NoteError as e:
        raise AuditError(f"{source}: its 200 answer is no cosignature: {e}") from e
    if not keys:
        return [f"{s.name} (unverified: no --witness-key)" for s in lines]
    good = [s.name for s in lines if any(verify(k, text, s) for k in keys)]
    if not good:
        known = ", ".join(format_vkey(k) for k in keys)
        raise AuditError(f"{source}: no cosignature in its answer verifies with a witness key "
                         f"you gave ({known})")
    return good


def ask_witness(deploy: DeploymentAudit, url: str, witness_keys: Iterable[VerifierKey],
                client=None, timeout: float = 10.0,
                catch_up: Callable[[], None] | None = None) -> dict[str, Any]:
    """Show the witness at ``url`` the log's newest deployment checkpoint, with the proof
    from the size it holds (C2SP tlog-witness); record what it says in ``deploy``.

    Returns what happened (``outcome``: ``cosigned`` | ``refused`` | ``unknown_log`` |
    ``no_checkpoint``); raises :class:`AuditError` when the witness cannot be asked (no
    answer, a busy witness after retries, an answer the spec does not allow).

    A witness that holds a larger tree than the newest checkpoint read may only be ahead of
    the auditor's read (the publisher signed and pushed meanwhile; it produces a checkpoint
    to the tree topic before any witness sees it): ``catch_up()`` reads the rest of the
    tree topic into ``deploy`` and the witness is asked again; only a larger tree than any
    the log signed after that is a finding.
    """
    import httpx

    source = f"witness {url}"
    latest = deploy.latest_signed()
    if latest is None:
        return {"source": source, "outcome": "no_checkpoint",
                "detail": f"the tree topic has no deployment checkpoint the log signed over "
                          f"its entries yet ({deploy.size} entries, "
                          f"{len(deploy.signed)} signed checkpoints read)"}
    exchange = _Exchange(deploy, source, list(witness_keys), latest, catch_up)
    own = client is None
    client = client or httpx.Client(timeout=timeout)
    try:
        for _round in range(_ROUNDS):
            said = exchange.answer(_post(client, url, exchange.request()))
            if said is not None:
                return said
        raise AuditError(f"{source} did not settle in {_ROUNDS} requests (it moved on, or "
                         f"was busy, each time)")
    finally:
        if own:
            client.close()


class _Exchange:
    """One tlog-witness exchange: the checkpoint shown (``latest``), the size the witness is
    said to hold (``old``) and whether the auditor has caught up with the tree topic."""

    def __init__(self, deploy: DeploymentAudit, source: str, keys: list[VerifierKey], latest,
                 catch_up: Callable[[], None] | None) -> None:
        self.deploy, self.source, self.keys = deploy, source, keys
        self.latest, self.old = latest, 0
        self.catch_up, self.caught_up = catch_up, catch_up is None

    def request(self) -> bytes:
        """The add-checkpoint body: ``latest`` with the proof from ``old``."""
        proof = self.deploy.consistency_proof(self.old, self.latest.size) if self.old else []
        return add_checkpoint_body(self.old, proof, self.latest.note)

    def answer(self, r) -> dict[str, Any] | None:
        """What the witness's answer ``r`` settles, or None when it is to be asked again."""
        latest, source = self.latest, self.source
        if r.status_code == 200:
            cosigners = _cosigners(parse_note(latest.note).text, r.content, self.keys, source)
            self.deploy.witnessed(latest.size, source, cosigners)
            return {"source": source, "outcome": "cosigned", "size": latest.size,
                    "old": self.old, "cosigners": cosigners}
        if r.status_code == 409:
            return self._holds(r)
        if r.status_code == 422:
            self.deploy.refused(source, latest.size, (
                f"it refused the log's deployment checkpoint of size {latest.size} "
                f"(root {latest.root.hex()[:16]}…) with the proof from size {self.old}, the "
                f"size it cosigned: the tree topic is not an extension of the tree it "
                f"saw ({r.text.strip()[:200]!r})"))
            return {"source": source, "outcome": "refused", "holds": self.old,
                    "size": latest.size}
        if r.status_code in (403, 404):
            return {"source": source, "outcome": "unknown_log",
                    "detail": f"{r.status_code}: {r.text.strip()[:200]}"}
        if r.status_code in (429, 503):
            time.sleep(min(5.0, float(_retry_after(r) or 1.0)))
            return None
        raise AuditError(f"{source}: POST /add-checkpoint answered {r.status_code}: "
                         f"{r.text.strip()[:200]!r}")

    def _holds(self, r) -> dict[str, Any] | None:
        """A 409: the witness holds another size. Ask again from it, after catching up
        when it is ahead of the auditor's read; ahead of what the log signed, it is a
        rollback."""
        latest, source = self.latest, self.source
        got = read_answer(409, r.headers.get("content-type", ""), r.content, None,
                          parse_note(latest.note).text)
        if got.kind != "size":
            raise AuditError(f"{source}: {got.detail}")
        if got.size > latest.size and not self.caught_up:
            self.catch_up()
            self.caught_up, newer = True, self.deploy.latest_signed()
            self.latest = newer if newer is not None else latest
            self.old = 0
            return None
        if got.size > latest.size:
            self.deploy.refused(source, got.size, (
                f"it cosigned the deployment tree at size {got.size}, but the newest "
                f"checkpoint the log signed over the tree topic's entries is of size "
                f"{latest.size} ({self.deploy.size} entries): the log went back"))
            return {"source": source, "outcome": "refused", "holds": got.size,
                    "size": latest.size}
        if got.size == self.old:
            raise AuditError(f"{source} answered 409 with the size it was told ({self.old})")
        self.old = got.size
        return None


def _retry_after(r) -> float | None:
    try:
        return float(r.headers.get("retry-after", ""))
    except ValueError:
        return None


def load_witness(trees: TreeAudit, url: str, witness_keys: Iterable[VerifierKey],
                 stream: str | None = None, timeout: float = 10.0,
                 catch_up: Callable[[], None] | None = None) -> dict[str, Any]:
    """Ask the witness at ``url``: the tlog-witness exchange over the deployment tree (when
    the tree topic was read, ``trees.deployment``), then, if it is ours, what it cosigned
    and refused of each stream. Returns what it said."""
    import httpx

    keys = list(witness_keys)
    source = f"witness {url}"
    out: dict[str, Any] = {"source": source}
    with httpx.Client(timeout=timeout) as client:
        if trees.deployment is not None:
            out["deployment"] = ask_witness(trees.deployment, url, keys, client,
                                            catch_up=catch_up)
        r = _get(client, url, "/checkpoints")
        if r.status_code in (404, 405) and "deployment" in out:
            # Not our witness: the spec's one route is all it has.
            if out["deployment"]["outcome"] in ("unknown_log", "no_checkpoint"):
                raise AuditError(f"{source} cannot vouch for this log: "
                                 f"{out['deployment'].get('detail')}")
            return out
        if stream is not None:
            origins = [checkpoint_origin(trees.log_key.name, stream)]
        else:
            r = _get(client, url, "/checkpoints")
            if r.status_code != 200:
                raise AuditError(f"{source}: GET /checkpoints answered {r.status_code}")
            origins = list(r.json().get("origins", []))
        taken = 0
        for origin in origins:
            r = _get(client, url, "/checkpoints/" + quote(origin, safe="/:"))
            if r.status_code == 404:
                continue
            if r.status_code != 200:
                raise AuditError(f"{source}: GET /checkpoints/{origin} answered {r.status_code}")
            try:
                w = open_witnessed(r.content, trees.log_key, keys, source, bool(keys))
            except NoteError as e:
                if not origin.startswith(trees.log_key.name + "/"):
                    continue  # a witness may follow other logs too
                raise AuditError(f"{source} serves a checkpoint for {origin} that does not "
                                 f"verify: {e}") from e
            trees.add_witnessed(w)
            taken += 1
        r = _get(client, url, "/refusals")
        if r.status_code != 200:
            raise AuditError(f"{source}: GET /refusals answered {r.status_code}")
        refusals = r.json().get("refusals", [])
        for refusal in refusals:
            trees.add_refusal(source, refusal)
    out.update(checkpoints=taken, refusals=len(refusals))
    return out


def load_checkpoint_file(trees: TreeAudit, path: Path,
                         witness_keys: Iterable[VerifierKey]) -> None:
    """Add a witnessed checkpoint note the auditor kept (cosignatures checked when witness
    keys are given)."""
    keys = list(witness_keys)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise AuditError(f"cannot read the checkpoint {path}: {e}") from e
    try:
        trees.add_witnessed(open_witnessed(data, trees.log_key, keys, f"file {path}", bool(keys)))
    except NoteError as e:
        raise AuditError(f"the checkpoint {path} does not verify: {e}") from e
