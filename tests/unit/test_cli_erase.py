"""``evidence erase`` without a broker: its exit codes (erased, failed, usage, refused, no
keys), what goes to stdout and stderr, against the file key store, with the request that
would go to Kafka caught."""

from __future__ import annotations

import re

import pytest

import cli.erase
import server.erasure
from cli.main import main
from evidence_client.keystore import FileKeyStore
from evidence_contract.keys import KeyErased
from evidence_contract.sealing import LocalKek
from server.erasure import ErasureFailed

KEK = bytes(range(32))


@pytest.fixture
def store(tmp_path, monkeypatch):
    env = {"EVIDENCE_KEY_STORE": f"file:{tmp_path / 'keys'}", "EVIDENCE_KEK": KEK.hex(),
           "EVIDENCE_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    monkeypatch.setattr(cli.erase, "stack_env", lambda: dict(env))
    return FileKeyStore(tmp_path / "keys", LocalKek(KEK))


@pytest.fixture
def sent(monkeypatch):
    out = []
    monkeypatch.setattr(server.erasure, "_send", lambda cfg, topic, req: out.append(req))
    return out


def test_erased_the_request_id_alone_on_stdout_what_was_done_on_stderr(store, sent, capsys):
    key = store.data_key("user-ada")
    assert main(["erase", "--subject", "user-ada", "--request-id", "dsr-1"]) == 0
    out, err = capsys.readouterr()
    assert out == "dsr-1\n"
    assert re.search(r"request dsr-1: erased at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, 1 key\(s\) "
                     r"destroyed", err) and f"key {key.key_id}" in err
    assert [(q.request_id, q.key_ids) for q in sent] == [("dsr-1", (key.key_id,))]
    with pytest.raises(KeyErased):
        store.key(key.key_id)


def test_a_legal_hold_is_refused_with_3_and_nothing_is_erased(store, sent, capsys):
    key = store.data_key("user-ada")
    store.hold("user-ada", "case 17")
    assert main(["erase", "--subject", "user-ada"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and "refused" in err and "legal hold since 20" in err
    assert store.key(key.key_id) == key and sent == []


def test_no_keys_is_4_and_seals_nothing_unless_asked(store, sent, capsys):
    assert main(["erase", "--subject", "user-nobody", "--request-id", "dsr-2"]) == 4
    out, err = capsys.readouterr()
    assert out == "" and "no keys to erase" in err and "--seal-if-none" in err and sent == []
    assert main(["erase", "--subject", "user-nobody", "--request-id", "dsr-2",
                 "--seal-if-none"]) == 0
    assert capsys.readouterr().out == "dsr-2\n"
    assert [(q.request_id, q.key_ids) for q in sent] == [("dsr-2", ())]


def test_a_broken_key_store_or_kafka_is_a_failure_1(store, sent, capsys, monkeypatch):
    store.data_key("user-ada")

    def down(cfg, topic, req):
        raise ErasureFailed(f"erasure request {req.request_id} to {topic}: broker down")

    monkeypatch.setattr(server.erasure, "_send", down)
    assert main(["erase", "--subject", "user-ada", "--request-id", "dsr-3"]) == 1
    assert "broker down" in capsys.readouterr().err
    monkeypatch.setattr(cli.erase, "stack_env", lambda: {
        "EVIDENCE_KEY_STORE": "file:/nonexistent/keys", "EVIDENCE_KAFKA_BOOTSTRAP": "x:1"})
    assert main(["erase", "--subject", "user-ada"]) == 1
    assert main(["erase", "--subject", "a\nb"]) == 2


def test_help_says_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["erase", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "3 refused (a legal hold" in text and "4 no keys to erase" in text
    assert "stdout: the request id" in text
