"""``devstack.ports.free_port``: outside the ephemeral range, bindable, never handed out twice
(CI saw the chaos stack's API exit with EADDRINUSE: its port, picked by ``bind(0)`` from the
ephemeral range, had become the local end of a client connection before the API bound it)."""

import socket

import pytest

from devstack import ports


def test_the_kernels_range_is_read_and_a_bad_file_falls_back(tmp_path):
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ports.ephemeral_range(f) == (40000, 50000)
    f.write_text("garbage")
    assert ports.ephemeral_range(f) == (32768, 60999)
    assert ports.ephemeral_range(tmp_path / "missing") == (32768, 60999)


@pytest.mark.parametrize("ephemeral, lowest, highest", [
    ((32768, 60999), 20000, 32767),    # Linux's default: below it
    ((20500, 60999), 61000, 65535),    # too little room below: above it
    ((1024, 65535), 1024, 65535),      # no room at all: anywhere, still checked
])
def test_candidates_stay_outside_the_ephemeral_range(ephemeral, lowest, highest):
    r = ports.candidate_range(ephemeral)
    assert (r.start, r.stop - 1) == (lowest, highest)


def test_free_ports_bind_sit_outside_the_ephemeral_range_and_are_never_repeated():
    low, high = ports.ephemeral_range()
    got = [ports.free_port() for _ in range(50)]
    assert len(set(got)) == 50
    for port in got:
        assert not low <= port <= high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_skipped(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    busy = held.getsockname()[1]
    spare = ports.free_port()
    ports._given.discard(spare)
    picks = iter([busy, busy, spare])
    monkeypatch.setattr(ports.random, "choice", lambda _r: next(picks))
    try:
        assert ports.free_port() == spare
    finally:
        held.close()


def test_no_free_port_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(ports, "_binds", lambda _port: False)
    with pytest.raises(OSError, match=r"no free port on 127\.0\.0\.1 in \d+-\d+ after 5 tries"):
        ports.free_port(attempts=5)
