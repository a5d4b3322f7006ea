"""What the server's services share; import what you need from its modules.

Below writer, projections, fidelity, audit and api in the layer graph (``.importlinter``),
beside ``topics``; of this project it imports only the contract (``evidence_contract``),
and ``keystore.from_env`` the client's ``FileKeyStore`` (the one allowed exception in
``.importlinter``).

Modules:
    logs      configure(), event_logger() — one JSON-lines log format on stdlib logging
    kafka     KafkaClientError, FencedError, translate(), kafka_errors() — librdkafka errors
              become the project's error tree here and nowhere else
    version   version() — the installed evidence-store version (package metadata)
    keystore  PgKeyStore — per-subject data keys in PostgreSQL (evidence_contract.keys);
              from_env() — the key store EVIDENCE_KEY_STORE names
    erasure   erase_subject() — destroy a subject's keys, ask the writer for a receipt
    runtime   tune_gc() — the cycle collector's thresholds of the writer and the projector
    witnesses parse_witnesses(), WatchedWitnesses — the witnesses file (EVIDENCE_WITNESSES_FILE),
              re-read when it changes

The modules are not imported here, so a service that only logs (the API) does not load
confluent_kafka.
"""

__all__ = ["erasure", "kafka", "keystore", "logs", "runtime", "version", "witnesses"]
