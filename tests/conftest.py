# Fixtures that reach real Kafka and PostgreSQL live in tests/fixtures and are shared as
# plugins; unit tests use none of them and run without services.
pytest_plugins = [
    "tests.fixtures.stack",
    "tests.fixtures.kafka",
    "tests.fixtures.postgres",
    "tests.fixtures.provider",
    "tests.fixtures.writer",
    "tests.fixtures.log",
    "tests.fixtures.readmodel",
    "tests.fixtures.api_server",
    "tests.fixtures.pipeline",
    "tests.fixtures.audit",
    "tests.fixtures.litewitness",
]
