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

__all__ = ["ApiClient", "CliError", "add_common", "api_client", "log_key"]


class CliError(Exception):
    """Stops the command: ``code`` is its exit status, the message goes to stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api", metavar="URL",
                   help="API base URL (default $EVIDENCE_API_URL, else .stack/env)")
    p.add_argument("--api-key", metavar="KEY",
                   help="API key (default $EVIDENCE_API_KEY, else .stack/env)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for each API answer (default 10)")


def stack_env() -> dict[str, str]:
    """``.stack/env`` under the process's own ``EVIDENCE_*`` variables."""
    try:
        from devstack import StackConfig, read_env

        stack = read_env(StackConfig.from_env())
    except Exception:  # noqa: BLE001 - no stack file is fine; flags and env still work
        stack = {}
    return {**stack, **{k: v for k, v in os.environ.items() if k.startswith("EVIDENCE_")}}


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
    url = args.api or env.get("EVIDENCE_API_URL")
    key = args.api_key or env.get("EVIDENCE_API_KEY")
    if not url:
        raise CliError(1, "no API URL: pass --api URL, set EVIDENCE_API_URL, or run `make up`")
    if not key:
        raise CliError(1, "no API key: pass --api-key, set EVIDENCE_API_KEY, or run `make up`")
    return ApiClient(url, key, args.timeout)


def log_key(path: str | None, env: dict[str, str], api: ApiClient):
    """(the log's verifier key, where it came from); see the module docstring."""
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
    text = api.ok("/log/key").text.strip()
    try:
        return parse_vkey(text), "api"
    except NoteError as e:
        raise CliError(1, f"the API's /log/key is not a verifier key: {e}") from e


def fail(command: str, e: CliError) -> int:
    print(f"evidence {command}: {e}", file=sys.stderr)
    return e.code
