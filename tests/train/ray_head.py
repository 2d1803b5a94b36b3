"""A private Ray head on this machine for tests whose runs join one cluster (``RAY_ADDRESS``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def local_ray_head(num_gpus: int, num_cpus: int, start_timeout: float = 120) -> Iterator[str]:
    """Start a Ray head declaring `num_gpus` logical GPUs; yield its address; stop it.

    In verl's CPU mode each logical GPU stands for one training (or rollout) process.
    """
    temp_dir = tempfile.mkdtemp(prefix="rllm-ray-test-", dir="/tmp")  # short socket paths
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port=0",
         f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp_dir}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        # A private test cluster on this machine: no token for the runs to find.
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )  # fmt: skip
    address_file = Path(temp_dir) / "ray_current_cluster"
    try:
        deadline = time.monotonic() + start_timeout
        while not address_file.is_file() or not address_file.read_text().strip():
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed: {head.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        yield address_file.read_text().strip()
    finally:
        # Every process of the cluster shares the head's process group. Nothing in it is kept,
        # so no graceful stop (Ray's takes about 35 s).
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)
