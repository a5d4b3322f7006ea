"""A free TCP port on 127.0.0.1 for a service that binds it later.

The port the kernel picks for ``bind(("127.0.0.1", 0))`` comes from the ephemeral range: the
same range it draws the local end of every outgoing connection from. A stack starts Kafka and
PostgreSQL, their clients open dozens of connections, and only then does the API bind the port
picked for it at the start; one of those connections may hold it by then, and the API exits
with EADDRINUSE (CI saw exactly that in the chaos test). So ``free_port`` picks below the
ephemeral range, where only an explicit bind lands, checks that the port binds now, and never
hands out the same port twice in one process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 20000      # above the well-known and most registered service ports
_DEFAULT_EPHEMERAL = (32768, 60999)   # Linux's default, when the file cannot be read
_given: set[int] = set()


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (inclusive)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def candidate_range(ephemeral: tuple[int, int] | None = None) -> range:
    """Ports outside the ephemeral range to pick from: below it when there is room, else above."""
    low, high = ephemeral or ephemeral_range()
    if low - _LOWEST >= 1000:
        return range(_LOWEST, low)
    if 65535 - high >= 1000:
        return range(high + 1, 65536)
    return range(1024, 65536)  # an unusual kernel setting: any port, still checked and unshared


def _binds(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, attempts: int = 200) -> int:
    """A port that binds on 127.0.0.1 now, outside the ephemeral range, new to this process."""
    ports = candidate_range()
    for _ in range(attempts):
        port = random.choice(ports)
        if port not in _given and _binds(port):
            _given.add(port)
            return port
    raise OSError(f"no free port on 127.0.0.1 in {ports.start}-{ports.stop - 1} "
                  f"after {attempts} tries")
