"""The publisher: signs the deployment tree and pushes its checkpoints to the witnesses.

``core`` is pure (the tree, the checkpoint, the tlog-witness client's decisions); ``service``
is the shell (Kafka, PostgreSQL, HTTP); ``cli`` is ``evidence publisher``. See
docs/witnessing.md.
"""
