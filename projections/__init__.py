"""PostgreSQL projections of the evidence log: disposable, rebuilt from offset zero.

- :mod:`projections.ddl` — generation schemas, the stable ``evidence`` views, the swap.
- :mod:`projections.rows` — a log message to a ``records`` row (pure).
"""
