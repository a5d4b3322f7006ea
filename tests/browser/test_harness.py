"""The browser harness itself, on a page the API has always served (the OpenAPI page, /docs).

What the page tests rely on, shown on a page whose faults are known: Debian's Chromium renders
a page of the real API under uvicorn; a request for an asset outside the deployment is caught
and aborted (FastAPI's /docs asks a CDN for Swagger UI); a script the page runs shows as a
dialog; and axe-core, injected into the page, reports a serious violation where there is one
(FastAPI's /docs page has no ``lang``), so a clean report on the pages means something.
"""

from __future__ import annotations

import uuid

import pytest

from api import Keyring, Settings
from tests.fixtures.browser import axe_violations
from tools.browser import CHROMIUM

pytestmark = pytest.mark.integration


@pytest.fixture
def api_url(database_url, make_readmodel, make_api_server):
    readmodel = make_readmodel(heartbeat=False)
    key = f"browser-{uuid.uuid4().hex}"
    return make_api_server(Settings(database_url, Keyring([("k", key, ["*"])]),
                                    views_schema=readmodel.views))


def test_debian_chromium_renders_the_api_docs_and_outside_assets_are_refused(api_url, make_tab,
                                                                          browser):
    assert CHROMIUM.exists() and browser.version.split(".")[0].isdigit()
    tab = make_tab(api_url)
    response = tab.open("/docs")
    assert response.status == 200
    assert tab.page.title() == "evidence-store API - Swagger UI"
    # Swagger UI's script and stylesheet live on a CDN: asked for, refused, never loaded.
    assert any("swagger-ui" in url for url in tab.outside), tab.outside
    assert tab.page.evaluate("typeof window.SwaggerUIBundle") == "undefined"


def test_a_script_the_page_runs_is_seen_as_a_dialog(api_url, make_tab):
    tab = make_tab(api_url)
    tab.open("/docs")
    assert tab.dialogs == []
    tab.page.evaluate("() => alert('ran')")  # returns once the fixture dismissed it
    assert tab.dialogs == ["alert: ran"]


def test_axe_reports_a_serious_violation_where_there_is_one(api_url, make_tab):
    tab = make_tab(api_url)
    tab.open("/docs")
    violations = axe_violations(tab.page)
    assert any(v.startswith("html-has-lang (serious)") for v in violations), violations
    # Only serious and critical ones are reported: /docs has no h1 either (moderate).
    assert not any(v.startswith("page-has-heading-one") for v in violations), violations
