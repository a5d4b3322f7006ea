"""What the bench says of the machine beside its figures: CPU steal, the share of the cores'
time the hypervisor gave to other guests over a timed part (``bench.services.host_ticks``,
``steal_pct``), and its speed at the start and the end of a run (``speed_probe``)."""

from bench.services import host_ticks, steal_pct


def test_steal_is_the_share_of_all_ticks_between_two_readings():
    assert steal_pct((10, 1000), (60, 2000)) == 5.0
    assert steal_pct((10, 1000), (10, 1400)) == 0.0
    assert steal_pct((0, 0), (1, 3)) == 33.3


def test_steal_is_unknown_without_two_readings_or_time_between_them():
    assert steal_pct(None, (1, 2)) is None
    assert steal_pct((1, 2), None) is None
    assert steal_pct((5, 100), (5, 100)) is None  # no tick passed: no share to give


def test_host_ticks_reads_the_machines_cpu_line():
    a = host_ticks()
    assert a is not None
    steal, total = a
    assert 0 <= steal <= total
    sum(i * i for i in range(200_000))  # some ticks pass
    b = host_ticks()
    assert b is not None and b[0] >= steal and b[1] >= total
    got = steal_pct(a, b)
    assert got is None or 0.0 <= got <= 100.0


def test_the_speed_probe_times_its_fixed_work_and_the_report_shows_it():
    from bench.report import _speed
    from bench.services import speed_probe

    got = speed_probe()
    assert set(got) == {"python_loop_ms", "sha256_mib_s"}
    assert got["python_loop_ms"] > 0 and got["sha256_mib_s"] > 0
    line = _speed({"start": got, "end": {"python_loop_ms": 1.5, "sha256_mib_s": 2000}})[1]
    assert f"at the start {got['python_loop_ms']} ms" in line
    assert "at the end 1.5 ms and 2,000 MiB/s" in line
    assert _speed({}) == []  # a run from before the probe
