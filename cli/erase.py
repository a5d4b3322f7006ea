"""``evidence erase --subject ID [--request-id R] [--reason TEXT] [--seal-if-none] [--wait [S]]``.

Erases a subject by crypto-shredding (docs/erasure.md): ``server.erasure.erase_subject``
destroys every live data key of the subject in the key store the environment names
(``EVIDENCE_KEY_STORE``, ``EVIDENCE_KEK_FILE``; the local stack's ``.stack/env`` sets both),
then sends the erasure request to the writer through intake, which signs a receipt with the
log key onto ``evidence.erasures``. A subject with no keys is not erased and gets no receipt
(exit 4) unless ``--seal-if-none`` asks for one.

Output: stdout has the request id (one line, for scripts); with ``--wait`` (default 30 s) the
signed receipt note follows it, once projected (``erasures`` in the read model at
``EVIDENCE_DATABASE_URL``). What was done (when, the key ids destroyed) goes to stderr.

The same ``--request-id`` again is the same erasure: safe to retry (one receipt).

Exit codes: 0 erased (and, with --wait, receipted); 1 failed: the key store, Kafka or the
database could not be used, or no receipt within the wait (the keys may be destroyed: retry
with the same request id); 2 usage error; 3 refused: the subject is under a legal hold
(nothing erased); 4 the subject has no keys to erase (nothing erased, no receipt).
"""

from __future__ import annotations

import argparse
import sys
import time

from .settings import SettingsError, add_options, resolve
from .tlog import CliError, fail, stack_env

HELP = "erase a subject: destroy its keys, get a receipt signed by the log"

EXIT_REFUSED = 3
EXIT_NO_KEYS = 4
EPILOG = ("stdout: the request id, then (with --wait) the signed receipt; messages go to "
          "stderr. exit codes: 0 erased, 1 failed (key store, Kafka or database; retry with "
          "the same --request-id), 2 usage, 3 refused (a legal hold: nothing erased), 4 no "
          "keys to erase (nothing erased, no receipt; see --seal-if-none)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--subject", required=True, help="the subject id whose content to erase")
    p.add_argument("--request-id", metavar="R",
                   help="the erasure's request id (default: a new one); the same id again "
                        "is the same erasure")
    p.add_argument("--reason", metavar="TEXT", help="why (kept with the receipt, not signed)")
    p.add_argument("--seal-if-none", action="store_true",
                   help="when the subject has no keys, have a receipt sealed anyway (it "
                        "names no key); without it nothing is sealed (exit 4)")
    p.add_argument("--wait", nargs="?", type=float, const=30.0, default=None, metavar="S",
                   help="wait until the receipt is projected (default 30 s) and print it "
                        "after the request id")
    p.epilog = EPILOG
    add_options(p, "bootstrap", "topic_prefix", "database_url", "views_schema",
                note={"database_url": "with --wait", "views_schema": "with --wait"})


def wait_for_receipt(database_url: str, views: str, request_id: str, wait_s: float) -> bytes:
    """The projected receipt note of ``request_id``; ``CliError`` when none in time."""
    import psycopg

    deadline = time.monotonic() + wait_s
    while True:
        try:
            with psycopg.connect(database_url, connect_timeout=5) as conn:
                row = conn.execute(
                    f'select note from "{views}".erasures where request_id = %s limit 1',
                    (request_id,)).fetchone()
        except psycopg.errors.UndefinedTable:
            row = None  # a projection that has not made the table yet
        except psycopg.Error as e:
            raise CliError(1, f"cannot read the projection at EVIDENCE_DATABASE_URL: {e}") from e
        if row is not None:
            return bytes(row[0])
        if time.monotonic() >= deadline:
            raise CliError(1, f"no receipt of request {request_id} projected within "
                              f"{wait_s:.0f} s (the keys are destroyed; is the writer running "
                              f"with a log key? retry with --request-id {request_id})")
        time.sleep(0.2)


def run(args: argparse.Namespace) -> int:
    from evidence_contract.erasure import valid_request_id
    from evidence_contract.keys import KeyStoreError, LegalHold, valid_subject
    from evidence_contract import iso_micros
    from server.erasure import ErasureFailed, NothingToErase, erase_subject
    from server.keystore import from_env

    if not valid_subject(args.subject):
        return fail("erase", CliError(2, f"{args.subject!r} is not a subject id"))
    if args.request_id is not None and not valid_request_id(args.request_id):
        return fail("erase", CliError(2, f"{args.request_id!r} is not a request id "
                                         f"(1-200 of [A-Za-z0-9._:@/+=-])"))
    if args.wait is not None and not args.wait > 0:
        return fail("erase", CliError(2, "--wait takes a positive number of seconds"))
    env = stack_env()
    try:
        try:
            settings = resolve(args, env)
        except SettingsError as e:
            raise CliError(2, str(e)) from e
        if settings.need("bootstrap"):
            raise CliError(1, str(settings.need("bootstrap")))
        bootstrap = str(settings.bootstrap)
        try:
            store = from_env(env)
        except KeyStoreError as e:
            raise CliError(1, f"{e} (`make up` writes both to .stack/env)") from e
        try:
            req = erase_subject(store, {"bootstrap.servers": bootstrap}, args.subject,
                                args.request_id, args.reason,
                                topics=settings.connection.names,
                                seal_if_none=args.seal_if_none)
        except ValueError as e:
            raise CliError(2, str(e)) from e
        except LegalHold as e:  # before KeyStoreError, its base: nothing was destroyed
            raise CliError(EXIT_REFUSED, f"refused: {e}") from e
        except NothingToErase as e:
            raise CliError(EXIT_NO_KEYS, f"{e} (--seal-if-none for a receipt)") from e
        except (KeyStoreError, ErasureFailed) as e:
            raise CliError(1, str(e)) from e
        print(f"request {req.request_id}: erased at {iso_micros(req.erased_at)}, "
              f"{len(req.key_ids)} key(s) destroyed", file=sys.stderr)
        for k in req.key_ids:
            print(f"key {k}", file=sys.stderr)
        print(req.request_id, flush=True)
        if args.wait is None:
            return 0
        if settings.need("database_url"):
            raise CliError(1, f"--wait reads the projection; {settings.need('database_url')}")
        note = wait_for_receipt(str(settings.database_url), settings.views_schema,
                                req.request_id, args.wait)
    except CliError as e:
        return fail("erase", e)
    sys.stdout.write(note.decode("utf-8"))
    return 0
