"""Metric labels come from fixed sets, whatever methods and paths clients make up."""

from fastapi.testclient import TestClient

from api import Keyring, Settings, create_app
from api.metrics import METHODS, OTHER


def test_made_up_methods_and_paths_add_no_series():
    settings = Settings("postgresql://unused/unused",
                        Keyring([("k", "k-0123456789abcdef0123456789abcdef", ["*"])]))
    app = create_app(settings)  # no lifespan: /healthz never touches the database
    client = TestClient(app, raise_server_exceptions=False)
    for i in range(300):
        client.request(f"M{i:05d}", "/healthz")
        client.request("GET", f"/nope/{i}")
    text = app.state.metrics.render().decode()
    series = [ln for ln in text.splitlines() if ln.startswith("evidence_api_requests_total{")]
    labels = {ln.split('method="')[1].split('"')[0] for ln in series}
    assert labels <= METHODS | {OTHER}
    routes = {ln.split('route="')[1].split('"')[0] for ln in series}
    assert routes == {"/healthz", OTHER}
    assert len(series) <= 3 and len(text) < 20_000, len(text)
