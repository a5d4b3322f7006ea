"""server/: the one log line format, the one librdkafka error mapping, the version."""

from __future__ import annotations

import io
import json
import logging
from importlib.metadata import version as distribution_version
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from evidence_contract import EvidenceError
from server import kafka, logs
from server.version import version


@pytest.fixture
def root_logging():
    """Put the root logger back as it was after a test that calls configure()."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_an_event_is_one_json_line_in_the_shape_tests_and_operators_parse(root_logging):
    out = io.StringIO()
    logs.configure("info", out)
    log = logs.event_logger("evidence.test-writer")
    log("info", "started", transactional_id="tx", partitions=[0, 1], message="m", name="n")
    log("debug", "hidden")
    [line] = out.getvalue().splitlines()
    entry = json.loads(line)
    assert list(entry)[:4] == ["ts", "level", "logger", "event"]
    assert entry == {"ts": entry["ts"], "level": "info", "logger": "evidence.test-writer",
                     "event": "started", "transactional_id": "tx", "partitions": [0, 1],
                     "message": "m", "name": "n"}
    assert round(entry["ts"], 6) == entry["ts"]
    assert line.startswith('{"ts":') and ', "' not in line  # compact separators, as before


def test_plain_logging_records_come_out_in_the_same_shape(root_logging):
    out = io.StringIO()
    logs.configure("warning", out)
    logging.getLogger("uvicorn.error").info("not shown")
    logging.getLogger("evidence.api").warning("%s: no database connection", "records")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("evidence.api").exception("unhandled error")
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert (first["level"], first["logger"], first["event"]) == (
        "warning", "evidence.api", "records: no database connection")
    assert second["event"] == "unhandled error" and "ValueError: boom" in second["exc_info"]


def test_configure_twice_replaces_its_handler(root_logging):
    first, second = io.StringIO(), io.StringIO()
    logs.configure("info", first)
    logs.configure("info", second)
    logs.event_logger("evidence.x")("warning", "once")
    assert first.getvalue() == "" and len(second.getvalue().splitlines()) == 1


def test_values_json_cannot_encode_are_written_as_text(root_logging):
    out = io.StringIO()
    logs.configure("info", out)
    logs.event_logger("evidence.x")("info", "e", data=b"\x00", err=ValueError("v"))
    entry = json.loads(out.getvalue())
    assert (entry["data"], entry["err"]) == ("b'\\x00'", "v")


class ComponentError(EvidenceError):
    pass


class ComponentKafkaError(ComponentError, kafka.KafkaClientError):
    pass


class ComponentFenced(ComponentKafkaError, kafka.FencedError):
    pass


def _err(code: int, **flags: bool) -> KafkaError:
    return KafkaError(code, "reason", **flags)


def test_translate_keeps_librdkafkas_code_name_and_flags():
    e = kafka.translate(_err(KafkaError._TIMED_OUT, retriable=True, txn_requires_abort=True),
                        "commit", ComponentKafkaError)
    assert type(e) is ComponentKafkaError and isinstance(e, ComponentError)
    assert (e.code, e.name, e.retriable, e.txn_requires_abort, e.fatal) == (
        KafkaError._TIMED_OUT, "_TIMED_OUT", True, True, False)
    assert str(e) == "commit: reason [_TIMED_OUT (-185)]"


@pytest.mark.parametrize("code", sorted(kafka.FENCED_CODES))
def test_fencing_becomes_the_fenced_class_that_is_a_kind_of_cls(code):
    assert type(kafka.translate(_err(code, fatal=True), "x")) is kafka.FencedError
    assert type(kafka.translate(_err(code), "x", ComponentKafkaError,
                                fenced_cls=ComponentFenced)) is ComponentFenced
    # a fenced class that is not a kind of cls would escape the caller's except: cls instead
    assert type(kafka.translate(_err(code), "x", ComponentKafkaError)) is ComponentKafkaError


def test_a_consumers_fatal_is_fencing_a_producers_is_not():
    fatal = _err(KafkaError._FATAL, fatal=True)
    assert isinstance(kafka.translate(fatal, "consume", consumer=True), kafka.FencedError)
    e = kafka.translate(fatal, "commit")
    assert not isinstance(e, kafka.FencedError) and e.fatal
    assert kafka.is_fatal(fatal) and not kafka.is_fatal(_err(KafkaError._TRANSPORT, retriable=True))


def test_kafka_errors_translates_with_the_original_as_cause():
    with pytest.raises(ComponentKafkaError) as e:
        with kafka.kafka_errors("produce", ComponentKafkaError):
            raise KafkaException(_err(KafkaError._STATE))
    assert e.value.name == "_STATE" and isinstance(e.value.__cause__, KafkaException)
    with pytest.raises(kafka.KafkaClientError) as e:
        with kafka.kafka_errors("list topics"):
            raise KafkaException("no error object")
    assert (e.value.code, e.value.name) == (KafkaError.UNKNOWN, "UNKNOWN")


def test_a_plain_component_error_needs_no_code():
    e = ComponentKafkaError("topic does not exist")
    assert (str(e), e.code, e.name, e.fatal) == ("topic does not exist", None, None, False)


def test_the_version_is_the_installed_distributions():
    assert version() == distribution_version("evidence-store")
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert f'version = "{version()}"' in pyproject.read_text("utf-8")
