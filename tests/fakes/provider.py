"""The fake model provider lives in ``testing/`` (``evidence demo`` runs it too, from a
checkout); the tests import it from here."""

from testing.fake_provider import (  # noqa: F401 - re-exported
    FINGERPRINT,
    RESPONSE_MODEL_SUFFIX,
    FakeProvider,
    response_obj,
    Seen,
    anthropic_body,
    anthropic_events,
    chat_body,
    chat_events,
    error_body,
    output_text,
    responses_events,
)
