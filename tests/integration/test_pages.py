"""The pages over HTTP against a real pipeline (Kafka, the writer, the projector, PostgreSQL,
the API under uvicorn): log in, the cookie's flags, a record's verification steps green, the
same record red once its projected row is altered in SQL, a record outside the key's scope
the same "not found" as a missing one, CSRF refusals, the bundle download verified, logout.

The session cookie is Secure, so an HTTP client keeps it to itself over http://127.0.0.1:
these tests send it back by hand, as the browser would over HTTPS (or to localhost)."""

from __future__ import annotations

import re
import uuid
from html import unescape

import httpx
import openai
import psycopg
import pytest

from evidence_contract.bundle import Trust, parse_bundle, verify_bundle
from tests.fixtures.log import wait_until

pytestmark = pytest.mark.integration

COOKIE = "evidence_session"
SCRIPT = "<script>alert('pwned')</script>"


def covered(p, stream: str, size: int) -> None:
    def ok() -> bool:
        r = p.api.get(f"/streams/{stream}/checkpoint")
        return r.status_code == 200 and int(r.text.split("\n")[1]) >= size

    wait_until(f"a checkpoint of {stream} covering {size}", ok, 60, 0.2)


def token(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


class Browser:
    """An HTTP client that keeps the session cookie as a browser over HTTPS would."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=20, follow_redirects=False)
        self.session: str | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        out = {"origin": self.url, **extra}
        if self.session:
            out["cookie"] = f"{COOKIE}={self.session}"
        return out

    def get(self, path: str, **kw) -> httpx.Response:
        return self.http.get(path, headers=self.headers(), **kw)

    def post(self, path: str, data: dict, **headers: str) -> httpx.Response:
        return self.http.post(path, data=data, headers=self.headers(**headers))

    def login(self, key: str) -> httpx.Response:
        r = self.post("/ui/login", {"csrf": token(self.get("/ui/login").text), "key": key,
                                    "next": "/ui/"})
        if r.status_code == 303:
            self.session = r.headers["set-cookie"].split(";")[0].split("=", 1)[1]
        return r


def steps(html: str) -> dict[str, str]:
    """Each verification step's title and its status class."""
    return {unescape(title): status for status, title in re.findall(
        r'<li class="(pass|fail|skip)">\s*<span class="step-title">([^<]+)</span>', html)}


def verdict(html: str) -> tuple[str, str]:
    m = re.search(r'<p class="notice verdict (\w+)" role="status">([^<]*)</p>', html)
    return m.group(1), unescape(m.group(2))


@pytest.fixture
def pages(make_pipeline, make_recorder, fake_provider, make_api_server, request):
    """Two calls on a stream of this test (the first asks for a ``<script>``), sealed,
    projected and checkpointed; the API also serves a key that may read only other streams."""
    from api import Keyring, Settings

    stream = f"pages:{request.node.name[-40:].replace('_', '-')}"
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.5"})
    recorder = make_recorder(p.topics, stream=stream)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    for n, text in ((1, SCRIPT), (2, "question 2")):
        client.chat.completions.create(model="gpt-4o", seed=n,
                                       messages=[{"role": "user", "content": text}])
    recorder.close()
    records = p.wait_records(stream, 2)
    covered(p, stream, 2)
    narrow = f"narrow-{uuid.uuid4().hex}"
    cfg = p.projection
    url = make_api_server(Settings(
        cfg.database_url, Keyring([("test", p.api_key, ["*"]), ("narrow", narrow, ["other:*"])]),
        views_schema=cfg.views_schema, log_name=cfg.log_name, log_key=p.log_key,
        kafka_bootstrap=cfg.bootstrap, topic_prefix=p.topics.names.prefix))
    return p, stream, records, url, narrow


def test_login_keeps_the_key_on_the_server(pages):
    p, _stream, _records, url, _narrow = pages
    b = Browser(url)
    assert b.get("/ui/").status_code == 303
    assert b.login("wrong-" + p.api_key).status_code == 401
    r = b.login(p.api_key)
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
    cookie = r.headers["set-cookie"]
    for flag in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/"):
        assert flag in cookie
    assert p.api_key not in cookie
    home = b.get("/ui/")
    assert home.status_code == 200 and p.api_key not in home.text
    assert "default-src 'self'" in home.headers["content-security-policy"]


def test_the_streams_page_shows_the_streams_proofs(pages):
    p, stream, _records, url, _narrow = pages
    b = Browser(url)
    b.login(p.api_key)
    html = b.get("/ui/").text
    row = re.search(rf'<th scope="row"><a href="/ui/streams/{re.escape(stream)}">.*?</tr>',
                    html, re.S).group(0)
    assert ">2</a>" in row and "whole" in row and "signed checkpoint at size" in row
    page = b.get(f"/ui/streams/{stream}")
    assert page.status_code == 200 and "No findings." in page.text


def test_a_record_is_found_by_event_id_and_its_steps_are_green(pages):
    p, stream, records, url, _narrow = pages
    b = Browser(url)
    b.login(p.api_key)
    found = b.get("/ui/search", params={"q": records[0]["event_id"]})
    assert found.status_code == 303
    assert found.headers["location"] == f"/ui/streams/{stream}/records/1"
    assert b.get("/ui/search", params={"q": records[1]["content_key"]}).headers["location"] \
        == f"/ui/streams/{stream}/records/2"
    page = b.get(found.headers["location"])
    assert page.status_code == 200
    s = steps(page.text)
    for title in ("The page's fields are the sealed record's", "Record bytes → leaf hash",
                  "Checkpoint signed by the pinned log key", "Inclusion proof",
                  "Content digests"):
        assert s[title] == "pass", (title, s)
    assert "fail" not in s.values()
    status, text = verdict(page.text)
    assert status == "pass" and text.startswith("VERIFIED")
    # The request asked for a <script>: it shows as text, never as markup.
    assert "<script" not in page.text
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page.text
    assert f'href="/ui/streams/{stream}/records/2"' in page.text  # the next record


def test_a_row_altered_in_sql_shows_a_failed_step(pages):
    p, stream, _records, url, _narrow = pages
    views = p.projection.views_schema
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        conn.execute(f'update "{views}".records set response_bytes = response_bytes || '
                     f"'x'::bytea where stream = %s and seq = 1", (stream,))
        conn.execute(f'update "{views}".records set model_id = %s where stream = %s and '
                     f'seq = 2', ("gpt-4o-cheaper", stream))
    b = Browser(url)
    b.login(p.api_key)
    for seq, named in ((1, "response bytes"), (2, "model_id")):
        page = b.get(f"/ui/streams/{stream}/records/{seq}")
        assert page.status_code == 200
        s = steps(page.text)
        assert s["The page's fields are the sealed record's"] == "fail", s
        assert named in page.text
        status, text = verdict(page.text)
        assert status == "fail" and text.startswith("NOT VERIFIED"), text
    detail = p.api.get(f"/streams/{stream}").json()
    assert (1, "projection_altered") in [(f["seq"], f["kind"]) for f in detail["findings"]]


def test_out_of_scope_is_the_same_not_found_as_missing(pages):
    p, stream, records, url, narrow = pages
    b = Browser(url)
    assert b.login(narrow).status_code == 303
    answers = [b.get(path) for path in (
        f"/ui/streams/{stream}/records/1", "/ui/streams/other:none/records/1",
        f"/ui/streams/{stream}", f"/ui/streams/{stream}/records/1/bundle",
        f"/ui/search?q={records[0]['event_id']}", f"/ui/search?q={stream}")]
    assert [r.status_code for r in answers] == [404] * 6
    mains = {re.search(r"<main.*</main>", r.text, re.S).group(0) for r in answers}
    assert len(mains) == 1
    assert stream not in b.get("/ui/").text


def test_forms_without_the_sessions_token_are_refused(pages):
    p, _stream, _records, url, _narrow = pages
    b = Browser(url)
    b.login(p.api_key)
    assert b.post("/ui/logout", {}, **{"content-type": "application/x-www-form-urlencoded"}
                  ).status_code == 403
    csrf = token(b.get("/ui/").text)
    assert b.post("/ui/logout", {"csrf": csrf}, origin="https://evil.example").status_code \
        == 403
    assert b.get("/ui/").status_code == 200  # still logged in
    bare = httpx.post(f"{url}/ui/login", data={"key": p.api_key}, headers={"origin": url})
    assert bare.status_code == 403 and "set-cookie" not in bare.headers


def test_the_bundle_download_verifies_with_the_log_key(pages):
    p, stream, _records, url, _narrow = pages
    b = Browser(url)
    b.login(p.api_key)
    r = b.get(f"/ui/streams/{stream}/records/2/bundle")
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    done = verify_bundle(parse_bundle(r.json()), Trust(p.log_key))
    assert (done.stream, done.seq) == (stream, 2)


def test_logout_deletes_the_session(pages):
    p, _stream, _records, url, _narrow = pages
    b = Browser(url)
    b.login(p.api_key)
    old = b.session
    r = b.post("/ui/logout", {"csrf": token(b.get("/ui/").text)})
    assert r.status_code == 303 and "Max-Age=0" in r.headers["set-cookie"]
    b.session = old  # the id presented again is dead on the server
    assert b.get("/ui/").status_code == 303


# -- an erased record, over a read model the test writes (tests/fixtures/readmodel.py) -----

ERASED_STREAM = "bank:pages"
ERASED_AT = 1_735_700_000_000_000


@pytest.fixture
def erased(database_url):
    """Two encrypted records whose keys were erased: the first with a receipt the log key
    signed, the second with one another key signed; the API pins the log key."""
    from api import Keyring, Settings
    from evidence_contract.erasure import ErasureRequest, receipt_text
    from evidence_contract.note import format_note, generate_signer, sign
    from evidence_contract.sealing import new_key_id
    from tests.fixtures.api_server import serve_api
    from tests.fixtures.readmodel import ReadModel
    from tests.integration.test_api_erased import _encrypted

    log = generate_signer("evidence-store.local/log")
    forger = generate_signer("evidence-store.local/log")
    key = f"pages-{uuid.uuid4().hex}"
    with ReadModel(database_url) as rm:
        for n, signer in ((1, log), (2, forger)):
            event = _encrypted()
            event["encryption"] = {**event["encryption"], "key_id": new_key_id()}
            rec = rm.add(ERASED_STREAM, **event)
            key_id = rec.body["encryption"]["key_id"]
            text = receipt_text(log.name, ErasureRequest(f"dsr-{n}", (key_id,), ERASED_AT))
            rm.conn.execute(
                f'insert into "{rm.gen}".erasures (request_id, key_id, erased_at, '
                f"erased_at_us, note, log_partition, log_offset) values (%s, %s, "
                f"to_timestamp(%s / 1e6), %s, %s, 0, %s)",
                (f"dsr-{n}", bytes.fromhex(key_id), ERASED_AT, ERASED_AT,
                 format_note(text, [sign(signer, text)]), n))
        settings = Settings(database_url, Keyring([("k", key, ["*"])]), views_schema=rm.views,
                            max_lag=10**9, log_key=log.verifier)
        with serve_api(settings) as url:
            yield url, key


def test_an_erased_record_shows_its_receipt_checked_and_no_body(erased):
    url, key = erased
    b = Browser(url)
    b.login(key)
    page = b.get(f"/ui/streams/{ERASED_STREAM}/records/1")
    assert page.status_code == 200
    html = unescape(page.text)
    assert "The content of this record was erased" in html and "dsr-1" in html
    assert re.search(r'class="badge good">✓</span> Erasure receipt: signed by '
                     r"evidence-store.local/log: request dsr-1", html), html
    assert "Erased: no body can be shown." in html and "shown as" not in html
    s = steps(page.text)
    assert s["Content digests"] == "skip" and "fail" not in s.values(), s
    forged = unescape(b.get(f"/ui/streams/{ERASED_STREAM}/records/2").text)
    assert "dsr-2" in forged
    assert re.search(r'class="badge bad">✗</span> Erasure receipt: it does not verify', forged)
