import pytest

from api.verify import Original, VerifyResult, verify
from evidence_contract import output_digest, response_digest

TEXT = "Hello, world! — ünïcode ✓"
BODY = b'{"id":"x","choices":[{"message":{"content":"Hello"}}]}'


def original(**overrides):
    fields = dict(stream="acme:chat", seq=7, output_digest=output_digest(TEXT),
                  response_digest=response_digest(BODY), deterministic=True, seed=42,
                  model_version="gpt-4o-mini-2024-07-18", outcome="COMMITTED")
    fields.update(overrides)
    return Original(**fields)


def test_matching_output_is_a_match_with_no_reason():
    r = verify(original(), replayed_output=TEXT)
    assert (r.match, r.reason, r.compared) == (True, None, "output_digest")
    assert r.original_hash == r.replay_hash == output_digest(TEXT).hex()
    assert (r.stream, r.seq, r.deterministic) == ("acme:chat", 7, True)
    assert r.model_version == "gpt-4o-mini-2024-07-18"
    assert r.outcome == "match"


def test_output_hash_uses_the_0x04_domain_prefix_over_utf8():
    import hashlib

    r = verify(original(), replayed_output=TEXT)
    assert r.replay_hash == hashlib.sha256(b"\x04" + TEXT.encode("utf-8")).hexdigest()


def test_matching_response_bytes_compare_response_digest():
    r = verify(original(), replayed_response=BODY)
    assert (r.match, r.compared) == (True, "response_digest")
    assert r.original_hash == response_digest(BODY).hex()


def test_deterministic_mismatch_says_to_rerun_against_the_same_model_version():
    r = verify(original(), replayed_output=TEXT + " ")
    assert r.match is False and r.outcome == "mismatch"
    assert r.original_hash == output_digest(TEXT).hex() != r.replay_hash
    assert "deterministic" in r.reason and "seed 42" in r.reason
    assert "same model version (gpt-4o-mini-2024-07-18)" in r.reason


def test_a_seed_from_the_numeric_column_is_named_exactly_at_any_size():
    from decimal import Decimal

    r = verify(original(seed=Decimal(2**64 + 1)), replayed_output="other")
    assert f"seed {2**64 + 1})" in r.reason


def test_deterministic_mismatch_without_a_recorded_model_says_so():
    r = verify(original(model_version=None), replayed_output="other")
    assert "same model version (not recorded)" in r.reason


def test_non_deterministic_mismatch_says_drift_is_expected():
    r = verify(original(deterministic=False, seed=None), replayed_output="other")
    assert r.match is False and r.deterministic is False
    assert "no seed" in r.reason and "drift is expected" in r.reason


def test_response_mismatch_points_at_replayed_output():
    r = verify(original(), replayed_response=BODY + b" ")
    assert r.match is False and "replayed_output" in r.reason


def test_record_without_output_digest_is_no_digest_with_null_original_hash():
    r = verify(original(output_digest=None, outcome="FAILED"), replayed_output=TEXT)
    assert (r.match, r.original_hash, r.outcome) == (False, None, "no_digest")
    assert r.replay_hash == output_digest(TEXT).hex()
    assert "no output_digest" in r.reason and "FAILED" in r.reason
    assert "replayed_response_b64" in r.reason  # it still has a response digest


def test_record_of_an_unknown_wire_format_says_its_output_digest_cannot_be_computed():
    r = verify(original(output_digest=None, endpoint="https://api.example.com/v1/embeddings"),
               replayed_output=TEXT)
    assert (r.match, r.original_hash, r.outcome) == (False, None, "no_digest")
    assert "no output_digest" in r.reason
    assert "cannot be recomputed for this wire format" in r.reason
    assert "'/v1/embeddings'" in r.reason and "openai.chat" in r.reason


def test_record_of_a_known_wire_format_without_output_text_is_only_missing_its_digest():
    r = verify(original(output_digest=None,
                        endpoint="https://api.openai.com/v1/chat/completions"),
               replayed_output=TEXT)
    assert "no output_digest" in r.reason and "wire format" not in r.reason


def test_an_unknown_wire_format_does_not_stop_a_sealed_output_digest_from_comparing():
    r = verify(original(endpoint="https://llm.example/v2/generate"), replayed_output=TEXT)
    assert r.match is True and r.reason is None


def test_record_with_no_digest_at_all_says_there_is_nothing_to_compare():
    r = verify(original(output_digest=None, response_digest=None), replayed_response=BODY)
    assert r.outcome == "no_digest" and "no digest to compare at all" in r.reason


def test_empty_output_and_empty_response_are_ordinary_values():
    assert verify(original(output_digest=output_digest("")), replayed_output="").match
    assert verify(original(response_digest=response_digest(b"")), replayed_response=b"").match


@pytest.mark.parametrize("output, response", [(None, None), ("x", b"x")])
def test_neither_or_both_inputs_is_invalid_not_an_exception(output, response):
    r = verify(original(), replayed_output=output, replayed_response=response)
    assert r.match is False and r.compared is None and r.outcome == "invalid"
    assert "exactly one" in r.reason


@pytest.mark.parametrize("hostile", [
    dict(replayed_output=b"bytes not text"),
    dict(replayed_output=12),
    dict(replayed_output="\ud800 lone surrogate"),
    dict(replayed_response="text not bytes"),
    dict(replayed_response=[1, 2, 3]),
    dict(replayed_output=object()),
])
def test_hostile_inputs_return_a_result(hostile):
    r = verify(original(), **hostile)
    assert isinstance(r, VerifyResult) and r.match is False and r.reason


@pytest.mark.parametrize("record", [
    None, 42, "a string", object(), {"output_digest": output_digest(TEXT)},
    original(output_digest="not bytes"), original(output_digest=b"short"),
    original(output_digest=output_digest(TEXT) + b"x"),
])
def test_hostile_records_never_match_and_never_raise(record):
    r = verify(record, replayed_output=TEXT)
    assert isinstance(r, VerifyResult) and r.match is False
    assert r.original_hash is None


def test_attributes_of_the_wrong_type_are_reported_as_unknown():
    r = verify(original(stream=3, seq=True, deterministic="yes", model_version=1),
               replayed_output=TEXT)
    assert (r.stream, r.seq, r.deterministic, r.model_version) == (None, None, None, None)
    assert r.match is True


def test_a_broken_record_object_is_reported_not_raised():
    class Exploding:
        def __getattr__(self, name):
            raise RuntimeError("boom")

    r = verify(Exploding(), replayed_output=TEXT)
    assert r.match is False and "could not run" in r.reason


def test_memoryview_and_bytearray_responses_are_accepted():
    assert verify(original(), replayed_response=bytearray(BODY)).match
    assert verify(original(), replayed_response=memoryview(BODY)).match


def test_to_dict_has_the_api_fields():
    d = verify(original(), replayed_output=TEXT).to_dict()
    assert list(d) == ["match", "original_hash", "replay_hash", "compared", "deterministic",
                       "model_version", "stream", "seq", "reason"]
