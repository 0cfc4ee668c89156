"""Matching socket-monitor disconnect events (by fd) to routing ids, when the OS reuses an fd at once."""

from backend.disconnects import FdRoutes


def test_a_disconnect_names_the_route_seen_on_that_fd():
    fds = FdRoutes()
    assert fds.seen(12, b"a") is None and fds.seen(12, b"a") is None
    assert fds.disconnected(12) == b"a"
    assert fds.disconnected(12) is None  # a connection that never sent a message
    assert fds.disconnected(99) is None


def test_a_reused_fd_drops_the_old_route_and_never_the_new_one():
    fds = FdRoutes()
    fds.seen(12, b"old")
    # the old connection closed and a new one on the same fd sent a message before the event was read
    assert fds.seen(12, b"new") == b"old"
    assert fds.disconnected(12) is None  # the old connection's late event: the new one stays
    assert fds.seen(12, b"new") is None
    assert fds.disconnected(12) == b"new"  # the new connection's own disconnect
