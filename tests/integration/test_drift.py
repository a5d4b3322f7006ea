"""`evidence drift` and the projector's drift metrics against a real pipeline: calls through
the real Recorder to the fake provider, whose fingerprint and then served model change
mid-stream, sealed by the real writer, projected, served by the API."""

from __future__ import annotations

import json
import uuid

import openai
import pytest

import testing.fake_provider as fake
from projections.metrics import ProjectorMetrics
from tests.fixtures.audit import evidence
from tests.fixtures.log import wait_until

pytestmark = pytest.mark.integration
OLD_FP = fake.FINGERPRINT  # the fake's, before a test patches it


def chat(client, text):
    return client.chat.completions.create(model="gpt-4o", seed=1,
                                          messages=[{"role": "user", "content": text}])


class projector_with_metrics:
    """A second projector (its own schemas and group) over the pipeline's topics, whose
    metrics the test holds."""

    def __init__(self, cfg):
        import threading

        self.cfg, self.metrics = cfg, ProjectorMetrics()
        self.stop, self.error = threading.Event(), None
        self.thread = threading.Thread(target=self._run, name="drift-projector", daemon=True)

    def _run(self):
        from projections.service import Projector

        try:
            Projector(self.cfg, self.metrics).run(self.stop.is_set)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "projector did not stop within 30 s"
        if self.error is not None and exc[0] is None:
            raise self.error


@pytest.fixture
def drifted(make_pipeline, make_recorder, make_projection_config, fake_provider, monkeypatch):
    tag = uuid.uuid4().hex[:8]
    stream = f"drf{tag}:chat"
    p = make_pipeline(partitions=1)
    rec = make_recorder(p.topics, stream=stream)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=rec.http_client())
    for i in range(3):                                                   # #1-#3: fp_fake_2026
        chat(client, f"before {i}")
    monkeypatch.setattr(fake, "FINGERPRINT", f"fp_new_{tag}")
    for i in range(3):                                                   # #4-#6: the new one
        chat(client, f"after {i}")
    monkeypatch.setattr(fake, "RESPONSE_MODEL_SUFFIX", "-2026-12-01")
    for i in range(2):                                                   # #7-#8: another model
        chat(client, f"later {i}")
    rec.close()
    records = p.wait_records(stream, 8, timeout=60)
    env = {**p.env(), "EVIDENCE_PG_VIEWS_SCHEMA": p.projection.views_schema}
    return p, env, stream, tag, records


def drift(env, *args):
    out = evidence("drift", *args, env=env)
    assert out.returncode in (0, 3), out.stderr.decode()
    return out.returncode, out


def test_drift_names_the_change_points_and_the_records_on_both_sides(drifted,
                                                                     make_projection_config):
    p, env, stream, tag, records = drifted
    assert [r["seq"] for r in records] == list(range(1, 9))
    provider = records[0]["provider"]["name"]

    code, out = drift(env, "--stream", stream, "--format", "json")
    assert code == 3
    rep = json.loads(out.stdout)
    (m,) = rep["models"]
    assert (m["provider"], m["model"], m["records"]) == (provider, "gpt-4o", 8)
    assert m["fingerprints"] == sorted([OLD_FP, f"fp_new_{tag}"])
    assert m["served_models"] == ["gpt-4o-2026-07-01", "gpt-4o-2026-12-01"]
    got = [(c["kind"], c["old"], c["new"], c["before"]["seq"], c["after"]["seq"])
           for c in m["changes"]]
    assert got == [("fingerprint", OLD_FP, f"fp_new_{tag}", 3, 4),
                   ("served_model", "gpt-4o-2026-07-01", "gpt-4o-2026-12-01", 6, 7)]
    fp_change = m["changes"][0]
    assert fp_change["before"]["stream"] == fp_change["after"]["stream"] == stream
    assert fp_change["at"] == records[3]["occurred_at"] and fp_change["before"]["sealed"] == \
        records[2]["occurred_at"]
    # Four values a half: reported, never flagged under the default five.
    assert rep["shifts_flagged"] == 0 and {s["measure"] for s in m["shifts"]} >= {
        "latency_ms", "input_tokens", "output_tokens", "response_length"}

    code, out = drift(env, "--stream", f"drf{tag}:*")
    text = out.stdout.decode()
    assert code == 3 and f"{stream}@3" in text and f"{stream}@4" in text
    assert f"{OLD_FP} -> fp_new_{tag}" in text and "2 change points" in text

    # The window after the fingerprint changed and before the model did: nothing moved.
    code, out = drift(env, "--stream", stream, "--since", records[3]["occurred_at"],
                      "--until", records[6]["occurred_at"], "--format", "json")
    assert code == 0 and json.loads(out.stdout)["found"] is False

    # Against a baseline before it, the same window shows the change and its last record.
    code, out = drift(env, "--stream", stream, "--since", records[3]["occurred_at"],
                      "--until", records[6]["occurred_at"], "--baseline-since",
                      records[0]["occurred_at"], "--baseline-until", records[3]["occurred_at"],
                      "--format", "json")
    rep = json.loads(out.stdout)
    (m,) = rep["models"]
    assert code == 3 and rep["compared"] == "baseline" and m["baseline_records"] == 3
    assert [(c["before"]["seq"], c["after"]["seq"]) for c in m["changes"]] == [(3, 4)]

    # Usage errors are 2; a key refused, 1.
    assert evidence("drift", "--stream", stream, "--threshold", "0", env=env).returncode == 2
    assert evidence("drift", "--stream", stream, "--baseline-since", "2026-01-01",
                    env=env).returncode == 2
    assert evidence("drift", "--stream", stream, "--baseline-since", "2026-02-01",
                    "--baseline-until", "2026-01-01", env=env).returncode == 2
    refused = evidence("drift", env={**env, "EVIDENCE_API_KEY": "x" * 40})
    assert refused.returncode == 1 and b"401" in refused.stderr

    # The projector counts both changes as it projects them, timed at the first record after.
    cfg = make_projection_config(p.topics, log_name=p.projection.log_name,
                                 log_signing_key_file=p.projection.log_signing_key_file)
    labels = {"provider": provider, "model": "gpt-4o"}
    with projector_with_metrics(cfg) as second:
        reg = second.metrics.registry
        wait_until("the drift metrics", lambda: reg.get_sample_value(
            "evidence_model_served_model_changes_total", labels) == 1, 60, 0.1)
    assert reg.get_sample_value("evidence_model_fingerprint_changes_total", labels) == 1
    assert reg.get_sample_value("evidence_model_last_fingerprint_change_timestamp_seconds",
                                labels) == records[3]["occurred_at_us"] / 1e6
    assert reg.get_sample_value("evidence_model_last_served_model_change_timestamp_seconds",
                                labels) == records[6]["occurred_at_us"] / 1e6
