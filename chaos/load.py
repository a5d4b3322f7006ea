"""One chaos load process: ``python -m chaos.load NAME OUT_FILE CONTROL_DIR``.

Environment: ``EVIDENCE_KAFKA_BOOTSTRAP``, ``EVIDENCE_TOPIC_PREFIX``, ``CHAOS_SPOOL_ROOT``,
``CHAOS_RATE`` (calls per second), ``CHAOS_STREAMS`` (streams per process),
``CHAOS_CLOCK_SKEW_S`` (shift this process's wall clock: a producer with a wrong clock).

Each call that returns appends ``<content_key hex> <stream>`` to OUT_FILE: the set of calls
the application was told succeeded. While ``CONTROL_DIR/disk-full`` exists the process may
not grow any file past 64 KiB (RLIMIT_FSIZE, SIGXFSZ ignored): its spool's disk is "full".
SIGTERM ends the load; the Recorder is closed and its metrics written to OUT_FILE.metrics.
The handler is installed before the Recorder is made, so a process told to stop while it starts
still closes its Recorder (and lets go of any spool it adopted) instead of dying mid-start.

``python -m chaos.load --recover SPOOL_ROOT``: what an application's next start does first, a
Recorder on the spool root adopting the spools that processes gone before it left, delivering
them and closing; prints its metrics as JSON.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

import httpx2

ANSWER = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
).encode()


def _skew_clock(seconds: float) -> None:
    real = time.time_ns
    shift = int(seconds * 1e9)
    time.time_ns = lambda: real() + shift  # type: ignore[assignment]


def recover(spool_root: str) -> dict[str, int]:
    """Adopt and deliver every spool under ``spool_root`` whose process is gone (a Recorder's
    start adopts them, its close delivers them); the Recorder's metrics."""
    from evidence_client import Recorder

    recorder = Recorder(os.environ["EVIDENCE_KAFKA_BOOTSTRAP"],
                        topic_prefix=os.environ["EVIDENCE_TOPIC_PREFIX"], spool_dir=spool_root,
                        delivery_timeout_ms=10_000, close_timeout=60)
    recorder.start()
    recorder.close()
    return recorder.metrics.snapshot()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--recover"]:
        print(json.dumps(recover(argv[1])))
        return 0
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    name, out_path, control = argv[0], Path(argv[1]), Path(argv[2])
    skew = float(os.environ.get("CHAOS_CLOCK_SKEW_S", "0"))
    if skew:
        _skew_clock(skew)
    import evidence_client
    from evidence_client import Recorder

    rate = float(os.environ.get("CHAOS_RATE", "20"))
    streams = [f"chaos:{name}-{i}" for i in range(int(os.environ.get("CHAOS_STREAMS", "3")))]
    recorder = Recorder(os.environ["EVIDENCE_KAFKA_BOOTSTRAP"],
                        topic_prefix=os.environ["EVIDENCE_TOPIC_PREFIX"],
                        spool_dir=os.environ["CHAOS_SPOOL_ROOT"], orphan_scan_s=2.0,
                        delivery_timeout_ms=10_000, close_timeout=60)
    client = recorder.http_client(transport=httpx2.MockTransport(
        lambda r: httpx2.Response(200, content=ANSWER,
                                  headers={"content-type": "application/json"})))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    disk_full = False
    # The calls that returned while the disk is "full": the file size limit that fills the
    # spool holds for every file this process writes, so a line written to out then could be
    # cut short (a full run once read a line of one field). They are written when it ends.
    held: list[str] = []
    n, t0 = 0, time.monotonic()
    with open(out_path, "a", buffering=1) as out:
        while not stop:
            full = (control / "disk-full").exists()
            if full != disk_full:
                resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024 if full else soft, hard))
                disk_full = full
                if not full:
                    out.write("".join(held))
                    held.clear()
            stream = streams[n % len(streams)]
            body = json.dumps({"model": "m", "messages": [
                {"role": "user", "content": f"{name} call {n} at {time.time_ns()}"}]}).encode()
            with evidence_client.stream(stream):
                r = client.post("https://api.openai.com/v1/chat/completions", content=body,
                                headers={"content-type": "application/json"})
            if r.status_code == 200:
                from evidence_contract import content_key

                line = f"{content_key(body).hex()} {stream}\n"
                if disk_full:
                    held.append(line)
                else:
                    out.write(line)
            n += 1
            delay = t0 + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        out.write("".join(held))
    recorder.close()
    Path(f"{out_path}.metrics").write_text(json.dumps(recorder.metrics.snapshot()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
