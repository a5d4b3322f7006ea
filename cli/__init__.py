"""The ``evidence`` command; its entry point is ``cli.main:main``.

Nothing is imported here, so ``python -m cli.main`` (how ``make up`` starts services) runs
the module once, without runpy's double-import warning.
"""
