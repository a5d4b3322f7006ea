"""Rebuild while the API serves traffic, over HTTP: ``evidence projections rebuild`` runs as a
subprocess while a client hammers record lookups and replay verifies; no request fails, every
answer is the answer from before, and afterwards the projection's checksums equal the log's."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from api import Keyring, Settings
from tests.fixtures.log import running_projector, wait_until

pytestmark = pytest.mark.integration

EVIDENCE = str(Path(sys.executable).parent / "evidence")
STREAMS = {"a": 1200, "b": 800, "c": 400}


def requests_to_make() -> list[tuple[str, str, dict | None]]:
    """(method, path, json body) of every request the client repeats."""
    out: list[tuple[str, str, dict | None]] = []
    for s, n in STREAMS.items():
        for seq in (1, n // 2, n):
            out.append(("GET", f"/streams/{s}/records/{seq}", None))
            out.append(("POST", "/replay/verify", {"stream": s, "seq": seq,
                                                    "replayed_output": "ok"}))
            out.append(("POST", "/replay/verify", {"stream": s, "seq": seq,
                                                    "replayed_output": "not ok"}))
        out.append(("GET", f"/streams/{s}", None))
    return out


class Hammer(threading.Thread):
    """Repeats the requests until stopped; keeps every (time, request, status, body)."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.url, self.key = url, key
        self.stop = threading.Event()
        self.answers: list[tuple[float, int, int, bytes]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        reqs = requests_to_make()
        with httpx.Client(base_url=self.url, timeout=10,
                          headers={"Authorization": f"Bearer {self.key}"}) as c:
            while not self.stop.is_set():
                for i, (method, path, body) in enumerate(reqs):
                    try:
                        r = c.request(method, path, json=body)
                        self.answers.append((time.monotonic(), i, r.status_code, r.content))
                    except httpx.HTTPError as e:
                        self.errors.append(f"{method} {path}: {e!r}")


def flags(cfg) -> list[str]:
    return ["--database-url", cfg.database_url, "--bootstrap", cfg.bootstrap,
            "--topic-prefix", cfg.topics.names.prefix, "--meta-schema", cfg.meta_schema,
            "--views-schema", cfg.views_schema, "--generation-prefix", cfg.generation_prefix]


def sql_checksums(cfg) -> dict[str, bytes]:
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return dict(conn.execute(
            f'select stream, sha256(string_agg(record_digest, \'\'::bytea order by seq)) '
            f'from "{cfg.views_schema}".records group by stream').fetchall())


def live(cfg) -> str:
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return conn.execute(f'select generation from "{cfg.meta_schema}".live').fetchone()[0]


def test_rebuild_under_http_traffic_fails_no_request_and_changes_no_answer(
        projection_config, topics, produce_chain, make_api_server, database_url):
    cfg = projection_config
    recs = produce_chain(topics, streams=STREAMS, response=os.urandom(1024))
    total = sum(STREAMS.values())
    key = f"k-{uuid.uuid4().hex}"
    with running_projector(cfg):
        def projected() -> bool:
            try:
                return sum(n for n in _counts(cfg).values()) == total
            except psycopg.errors.UndefinedTable:
                return False

        wait_until(f"{total} records projected", projected, 45, 0.1)
        url = make_api_server(Settings(database_url, Keyring([("t", key, ["*"])]),
                                       views_schema=cfg.views_schema))
        old = live(cfg)
        hammer = Hammer(url, key)
        hammer.start()
        try:
            wait_until("a first round of answers",
                       lambda: len(hammer.answers) >= len(requests_to_make()), 20)
            started = time.monotonic()
            env = {k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_")}
            rebuild = subprocess.run([EVIDENCE, "projections", "rebuild", "--no-progress",
                                      *flags(cfg)], env=env, capture_output=True, text=True,
                                     timeout=50)
            ended = time.monotonic()
            n = len(hammer.answers)
            wait_until("answers after the swap", lambda: len(hammer.answers) > n + 50, 20)
        finally:
            hammer.stop.set()
            hammer.join(15)
        assert rebuild.returncode == 0, rebuild.stdout + rebuild.stderr
        assert "is live" in rebuild.stdout
        assert live(cfg) != old

        # No request failed, and every answer, before, during and after, is the first one.
        assert hammer.errors == []
        assert [a for a in hammer.answers if a[2] != 200] == []
        first: dict[int, bytes] = {}
        for _t, i, _status, body in hammer.answers:
            first.setdefault(i, body)
            assert body == first[i], f"request {requests_to_make()[i]} changed its answer"
        during = [a for a in hammer.answers if started <= a[0] <= ended]
        assert len(during) >= 10, f"only {len(during)} requests during the rebuild"
        assert any(a[0] > ended for a in hammer.answers)

        # The verifies answered as they should, and the projection equals the log.
        verdicts = {json.dumps(requests_to_make()[i][2]): json.loads(first[i])["match"]
                    for i in first if requests_to_make()[i][0] == "POST"}
        assert sorted(set(verdicts.values())) == [False, True]
        by_stream: dict[str, list[bytes]] = {}
        for r in sorted(recs, key=lambda r: (r.stream, r.seq)):
            by_stream.setdefault(r.stream, []).append(r.record_digest)
        assert sql_checksums(cfg) == {s: hashlib.sha256(b"".join(d)).digest()
                                      for s, d in by_stream.items()}
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
            for s, n in STREAMS.items():
                head = c.get(f"/streams/{s}").json()
                assert (head["head_seq"], head["record_count"]) == (n, n)
                assert head["head_digest"] == by_stream[s][-1].hex()


def _counts(cfg) -> dict[str, int]:
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return dict(conn.execute(f'select stream, count(*) from "{cfg.views_schema}".records '
                                 f'group by stream').fetchall())
