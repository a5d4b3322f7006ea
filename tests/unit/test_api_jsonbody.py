"""api.jsonbody: strict JSON for request bodies, and the I-JSON integer range."""

import json

import pytest

from api.jsonbody import I_JSON_MAX_INT, JsonBodyError, i_json_problem, loads_strict


@pytest.mark.parametrize("raw", [
    b'{"a": 1, "b": [1.5, "x", null, true], "c": {"d": "\\u00e9\\ud83d\\ude00"}}',
    b"[]", b'"text"', b"0", b"-1e300", json.dumps([[[[1]]]]).encode(),
    json.dumps({"n": 2**64}).encode(),  # JSON, if not I-JSON: i_json_problem's to say
])
def test_plain_json_parses_as_json_loads_does(raw):
    assert loads_strict(raw) == json.loads(raw)


@pytest.mark.parametrize("raw, words", [
    (b'{"a": NaN}', "NaN is not a JSON number"),
    (b'[Infinity]', "Infinity is not a JSON number"),
    (b'[-Infinity]', "-Infinity is not a JSON number"),
    (b'[1e400]', "1e400 is too large"),
    (b'[-1E+999]', "too large"),
    (b'{"a": "\\ud800"}', "$.a: the string contains a lone surrogate"),
    (b'["ok", "\\udc00x"]', "$[1]: the string contains a lone surrogate"),
    (b'{"\\ud800": 1}', "member name contains a lone surrogate"),
    (b"[" * 65 + b"]" * 65, "nested more than 64"),
    (b"[" * 5000 + b"]" * 5000, "nested more than 64"),
    (b'{"a": ' * 3000 + b"1" + b"}" * 3000, "nested more than 64"),
    (b"\xff\xfe", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b"[" + b"1" * 5000 + b"]", "not valid JSON"),
])
def test_what_json_loads_would_let_through_is_refused_with_where(raw, words):
    with pytest.raises(JsonBodyError, match=None) as e:
        loads_strict(raw)
    assert words in str(e.value)


def test_depth_64_is_accepted():
    assert loads_strict(b"[" * 64 + b"]" * 64) is not None


@pytest.mark.parametrize("value, problem", [
    ({"seed": I_JSON_MAX_INT}, None),
    ({"seed": -I_JSON_MAX_INT}, None),
    ({"seed": True, "f": 1e300}, None),
    ({"model": {"seed": {"value": I_JSON_MAX_INT + 1}}}, "$.model.seed.value"),
    ([0, [-(2**64)]], "$[1][0]"),
])
def test_i_json_problem_names_the_first_integer_out_of_range(value, problem):
    found = i_json_problem(value)
    assert (found is None) if problem is None else found.startswith(problem + ":")
