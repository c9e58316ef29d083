"""A cluster's tasks as child processes of one launcher, on loopback: for trying and testing.

Every task runs the same command with its own ``TF_CONFIG`` (as on real
hosts, one per host). A child that calls :func:`exit_with_parent` gets a
parent-death signal from the kernel, so a launcher killed with SIGKILL does not
leave parameter servers running (``server.join()`` never returns on its own).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess

PARENT_ENV = "QUEUEKIT_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports free right now (held open together while chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def loopback_cluster(workers: int, ps: int = 1) -> dict[str, list[str]]:
    ports = free_ports(workers + ps)
    cluster = {"ps": [f"localhost:{p}" for p in ports[:ps]],
               "worker": [f"localhost:{p}" for p in ports[ps:]]}
    return {job: tasks for job, tasks in cluster.items() if tasks}


def exit_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux only).

    Returns False where it is not available. A parent that died before the
    call (the launcher's pid is in :data:`PARENT_ENV`) ends this process at once.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    expected = os.environ.get(PARENT_ENV)
    if expected and os.getppid() != int(expected):
        os.kill(os.getpid(), sig)
    return True


class LocalCluster:
    """``ps`` parameter servers and ``workers`` workers, each running ``argv``.

    Each child gets its ``TF_CONFIG`` and :data:`PARENT_ENV` (this pid): a child
    that sees it should call :func:`exit_with_parent`.
    """

    PARENT_ENV = PARENT_ENV

    def __init__(self, argv: list[str], workers: int, ps: int = 1, *, env=None,
                 cluster: dict[str, list[str]] | None = None, **popen):
        self.cluster = cluster or loopback_cluster(workers, ps)
        self._argv = list(argv)
        self._env = dict(os.environ if env is None else env)
        self._popen = popen
        self.processes: dict[str, subprocess.Popen] = {}

    def start_task(self, job: str, index: int) -> subprocess.Popen:
        env = dict(self._env, TF_CONFIG=json.dumps(
            {"cluster": self.cluster, "task": {"type": job, "index": index}}))
        env[PARENT_ENV] = str(os.getpid())
        proc = subprocess.Popen(self._argv, env=env, **self._popen)
        self.processes[f"/job:{job}/task:{index}"] = proc
        return proc

    def start(self) -> LocalCluster:
        for job in ("ps", "worker"):
            for i in range(len(self.cluster.get(job, []))):
                self.start_task(job, i)
        return self

    def wait_workers(self, timeout: float | None = None) -> dict[str, int]:
        """Wait for every worker to exit; their exit codes by device."""
        return {d: p.wait(timeout) for d, p in self.processes.items() if "/job:ps/" not in d}

    def close(self, grace: float = 5.0) -> None:
        """SIGTERM every task still running (the ps never ends by itself), SIGKILL after grace."""
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
