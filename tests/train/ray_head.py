"""A private Ray head on this machine for tests whose runs join one cluster (``RAY_ADDRESS``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ACTOR_MARKER = ":actor_name:"  # Ray's first line in an actor's log file


class RayHead:
    """A Ray head started in the background; :meth:`address` waits until it is up.

    Starting it does not wait, so a run that needs no cluster can go on meanwhile (two cores:
    the head's start-up overlaps the run's imports). In verl's CPU mode each logical GPU stands
    for one training (or rollout) process.
    """

    def __init__(self, num_gpus: int, num_cpus: int, start_timeout: float = 120) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rllm-ray-test-", dir="/tmp")  # short sockets
        self.deadline = time.monotonic() + start_timeout
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
             "--port=0", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={self.temp_dir}",
             # Actors' output stays in their log files (actors_run reads them) instead of being
             # tailed and sent to every driver: verl prints its whole config, on a busy CPU.
             "--include-log-monitor=false"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            # A private test cluster on this machine: no token for the runs to find.
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )  # fmt: skip
        self._address: str | None = None

    def address(self) -> str:
        if self._address is None:
            address_file = Path(self.temp_dir) / "ray_current_cluster"
            while not address_file.is_file() or not address_file.read_text().strip():
                if self.process.poll() is not None or time.monotonic() > self.deadline:
                    error = self.process.stderr.read().decode()[-2000:]
                    raise RuntimeError(f"ray start failed: {error}")
                time.sleep(0.5)
            self._address = address_file.read_text().strip()
        return self._address

    def actors_run(self) -> set[str]:
        """The class names of the actors this cluster has run (Ray writes a marker line into
        each actor's log file, streamed to drivers or not)."""
        names = set()
        for path in (Path(self.temp_dir) / "session_latest" / "logs").glob("worker-*.out"):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith(ACTOR_MARKER):
                    names.add(line.removeprefix(ACTOR_MARKER))
        return names

    def stop(self) -> None:
        # Every process of the cluster shares the head's process group. Nothing in it is kept,
        # so no graceful stop (Ray's takes about 35 s).
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
