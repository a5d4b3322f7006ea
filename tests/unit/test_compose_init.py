"""ops/compose_init.py, the Docker stack's one-shot init: what it makes, that it never replaces
what is there, that it refuses what cannot be used, and that each service takes the files
it made at the paths docker-compose.yml gives it, through that service's own loaders."""

import importlib.util
import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from api.config import Settings
from evidence_contract.note import format_skey, format_vkey, generate_signer, parse_vkey
from evidence_contract.tlog import DEFAULT_LOG_NAME
from publisher.config import PublisherConfig
from server.witnesses import parse_witnesses
from witness import load_key
from writer.config import WriterConfig
from writer.log_key import load_log_key

ROOT = Path(__file__).parents[2]
SVC = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
spec = importlib.util.spec_from_file_location("compose_init", ROOT / "ops/compose_init.py")
init = importlib.util.module_from_spec(spec)
spec.loader.exec_module(init)

OWNER = "65534:65534"


def _run(capsys, root: Path, *args: str) -> tuple[int, str, str]:
    code = init.main(["--root", str(root), "--owner", OWNER, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _contents(root: Path) -> dict[str, bytes]:
    return {name: path.read_bytes() for name, path in init.paths(root).items()}


def test_init_makes_every_key_owner_only_and_prints_the_admin_key(tmp_path, capsys):
    code, out, _ = _run(capsys, tmp_path, "--writable", str(tmp_path / "state"))
    assert code == 0
    files = init.paths(tmp_path)
    assert "made log.skey, log.vkey, witness.skey, witnesses, api-keys.json" in out
    for name in ("log.skey", "witness.skey", "api-keys.json"):
        assert stat.S_IMODE(files[name].stat().st_mode) == 0o600, name
    key = init.admin_key(files)
    assert f"the admin API key (every stream): {key}" in out
    [entry] = json.loads(files["api-keys.json"].read_text())
    assert entry == {"name": "compose-admin", "key": key, "streams": ["*"], "admin": True}
    if os.geteuid() == 0:  # given to the services' user (the image's USER)
        for path in [*files.values(), tmp_path / "state"]:
            assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534), path
    assert (tmp_path / "state").is_dir()


def test_a_second_run_keeps_every_file_as_it_was(tmp_path, capsys):
    assert _run(capsys, tmp_path)[0] == 0
    before = _contents(tmp_path)
    listed = init.paths(tmp_path)["witnesses"]
    listed.write_text(listed.read_text() + "# an operator's witness below\n")
    edited = listed.read_bytes()
    code, out, _ = _run(capsys, tmp_path)
    assert code == 0 and "every key was there; kept" in out
    after = _contents(tmp_path)
    assert after == {**before, "witnesses": edited}
    assert f"(every stream): {init.admin_key(init.paths(tmp_path))}" in out


def test_a_key_brought_by_the_operator_is_taken_and_made_owner_only(tmp_path, capsys):
    files = init.paths(tmp_path)
    mine = generate_signer(DEFAULT_LOG_NAME)
    files["log.skey"].parent.mkdir(parents=True)
    files["log.skey"].write_text(format_skey(mine) + "\n")
    files["log.skey"].chmod(0o644)
    code, out, _ = _run(capsys, tmp_path)
    assert code == 0 and "made log.vkey," in out and "log.skey" not in out.split("\n")[0]
    assert files["log.skey"].read_text().strip() == format_skey(mine)
    assert stat.S_IMODE(files["log.skey"].stat().st_mode) == 0o600
    assert files["log.vkey"].read_text().strip() == format_vkey(mine.verifier)


def test_a_log_key_of_another_name_stops_the_init_and_says_what_to_set(tmp_path, capsys):
    assert _run(capsys, tmp_path)[0] == 0
    code, out, err = _run(capsys, tmp_path, "--log-name", "example.com/other")
    assert code == 2 and out == ""
    assert f"is the key of log {DEFAULT_LOG_NAME!r}, not 'example.com/other'" in err
    assert f"set EVIDENCE_LOG_NAME={DEFAULT_LOG_NAME}" in err


def test_a_verifier_key_that_is_not_the_signers_stops_the_init(tmp_path, capsys):
    assert _run(capsys, tmp_path)[0] == 0
    vkey = init.paths(tmp_path)["log.vkey"]
    vkey.write_text(format_vkey(generate_signer(DEFAULT_LOG_NAME).verifier) + "\n")
    code, _, err = _run(capsys, tmp_path)
    assert code == 2 and "is not the verifier key of" in err and "remove it" in err


def test_what_is_not_a_key_stops_the_init_with_the_reason(tmp_path, capsys):
    files = init.paths(tmp_path)
    files["log.skey"].parent.mkdir(parents=True)
    files["log.skey"].write_text("not a key\n")
    code, _, err = _run(capsys, tmp_path)
    assert code == 2 and "holds no note signer key" in err and "Traceback" not in err
    files["log.skey"].unlink()
    files["api-keys.json"].parent.mkdir(parents=True)
    files["api-keys.json"].write_text('[{"name": "compose-admin", "key": "short"}]')
    code, _, err = _run(capsys, tmp_path)
    assert code == 2 and "too weak" in err
    code, _, err = _run(capsys, tmp_path / "other", "--owner", "nobody")
    assert code == 2 and "expected uid:gid" in err


def test_print_gives_one_value_and_makes_nothing(tmp_path, capsys):
    code, out, err = _run(capsys, tmp_path, "--print", "api-key")
    assert code == 2 and out == "" and "`docker compose up init` makes it" in err
    assert not any(p.exists() for p in init.paths(tmp_path).values())
    assert _run(capsys, tmp_path)[0] == 0
    files = init.paths(tmp_path)
    assert _run(capsys, tmp_path, "--print", "api-key")[1] == init.admin_key(files) + "\n"
    code, out, _ = _run(capsys, tmp_path, "--print", "log-vkey")
    assert code == 0 and parse_vkey(out.strip()).name == DEFAULT_LOG_NAME


def _service_env(name: str, root: Path, state: Path) -> dict[str, str]:
    """A compose service's environment with no variable set, its paths under ``root``."""
    env = {}
    for k, v in SVC[name]["environment"].items():
        v = str(v)
        if v.startswith("${"):
            v = v.split(":-", 1)[1].rstrip("}") if ":-" in v else ""
        env[k] = v.replace("/run/evidence", str(root)).replace(
            "/var/lib/evidence-witness", str(state))
    return env


def test_each_service_takes_the_files_init_made_where_compose_mounts_them(tmp_path, capsys):
    root, state = tmp_path / "run", tmp_path / "state"
    assert _run(capsys, root, "--writable", str(state))[0] == 0
    writer = WriterConfig.from_env(_service_env("writer", root, state))
    signer = load_log_key(writer.log_signing_key_file, writer.log_name)
    env = _service_env("writer", root, state)
    assert parse_vkey(Path(env["EVIDENCE_LOG_VERIFIER_KEY_FILE"]).read_text().strip()) \
        == signer.verifier
    publisher = PublisherConfig.from_env(_service_env("publisher", root, state))
    assert load_log_key(publisher.log_signing_key_file, publisher.log_name) == signer
    [listed] = parse_witnesses(Path(publisher.witnesses_file).read_text())
    env = _service_env("witness", root, state)
    assert load_key(Path(env["EVIDENCE_WITNESS_KEY_FILE"])).verifier == listed.key
    assert listed.url == "http://witness:7380"
    assert Path(env["EVIDENCE_WITNESS_STATE_DIR"]).is_dir()
    api = Settings.from_env(_service_env("api", root, state))
    assert api.log_key == signer.verifier and api.log_name == DEFAULT_LOG_NAME
    assert api.witnesses_file == publisher.witnesses_file, "cosignatures of the same witnesses"
    key = init.admin_key(init.paths(root))
    found = api.keyring.lookup(key)
    assert found is not None and found.admin
