"""``projections.rebuild.joined``: a prefix's and a tail's summaries as one."""

import hashlib

from projections.rebuild import joined


def d(x: str) -> bytes:
    return hashlib.sha256(x.encode()).digest()


PREFIX = ({"a": (3, d("a-chain"), d("a-bytes")), "b": (1, d("b-chain"), d("b-bytes"))},
          {"a": d("a-body"), "b": d("b-body")})
TAIL = ({"a": (2, d("a-chain2"), d("a-bytes2")), "c": (4, d("c-chain"), d("c-bytes"))},
        {"a": d("a-body2"), "c": d("c-body")})


def test_counts_add_and_every_stream_of_either_part_is_there():
    sums, bodies = joined(PREFIX, TAIL)
    assert {s: v[0] for s, v in sums.items()} == {"a": 5, "b": 1, "c": 4}
    assert set(bodies) == {"a", "b", "c"}
    assert all(len(v[1]) == len(v[2]) == 32 for v in sums.values())


def test_the_same_parts_join_alike_and_any_changed_digest_changes_the_join():
    assert joined(PREFIX, TAIL) == joined(PREFIX, TAIL)
    altered_tail = ({**TAIL[0], "a": (2, d("a-chain2"), d("other"))}, TAIL[1])
    assert joined(PREFIX, altered_tail)[0]["a"] != joined(PREFIX, TAIL)[0]["a"]
    assert joined(PREFIX, altered_tail)[0]["b"] == joined(PREFIX, TAIL)[0]["b"]
    altered_prefix = (PREFIX[0], {**PREFIX[1], "b": d("other")})
    assert joined(altered_prefix, TAIL)[1]["b"] != joined(PREFIX, TAIL)[1]["b"]


def test_a_stream_only_in_the_prefix_is_not_one_only_in_the_tail():
    only = {"s": (1, d("x"), d("y"))}
    assert joined((only, None), ({}, None))[0] != joined(({}, None), (only, None))[0]


def test_no_bodies_in_either_part_joins_to_none():
    assert joined((PREFIX[0], None), (TAIL[0], None))[1] is None
    assert joined(({}, {}), ({}, {})) == ({}, {})
