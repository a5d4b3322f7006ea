"""OTLP attribute values read as Python values, and the exact bytes each came from."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def any_value(value: AnyValue) -> Any:
    """An AnyValue as Python: str, bool, int, float, bytes, list, dict, or None when empty."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


class Attributes(Mapping[str, AnyValue]):
    """A span's or log record's attributes by key (the last of a repeated key wins, as the
    SDKs' attribute maps do), with typed readers that never guess a type."""

    def __init__(self, pairs: Iterable[KeyValue]) -> None:
        self._by_key = {kv.key: kv.value for kv in pairs}

    def __getitem__(self, key: str) -> AnyValue:
        return self._by_key[key]

    def __iter__(self):
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def value(self, key: str) -> Any:
        return any_value(self._by_key[key]) if key in self._by_key else None

    def str(self, key: str) -> str | None:
        v = self.value(key)
        return v if isinstance(v, str) else None

    def int(self, key: str) -> int | None:
        v = self.value(key)
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            return int(v)
        return None

    def float(self, key: str) -> float | None:
        v = self.value(key)
        if isinstance(v, bool):
            return None
        return float(v) if isinstance(v, (int, float)) else None

    def bool(self, key: str) -> bool | None:
        v = self.value(key)
        return v if isinstance(v, bool) else None

    def decimal(self, key: str) -> str | None:
        """An integer-valued attribute as the decimal text it was carried as."""
        v = self.value(key)
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return v
        if isinstance(v, float):
            return repr(v)
        return None

    def strings(self, key: str) -> tuple[str, ...] | None:
        """A string array; a JSON-encoded array in a string (Logfire writes them so) too."""
        v = self.value(key)
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                return (v,)
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return tuple(v)
        return None

    def raw(self, key: str) -> bytes:
        """The exact bytes of a value: a string's UTF-8, any other value's protobuf bytes."""
        v = self._by_key[key]
        if v.WhichOneof("value") == "string_value":
            return v.string_value.encode("utf-8")
        return v.SerializeToString(deterministic=True)
