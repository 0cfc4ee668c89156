"""Which client connection a socket monitor's ``EVENT_DISCONNECTED`` is about.

A ROUTER tells the daemon nothing when a peer goes away; libzmq's ``ROUTER_NOTIFY`` would, but it is a
draft option that the pyzmq wheels (libzmq 4.3.5 without draft APIs) refuse. So disconnects come from a
socket monitor, whose events name the connection's file descriptor, while each message names its fd
(``SRCFD``) and its routing id. The monitor's events arrive asynchronously: the OS may already have given
the fd to a new connection, and that connection's first message may be read before the old one's
disconnect event. Blindly dropping "every route seen on that fd" would then cancel the newcomer's jobs.

One TCP connection carries exactly one routing id, so a new routing id on an fd proves the previous
connection on it is closed: that connection is reported gone at once, and its disconnect event, still to
come, is skipped when it arrives. (Two connections opened and closed on the same fd without a message
in between, before the first event is read, still confuse it; no message is lost then, only a job of the
third connection may be cancelled early, and it ends with ``cancelled``.)
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FdRoutes:
    """The routing id last seen on each connection fd, and the disconnect events already accounted for."""

    _route: dict[int, bytes] = field(default_factory=dict)
    _skip: dict[int, int] = field(default_factory=dict)  # fd -> disconnect events of connections already dropped

    def seen(self, fd: int, route: bytes) -> bytes | None:
        """A message from ``route`` arrived on ``fd``; returns the route of a previous connection on that fd
        (now known to be closed) or None."""
        old = self._route.get(fd)
        self._route[fd] = route
        if old is None or old == route:
            return None
        self._skip[fd] = self._skip.get(fd, 0) + 1  # old's disconnect event is still to come
        return old

    def disconnected(self, fd: int) -> bytes | None:
        """A disconnect event for ``fd``; returns the route that went away, or None."""
        if self._skip.get(fd):
            self._skip[fd] -= 1
            return None
        return self._route.pop(fd, None)
