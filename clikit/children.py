"""The child processes a command starts (an engine server, a proxy): a free loopback port for each, and
their death with the command however it dies.

Linux's parent-death signal is armed in the child between fork and exec, so a `kill -9` of the command
does not leave a server holding GiBs of KV cache behind; the next run would otherwise find the memory
gone. Elsewhere the caller's own cleanup (process groups, a ledger) is all there is."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def free_port() -> int:
    """A loopback port nothing listens on now (the usual race: bind it soon)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child sent SIGTERM when this process dies (Linux), else None.

    The signal follows the thread that forks: start children from the thread that lives as long as
    they should."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: the child only calls into it

    def arm() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm
