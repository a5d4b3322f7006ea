"""The Docker stack's one-shot ``init`` service (docker-compose.yml): makes the keys the stack
needs in its named volumes when they are missing, and never replaces one that is there.

    /run/evidence/log/log.skey          the log's checkpoint signing key (a C2SP note signer
                                        key, Ed25519, named --log-name): writer, publisher
    /run/evidence/witness/witness.skey  the stack's own witness's key (cosignature/v1): witness
    /run/evidence/api/api-keys.json     EVIDENCE_API_KEYS_FILE: one admin key that reads every
                                        stream: API
    /run/evidence/public/log.vkey       the log's verifier key: writer, witness, API, and
                                        whoever checks the log (``--print log-vkey``)
    /run/evidence/public/witnesses      the witnesses the publisher pushes to (the stack's own
                                        at http://witness:7380); an operator's edits are kept

The same formats as ``make up`` writes under ``.stack/`` (devstack.stack); each volume is its
own, so a service mounts only the secrets it uses. Secret files are 0600 and owned by
``--owner`` (the image's USER), since the services refuse a key that others may read; the
directories named by ``--writable`` (the witness's state) are made the owner's too.

Each run prints the admin API key; ``--print api-key`` or ``--print log-vkey`` prints one
value and makes nothing. Exit 2, with the reason, when what is there cannot be used (a log
key named for another log, a verifier key that is not the signer's, a keys file the API would
refuse): every service that needs a key waits for this one to succeed, so the stack does not
start on it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from evidence_contract.note import (
    SIG_COSIGNATURE_V1, NoteError, format_skey, format_vkey, generate_signer, parse_skey,
)
from evidence_contract.tlog import DEFAULT_LOG_NAME

ROOT = Path("/run/evidence")
WITNESS_NAME = "witness.evidence-store.local"  # the name `make up` gives the stack's witness
WITNESS_URL = "http://witness:7380"
ADMIN_KEY_NAME = "compose-admin"


class InitError(Exception):
    """What is in the volumes cannot be used as it is; the message says what to do."""


def paths(root: Path) -> dict[str, Path]:
    """Every file the init makes, by name, under ``root`` (one directory per volume)."""
    return {"log.skey": root / "log" / "log.skey",
            "witness.skey": root / "witness" / "witness.skey",
            "api-keys.json": root / "api" / "api-keys.json",
            "log.vkey": root / "public" / "log.vkey",
            "witnesses": root / "public" / "witnesses"}


def create(path: Path, text: str, mode: int, owner: tuple[int, int] | None) -> bool:
    """Write ``text`` to ``path`` unless it exists; True when written. The file appears
    whole or not at all (written aside, then linked: a link never replaces a file)."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if owner is not None:
            os.chown(tmp, *owner)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _secret(path: Path, owner: tuple[int, int] | None) -> None:
    """A key brought by the operator gets the mode and owner the services accept."""
    path.chmod(0o600)
    if owner is not None:
        os.chown(path, *owner)


def _skey(path: Path):
    try:
        return parse_skey(path.read_text(encoding="ascii").strip())
    except (OSError, UnicodeDecodeError, NoteError) as e:
        raise InitError(f"{path} holds no note signer key ({e}); remove it and run the init "
                        f"again to make a new one") from None


def log_key(p: dict[str, Path], name: str, owner: tuple[int, int] | None) -> list[str]:
    """The log's signer key and its verifier key; what was made, by name."""
    made = []
    if create(p["log.skey"], format_skey(generate_signer(name)) + "\n", 0o600, owner):
        made.append("log.skey")
    _secret(p["log.skey"], owner)
    key = _skey(p["log.skey"])
    if key.name != name:
        raise InitError(f"{p['log.skey']} is the key of log {key.name!r}, not {name!r}: set "
                        f"EVIDENCE_LOG_NAME={key.name} (a log keeps its key and its name)")
    vkey = format_vkey(key.verifier)
    if create(p["log.vkey"], vkey + "\n", 0o644, owner):
        made.append("log.vkey")
    elif p["log.vkey"].read_text(encoding="ascii").strip() != vkey:
        raise InitError(f"{p['log.vkey']} is not the verifier key of {p['log.skey']}: "
                        f"remove it and run the init again, which writes the right one")
    return made


def witness_key(p: dict[str, Path], owner: tuple[int, int] | None) -> list[str]:
    """The stack's witness key, and the witnesses file naming it, when absent."""
    made = []
    text = format_skey(generate_signer(WITNESS_NAME, SIG_COSIGNATURE_V1)) + "\n"
    if create(p["witness.skey"], text, 0o600, owner):
        made.append("witness.skey")
    _secret(p["witness.skey"], owner)
    key = _skey(p["witness.skey"])
    listed = ("# The witnesses the log pushes its checkpoints to (docs/witnessing.md):\n"
              "# <witness verifier key> <submission URL>, one a line; re-read on change.\n"
              f"{format_vkey(key.verifier)} {WITNESS_URL}\n")
    if create(p["witnesses"], listed, 0o644, owner):
        made.append("witnesses")
    return made


def api_key(p: dict[str, Path], owner: tuple[int, int] | None) -> tuple[list[str], str]:
    """The API keys file with one admin key, when absent; and that key, refused here when
    the API would refuse it at start-up (api.auth.key_weakness)."""
    from api.auth import key_weakness

    entry = {"name": ADMIN_KEY_NAME, "key": secrets.token_urlsafe(32), "streams": ["*"],
             "admin": True}
    made = create(p["api-keys.json"], json.dumps([entry], indent=2) + "\n", 0o600, owner)
    _secret(p["api-keys.json"], owner)
    key = admin_key(p)
    weakness = key_weakness(key)
    if weakness is not None:
        raise InitError(f"{p['api-keys.json']}: the {ADMIN_KEY_NAME} key is too weak "
                        f"({weakness}); remove the file and run the init again")
    return (["api-keys.json"] if made else []), key


def admin_key(p: dict[str, Path]) -> str:
    """The key of the keys file's ``compose-admin`` entry (the one the init made)."""
    try:
        entries = json.loads(p["api-keys.json"].read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InitError(f"{p['api-keys.json']}: cannot read it ({e}); `docker compose up "
                        f"init` makes it") from None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == ADMIN_KEY_NAME:
            return str(entry.get("key"))
    raise InitError(f"{p['api-keys.json']} has no entry named {ADMIN_KEY_NAME!r}: the keys "
                    f"there are the operator's, read them in the file")


def run(root: Path, log_name: str, owner: tuple[int, int] | None,
        writable: list[Path]) -> tuple[list[str], str]:
    """Make what is missing under ``root``; (what was made, the admin API key)."""
    p = paths(root)
    made = log_key(p, log_name, owner) + witness_key(p, owner)
    more, key = api_key(p, owner)
    for d in writable:
        d.mkdir(parents=True, exist_ok=True)
        if owner is not None:
            os.chown(d, *owner)
    return made + more, key


def _owner(spec: str) -> tuple[int, int] | None:
    """The ``uid:gid`` of ``spec`` when this process may give files away (root), else None."""
    uid, _, gid = spec.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise InitError(f"--owner {spec!r}: expected uid:gid, numbers (the image's USER)")
    return (int(uid), int(gid)) if os.geteuid() == 0 else None


def _print(root: Path, what: str) -> None:
    p = paths(root)
    if what == "api-key":
        print(admin_key(p))
        return
    try:
        print(p["log.vkey"].read_text(encoding="ascii").strip())
    except OSError as e:
        raise InitError(f"{p['log.vkey']}: {e.strerror}; `docker compose up init` makes "
                        f"it") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="compose_init", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="where the volumes are mounted")
    ap.add_argument("--log-name", default=DEFAULT_LOG_NAME, help="the log's (and key's) name")
    ap.add_argument("--owner", default="65534:65534",
                    help="uid:gid the services run as (the image's USER)")
    ap.add_argument("--writable", type=Path, action="append", default=[],
                    help="a directory the services write (made the owner's)")
    ap.add_argument("--print", dest="show", choices=("api-key", "log-vkey"),
                    help="print one value and make nothing")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        if args.show:
            _print(args.root, args.show)
            return 0
        made, key = run(args.root, args.log_name, _owner(args.owner), args.writable)
    except InitError as e:
        print(f"init: {e}", file=sys.stderr)
        return 2
    print(f"init: made {', '.join(made)}" if made else "init: every key was there; kept")
    print(f"init: the admin API key (every stream): {key}")
    print("init: on the host: export EVIDENCE_API_KEY=$(docker compose run --rm -T init "
          "--print api-key)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
