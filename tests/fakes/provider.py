"""The fake model provider lives in the package (``evidence demo`` runs it too); the tests
import it from here."""

from devstack.fake_provider import (  # noqa: F401 - re-exported
    FINGERPRINT,
    RESPONSE_MODEL_SUFFIX,
    FakeProvider,
    _response_obj,
    Seen,
    anthropic_body,
    anthropic_events,
    chat_body,
    chat_events,
    error_body,
    output_text,
    responses_events,
)
