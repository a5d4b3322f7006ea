"""Asking witnesses what they cosigned and what they refused (the audit's HTTP module).

A witness (``evidence witness run``) serves ``GET /checkpoints`` (the origins it keeps),
``GET /checkpoints/<origin>`` (the last note it cosigned) and ``GET /refusals``. Everything it
says is verified before the audit uses it (:func:`audit.tlog.open_witnessed`): the log key's
signature and, when the auditor gave witness keys, a witness's cosignature. A witness that
does not answer, or answers with a note that does not verify, stops the audit
(:class:`~audit.errors.AuditError`): the auditor asked for that check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from evidence_contract.note import NoteError, VerifierKey
from evidence_contract.tlog import checkpoint_origin

from audit.errors import AuditError
from audit.tlog import TreeAudit, open_witnessed

__all__ = ["load_checkpoint_file", "load_witness"]


def _get(client, url: str, path: str):
    import httpx

    try:
        r = client.get(url.rstrip("/") + path)
    except httpx.HTTPError as e:
        raise AuditError(f"the witness at {url} does not answer ({type(e).__name__}: {e})") from e
    return r


def load_witness(trees: TreeAudit, url: str, witness_keys: Iterable[VerifierKey],
                 stream: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """Add what the witness at ``url`` cosigned and refused to ``trees``; returns counts."""
    import httpx

    keys = list(witness_keys)
    source = f"witness {url}"
    with httpx.Client(timeout=timeout) as client:
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
    return {"source": source, "checkpoints": taken, "refusals": len(refusals)}


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
