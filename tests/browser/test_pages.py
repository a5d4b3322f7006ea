"""The pages in a real headless browser (Debian's Chromium), over a real pipeline.

Calls are recorded through the fake provider (one of them answers with a ``<script>``),
sealed by the real writer, projected, checkpointed and served by the API under uvicorn; a
person's steps are then taken in Chromium: log in with the key, find a record by its event
id, read its verification, download its bundle, verify replays, audit the stream, ask for
fidelity; and with SQL, alter the read model under the pages. axe-core checks every page.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import openai
import psycopg
import pytest

from api import Keyring, Settings
from evidence_contract.bundle import Trust, parse_bundle, verify_bundle
from tests.fixtures.browser import Tab, axe_violations
from tests.fixtures.log import wait_until

pytestmark = pytest.mark.integration

SCRIPT = "<script>alert('xss')</script><img src=x onerror=alert(2)>"


@dataclass
class Site:
    p: Any                      # tests.fixtures.pipeline.Pipeline
    stream: str
    records: list[dict[str, Any]]
    sent: list[bytes]           # the response bodies, as the provider sent them

    def page_of(self, seq: int) -> str:
        return f"/ui/streams/{self.stream}/records/{seq}"


def chat(client: Any, text: str, seed: int) -> bytes:
    return client.chat.completions.with_raw_response.create(
        model="gpt-4o", seed=seed,
        messages=[{"role": "user", "content": text}]).http_response.content


@pytest.fixture
def site(make_pipeline, make_recorder, fake_provider, request) -> Site:
    """Two calls on a stream of this test (the second's answer holds a script), sealed,
    projected and covered by a signed checkpoint."""
    stream = f"pages:{request.node.name[-30:].replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.5"})
    recorder = make_recorder(p.topics, stream=stream)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    sent = [chat(client, "question 1", 1), chat(client, SCRIPT, 2)]
    recorder.close()
    records = p.wait_records(stream, 2)

    def covered() -> bool:
        r = p.api.get(f"/streams/{stream}/checkpoint")
        return r.status_code == 200 and int(r.text.split("\n")[1]) >= 2

    wait_until(f"a checkpoint of {stream} covering 2", covered, 60, 0.2)
    return Site(p, stream, records, sent)


def log_in(tab: Tab, key: str) -> None:
    tab.open("/ui/login")
    tab.page.fill("#key", key)
    tab.page.click("main form button[type=submit]")
    tab.page.wait_for_url(tab.origin + "/ui/")


def steps(tab: Tab) -> list[tuple[str, str]]:
    """The record page's verification steps: (class, title) each."""
    return [(li.get_attribute("class"), li.inner_text().split(":")[0].strip())
            for li in tab.page.query_selector_all("ol.steps > li")]


def sql(site: Site, statement: str, *args: Any) -> None:
    views = site.p.projection.views_schema
    with psycopg.connect(site.p.projection.database_url, autocommit=True) as conn:
        conn.execute(statement.replace("{views}", f'"{views}"'), args)


def test_a_key_finds_a_record_by_event_id_its_steps_hold_and_a_tampered_row_is_shown(
        site, make_tab, tmp_path):
    tab = make_tab(site.p.api_url)
    log_in(tab, site.p.api_key)
    first = site.records[0]
    tab.page.fill("#q", first["event_id"])
    tab.page.press("#q", "Enter")
    tab.page.wait_for_url(tab.origin + site.page_of(1))
    assert tab.page.text_content("h1").strip() == f"Record {site.stream} #1"
    shown = steps(tab)
    assert shown and all(cls in ("pass", "skip") for cls, _ in shown), shown
    assert sum(cls == "pass" for cls, _ in shown) >= 4, shown
    assert "pass" in tab.page.get_attribute("main .verdict", "class")

    # The bundle the page offers is the record with its proofs: it verifies offline.
    with tab.page.expect_download() as download:
        tab.page.click("text=Download the evidence bundle")
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    doc = json.loads(path.read_text())
    verified = verify_bundle(parse_bundle(doc), Trust(site.p.log_key, (), 0))
    assert (verified.stream, verified.seq) == (site.stream, 1)
    assert verified.decoded["seal"]["record_digest"].hex() == first["record_digest"]
    assert verified.body["response_bytes"] == site.sent[0]
    assert verified.body["response_digest"].hex() == first["response_digest"]

    # Alter the response in the read model: the page says so, in red.
    sql(site, "update {views}.records set response_bytes = response_bytes || 'x'::bytea "
              "where stream = %s and seq = 1", site.stream)
    tab.page.reload()
    shown = steps(tab)
    assert shown[0][0] == "fail", shown
    assert "fail" in tab.page.get_attribute("main .verdict", "class")
    assert tab.outside == [] and tab.dialogs == []


def test_a_response_holding_a_script_shows_as_text_and_runs_nothing(site, make_tab):
    tab = make_tab(site.p.api_url)
    log_in(tab, site.p.api_key)
    tab.open(site.page_of(2))
    text = tab.page.inner_text("main")
    assert SCRIPT in text  # the characters, as text: in the request and in the response
    assert tab.page.query_selector("main script") is None
    assert tab.page.query_selector("main img[src=x]") is None
    assert tab.dialogs == [] and tab.outside == []


def verify(tab: Tab, **form: str) -> str:
    tab.open("/ui/verify")
    for name, value in form.items():
        if name == "response":
            tab.page.set_input_files("#response", value)
        else:
            tab.page.fill(f"#{name}", value)
    tab.page.click("main form button[type=submit]")
    tab.page.wait_for_selector("#verdict, #problem")
    return tab.page.inner_text("main")


def test_verify_a_matching_and_a_mismatching_replay_as_the_route_answers(site, make_tab,
                                                                         tmp_path):
    tab = make_tab(site.p.api_url)
    log_in(tab, site.p.api_key)
    first = site.records[0]
    text = verify(tab, stream=site.stream, seq="1", output="echo: question 1 ✓")
    assert tab.page.inner_text("#verdict").strip() == "MATCH"
    assert first["output_digest"] in text

    wrong = "echo: question 1 ✗\nand a second line"
    text = verify(tab, event_id=first["event_id"], output=wrong)
    assert tab.page.inner_text("#verdict").strip() == "MISMATCH"
    api = site.p.api.post("/replay/verify", json={"event_id": first["event_id"],
                                                   "replayed_output": wrong}).json()
    assert tab.page.inner_text("#reason") == f"Reason: {api['reason']}"
    assert api["replay_hash"] in text and api["original_hash"] in text

    # The response's bytes, uploaded as a file: compared with the response digest.
    sent = tmp_path / "response.json"
    sent.write_bytes(site.sent[0])
    verify(tab, stream=site.stream, seq="1", response=str(sent))
    assert tab.page.inner_text("#verdict").strip() == "MATCH"
    assert "response_digest" in tab.page.inner_text("main")

    # On BIJOTEL's basis, a record captured at the wire has no claim: the route says so.
    tab.open("/ui/verify")
    tab.page.fill("#event_id", first["event_id"])
    tab.page.fill("#output", "echo: question 1 ✓")
    tab.page.select_option("#basis", "bijotel")
    tab.page.click("main form button[type=submit]")
    tab.page.wait_for_selector("#problem")
    assert "carries no bijotel.replay.output_hash claim" in tab.page.inner_text("#problem")

    # A form that names no record is answered on the page, never a 5xx.
    verify(tab, output="x")
    assert "Name the record" in tab.page.inner_text("#problem")
    assert tab.outside == [] and tab.dialogs == []


def test_a_record_outside_the_keys_streams_is_not_found(site, make_tab, make_api_server,
                                                        database_url):
    narrow = f"narrow-{uuid.uuid4().hex}"
    p = site.p
    settings = Settings(database_url, Keyring([("narrow", narrow, ["elsewhere:*"])]),
                        views_schema=p.projection.views_schema, log_name=p.projection.log_name,
                        log_key=p.log_key, kafka_bootstrap=p.projection.bootstrap,
                        topic_prefix=p.topics.names.prefix)
    url = make_api_server(settings)
    tab = make_tab(url)
    log_in(tab, narrow)
    for path in (site.page_of(1), f"/ui/streams/{site.stream}",
                 f"/ui/search?q={site.records[0]['event_id']}",
                 f"/ui/fidelity?stream={quote(site.stream)}&seq=1"):
        r = tab.open(path)
        assert r.status == 404, path
        assert "not found" in tab.page.inner_text("main").lower(), path
        assert site.stream not in tab.page.inner_text("main"), path
    verify(tab, stream=site.stream, seq="1", output="echo: question 1 ✓")
    assert "visible to this API key" in tab.page.inner_text("#problem")
    assert tab.page.query_selector("#verdict") is None


def audit(tab: Tab, stream: str, first: str = "", last: str = "") -> str:
    tab.open(f"/ui/audit?stream={quote(stream)}")
    tab.page.fill("#first", first)
    tab.page.fill("#last", last)
    tab.page.click("main form button[type=submit]")
    # The progress page reloads itself (a Refresh header, no script) until the audit ends.
    tab.page.wait_for_selector("#verdict, #audit-error", timeout=60_000)
    return tab.page.inner_text("main")


def test_audit_a_stream_with_progress_and_its_findings_named(site, make_tab):
    tab = make_tab(site.p.api_url)
    log_in(tab, site.p.api_key)
    text = audit(tab, site.stream)
    assert tab.page.inner_text("#verdict").strip() == "Clean: no findings"
    assert "Records checked\n2 (seq 1–2)" in text or "2 (seq 1–2)" in text

    sql(site, "update {views}.records set model_id = 'not-the-model' "
              "where stream = %s and seq = 2", site.stream)
    text = audit(tab, site.stream)
    assert "1 finding" in tab.page.inner_text("#verdict")
    assert "projection_altered" in tab.page.inner_text("#findings")
    # A range that leaves seq 2 out reports none of it.
    audit(tab, site.stream, first="1", last="1")
    assert tab.page.inner_text("#verdict").startswith("Clean: no findings in seq 1–1")
    assert tab.outside == [] and tab.dialogs == []


def test_fidelity_of_a_record_and_of_an_uploaded_manifest(site, make_tab, tmp_path):
    tab = make_tab(site.p.api_url)
    log_in(tab, site.p.api_key)
    tab.open(f"/ui/fidelity?event_id={site.records[0]['event_id']}")
    api = site.p.api.get(f"/streams/{site.stream}/records/1/fidelity").json()
    text = tab.page.inner_text("main")
    for mode in ("log_replay", "live_reexecution"):
        assert f"Level: {api[mode]['level']}" in text
        for gap in api[mode]["missing_evidence"]:
            assert gap["reason"] in text
    manifest = tmp_path / "run.json"
    manifest.write_text(json.dumps(api["live_reexecution"]["manifest"]))
    tab.page.set_input_files("#manifest", str(manifest))
    tab.page.click("main form[method=post] button[type=submit]")
    tab.page.wait_for_selector("section[aria-label=\"The manifest's fidelity\"]")
    shown = tab.page.inner_text("section[aria-label=\"The manifest's fidelity\"]")
    assert api["live_reexecution"]["manifest_sha256"] in shown
    for gap in api["live_reexecution"]["missing_evidence"]:
        assert gap["reason"] in shown

    tab.page.fill("#manifest_text", '{"kind": "not a manifest"}')
    tab.page.click("main form[method=post] button[type=submit]")
    tab.page.wait_for_selector("#problem")
    assert "not a valid evidence.replay-runtime v1 manifest" in tab.page.inner_text("#problem")


def test_every_main_page_passes_the_accessibility_check(site, make_tab):
    """axe-core's serious and critical violations, on every page, light and dark, at a
    phone's width and a desktop's."""
    for scheme, width in (("light", 1280), ("dark", 390)):
        tab = make_tab(site.p.api_url, color_scheme=scheme,
                       viewport={"width": width, "height": 800})
        tab.open("/ui/login")
        problems = {"login": axe_violations(tab.page)}
        log_in(tab, site.p.api_key)
        pages = {"streams": "/ui/", "stream": f"/ui/streams/{site.stream}",
                 "record": site.page_of(1), "script record": site.page_of(2),
                 "verify": "/ui/verify", "fidelity": f"/ui/fidelity?stream={quote(site.stream)}"
                                                     f"&seq=1",
                 "not found": site.page_of(99)}
        for name, path in pages.items():
            tab.open(path)
            problems[name] = axe_violations(tab.page)
        verify(tab, stream=site.stream, seq="1", output="something else")
        problems["verify result"] = axe_violations(tab.page)
        audit(tab, site.stream)
        problems["audit result"] = axe_violations(tab.page)
        bad = {name: found for name, found in problems.items() if found}
        assert bad == {}, f"{scheme} at {width}px: {bad}"
        assert tab.outside == [] and tab.dialogs == []


def test_the_screenshot_tool_writes_every_main_page(site, browser, tmp_path):
    from tools.screenshots import PAGES, SCHEMES, take

    written = take(browser, site.p.api_url, site.p.api_key, tmp_path, site.stream)
    assert sorted(p.name for p in written) == sorted(
        f"{page}-{scheme}.png" for page in PAGES for scheme in SCHEMES)
    for path in written:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
