"""The spool: durable append and ordered replay, torn/corrupt tails, acks survive reopen."""

from __future__ import annotations

import os

import pytest

from evidence_client import Spool, SpoolLockedError
from evidence_client.spool import scan


def items(n: int, tag: str = "v") -> list[tuple[bytes, bytes]]:
    return [(b"stream:%d" % (i % 3), f"{tag}{i}".encode() * (i + 1)) for i in range(n)]


def pending(spool: Spool) -> list[tuple[bytes, bytes]]:
    return [(e.key, e.value) for e in spool.peek(10_000)]


def log_file(d) -> str:
    [p] = [p for p in os.listdir(d) if p.endswith(".log")]
    return os.path.join(d, p)


def test_append_and_replay_in_order_across_reopen(tmp_path):
    with Spool(tmp_path) as s:
        s.append_many(items(5))
        s.append(b"k", b"")
        assert len(s) == 6
    with Spool(tmp_path) as s:
        assert pending(s) == items(5) + [(b"k", b"")]
    assert [(e.key, e.value) for e in scan(tmp_path)] == items(5) + [(b"k", b"")]


def test_acknowledged_entries_are_not_resent_after_reopen(tmp_path):
    with Spool(tmp_path) as s:
        s.append_many(items(10))
        s.ack(4)
        assert pending(s) == items(10)[4:]
    with Spool(tmp_path) as s:
        assert pending(s) == items(10)[4:]
        s.ack(6)
        assert len(s) == 0 and s.pending_bytes == 0
        s.append(b"k", b"after")
    with Spool(tmp_path) as s:
        assert pending(s) == [(b"k", b"after")]
    # Fully acknowledged generations are compacted away.
    assert len([p for p in os.listdir(tmp_path) if p.endswith(".log")]) == 1


def test_peek_respects_limits_and_ack_after_append_keeps_order(tmp_path):
    with Spool(tmp_path) as s:
        s.append_many(items(5))
        batch = s.peek(2)
        s.append(b"late", b"x")
        s.ack(len(batch))
        assert pending(s) == items(5)[2:] + [(b"late", b"x")]
        assert len(s.peek(100, max_bytes=1)) == 1  # always at least one


@pytest.mark.parametrize("cut", [1, 5, 8, 11])
def test_a_torn_tail_is_detected_quarantined_and_not_replayed(tmp_path, cut):
    with Spool(tmp_path) as s:
        s.append_many(items(3))
    path = log_file(tmp_path)
    size = os.path.getsize(path)
    with open(path, "ab") as f:  # a crash in the middle of the next append
        f.write(b"\x00\x00\x00\x20\x12\x34\x56\x78payload!!"[:cut])
    with Spool(tmp_path) as s:
        assert pending(s) == items(3)
        assert s.torn_bytes == cut
        s.append(b"k", b"next")
    assert os.path.getsize(path) > size
    with Spool(tmp_path) as s:
        assert pending(s) == items(3) + [(b"k", b"next")]
    assert any(".torn-" in p for p in os.listdir(tmp_path))


def test_a_corrupt_frame_ends_the_valid_data(tmp_path):
    with Spool(tmp_path) as s:
        s.append_many(items(4))
    path = log_file(tmp_path)
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0xFF  # flip a byte inside the last frame's payload: its CRC fails
    open(path, "wb").write(bytes(data))
    with Spool(tmp_path) as s:
        assert pending(s) == items(3)
        assert s.torn_bytes > 0
    data = bytearray(open(path, "rb").read())
    data[0:4] = (2**31).to_bytes(4, "big")  # an absurd length: not a frame
    open(path, "wb").write(bytes(data))
    with Spool(tmp_path) as s:
        assert len(s) == 0


def test_one_owner_at_a_time(tmp_path):
    with Spool(tmp_path):
        with pytest.raises(SpoolLockedError):
            Spool(tmp_path).open()
    Spool(tmp_path).open().close()


def test_a_compaction_that_crashed_before_head_switched_is_ignored(tmp_path):
    with Spool(tmp_path) as s:
        s.append_many(items(3))
    # A half-made next generation (e.g. crash before HEAD was renamed) must not be read.
    (tmp_path / "spool-00000001.log").write_bytes(b"garbage")
    with Spool(tmp_path) as s:
        assert pending(s) == items(3)
    assert not (tmp_path / "spool-00000001.log").exists()


def test_nothing_is_lost_when_appends_and_acks_interleave(tmp_path):
    out: list[tuple[bytes, bytes]] = []
    with Spool(tmp_path) as s:
        for i in range(50):
            s.append(b"k", b"%d" % i)
            if i % 7 == 6:
                batch = s.peek(5)
                out += [(e.key, e.value) for e in batch]
                s.ack(len(batch))
        out += pending(s)
    assert out == [(b"k", b"%d" % i) for i in range(50)]


def test_an_ack_the_disk_refuses_is_recorded_by_the_next_one(tmp_path, monkeypatch):
    """Kafka has the entries, so memory gives them up; HEAD names them until a record
    succeeds, and a reopen before that resends them (duplicates the writer absorbs), never
    loses one."""
    from evidence_client import SpoolError

    with Spool(tmp_path / "s") as s:
        s.append_many([(b"k", b"v%d" % i) for i in range(3)])

        def refuse(*a, **k):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(s, "_write_head", refuse)
        with pytest.raises(SpoolError, match="No space left"):
            s.ack(2)
        assert [e.value for e in s.peek()] == [b"v2"] and s.head_behind
    with Spool(tmp_path / "s") as s:  # a crash (or close) before the next record
        assert [e.value for e in s.peek()] == [b"v0", b"v1", b"v2"]
        s.ack(1)
        monkeypatch.setattr(s, "_write_head", refuse)
        with pytest.raises(SpoolError):
            s.ack(1)
        monkeypatch.undo()
        s.ack(0)  # nothing new: records what the refused one gave up
        assert not s.head_behind
    with Spool(tmp_path / "s") as s:
        assert [e.value for e in s.peek()] == [b"v2"]


def test_a_compaction_the_disk_refuses_changes_nothing_on_disk(tmp_path, monkeypatch):
    from evidence_client import SpoolError
    from evidence_client import spool as spool_mod

    monkeypatch.setattr(spool_mod, "_COMPACT_BYTES", 1)  # every ack compacts
    with Spool(tmp_path) as s:
        s.append_many(items(4))
        real = spool_mod.fsync_dir

        def refuse(path):  # the new generation's directory entry cannot be made durable
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(spool_mod, "fsync_dir", refuse)
        with pytest.raises(SpoolError, match="cannot compact"):
            s.ack(2)
        monkeypatch.setattr(spool_mod, "fsync_dir", real)
        assert pending(s) == items(4)[2:]
    with Spool(tmp_path) as s:
        assert pending(s) == items(4)  # HEAD still names them: resent, none lost
        s.ack(3)  # compacts into the next generation
        assert pending(s) == items(4)[3:]
    with Spool(tmp_path) as s:
        assert pending(s) == items(4)[3:]
    assert os.path.basename(log_file(tmp_path)) != "spool-00000000.log"


def test_a_small_fully_acknowledged_file_is_kept_and_appended_to(tmp_path, monkeypatch):
    """A new generation costs four fsyncs under the owner's lock; a lone caller's every
    acknowledgement used to make one. A small, fully acknowledged file is kept."""
    from evidence_client import spool as spool_mod

    with Spool(tmp_path) as s:
        for round in range(3):
            s.append_many(items(5, tag=f"r{round}-"))
            s.ack(5)
            assert len(s) == 0 and s.pending_bytes == 0 and not s.head_behind
        assert os.path.basename(log_file(tmp_path)) == "spool-00000000.log"
        s.append(b"k", b"after")
    with Spool(tmp_path) as s:
        assert pending(s) == [(b"k", b"after")]
        monkeypatch.setattr(spool_mod, "_IDLE_COMPACT_BYTES", 1)
        s.ack(1)
    assert os.path.basename(log_file(tmp_path)) == "spool-00000001.log"
    with Spool(tmp_path) as s:
        assert pending(s) == []


def test_an_append_the_disk_cuts_short_leaves_the_next_ones_readable(tmp_path):
    """A full disk (here RLIMIT_FSIZE, as the chaos run's fault) lets an append write part of a
    frame. The next appends must still be read back as written: the file is open O_APPEND, so
    without cutting the partial frame off they landed after it while the index placed them at
    the old end, and every later read was out of frame (a chaos run resent 190 garbage
    captures and lost the real ones). Run in a process of its own: the limit is per process."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import resource, sys
        from evidence_client import Spool
        from evidence_client.errors import SpoolError
        s = Spool({str(tmp_path)!r}).open()
        s.append_many([(b"k%d" % i, b"v" * 1000) for i in range(5)])
        size = s.pending_bytes
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1500, hard))  # room for 1.5 frames
        try:
            s.append_many([(b"full-%d" % i, b"w" * 1000) for i in range(3)])
            sys.exit("the append past the limit did not fail")
        except SpoolError:
            pass
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        s.append_many([(b"after-%d" % i, b"x" * 1000) for i in range(3)])
        got = [(e.key.decode(), len(e.value)) for e in s.peek()]
        s.close()
        again = Spool({str(tmp_path)!r}).open()
        print(got == [(e.key.decode(), len(e.value)) for e in again.peek()], again.torn_bytes)
        print(got)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    same, got = out.stdout.splitlines()
    assert got == repr([(f"k{i}", 1000) for i in range(5)] + [(f"after-{i}", 1000) for i in range(3)])
    assert same == "True 0", "reopened, the spool reads the same and finds nothing torn"


def test_a_head_recorded_from_another_thread_never_goes_back(tmp_path):
    """``record_head(at)``: the journal's syncer writes HEAD outside the owner's lock, from a
    position read under it. A position a compaction has left behind, or one older than HEAD
    already says, is not written: HEAD naming a deleted generation would lose every entry."""
    with Spool(tmp_path) as s:
        s.append_many(items(6))
        s.release(2)
        early = s.head_position
        s.release(2)
        later = s.head_position
        s.record_head(later)
        assert not s.head_behind
        s.record_head(early)  # older than HEAD says: not written
        assert (tmp_path / "HEAD").read_text().split() == [str(later[0]), str(later[1])]
        s.release(2)
        s.compact()  # a new generation, HEAD switched to it
        s.record_head(later)  # of the old generation: not written
        assert (tmp_path / "HEAD").read_text().split() == [str(s.head_position[0]), "0"]
        s.append_many(items(2, "n"))
    with Spool(tmp_path) as s:
        assert pending(s) == items(2, "n")
