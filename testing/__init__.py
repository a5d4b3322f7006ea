"""Test and demo doubles that are not part of any shipped distribution.

- :mod:`testing.fake_provider` — a local OpenAI/Anthropic look-alike over real HTTP, for the
  tests, the benchmarks and ``evidence demo`` (which runs from a checkout).

Nothing in the product imports this package (``.importlinter``); ``cli.demo`` does, lazily,
and says so clearly when the package is not there.
"""
