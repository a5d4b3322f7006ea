"""Produce to evidence-store from any language with the schema alone: examples/ against real Kafka.

Each example (examples/java: Apache Avro Java + kafka-clients; examples/python-avro: the
official ``avro`` package + confluent-kafka; examples/go: hamba/avro + franz-go) is built
here, then:

- every library computes the contract's CRC-64-AVRO fingerprints for the three .avsc files;
- every producer sends CaptureEvents (its own streams and one stream shared by all three) to
  a fresh intake, the real writer seals them all, none is rejected, each is sealed byte for
  byte as produced (so every producer's Avro is canonical), and our own decoder reads them;
- every verifier passes on the whole log, i.e. reads what every other language produced,
  re-encodes it to the exact sealed bytes and recomputes every digest and link;
- every verifier fails, naming the fault, once a forged record is appended.

Builds are cached under build/examples/<lang>/<hash of the example's sources>, so a warm run
builds nothing. A missing toolchain (java, mvn, go) or a missing ``avro`` package fails the
test: nothing here is ever skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import evidence_contract as contract
from tests.fixtures import toolchains
from tests.fixtures.builds import one_builder
from tests.fixtures.writer import read_all, verify_log

BUILD_TIMEOUT = 900  # a cold build downloads Maven and Go dependencies

pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_TIMEOUT + 300)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCHEMAS = ROOT / "schemas" / "avro"
CAPTURE_AVSC = SCHEMAS / "CaptureEvent.avsc"
RECORD_AVSC = SCHEMAS / "EvidenceRecord.avsc"
HEAD_AVSC = SCHEMAS / "WriterHead.avsc"
CACHE = ROOT / "build" / "examples"  # build/ is gitignored

LANGS = ("java", "python-avro", "go")
PER_STREAM = 6  # covers FAILED (i % 4 == 3), HASH_ONLY (i % 3 == 2), seeds >= 2^63 (even i)
SHARED = "ex-polyglot-shared"  # one stream chained from all three languages


def _tool(name: str) -> str:
    path = toolchains.go() if name == "go" else shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not on PATH: the polyglot examples need Java 17+ with Maven "
                    f"and Go 1.24+ (see examples/README.md)")
    return path


def _sources_hash(root: Path, exclude: tuple[str, ...] = ()) -> str:
    """sha256 over every file's relative path and bytes under ``root`` (sorted)."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not any(rel == e or rel.startswith(e + "/") for e in exclude):
            h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _run(cmd: list[str], *, cwd: Path | None = None, timeout: float = 120,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _cached_build(lang: str, key: str, build) -> Path:
    """``build(tmpdir)`` fills a fresh dir; it becomes CACHE/lang/key. Older keys are dropped."""
    with one_builder(CACHE / lang):
        return _build_once(lang, key, build)


def _build_once(lang: str, key: str, build) -> Path:
    final = CACHE / lang / key
    if (final / "ok").exists():
        return final
    tmp = CACHE / lang / f".tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        build(tmp)
        (tmp / "ok").write_text("built\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in (CACHE / lang).iterdir():
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        pytest.fail(f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")


def _build_java() -> list[str]:
    java, mvn = _tool("java"), _tool("mvn")
    src = EXAMPLES / "java"

    def build(out: Path) -> None:
        # The example's build directory is a property, so nothing is written into examples/.
        _check(_run([mvn, "-q", "-B", "package", f"-Dexample.build.dir={out / 'target'}"],
                    cwd=src, timeout=BUILD_TIMEOUT), "mvn -q package (examples/java)")
        (out / "target" / "evidence-example.jar").rename(out / "evidence-example.jar")
        shutil.rmtree(out / "target")

    d = _cached_build("java", _sources_hash(src, exclude=("target",)), build)
    return [java, "-cp", str(d / "evidence-example.jar")]


def _build_go() -> Path:
    go = _tool("go")
    src = EXAMPLES / "go"

    def build(out: Path) -> None:
        # go.sum pins every module; -mod=readonly fails rather than change it, and
        # GOTOOLCHAIN=local fails on a too-old Go rather than download another.
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        with toolchains.one_go_build():
            _check(_run([go, "build", "-trimpath", "-o", str(out) + "/", "./cmd/produce",
                         "./cmd/verify"], cwd=src, env=env, timeout=BUILD_TIMEOUT),
                   "go build (examples/go)")

    return _cached_build("go", _sources_hash(src, exclude=("bin",)), build)


def _check_python_avro() -> None:
    probe = _run([sys.executable, "-c",
                  "import avro, confluent_kafka; from avro.schema import parse; print(avro.__version__)"])
    if probe.returncode != 0:
        pytest.fail("the python-avro example needs the `avro` package (the test extras): "
                    f"pip install -e '.[test]'\n{probe.stderr[-2000:]}")
    major, minor = (int(x) for x in probe.stdout.strip().split(".")[:2])
    assert (major, minor) >= (1, 12), f"avro {probe.stdout.strip()} is older than 1.12"


@dataclass(frozen=True)
class Example:
    lang: str
    produce_cmd: list[str]
    verify_cmd: list[str]

    def produce(self, bootstrap: str, prefix: str, streams: list[str], count: int) -> subprocess.Popen:
        args = ["--bootstrap", bootstrap, "--topic-prefix", prefix, "--schema", str(CAPTURE_AVSC),
                "--count", str(count)]
        for s in streams:
            args += ["--stream", s]
        return subprocess.Popen(self.produce_cmd + args, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def verify(self, *args: str) -> tuple[int, list[dict[str, Any]], str]:
        proc = _run(self.verify_cmd + list(args), timeout=120)
        return proc.returncode, _json_lines(proc.stdout), proc.stderr


def _json_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def examples() -> dict[str, Example]:
    _check_python_avro()
    # Cold, both builds mostly wait on downloads: run them side by side.
    with ThreadPoolExecutor(2) as pool:
        java_build, go_build = pool.submit(_build_java), pool.submit(_build_go)
        java, go = java_build.result(), go_build.result()
    py = EXAMPLES / "python-avro"
    return {
        "java": Example("java", java + ["dev.evidencestore.example.Produce"],
                        java + ["dev.evidencestore.example.Verify"]),
        "python-avro": Example("python-avro", [sys.executable, str(py / "produce.py")],
                               [sys.executable, str(py / "verify.py")]),
        "go": Example("go", [str(go / "produce")], [str(go / "verify")]),
    }


def test_every_library_computes_the_contract_fingerprints(examples):
    """Same Parsing Canonical Form, same CRC-64-AVRO, in Java, Python avro and Go, for all three."""
    expected = {p.name: contract.fingerprint(p.stem).hex() for p in (CAPTURE_AVSC, RECORD_AVSC, HEAD_AVSC)}
    expected_pcf = {p.name: contract.parsing_canonical_form(p.stem)
                    for p in (CAPTURE_AVSC, RECORD_AVSC, HEAD_AVSC)}
    got: dict[str, dict[str, dict[str, Any]]] = {}
    for lang, ex in examples.items():
        for args in (["--schema", str(RECORD_AVSC), "--capture-schema", str(CAPTURE_AVSC)],
                     ["--schema", str(HEAD_AVSC)]):
            rc, lines, err = ex.verify("--fingerprints", *args)
            assert rc == 0 and lines, f"{lang} verify --fingerprints failed ({rc}): {err[-3000:]}"
            for line in lines:
                got.setdefault(lang, {})[Path(line["schema"]).name] = line
    mismatches = [
        f"{lang} ({line['library']}) {name}: {line['fingerprint']} != {expected[name]}\n"
        f"  {lang} PCF:      {line['canonical_form']}\n  contract PCF: {expected_pcf[name]}"
        for lang, by_schema in got.items() for name, line in by_schema.items()
        if line["fingerprint"] != expected[name] or line["canonical_form"] != expected_pcf[name]]
    assert not mismatches, "\n".join(mismatches)
    assert {lang: sorted(v) for lang, v in got.items()} == {
        lang: sorted(expected) for lang in LANGS}


def _wait_sealed(bootstrap: str, settings, n: int, writer, timeout: float = 90.0):
    """Until log + rejected hold ``n`` messages; return (log, rejected)."""
    deadline = time.monotonic() + timeout
    while True:
        log = read_all(bootstrap, settings.names.log)
        rejected = read_all(bootstrap, settings.names.rejected)
        if len(log) + len(rejected) >= n:
            return log, rejected
        writer.assert_alive()
        assert time.monotonic() < deadline, \
            f"{len(log)} sealed and {len(rejected)} rejected after {timeout}s, wanted {n}"
        time.sleep(0.3)


def test_every_language_produces_and_every_language_verifies(examples, make_topics, run_writer,
                                                             kafka_bootstrap):
    settings = make_topics(partitions=3)
    prefix = settings.names.prefix
    writer = run_writer(settings)

    streams = {lang: [f"ex-{lang}-1", f"ex-{lang}-2", SHARED] for lang in LANGS}
    procs = {lang: ex.produce(kafka_bootstrap, prefix, streams[lang], PER_STREAM)
             for lang, ex in examples.items()}
    produced: dict[str, dict[str, Any]] = {}
    for lang, p in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"{lang} produce failed ({p.returncode}):\n{out[-2000:]}\n{err[-4000:]}"
        (summary,) = _json_lines(out)
        assert summary["errors"] == [], f"{lang} produce: {summary['errors']}"
        assert summary["fingerprint"] == contract.fingerprint("CaptureEvent").hex(), lang
        assert len(summary["event_ids"]) == 3 * PER_STREAM, lang
        produced[lang] = summary
    total = sum(len(s["event_ids"]) for s in produced.values())

    log, rejected = _wait_sealed(kafka_bootstrap, settings, total, writer)
    assert not rejected, "captures were rejected:\n" + "\n".join(
        f"{dict(m.headers() or [])}: {m.value()[:200]!r}" for m in rejected)
    assert len(log) == total

    # Our own decoder reads every record, the chains verify, and each body is sealed byte for
    # byte as its producer encoded it: every language's Avro binary is the canonical one.
    by_stream = verify_log(log)
    assert sorted(by_stream) == sorted({s for ss in streams.values() for s in ss})
    assert len(by_stream[SHARED]) == 3 * PER_STREAM
    sealed = {}
    for m in log:
        body_avro, rec = contract.split_record(m.value())
        assert contract.decode(m.value())[0] == "EvidenceRecord"
        sealed[rec["body"]["event_id"]] = (body_avro, rec)
    for lang, summary in produced.items():
        assert set(summary["event_ids"]) <= set(sealed), f"{lang}: not every capture was sealed"
    intake = read_all(kafka_bootstrap, settings.names.intake)
    assert len(intake) == total
    for m in intake:
        name, event = contract.decode(m.value())
        assert name == "CaptureEvent"
        body_avro, rec = sealed[event["event_id"]]
        assert m.value()[contract.HEADER_SIZE:] == body_avro, \
            f"{event['capture']['library']}: the writer re-encoded this capture (not canonical Avro)"
        assert rec["body"] == event

    # Cross-check: every language's verifier passes on what every language produced.
    verify_args = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix,
                   "--schema", str(RECORD_AVSC), "--capture-schema", str(CAPTURE_AVSC)]
    for lang, ex in examples.items():
        rc, lines, err = ex.verify(*verify_args)
        assert lines, f"{lang} verify printed no summary ({rc}): {err[-3000:]}"
        (summary,) = lines
        assert (rc, summary["errors"]) == (0, []), f"{lang} verify: {summary}\n{err[-3000:]}"
        assert (summary["records"], summary["streams"]) == (total, len(by_stream)), summary
        assert summary["fingerprint"] == contract.fingerprint("EvidenceRecord").hex()

    # And every verifier catches a forgery: the last record of the shared stream again, with
    # its response body altered (digests left as they were), appended to the same partition.
    from confluent_kafka import Producer

    last = max((m for m in log if m.key() == SHARED.encode()),
               key=lambda m: contract.split_record(m.value())[1]["seal"]["seq"])
    forged = contract.split_record(last.value())[1]
    assert forged["body"]["response_bytes"] is not None
    forged["body"]["response_bytes"] = b'{"forged":true}'
    forged["body"]["response_length"] = len(b'{"forged":true}')
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(settings.names.log, contract.encode("EvidenceRecord", forged), SHARED.encode(),
              partition=last.partition())
    assert p.flush(30) == 0
    for lang, ex in examples.items():
        rc, lines, err = ex.verify(*verify_args)
        assert rc == 1 and lines, f"{lang} verify did not fail on a forged record ({rc}): {lines} {err[-2000:]}"
        errors = "\n".join(lines[0]["errors"])
        for finding in ("response_digest does not match response_bytes", "record_digest does not verify",
                        f"expected seq {3 * PER_STREAM + 1}", "prev_digest does not link"):
            assert finding in errors, f"{lang} verify did not report {finding!r}:\n{errors}"
        assert lines[0]["records"] == total + 1
