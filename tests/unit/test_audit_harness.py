"""The divergence harness's pure parts: sampling, the reconstruction comparison, the tally."""

import base64
import copy

from audit.harness import LiveTally, Sampler, Served, check_reconstruction, summary
from evidence_contract import encode, output_digest, split_record
from tests.unit.test_audit_verify import chain


def served_for(message: bytes, record) -> Served:
    body, seal = record["body"], record["seal"]
    b64 = lambda b: None if b is None else base64.b64encode(bytes(b)).decode()  # noqa: E731
    hexd = lambda b: None if b is None else bytes(b).hex()  # noqa: E731
    return Served(200, bytes(body["response_bytes"]),
                  {"Evidence-Stream": body["stream"], "Evidence-Seq": str(seal["seq"]),
                   "Evidence-Record-Digest": seal["record_digest"].hex()},
                  200, {"stream": body["stream"], "seq": seal["seq"],
                        "event_id": body["event_id"], "occurred_at_us": seal["occurred_at"],
                        "outcome": body["outcome"], "prev_digest": hexd(seal["prev_digest"]),
                        "record_digest": hexd(seal["record_digest"]),
                        **{k: hexd(body[k]) for k in ("content_key", "response_digest",
                                                      "output_digest", "input_digest",
                                                      "prompt_digest")},
                        "request_b64": b64(body["request_bytes"]),
                        "response_b64": b64(body["response_bytes"]),
                        "error_b64": b64(body["error_bytes"]), "record_b64": b64(message),
                        "input_b64": b64(body["input_bytes"]),
                        "prompt_b64": b64(body["prompt_bytes"]),
                        "model_id": body["model_id"], "fingerprint": body["fingerprint"],
                        "request_length": body["request_length"],
                        "response_length": body["response_length"],
                        "truncated": body["capture"]["truncated"],
                        "replay": {"seed": int(body["replay"]["seed"])
                                   if body["replay"]["seed"] is not None else None}})


def test_sampler_keeps_n_uniformly_and_is_repeatable():
    a, b = Sampler(3, seed=1), Sampler(3, seed=1)
    for i in range(100):
        a.offer(i)
        b.offer(i)
    assert a.kept == b.kept and len(a.kept) == 3 and a.seen == 100
    everything = Sampler(None)
    for i in range(5):
        everything.offer(i)
    assert everything.kept == [0, 1, 2, 3, 4]


def test_reconstruction_identical_and_each_difference_named():
    [rec] = chain("s", 1)
    message = encode("EvidenceRecord", rec)
    stored, record = split_record(message)
    ok = served_for(message, record)
    assert check_reconstruction(message, stored, record, ok) == []

    bad = Served(200, b"other", ok.replay_headers, 200, ok.record_json)
    assert any("/replay served" in p for p in check_reconstruction(message, stored, record, bad))
    js = dict(ok.record_json, record_digest="00" * 32)
    bad = Served(*(ok.replay_status, ok.replay_body, ok.replay_headers), 200, js)
    [p] = check_reconstruction(message, stored, record, bad)
    assert "record_digest" in p
    for change, named in (({"replay": {"seed": 41}}, "replay.seed"),
                          ({"truncated": True}, "truncated"),
                          ({"request_length": 1}, "request_length")):
        bad = Served(*(ok.replay_status, ok.replay_body, ok.replay_headers), 200,
                     dict(ok.record_json, **change))
        [p] = check_reconstruction(message, stored, record, bad)
        assert named in p
    bad = Served(404, None, {}, 404, None)
    assert len(check_reconstruction(message, stored, record, bad)) == 2


def test_live_tally_by_model_and_fingerprint():
    [rec] = chain("s", 1)
    body = copy.deepcopy(rec["body"])
    body["output_digest"] = output_digest("x")
    t = LiveTally(output_text=lambda b: "x" if b["response_bytes"] == body["response_bytes"]
                  else "y")
    t.add(body, 1, bytes(body["response_bytes"]))
    t.add(body, 2, b"changed")
    t.add(body, 3, None, "exit 1")
    d = t.to_dict()
    assert d["overall"]["runs"] == 3 and d["overall"]["errors"] == 1
    assert d["overall"]["response_match_rate"] == 0.5
    assert d["overall"]["output_match_rate"] == 0.5
    assert list(d["by_model_id"]) == [str(body["model_id"])]
    assert [x["seq"] for x in d["divergent"]] == [2, 3]
    lines = summary({"sampled": 3, "log_records": 3, "stream": None,
                     "reconstruction": {"checked": 3, "failed": 0, "failures": []}, "live": d})
    assert lines[-1] == "RECONSTRUCTION OK" and any("response match 50.0%" in x for x in lines)
