"""What the server's services share; import what you need from its modules.

Below writer, projections, fidelity, audit and api in the layer graph (``.importlinter``),
beside ``topics``; of this project it imports only the contract (``evidence_contract``).

Modules:
    logs      configure(), event_logger() — one JSON-lines log format on stdlib logging
    kafka     KafkaClientError, FencedError, translate(), kafka_errors() — librdkafka errors
              become the project's error tree here and nowhere else
    version   version() — the installed evidence-store version (package metadata)

The modules are not imported here, so a service that only logs (the API) does not load
confluent_kafka.
"""

__all__ = ["kafka", "logs", "version"]
