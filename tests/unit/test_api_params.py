"""Every integer query and path parameter of the API takes decimal digits only (api.params):
found in the OpenAPI document, so a parameter added later is held to it too."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from api import Keyring, Settings, create_app
from api.params import digits_only

KEY = "k-0123456789abcdef0123456789abcdef"
FILL = {"stream": "acme:chat", "seq": "1", "content_key_hex": "ab" * 32, "trace_id": "ab" * 16}


def _app():
    # No lifespan: nothing connects; a request that passes validation answers 503.
    return create_app(Settings("postgresql://unused/unused", Keyring([("k", KEY, ["*"])])))


def _integer_params() -> list[tuple[str, str, str, str]]:
    spec = _app().openapi()
    found = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for p in op.get("parameters", []):
                schema = p["schema"]
                kinds = {s.get("type") for s in schema.get("anyOf", [schema])}
                if "integer" in kinds:
                    found.append((method.upper(), path, p["in"], p["name"]))
    return found


PARAMS = _integer_params()


def test_the_integer_parameters_are_found():
    assert ("GET", "/streams/{stream}/records", "query", "limit") in PARAMS
    assert ("GET", "/streams/{stream}/records/{seq}", "path", "seq") in PARAMS
    assert len(PARAMS) >= 10


@pytest.fixture(scope="module")
def client():
    return TestClient(_app(), raise_server_exceptions=False)


def _get(client, method, path, where, name, value):
    fill = {**FILL, **({name: quote(value, safe="")} if where == "path" else {})}
    url = path.format(**fill)
    params = {n: "1" for m, p, w, n in PARAMS if (m, p, w) == (method, path, "query")}
    if where == "query":
        params[name] = value
    return client.request(method, url, params=params, headers={"Authorization": f"Bearer {KEY}"})


@pytest.mark.parametrize("method, path, where, name", PARAMS)
@pytest.mark.parametrize("value", [" 1", "+1", "1_0", "1 ", "\u0661", "0x1", "1e3", "-1"])
def test_anything_but_digits_is_422_saying_so(client, method, path, where, name, value):
    r = _get(client, method, path, where, name, value)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_request"
    assert body["message"].startswith(f"{name}: must be a whole number written in decimal "
                                      f"digits only"), body["message"]


@pytest.mark.parametrize("method, path, where, name", PARAMS)
def test_digits_pass(client, method, path, where, name):
    r = _get(client, method, path, where, name, "1")
    assert "decimal digits" not in r.text, r.text  # 503 (no database) or a later check


def test_digits_only_leaves_other_values_alone():
    assert digits_only("0042") == "0042" and digits_only(None) is None and digits_only(7) == 7
    with pytest.raises(ValueError, match=r"not '9{40}…'$"):
        digits_only("9" * 50 + "x")
