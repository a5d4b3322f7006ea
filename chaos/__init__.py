"""``make chaos``: the pipeline under sustained load through the real gateway while its
processes are killed and its dependencies fail, then checked end to end.

- :mod:`chaos.load` — one load process: a real ``evidence_client.Recorder`` recording calls
  (to an in-process provider) into several streams, writing each returned call's content key
  to a file: what the service was told went fine.
- :mod:`chaos.run` — the orchestrator: an isolated stack of its own (Kafka, PostgreSQL, the
  supervised writer, projector and API on free ports under a temporary directory), the load
  processes, the fault schedule, and the final checks; prints one summary line and writes a
  report under ``chaos/results/``.

Not part of any distribution; nothing in the product imports it.
"""
