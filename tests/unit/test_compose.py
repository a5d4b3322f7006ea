"""docker-compose.yml and the Dockerfile cannot run here (no Docker engine); this keeps them in
step with the devstack (same services, ports, Kafka version, topic names and EVIDENCE_*
variables), checks the compose file against the compose-spec schema and the Dockerfile with
hadolint, and holds their shape: the init service and the volumes it fills, the commands the
services run, the native crates built in a stage of their own and installed as wheels."""

import argparse
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import dockerfile
import jsonschema
import yaml

from devstack import StackConfig
from devstack.config import KAFKA_VERSION
from devstack.services import SERVICES
from evidence_contract.tlog import DEFAULT_LOG_NAME
from topics import TopicSettings

ROOT = Path(__file__).parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SVC = COMPOSE["services"]
# Services that run only when configured (the retention shredder) are not in compose yet.
PROJECT_SERVICES = [s.name for s in SERVICES if s.needs is None]


def _published(service: str) -> set[int]:
    return {int(p.split(":")[-2]) for p in SVC[service].get("ports", [])}


def test_compose_runs_the_same_services_as_the_devstack():
    assert {"kafka", "postgres", *PROJECT_SERVICES} <= set(SVC)
    for name in PROJECT_SERVICES:
        assert SVC[name]["build"] == "."
        assert SVC[name]["command"][0] == name, "each service runs `evidence <name>`"


BROKERS = ("kafka", "kafka-2", "kafka-3")


def test_compose_uses_the_devstack_kafka_version_in_kraft_mode():
    for name in BROKERS:
        assert SVC[name]["image"] == f"apache/kafka:{KAFKA_VERSION}"
        env = SVC[name]["environment"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"


def test_compose_kafka_is_three_brokers_one_quorum_replicated_three_ways():
    envs = [SVC[name]["environment"] for name in BROKERS]
    assert sorted(e["KAFKA_NODE_ID"] for e in envs) == [1, 2, 3]
    assert len({e["CLUSTER_ID"] for e in envs}) == 1
    voters = {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    for name, e in zip(BROKERS, envs):
        assert f"INTERNAL://{name}:19092" in e["KAFKA_ADVERTISED_LISTENERS"]
        assert e["KAFKA_MIN_INSYNC_REPLICAS"] == 2
        assert e["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3
        assert e["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 3
        assert e["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 3
        assert e["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 2
    assert len({v for name in BROKERS for v in SVC[name]["volumes"]}) == 3, "a disk each"
    for name in ("kafka-2", "kafka-3"):
        assert SVC["topics"]["depends_on"][name]["condition"] == "service_healthy"
    for name in [*PROJECT_SERVICES, "topics"]:
        env = SVC[name]["environment"]
        assert set(env["EVIDENCE_KAFKA_BOOTSTRAP"].split(",")) == {
            f"{b}:19092" for b in BROKERS}, name
        assert TopicSettings.from_env({k: str(v) for k, v in env.items()}
                                      ).replication_factor == 3


def test_writers_and_projectors_scale_with_an_identity_per_writer():
    for name in ("writer", "projector"):
        assert "container_name" not in SVC[name] and not SVC[name].get("ports"), \
            f"--scale {name}=N needs no fixed name or host port"
    entry = " ".join(SVC["writer"]["entrypoint"])
    assert "EVIDENCE_WRITER_TRANSACTIONAL_ID=evidence-writer-$$HOSTNAME" in entry
    assert 'exec evidence "$$@"' in entry
    assert "EVIDENCE_WRITER_TRANSACTIONAL_ID" not in SVC["writer"]["environment"]
    assert "EVIDENCE_PROJECTOR_GROUP" not in SVC["projector"]["environment"], \
        "one derived group for every projector replica"


def test_compose_publishes_the_devstack_ports_on_loopback():
    cfg = StackConfig(root=ROOT)
    assert _published("kafka") == {cfg.kafka_port}
    assert len(_published("kafka") | _published("kafka-2") | _published("kafka-3")) == 3
    assert _published("postgres") == {cfg.postgres_port}
    assert _published("api") == {cfg.api_port}
    for svc in SVC.values():
        for p in svc.get("ports", []):
            assert p.startswith("127.0.0.1:"), f"{p} must bind loopback only"


def test_compose_database_matches_the_devstack_credentials():
    cfg = StackConfig(root=ROOT)
    env = SVC["postgres"]["environment"]
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == (
        cfg.db_user, cfg.db_password, cfg.db_name)


def test_project_services_get_the_stack_env_variables_and_topic_names():
    required = {"EVIDENCE_KAFKA_BOOTSTRAP", "EVIDENCE_DATABASE_URL", "EVIDENCE_API_URL",
                "EVIDENCE_TOPIC_PREFIX"}
    for name in [*PROJECT_SERVICES, "topics"]:
        env = SVC[name]["environment"]
        assert required <= set(env), name
        settings = TopicSettings.from_env({k: str(v) for k, v in env.items()})
        assert settings.names.all() == TopicSettings().names.all()
        assert settings.partitions == TopicSettings().partitions


def test_topics_are_created_by_the_project_before_services_start():
    assert SVC["topics"]["command"] == ["topics", "ensure"]
    for name in ("writer", "projector"):
        assert SVC[name]["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def test_the_writer_gets_the_log_key_variables_and_a_mounted_key_file():
    env = SVC["writer"]["environment"]
    assert {"EVIDENCE_LOG_NAME", "EVIDENCE_LOG_SIGNING_KEY_FILE",
            "EVIDENCE_LOG_VERIFIER_KEY_FILE"} <= set(env)
    assert _mounted_at(env["EVIDENCE_LOG_SIGNING_KEY_FILE"], "writer")
    assert _mounted_at(env["EVIDENCE_LOG_VERIFIER_KEY_FILE"], "writer")


# -- the init service and the volumes it fills ----------------------------------------------

def _mounts(service: str) -> dict[str, tuple[str, bool]]:
    """A service's volumes (short syntax): container path -> (source, read-only)."""
    out = {}
    for v in SVC[service].get("volumes", []):
        source, target, *opts = v.split(":")
        out[target] = (source, bool(opts) and "ro" in opts[0].split(","))
    return out


def _mounted_at(path: str, service: str) -> tuple[str, bool] | None:
    """The (source, read-only) of the mount of ``service`` that holds ``path``, or None."""
    for target, mount in _mounts(service).items():
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return mount
    return None


def _interpolated(text: str) -> str:
    """``text`` as compose interpolates it with no variable set (``${X:-d}`` is d)."""
    text = re.sub(r"\$\{[A-Z0-9_]+:?-([^}]*)\}", r"\1", text)
    return re.sub(r"\$\{[A-Z0-9_]+\}", "", text).replace("$$", "$")


def _init_module():
    spec = importlib.util.spec_from_file_location("compose_init", ROOT / "ops/compose_init.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


INIT_VOLUMES = {"log-key", "witness-key", "api-keys", "public-keys"}


def test_compose_file_is_valid_by_the_compose_spec_schema():
    # The compose-spec JSON schema, vendored (tests/unit/compose_spec/README.md says whence).
    schema = json.loads((ROOT / "tests/unit/compose_spec/compose-spec.json").read_text())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(COMPOSE)]
    assert errors == []


def test_no_service_mounts_a_host_path():
    declared = set(COMPOSE["volumes"])
    for name, svc in SVC.items():
        for target, (source, _ro) in _mounts(name).items():
            assert source in declared, (
                f"{name} mounts {source} at {target}: a host path (made by `make up`, or by "
                f"nobody on a Docker host); a named volume, filled by init, instead")
    assert ".stack/" not in (ROOT / "docker-compose.yml").read_text()


def test_init_runs_once_as_root_and_makes_the_keys_into_named_volumes():
    init = SVC["init"]
    assert init["build"] == "." and init["restart"] == "no" and "depends_on" not in init
    assert init["user"] == "0:0", "to give the files to the services' user"
    assert init["entrypoint"] == ["python", "/app/ops/compose_init.py"]
    mod = _init_module()
    args = mod.parser().parse_args([_interpolated(a) for a in init["command"]])
    assert args.log_name == DEFAULT_LOG_NAME and args.show is None
    assert args.owner == _dockerfile_user(), "the files go to the user the services run as"
    mounts = _mounts("init")
    made = {p.parent for p in mod.paths(args.root).values()}
    assert {Path(t) for t, (src, ro) in mounts.items() if src in INIT_VOLUMES} == made
    assert not any(ro for _src, ro in mounts.values()), "init writes every volume it mounts"
    for d in args.writable:
        assert str(d) in mounts, f"--writable {d} is a volume init mounts"


def test_every_service_that_reads_a_key_mounts_it_read_only_and_waits_for_init():
    owned = {src for t, (src, _ro) in _mounts("init").items()}
    writable = {str(d) for d in _init_module().parser().parse_args(
        [_interpolated(a) for a in SVC["init"]["command"]]).writable}
    readers = set()
    for name in set(SVC) - {"init"}:
        env = SVC[name].get("environment", {})
        for var, value in env.items():
            if var.endswith(("_FILE", "_DIR")) and str(value).startswith("/"):
                assert _mounted_at(str(value), name), f"{name}: {var}={value} is mounted nowhere"
        for target, (source, ro) in _mounts(name).items():
            if source not in owned:
                continue
            readers.add(name)
            assert ro or target in writable, f"{name} mounts {source} writable"
            assert SVC[name]["depends_on"]["init"] == {
                "condition": "service_completed_successfully"}, name
    assert readers == {"writer", "publisher", "witness", "api"}


def test_every_service_names_the_same_log():
    names = {_interpolated(SVC[s]["environment"]["EVIDENCE_LOG_NAME"])
             for s in ("writer", "publisher", "api")}
    init = SVC["init"]["command"]
    names.add(_interpolated(init[init.index("--log-name") + 1]))
    assert names == {DEFAULT_LOG_NAME}


def test_every_variable_compose_sets_is_in_the_configuration_reference():
    documented = set(re.findall(r"`(EVIDENCE_[A-Z0-9_]+)`",
                                (ROOT / "docs/configuration.md").read_text()))
    for name, svc in SVC.items():
        env = svc.get("environment", {})
        assert not {v for v in env if v.startswith("EVIDENCE_")} - documented, name


def test_the_commands_the_services_run_exist_in_the_installed_cli():
    from cli.main import SUBCOMMAND_MODULES, _commands

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["evidence"] == "cli.main:main"
    shipped = [p.rstrip("*") for p in
               pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    parser = argparse.ArgumentParser(prog="evidence", exit_on_error=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd, (help_text, add_args, _run) in _commands().items():
        add_args(sub.add_parser(cmd, help=help_text))
    for name, svc in SVC.items():
        if svc.get("build") != "." or name == "init":
            continue
        entry = svc.get("entrypoint", _dockerfile_entrypoint())
        assert entry[-1] == "--" and 'exec evidence "$$@"' in entry[2] \
            if entry[0] == "sh" else entry == ["evidence"], name
        parser.parse_args(svc["command"])  # SystemExit when `evidence` has no such command
        assert SUBCOMMAND_MODULES[svc["command"][0]].split(".")[0] in shipped, name
    script = SVC["init"]["entrypoint"][1].removeprefix(_dockerfile_workdir() + "/")
    assert (ROOT / script).is_file() and not _dockerignored(script)


# -- the Dockerfile ---------------------------------------------------------------------------

def _stages() -> list[list]:
    """The Dockerfile's instructions, one list per stage (each starts with its FROM)."""
    stages: list[list] = []
    for cmd in dockerfile.parse_file(str(ROOT / "Dockerfile")):
        if cmd.cmd == "FROM":
            stages.append([])
        stages[-1].append(cmd)
    return stages


def _last(stage: list, instruction: str):
    found = [c for c in stage if c.cmd == instruction]
    return found[-1] if found else None


def _dockerfile_user() -> str:
    return _last(_stages()[-1], "USER").value[0]


def _dockerfile_entrypoint() -> list[str]:
    return list(_last(_stages()[-1], "ENTRYPOINT").value)


def _dockerfile_workdir() -> str:
    return _last(_stages()[-1], "WORKDIR").value[0]


def _native_crates() -> list[str]:
    """The native crates the Makefile builds for `make up` (native/<crate>/build.sh)."""
    crates = re.findall(r"sh native/(\w+)/build\.sh", (ROOT / "Makefile").read_text())
    assert crates
    return crates


def _dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` out of the build context (its patterns, with
    ``**``; a pattern that matches a directory keeps out what is under it)."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        rx = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
        rx = rx.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(rx, p) for p in prefixes):
            return True
    return False


def test_the_dockerfile_builds_the_native_crates_in_a_stage_of_their_own():
    builder, runtime = _stages()
    image, _as, name = builder[0].value
    assert name == "native"
    rust = re.fullmatch(r"rust:1\.(\d+)-slim-(\w+)", image)
    minimum = re.search(r"RUST_MIN=(\d+)", (ROOT / "native/toolchain.sh").read_text())
    assert rust and int(rust.group(1)) >= int(minimum.group(1)), image
    assert runtime[0].value[0].endswith(f"-slim-{rust.group(2)}"), "one Debian, one libc"
    # The builder's python3 is Debian's; native/rows' wheel is for that Python only (no abi3).
    debian_python = {"bookworm": "3.11", "trixie": "3.13"}[rust.group(2)]
    assert runtime[0].value[0].startswith(f"python:{debian_python}-")
    assert any(c.cmd == "COPY" and c.value[0] == "native/" for c in builder)
    builds = [c.value[0] for c in builder if c.cmd == "RUN" and " wheel " in c.value[0]]
    assert len(builds) == 1 and "--wheel-dir /wheels" in builds[0]
    for crate in _native_crates():
        assert f"./native/{crate}" in builds[0].split(), crate
        for f in ("Cargo.toml", "Cargo.lock", "pyproject.toml", "src/lib.rs"):
            assert not _dockerignored(f"native/{crate}/{f}")
        assert _dockerignored(f"native/{crate}/target/release/x.so"), "the host's build"


def test_the_runtime_stage_installs_the_wheels_and_refuses_the_pure_paths():
    runtime = _stages()[-1]
    python = re.fullmatch(r"python:(\d+)\.(\d+)-slim-\w+", runtime[0].value[0])
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert (int(python.group(1)), int(python.group(2))) >= tuple(
        int(x) for x in requires.removeprefix(">=").split("."))
    assert any(c.cmd == "COPY" and c.flags == ("--from=native",) and c.value == ("/wheels",
               "/wheels") for c in runtime)
    install = next(c.value[0] for c in runtime if c.cmd == "RUN" and "pip install" in c.value[0])
    words = install.split()
    assert {"-c", "constraints.txt", "/wheels/*.whl", "."} <= set(words)
    # The image refuses to build when the compiled paths are missing or refused.
    assert "EVIDENCE_NATIVE=1 python -c" in install
    assert "projections.fastrows" in install and "writer.native.select()" in install
    env = {k: v for c in runtime if c.cmd == "ENV" for k, v in zip(c.value[::2], c.value[1::2])}
    assert env["EVIDENCE_NATIVE"] == "1"
    assert re.fullmatch(r"\d+:\d+", _dockerfile_user()), "numeric: what init chowns to"
    assert _dockerfile_entrypoint() == ["evidence"]


def test_the_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).parent / "hadolint"
    done = subprocess.run([str(hadolint), "--no-color", str(ROOT / "Dockerfile")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerignore_keeps_out_the_local_stack_and_keeps_the_source():
    for path in (".stack/log.skey", ".venv/bin/python", ".git/HEAD", "build/browser/x.js",
                 "packaging/contract/build/lib/x.py", "writer/__pycache__/core.pyc"):
        assert _dockerignored(path), path
    for path in ("pyproject.toml", "constraints.txt", "README.md", "writer/core.py",
                 "packaging/contract/pyproject.toml", "ops/compose_init.py",
                 "projections/schema.sql"):
        assert not _dockerignored(path), path


def _docker_doc_commands() -> list[list[str]]:
    """The `docker compose` commands of docs/operations.md's Docker section, split."""
    text = (ROOT / "docs/operations.md").read_text()
    section = text[text.index("## Docker\n"):]
    section = section[:section.index("\n## ", 1)]
    out = []
    for line in section.splitlines():
        line = line.split("#", 1)[0].strip()
        line = re.sub(r"^export \w+=\$\((.*)\)$", r"\1", line)
        if line.startswith("docker compose "):
            out.append(shlex.split(line.split(">", 1)[0])[2:])
    return out


def test_the_docker_docs_run_services_and_init_options_that_exist():
    commands = _docker_doc_commands()
    assert [c[0] for c in commands][:3] == ["up", "logs", "run"], "up first, then the key"
    init = _init_module().parser()
    for args in commands:
        if args[0] == "logs":
            assert args[1] in SVC
        if args[0] != "run":
            continue
        rest = args[1:]
        while rest[0].startswith("-"):  # run's own options (--rm, -T, -v X, --entrypoint X)
            rest = rest[2:] if rest[0] in ("-v", "--entrypoint") else rest[1:]
        assert rest[0] in SVC, args
        if rest[0] == "init" and "--entrypoint" not in args:
            init.parse_args(rest[1:])  # SystemExit for an option init does not have
    readme = (ROOT / "README.md").read_text()
    assert "`docker compose up -d --build`" in readme and "`docker compose logs init`" in readme
