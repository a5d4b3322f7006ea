"""``evidence demo``: the whole loop on the running stack, for a newcomer after ``make up``.

1. record  three calls with the official openai SDK through a ``evidence_client.Recorder`` against
           the fake provider of the checkout (``testing.fake_provider``, on 127.0.0.1);
2. wait    until the writer has sealed them and the projector made them queryable (API);
3. verify  ``POST /replay/verify``: the recorded output (MATCH), then another one (MISMATCH);
4. replay  stop the provider and replay a call through ``evidence_client.Replayer``: the SDK gets
           the recorded bytes from storage; an unrecorded call raises ``ReplayMiss``.

It uses the services ``make up`` started (writer, projector, API); settings come from
``EVIDENCE_*`` variables, else ``.stack/env``. Exit 0 when the loop went round, 1 when a
service could not be reached or did not answer in time (the message names its log).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from evidence_contract.errors import EvidenceError

from .settings import SettingsError, add_options, resolve, stack_env

HELP = "record, verify and replay a few calls on the running stack (what to look at next)"

EXIT_OK, EXIT_FAILED = 0, 1

DEFAULT_STREAM = "demo:quickstart"

# The three calls; the first is deterministic (a seed), so its verdicts show both reasons.
_CHAT = {"model": "gpt-4o-mini", "seed": 42, "temperature": 0,
         "messages": [{"role": "user", "content": "What does an evidence store keep?"}]}
_CHAT_STREAM = {"model": "gpt-4o-mini", "stream": True,
                "messages": [{"role": "user", "content": "Stream me a short answer."}]}
_RESPONSES = {"model": "gpt-4.1-mini", "input": "Summarise the record contract."}


class DemoError(EvidenceError):
    """A step could not be completed; the message says what to read or run."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = ("Settings default to $EVIDENCE_API_URL, $EVIDENCE_API_KEY, "
                "$EVIDENCE_KAFKA_BOOTSTRAP and $EVIDENCE_TOPIC_PREFIX, else to .stack/env "
                "(written by `make up`).\n\nexit codes: 0 the loop went round, 1 a service "
                "is unreachable or too slow (the message names its log)")
    p.add_argument("--stream", default=DEFAULT_STREAM,
                   help=f"stream to record into (default {DEFAULT_STREAM})")
    add_options(p, "api", "api_key", "bootstrap", "topic_prefix")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait for the records to be queryable (default 60)")


def _settings(args: argparse.Namespace) -> dict[str, str]:
    from devstack import StackConfig, read_env

    stack_cfg = StackConfig.from_env()
    stack = read_env(stack_cfg)

    try:
        r = resolve(args, stack_env(stack))
    except SettingsError as e:
        raise DemoError(str(e)) from e
    s = {"api": r.api, "key": r.api_key, "bootstrap": r.bootstrap, "prefix": r.topic_prefix,
         # The key replays are verified against: the stack's, as `make up` wrote it.
         "log_key": _log_key(stack),
         "logs": str(stack_cfg.services_dir), "kafka_log": str(stack_cfg.kafka_log)}
    missing = [name for name, var in (("API URL", "api"), ("API key", "key"),
                                      ("Kafka bootstrap", "bootstrap")) if not s[var]]
    if missing:
        raise DemoError(f"no {', '.join(missing)}: run `make up` (it writes .stack/env), or "
                        f"set EVIDENCE_API_URL, EVIDENCE_API_KEY and EVIDENCE_KAFKA_BOOTSTRAP")
    return s


def _log_key(stack: dict[str, str]) -> Any:
    """The log's verifier key as the operator holds it (``cli.tlog.log_key`` without asking
    the API), or None."""
    from cli.tlog import CliError, log_key

    try:
        return log_key(None, stack, None)[0]
    except CliError as e:
        raise DemoError(str(e)) from e


def _say(text: str = "") -> None:
    print(text, flush=True)


def _log(s: dict[str, str], service: str) -> str:
    return os.path.join(s["logs"], f"{service}.log")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except DemoError as e:
        print(f"evidence demo: {e}", file=sys.stderr)
        return EXIT_FAILED


def _run(args: argparse.Namespace) -> int:
    _check_requirements()
    import httpx

    s = _settings(args)
    stream = args.stream
    api = httpx.Client(base_url=s["api"], headers={"Authorization": f"Bearer {s['key']}"},
                       timeout=10)
    with api:
        before = _head_seq(api, s, stream)
        _say("evidence demo: record -> seal -> query -> verify -> replay, on the running stack")
        _say(f"  API {s['api']}  Kafka {s['bootstrap']}  intake {s['prefix']}.intake  "
             f"stream {stream}")
        _say()
        calls = _record(s, stream)
        first = _seal_and_project(api, s, stream, before, calls.keys, args.timeout)
        _verify_step(api, s, stream, first["seq"], calls.texts[0])
        _replay(s, stream, calls.provider_url, calls.first_response, calls.texts[0])

    _next_steps(s, stream, first["seq"], calls.texts[0])
    return EXIT_OK


def _check_requirements() -> None:
    """What the demo needs beside the CLI: the openai SDK, httpx and the checkout's fake
    provider; a :class:`DemoError` saying how to get the one missing."""
    try:
        import httpx  # noqa: F401
        import openai  # noqa: F401
    except ImportError as e:
        raise DemoError(f"the demo uses the official openai SDK and httpx ({e}); "
                        f"`make up` installs them, or: pip install openai") from e
    try:
        import testing.fake_provider  # noqa: F401
    except ImportError as e:
        raise DemoError("the demo runs from a checkout of evidence-store: its fake provider "
                        f"(testing/) is in no installed package ({e}); in a checkout, run "
                        "`make up`, then `.venv/bin/evidence demo`") from e


@dataclass(frozen=True)
class _Recorded:
    """What step 1 recorded: each call's output text and content key, in the order of the
    calls, the provider's first response body and where the provider was."""

    texts: list[str]
    keys: list[str]
    first_response: bytes
    provider_url: str


def _record(s: dict[str, str], stream: str) -> _Recorded:
    """1. Record: the official SDK, with the Recorder's client as its http_client."""
    import openai

    from evidence_client import Recorder
    from testing.fake_provider import FakeProvider

    fake = FakeProvider().start()
    try:
        _say(f"1. record: 3 calls with the openai SDK through evidence_client.Recorder "
             f"(fake provider at {fake.url})")
        recorder = Recorder(s["bootstrap"], stream, topic_prefix=s["prefix"],
                            delivery_timeout_ms=10_000, close_timeout=15)
        with recorder:
            client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-demo",
                                   max_retries=0, http_client=recorder.http_client())
            with client:
                texts = [
                    client.chat.completions.create(**_CHAT).choices[0].message.content,
                    "".join(c.choices[0].delta.content or ""
                            for c in client.chat.completions.create(**_CHAT_STREAM)
                            if c.choices),
                    client.responses.create(**_RESPONSES).output_text,
                ]
        seen = fake.wait_for(3)
    finally:
        fake.stop()
    keys = [hashlib.sha256(b"\x00" + x.request_body).hexdigest() for x in seen]
    for label, text, key in zip(("chat.completions", "chat.completions stream=True",
                                 "responses"), texts, keys):
        _say(f"   {label:<29} -> {text!r}")
        _say(f"   {'':<29}    content_key {key[:16]}… (sha256 of 0x00 + request bytes)")
    m = recorder.metrics.snapshot()
    if m["delivered"] + m["resent"] < 3:
        raise DemoError(
            f"only {m['delivered'] + m['resent']} of 3 captures reached Kafka at "
            f"{s['bootstrap']} (the rest wait in the gateway's local spool and are sent by "
            f"the next Recorder on this stream); is Kafka up? read {s['kafka_log']}")
    return _Recorded(texts, keys, seen[0].response_body, fake.url)


def _seal_and_project(api: Any, s: dict[str, str], stream: str, before: int, keys: list[str],
                      timeout: float) -> dict[str, Any]:
    """2. Wait until the writer sealed the calls and the projector made them queryable; the
    first call's record."""
    _say()
    _say(f"2. seal and project: waiting until the API answers for them "
         f"(writer, projector; up to {timeout:.0f} s)")
    t0 = time.monotonic()
    records = _wait_records(api, s, stream, before, keys, timeout)
    for key, label in zip(keys, ("chat", "stream", "responses")):
        r = records[key]
        _say(f"   {label:<9} sealed as {stream} seq {r['seq']}: record_digest "
             f"{r['record_digest'][:16]}… chained to {r['prev_digest'][:16]}…")
    _say(f"   queryable after {time.monotonic() - t0:.1f} s")
    return records[keys[0]]


def _verify_step(api: Any, s: dict[str, str], stream: str, seq: int, text: str) -> None:
    """3. Verify a re-execution against the sealed output digest: the recorded output
    matches, another one does not."""
    from cli.replay import _verdict

    _say()
    _say("3. verify (POST /replay/verify): the recorded output, then a different one")
    match = _verify(api, s, stream, seq, text)
    mismatch = _verify(api, s, stream, seq, text + " (but re-executed)")
    for answer in (match, mismatch):
        _say("\n".join("   " + line for line in _verdict(answer).splitlines()))
    if not match["match"] or mismatch["match"]:
        raise DemoError(f"unexpected verdicts (match={match['match']}, "
                        f"mismatch={mismatch['match']}); read {_log(s, 'api')}")


def _head_seq(api: Any, s: dict[str, str], stream: str) -> int:
    import httpx

    try:
        r = api.get(f"/streams/{stream}")
    except httpx.HTTPError as e:
        raise DemoError(f"cannot reach the API at {s['api']} ({e}); is the stack up? run "
                        f"`make up`, and read {_log(s, 'api')}") from e
    if r.status_code == 404:
        return 0
    if r.status_code == 401:
        raise DemoError("the API rejected the key; use the one in .stack/env "
                        "(EVIDENCE_API_KEY) or pass --api-key")
    if r.status_code != 200:
        raise DemoError(f"the API answered {r.status_code} for /streams/{stream}: "
                        f"{r.text[:200]}; read {_log(s, 'api')}")
    return int(r.json()["head_seq"])


def _wait_records(api: Any, s: dict[str, str], stream: str, after: int, keys: list[str],
                  timeout: float) -> dict[str, dict[str, Any]]:
    """The first record after seq ``after`` for each content key, once all are queryable."""
    import httpx

    deadline = time.monotonic() + timeout
    found: dict[str, dict[str, Any]] = {}
    while True:
        try:
            r = api.get(f"/streams/{stream}/records", params={"after_seq": after, "limit": 100})
            page = r.json().get("records", []) if r.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            page = []
        for rec in page:
            if rec["content_key"] in keys and rec["content_key"] not in found:
                found[rec["content_key"]] = rec
        if len(found) == len(keys):
            return found
        if time.monotonic() > deadline:
            raise DemoError(
                f"{len(found)} of {len(keys)} captures are queryable after {timeout:.0f} s. "
                f"They reached Kafka; the writer seals them into {s['prefix']}.log "
                f"(read {_log(s, 'writer')}) and the projector copies the log into "
                f"PostgreSQL (read {_log(s, 'projector')}); `evidence dev status` shows what "
                f"runs")
        if len(page) == 100:
            after = page[-1]["seq"]
        time.sleep(0.2)


def _verify(api: Any, s: dict[str, str], stream: str, seq: int, output: str) -> dict[str, Any]:
    r = api.post("/replay/verify", json={"stream": stream, "seq": seq, "replayed_output": output})
    if r.status_code != 200:
        raise DemoError(f"POST /replay/verify answered {r.status_code}: {r.text[:200]}; "
                        f"read {_log(s, 'api')}")
    return r.json()


def _replay(s: dict[str, str], stream: str, provider_url: str, sent: bytes, text: str) -> None:
    """4. Replay from storage: the provider is gone; the SDK still gets its answer."""
    import openai

    from evidence_client import EvidenceUnverified, Replayer, ReplayMiss

    _say()
    _say("4. replay: the provider is stopped; the same call through "
         "evidence_client.Replayer(api_url, api_key).http_client()")
    # Verified: each replayed answer is checked from the record's bytes to a checkpoint
    # signed by the stack's log key; without that key file, the API's key is pinned on first
    # use (and the demo says so).
    if s["log_key"] is None:
        _say("   (no EVIDENCE_LOG_VERIFIER_KEY_FILE: pinning the API's log key on first use)")
    with Replayer(s["api"], s["key"], stream=stream, log_key=s["log_key"],
                  trust_on_first_use=s["log_key"] is None) as replayer:
        client = openai.OpenAI(base_url=provider_url + "/v1", api_key="unused", max_retries=0,
                               http_client=replayer.http_client())
        with client:
            try:
                raw = client.chat.completions.with_raw_response.create(**_CHAT)
            except EvidenceUnverified as e:
                raise DemoError(f"the recorded answer failed its check, so it was not replayed "
                                f"({type(e).__name__}: {e}); `evidence audit` says what was "
                                f"altered and `evidence projections rebuild "
                                f"--accept-differences` restores the read side from the log"
                                ) from e
            answer = raw.parse().choices[0].message.content
            same = raw.http_response.content == sent
            headers = raw.http_response.headers
            _say(f"   -> {answer!r}, served from storage: the earliest record with its "
                 f"content_key ({headers.get('evidence-stream')} seq {headers.get('evidence-seq')})")
            _say(f"   byte for byte what the provider sent: {'yes' if same else 'NO'}")
            _say(f"   verified before it was handed out: in the checkpoint "
                 f"{headers.get('evidence-verified')} signed by the log key")
            if not same or answer != text:
                raise DemoError("the replayed response differs from the recorded one; "
                                f"read {_log(s, 'api')}")
            try:
                client.chat.completions.create(**{**_CHAT, "seed": 43})
                raise DemoError("an unrecorded call was answered; it must raise ReplayMiss")
            except ReplayMiss as e:
                _say(f"   an unrecorded call (seed 43) raises ReplayMiss: "
                     f"{str(e).split(';')[-1].strip()}")
            except openai.APIConnectionError as e:  # SDKs that wrap transport errors
                if not isinstance(e.__cause__, ReplayMiss):
                    raise
                _say("   an unrecorded call (seed 43) raises ReplayMiss: "
                     "replay never calls the provider")


def _next_steps(s: dict[str, str], stream: str, seq: int, text: str) -> None:
    steps = [
        ("source .stack/env", "the stack's settings, for the commands below"),
        (f".venv/bin/evidence replay --stream {stream} --seq {seq} --output {text!r}",
         "verify from the shell: exit 0 MATCH, 3 MISMATCH"),
        (f'curl -s -H "Authorization: Bearer $EVIDENCE_API_KEY" '
         f'"$EVIDENCE_API_URL/streams/{stream}/records/{seq}?include=bytes"',
         "the sealed record, digests and bytes"),
        (f"{s['api']}/docs", "every route (OpenAPI)"),
        (".venv/bin/evidence projections status", "generations, positions, lag"),
        (f"{s['logs']}/{{writer,projector,api}}.log", "the services' logs"),
        ("cli/demo.py, evidence_client/recorder.py, writer/core.py, projections/fold.py, "
         "evidence_client/replay.py", "the code of this loop; docs in ARCHITECTURE.md"),
    ]
    _say()
    _say("Look next:")
    for command, why in steps:
        _say(f"  {command}")
        _say(f"      {why}")
