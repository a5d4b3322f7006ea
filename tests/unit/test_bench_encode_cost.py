"""bench/encode_cost.py runs and reports its four paths (no timing is asserted): encode (with
the compiled writer, always built here), the generated writer without it, the read-back path
that one replaced and fastavro, which it checks write the same bytes."""

from bench.encode_cost import measure


def test_the_encode_bench_reports_each_path_and_its_ratios():
    out = measure(size=64, rounds=1, number=5)
    assert set(out["us_per_capture"]) == {"encode", "generated", "write_and_read_back",
                                          "fastavro"}
    assert out["compiled"] is True and out["generated_over_encode"] > 0
    assert all(v > 0 for v in out["us_per_capture"].values())
    assert out["read_back_path_over_encode"] > 0 and out["fastavro_over_encode"] > 0
