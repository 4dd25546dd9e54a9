"""How many HTTP connections the process can hold: its file descriptor limit.

Each connection holds a descriptor; past ``RLIMIT_NOFILE`` accept fails
(asyncio then stops accepting for a second, probes included), and so would
the Kafka clients' sockets and the worker's files. So the endpoint holds at
most the limit minus ``FD_RESERVE``, after raising the soft limit towards the
hard one if that is needed (an unprivileged process may: containers commonly
get 1,048,576 hard, shells 1,024 soft).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("privstream.http")

#: descriptors left to everything but HTTP clients: Kafka connections (one per broker
#: and client), the changelog readers, the log, the interpreter's own files
FD_RESERVE = 256
#: fewer connections than this and 1,000 idle ones could push probes out of the way
ENOUGH_CONNECTIONS = 1024


def connection_cap(wanted: int) -> int:
    """``wanted``, or fewer if the descriptor limit cannot hold them and the reserve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        if raised > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    cap = wanted if soft == resource.RLIM_INFINITY else max(min(wanted, soft - FD_RESERVE), 1)
    if cap < ENOUGH_CONNECTIONS:
        log.warning(
            "the HTTP endpoint holds at most %d connections: the file descriptor limit is %d "
            "(hard %d) and %d are kept for the rest; raise `ulimit -n` to at least %d",
            cap,
            soft,
            hard,
            FD_RESERVE,
            ENOUGH_CONNECTIONS + FD_RESERVE,
        )
    return cap
