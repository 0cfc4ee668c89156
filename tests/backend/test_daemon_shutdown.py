"""A job ending while the daemon's socket is already closed (shutdown) finishes quietly, without raising."""

import asyncio
import logging

from backend.agent import AgentConfig
from backend.daemon import Daemon, DaemonConfig, Job


async def test_the_end_of_a_job_on_a_closed_socket_is_logged_not_raised(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="backend.daemon")
    daemon = Daemon(None, DaemonConfig(bind=f"ipc://{tmp_path}/daemon.sock"), AgentConfig())  # no engine: fails first
    daemon.bind()
    daemon._sock.close(0)  # as at shutdown: sends now raise ZMQError (ENOTSOCK)
    try:
        job = Job(b"peer", b"route", "r1", "audit")
        daemon._jobs[(job.peer, job.id)] = job
        job.task = asyncio.create_task(daemon._run_job(job, {}))  # {}: not an audit the agent can read
        await asyncio.wait_for(job.task, 30)  # returns instead of raising
        assert daemon._jobs == {} and "could not send the end of request r1" in caplog.text
    finally:
        daemon._gate.stop()
        daemon._ctx.term()
