"""What ``evidence checkpoint`` and ``evidence prove`` share: the API, the log key, checks.

The API URL and key come from ``--api``/``--api-key``, else ``$EVIDENCE_API_URL`` and
``$EVIDENCE_API_KEY``, else ``.stack/env`` (as ``evidence replay``). The log's verifier key,
which every check starts from, comes from ``--log-key FILE``, else
``$EVIDENCE_LOG_VERIFIER_KEY_FILE`` (or the signer key of ``$EVIDENCE_LOG_SIGNING_KEY_FILE``),
else ``.stack/env``'s; only as a last resort from the API's own ``GET /log/key``, and then the
output says so (``"log_key_source": "api"``): a key taken from the party being checked proves
only that its answers agree with each other.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .settings import SettingsError, add_options, resolve, stack_env

__all__ = ["ApiClient", "CliError", "EXIT_UNVERIFIED", "add_common", "add_trust", "api_client",
           "log_key", "log_verifier", "stack_env", "verified_record"]

EXIT_UNVERIFIED = 4
"""The exit status of a command whose evidence failed its check (tampered, rolled back,
unwitnessed, or never covered by a checkpoint): nothing of it is printed as good."""


class CliError(Exception):
    """Stops the command: ``code`` is its exit status, the message goes to stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def add_common(p: argparse.ArgumentParser) -> None:
    """``--api``, ``--api-key`` and ``--timeout`` (:mod:`cli.settings`)."""
    add_options(p, "api", "api_key", "timeout")


@dataclass
class ApiClient:
    url: str
    key: str
    timeout: float

    def get(self, path: str, params: dict[str, Any] | None = None):
        import httpx

        try:
            return httpx.get(self.url.rstrip("/") + path, params=params, timeout=self.timeout,
                             headers={"Authorization": f"Bearer {self.key}"})
        except httpx.HTTPError as e:
            raise CliError(1, f"cannot reach the API at {self.url} ({type(e).__name__}: {e}); "
                              f"is it running? `make up` starts it") from e

    def ok(self, path: str, params: dict[str, Any] | None = None, usage_on_422: bool = True):
        """The answer of a GET that must be 200; anything else raises CliError with the
        API's reason (422: a usage error)."""
        r = self.get(path, params)
        if r.status_code == 200:
            return r
        try:
            message = r.json().get("message") or r.text[:200]
        except ValueError:
            message = r.text[:200] or r.reason_phrase
        code = 2 if r.status_code == 422 and usage_on_422 else 1
        raise CliError(code, f"GET {path}: {r.status_code}: {message}")


def api_client(args: argparse.Namespace, env: dict[str, str]) -> ApiClient:
    """The API the shared options name (:func:`cli.settings.resolve`); ``CliError`` when
    the URL or the key is missing or a setting cannot work."""
    try:
        s = resolve(args, env)
    except SettingsError as e:
        raise CliError(2, str(e)) from e
    missing = s.need("api", "api_key")
    if missing:
        raise CliError(1, missing)
    return ApiClient(str(s.api), str(s.api_key), s.timeout)


def log_key(path: str | None, env: dict[str, str], api: ApiClient | None):
    """(the log's verifier key, where it came from); see the module docstring. Without
    ``api``, a key the operator holds or none: ``(None, "none")``."""
    from evidence_contract.note import NoteError, parse_skey, parse_vkey

    sources = [(path, parse_vkey, "file")] if path else []
    # The process's own variables before .stack/env's (``env`` merges them one by one): an
    # operator or a test that names a key, either kind, is not overruled by the local stack's.
    for source in (os.environ, env):
        sources += [(source.get("EVIDENCE_LOG_VERIFIER_KEY_FILE"), parse_vkey, "env"),
                    (source.get("EVIDENCE_LOG_SIGNING_KEY_FILE"),
                     lambda t: parse_skey(t).verifier, "env")]
    for file, parse, source in sources:
        if not file:
            continue
        try:
            return parse(Path(file).read_text(encoding="utf-8").strip()), source
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(1, f"cannot read the log key {file}: {e}") from e
        except NoteError as e:
            raise CliError(1, f"{file} is not a note key: {e}") from e
    if api is None:
        return None, "none"
    text = api.ok("/log/key").text.strip()
    try:
        return parse_vkey(text), "api"
    except NoteError as e:
        raise CliError(1, f"the API's /log/key is not a verifier key: {e}") from e


def add_trust(p: argparse.ArgumentParser) -> None:
    """The flags of a command that verifies what it reads (see :func:`log_verifier`)."""
    g = p.add_argument_group("verification (on by default)")
    g.add_argument("--log-key", metavar="FILE",
                   help="the log's verifier key (default $EVIDENCE_LOG_VERIFIER_KEY_FILE, else "
                        "the signer key of $EVIDENCE_LOG_SIGNING_KEY_FILE, else .stack/env's)")
    g.add_argument("--trust-on-first-use", action="store_true",
                   help="with no key of yours, pin the API's /log/key the first time (kept in "
                        "--state-file) and check every later read against it")
    g.add_argument("--witness-key", metavar="KEY", action="append", default=[],
                   help="a witness's verifier key (text or file); repeatable")
    g.add_argument("--min-witnesses", type=int, metavar="K",
                   help="cosignatures required from the --witness-key keys (default: all)")
    g.add_argument("--log-witness-key", metavar="KEY", action="append", default=[],
                   help="a key of a witness of the deployment log (text or file); repeatable: "
                        "the record must be covered by a deployment checkpoint it cosigned")
    g.add_argument("--min-log-witnesses", type=int, metavar="K",
                   help="cosignatures of the deployment checkpoint required from the "
                        "--log-witness-key keys (default: all)")
    g.add_argument("--state-file", metavar="FILE",
                   help="where the last verified checkpoint per log is kept, to catch a "
                        "rollback between runs (default $XDG_STATE_HOME/evidence/"
                        "checkpoints.json, else ~/.local/state/evidence/checkpoints.json)")
    g.add_argument("--checkpoint-wait", type=float, default=15.0, metavar="S",
                   help="seconds to wait for a checkpoint that covers a new record (default 15)")
    g.add_argument("--no-verify", action="store_true",
                   help="take the API's word (not recommended: a tampered projection passes)")


def _state_file(args: argparse.Namespace) -> Path:
    if args.state_file:
        return Path(args.state_file)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "evidence" / "checkpoints.json"


def log_verifier(args: argparse.Namespace, env: dict[str, str], api: ApiClient):
    """An ``evidence_client.trust.LogVerifier`` of the flags of :func:`add_trust`: the log key
    the operator holds, or with ``--trust-on-first-use`` the API's, pinned in the state file."""
    from evidence_client.errors import ConfigError
    from evidence_client.trust import LogVerifier

    key, _source = log_key(args.log_key, env, None)

    def keys(items: list[str]) -> list[str]:
        out = []
        for item in items:
            lines = [item] if "+" in item and not os.path.exists(item) else \
                Path(item).read_text(encoding="utf-8").splitlines()
            out += [t.strip() for t in lines if t.strip()]
        return out

    log_witnesses = keys(args.log_witness_key) or None
    if log_witnesses is None and args.min_log_witnesses:
        raise CliError(2, "--min-log-witnesses needs --log-witness-key")
    try:
        verifier = LogVerifier(key, witnesses=keys(args.witness_key),
                               min_witnesses=args.min_witnesses,
                               trust_on_first_use=args.trust_on_first_use,
                               state_file=_state_file(args), log_witnesses=log_witnesses,
                               min_log_witnesses=args.min_log_witnesses)
        verifier.pin(lambda: api.ok("/log/key").text)
    except ConfigError as e:
        raise CliError(2, f"{e}; see --log-key and --trust-on-first-use") from e
    return verifier


def verified_record(api: ApiClient, verifier, stream: str, seq: int, wait_s: float):
    """Record ``seq`` of ``stream`` from its bundle, verified (waiting up to ``wait_s`` for a
    checkpoint that covers it): an ``evidence_contract.bundle.Verified``. A failed check is
    ``CliError(EXIT_UNVERIFIED)``."""
    import time

    from evidence_client.errors import EvidenceUncovered, EvidenceUnverified
    from evidence_contract.tlog import checkpoint_origin

    deadline = time.monotonic() + wait_s
    while True:
        snapshot = verifier.snapshot()
        known = snapshot.get(checkpoint_origin(verifier.log_key.name, stream))
        params = {} if known is None else {"known_size": known.size}
        doc = api.ok(f"/streams/{stream}/records/{seq}/bundle", params).json()
        try:
            return verifier.check(doc, snapshot)
        except EvidenceUncovered as e:
            if time.monotonic() >= deadline:
                raise CliError(EXIT_UNVERIFIED, f"{e} (waited {wait_s:g} s)") from e
            time.sleep(0.5)
        except EvidenceUnverified as e:
            raise CliError(EXIT_UNVERIFIED, f"the evidence of {stream} #{seq} fails its check "
                                            f"({type(e).__name__}): {e}") from e


def fail(command: str, e: CliError) -> int:
    print(f"evidence {command}: {e}", file=sys.stderr)
    return e.code
