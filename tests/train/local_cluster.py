"""A Ray cluster of several nodes on this machine for tests, over scripts/ray_local_cluster.sh.

Each node is a separate Ray node with its own node id and resources, as separate machines
would be: a test can check where actors ran, or kill a worker node mid-run.

    with LocalRayCluster(workers=1) as cluster:
        address = cluster.address          # host:port, for --ray-address or RAY_ADDRESS
        cluster.node_ids()                 # {"head": ..., "worker1": ...}
        cluster.kill_worker(1)             # SIGKILL the node and everything it runs
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rllm_agents import reaper

from tests.processes import alive

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "ray_local_cluster.sh"
MARKER = "RLLM_LOCAL_CLUSTER_NODE"  # the script marks every process of a node with it

# Runs in a process of its own (see LocalRayCluster.actors): the actors of one class from the
# GCS actor table, dead ones included. The state API (ray.util.state) would need the full
# dashboard on the head, about a gigabyte and ten seconds more to start.
ACTORS_PROGRAM = """
import json, logging, sys

import ray
from ray._private import state


def death_reason(cause) -> str:
    if not cause.HasField("actor_died_error_context"):
        return ""
    context = cause.actor_died_error_context
    return context.Reason.Name(context.reason)  # NODE_DIED, RAY_KILL, WORKER_DIED, ...


ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
actors = [
    {"name": actor["Name"], "node_id": actor["Address"]["NodeID"], "state": actor["State"],
     "start_time_ms": actor["StartTime"], "death_reason": death_reason(actor["DeathCause"])}
    for actor in state.actors().values()
    if actor["ActorClassName"] == sys.argv[2]
]
print(json.dumps(actors))
"""


class LocalRayCluster:
    """A head and `workers` worker nodes, each with `gpus_per_node` logical GPUs and
    `cpus_per_node` CPUs, started from a state folder of its own (never another cluster's)."""

    def __init__(
        self,
        workers: int = 1,
        gpus_per_node: int = 1,
        cpus_per_node: int = 8,
        start_timeout_s: float = 240,
    ) -> None:
        self.workers = workers
        self.gpus_per_node = gpus_per_node
        self.cpus_per_node = cpus_per_node
        self.start_timeout_s = start_timeout_s
        self.state_dir = Path(tempfile.mkdtemp(prefix="rllm-local-cluster-"))
        self.address = ""
        self._watchdog: reaper.Watchdog | None = None

    # ---- the script's commands --------------------------------------------------------------
    def start(self) -> str:
        """Start the nodes, wait until all are alive, and return the head's host:port."""
        try:
            lines = self._script(
                "start",
                f"--workers={self.workers}",
                f"--gpus-per-node={self.gpus_per_node}",
                f"--cpus-per-node={self.cpus_per_node}",
                timeout=self.start_timeout_s + 30,
            )
        except BaseException:
            # The script stopped what it started; the state folder is left to remove.
            shutil.rmtree(self.state_dir, ignore_errors=True)
            raise
        self.address = lines[-1].removeprefix("RAY_ADDRESS=")
        # The nodes run in sessions of their own: should this process die unwound (kill -9),
        # a watchdog ends them, so no orphaned cluster goes on using the machine.
        self._watchdog = reaper.start_watchdog()
        self._watch_nodes()
        if self._watchdog is not None:
            self._watchdog.remove_folder(str(self.state_dir))
            self._watchdog.remove_folder((self.state_dir / "temp_dir").read_text().strip())
        return self.address

    def _watch_nodes(self) -> None:
        if self._watchdog is not None:
            self._watchdog.add([(pid, start) for pid in self.processes() if (start := _start(pid))])

    def kill_worker(self, k: int = 1) -> None:
        """SIGKILL worker node `k` and every process it runs, as when a machine is lost."""
        self._script("kill-worker", str(k))

    def add_worker(self) -> str:
        """Start one more worker node and wait until it is alive; its name ("worker2")."""
        name = self._script("add-worker", timeout=self.start_timeout_s + 30)[-1]
        self._watch_nodes()
        return name

    def stop(self) -> None:
        """Stop every node; raise if a process of the cluster is left behind. Again: no-op."""
        if not (self.state_dir / "temp_dir").exists():
            shutil.rmtree(self.state_dir, ignore_errors=True)
            return
        recorded = self.processes()
        try:
            self._script("stop", timeout=60)
            left = [pid for pid in recorded if alive(pid)]
        finally:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            if self._watchdog is not None:
                self._watchdog.release()  # kills whatever the stop left, then exits
                self._watchdog = None
        if left:
            raise RuntimeError(f"the local Ray cluster left processes behind: {left}")

    def _script(self, *args: str, timeout: float = 60) -> list[str]:
        # The script runs the nodes with this interpreter, so they import what the tests do.
        env = {**os.environ, "PYTHON": sys.executable}
        done = subprocess.run(
            ["bash", str(SCRIPT), *args, f"--dir={self.state_dir}"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"ray_local_cluster.sh {args[0]} failed ({done.returncode}): "
                f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return done.stdout.strip().splitlines()

    # ---- what runs where --------------------------------------------------------------------
    def status(self) -> dict[str, dict]:
        """Every node the cluster has had, by name ("-": not started here), as the script's
        status reports it: node_id, alive, and resources (a dead node's read as empty)."""
        nodes = {}
        for line in self._script("status")[1:]:  # after the RAY_ADDRESS= line
            name, state, node_id, *resources = line.split()
            amounts = dict(resource.split("=", 1) for resource in resources)
            nodes[name] = {
                "node_id": node_id,
                "alive": state == "alive",
                "resources": {key: float(value) for key, value in amounts.items()},
            }
        return nodes

    def node_ids(self) -> dict[str, str]:
        """The Ray node id of each node started and not killed, by name ("head", "worker1")."""
        return {
            path.stem: path.read_text().strip()
            for path in sorted(self.state_dir.glob("*.node_id"))
            if path.with_suffix(".pid").exists()
        }

    def processes(self, node: str | None = None) -> list[int]:
        """The running processes of one node (all nodes: None): Ray's own and its workers."""
        marker = f"{MARKER}={self._cluster_id()}/".encode()
        wanted = marker + node.encode() if node else None
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                variables = (entry / "environ").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            if any(v == wanted if wanted else v.startswith(marker) for v in variables):
                if alive(int(entry.name)):
                    found.append(int(entry.name))
        return found

    def _cluster_id(self) -> str:
        return Path((self.state_dir / "temp_dir").read_text().strip()).name

    def actors(self, class_name: str, since: float = 0.0) -> list[dict]:
        """The actors of `class_name` started at or after `since` (time.time()), dead ones
        included: each with its name (if named), node_id, state, start_time_ms and
        death_reason ("NODE_DIED", ...)."""
        done = subprocess.run(
            [sys.executable, "-c", ACTORS_PROGRAM, self.address, class_name],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
            check=True,
        )
        actors = json.loads(done.stdout.strip().splitlines()[-1])
        return [actor for actor in actors if actor["start_time_ms"] >= since * 1000]

    # ---- a context manager ------------------------------------------------------------------
    def __enter__(self) -> LocalRayCluster:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _start(pid: int) -> str | None:
    """The start time of `pid` (clock ticks since boot), which names it with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[19]
