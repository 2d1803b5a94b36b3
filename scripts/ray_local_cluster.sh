#!/usr/bin/env bash
# A Ray cluster of several nodes on this one machine: a head and N worker nodes, each a
# separate Ray node (its own raylet, node id and resources), to rehearse a multi-node run or
# to test multi-node placement. docs/training/cluster.md walks through it.
#
# Usage:
#   scripts/ray_local_cluster.sh start [--workers N] [--gpus-per-node G] [--cpus-per-node C]
#                                      [--dir DIR] [--dashboard]
#       Start a head and N worker nodes (defaults: N=1, G=1, C=8) and wait until all are
#       alive. The last line printed is RAY_ADDRESS=host:port (also in DIR/address).
#       --dashboard: Ray's full dashboard too (the state API, `ray list actors`, jobs); it
#       costs about 1 GB of memory and ten seconds more to start, so it is off by default.
#   scripts/ray_local_cluster.sh status [--dir DIR]     the nodes, alive or dead, and resources
#   scripts/ray_local_cluster.sh kill-worker [K] [--dir DIR]
#       SIGKILL worker node K (default 1) and everything it runs: a machine lost.
#   scripts/ray_local_cluster.sh add-worker [--dir DIR] one more worker node, e.g. a replacement
#   scripts/ray_local_cluster.sh stop [--now] [--dir DIR]
#       Stop every node started here: SIGTERM, then SIGKILL after 5 s (at once with --now).
#
# DIR (default: $RLLM_LOCAL_CLUSTER_DIR, else /tmp/rllm-local-cluster) holds the nodes' pids
# and logs. Only the processes started from DIR are ever signalled: other Ray clusters on the
# machine (`ray stop` would end them all) are left alone.
#
# Each node offers a custom resource naming it, {"rllm_node_head": 1}, {"rllm_node_worker1": 1},
# ...: `ray.nodes()` tells the nodes apart by it, and a task or actor asking for it runs there.
# Without real GPUs the GPUs are logical: a Ray reservation, one per training process in
# rllm's verl CPU mode. On a machine with enough real GPUs each node gets its own slice of
# them (CUDA_VISIBLE_DEVICES), as separate machines would have.
#
# Several nodes on one host with the Ray 2.60 CLI: `ray start --address=HEAD` on the head's
# own machine simply adds a second node. It joins the head's session folder (the --temp-dir is
# the head's; Ray numbers the second node's sockets and logs, e.g. plasma_store.1,
# raylet.1.out), and its raylet and object manager ports are random (0) by default. What
# collides is the fixed default ports:
#   --dashboard-agent-listen-port (52365): the second node's agent retries for ~3 s, then runs
#       without its HTTP server; each node gets a free port here instead.
#   --ray-client-server-port (10001, head only): taken if another head runs on the machine.
#   --port: 0 lets the head's GCS pick a free port; the address is read from the
#       ray_current_cluster file in the head's own --temp-dir (not /tmp/ray, so other
#       clusters' files are neither read nor overwritten).
# A driver started on this machine attaches to the head node (Ray prefers the head among
# several nodes on the driver's host), so killing a worker node never takes a driver with it.
# Ray starts each worker process in a process group of its own: ending a node means its
# process group plus every process that carries the node's marker variable (see `marked`).
set -euo pipefail

PYTHON="${PYTHON:-python}"
STATE_DIR="${RLLM_LOCAL_CLUSTER_DIR:-/tmp/rllm-local-cluster}"
START_TIMEOUT_S="${RLLM_LOCAL_CLUSTER_TIMEOUT_S:-180}"
# How long `stop` lets the nodes end themselves before SIGKILL. Ray's own graceful stop of a
# node takes longer than this (tens of seconds, on a busy machine); nothing of a rehearsal
# cluster needs keeping.
STOP_GRACE_S="${RLLM_LOCAL_CLUSTER_STOP_GRACE_S:-5}"
# Ray's health check of nodes as rllm_agents.execution.ray_executor.FAST_NODE_DEATH: a dead
# node is noticed in ~1.5 s instead of ~15 s, so a killed worker node's episodes move on fast.
FAST_NODE_DEATH='{"health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}'
NODE_RESOURCE_PREFIX=rllm_node_
# Every process of a node carries MARKER=<cluster id>/<node name> in its environment.
MARKER=RLLM_LOCAL_CLUSTER_NODE

# A private cluster on this machine: no auth token for drivers to find.
export RAY_AUTH_MODE=disabled

die() {
  echo "ray_local_cluster: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# True while `pid` runs (a zombie, dead but not yet reaped, counts as gone).
running() {
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) } # the fields after "pid (command) ": the state first
  [[ $stat != Z* ]]
}

any_running() {
  local pid
  for pid in "$@"; do running "$pid" && return 0; done
  return 1
}

# The running processes that carry node `name`'s marker (all nodes: "[^/]*"). Ray starts each
# worker process in a process group of its own, and once a raylet dies its workers are
# re-parented, but they keep the environment they were started with.
marked() {
  local pid
  for pid in $(grep -lzE "^$MARKER=$(cluster_id)/$1\$" /proc/[0-9]*/environ 2>/dev/null |
    cut -d/ -f3); do
    if running "$pid"; then echo "$pid"; fi
  done
}

# Signal node `name`'s processes (all nodes: "[^/]*"); print their pids. The process group of
# each node's `ray start` (setsid made its pid the group id) goes first, in one signal, so its
# raylet starts no worker meanwhile; then every marked process. Only a group whose leader
# carries the marker is signalled: a pid file outlives its process, and pids are reused.
signal_node() {
  local signal=$1 pids leader
  pids=$(marked "$2")
  for leader in $(node_pids "$2" | awk '{print $2}'); do
    if grep -qx "$leader" <<<"$pids"; then kill "-$signal" -- "-$leader" 2>/dev/null || true; fi
  done
  # shellcheck disable=SC2086 # a pid list
  [[ -n $pids ]] && kill "-$signal" $pids 2>/dev/null || true
  echo "$pids"
}

# Wait up to `seconds` until `pids` have ended (a killed process keeps running a while after
# its memory, environment included, is gone) and node `name` has no process left.
wait_gone() {
  local name=$1 deadline=$((SECONDS + $2))
  shift 2
  while any_running "$@" || [[ -n $(marked "$name") ]]; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# ---- the state folder -------------------------------------------------------------------
config_value() {
  sed -n "s/^$1=//p" "$STATE_DIR/config"
}

# "name pid" of each node started and not killed (all of them, or those named `pattern`).
node_pids() {
  local file name
  for file in "$STATE_DIR"/*.pid; do
    name=$(basename "$file" .pid)
    if [[ -e $file && $name =~ ^${1:-.*}$ ]]; then echo "$name $(cat "$file")"; fi
  done
}

# The cluster's unique name (its Ray folder's), which the marker of its processes holds.
cluster_id() {
  basename "$(cat "$STATE_DIR/temp_dir")"
}

head_running() {
  [[ -f $STATE_DIR/head.pid ]] && running "$(cat "$STATE_DIR/head.pid")"
}

next_worker_index() {
  local index=1
  while [[ -e $STATE_DIR/worker$index.log ]]; do index=$((index + 1)); done
  echo "$index"
}

# CUDA_VISIBLE_DEVICES for node number `slot` (head 0, workerK K): its own G real GPUs when
# the machine has enough of them and the caller set none; empty (Ray's default) otherwise.
gpu_slice() {
  local slot=$1 gpus count first
  gpus=$(config_value gpus)
  [[ -z ${CUDA_VISIBLE_DEVICES:-} && $gpus -gt 0 ]] || return 0
  count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  first=$((slot * gpus))
  ((first + gpus <= count)) || return 0
  seq -s, "$first" $((first + gpus - 1))
}

# ---- nodes ------------------------------------------------------------------------------
# Start one node in the background, in a session of its own; record its pid.
launch_node() {
  local name=$1 slot=$2
  shift 2
  local devices
  devices=$(gpu_slice "$slot")
  (
    [[ -n $devices ]] && export CUDA_VISIBLE_DEVICES=$devices
    export "$MARKER=$(cluster_id)/$name"
    # A background job of this non-interactive script is no group leader, so setsid runs
    # the node in place (no fork): $! is the node's pid and its process group id.
    exec setsid "$PYTHON" -m ray.scripts.scripts start --block \
      --num-cpus="$(config_value cpus)" --num-gpus="$(config_value gpus)" \
      --resources="{\"$NODE_RESOURCE_PREFIX$name\": 1}" \
      --dashboard-agent-listen-port="$(free_port)" --disable-usage-stats "$@"
  ) >"$STATE_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE_DIR/$name.pid"
}

start_head() {
  local dashboard=$1 temp_dir
  # Unix socket paths hold 107 bytes: Ray's folder stays short whatever DIR is.
  temp_dir=$(mktemp -d /tmp/rllm-cluster-XXXXXX)
  echo "$temp_dir" >"$STATE_DIR/temp_dir"
  launch_node head 0 --head --port=0 --ray-client-server-port="$(free_port)" \
    --include-dashboard="$dashboard" --temp-dir="$temp_dir" --system-config="$FAST_NODE_DEATH"
}

# Wait for the head's address (host:port), which Ray writes once the head's GCS is up.
head_address() {
  local file deadline=$((SECONDS + START_TIMEOUT_S))
  file="$(cat "$STATE_DIR/temp_dir")/ray_current_cluster"
  until [[ -s $file ]]; do
    head_running || die "the head node exited: $(tail -n 20 "$STATE_DIR/head.log")"
    ((SECONDS < deadline)) || die "the head node did not start within ${START_TIMEOUT_S}s"
    sleep 0.5
  done
  cat "$file"
}

start_worker() {
  local index=$1
  launch_node "worker$index" "$index" --address="$(cat "$STATE_DIR/address")"
}

# Wait until the named nodes are alive in the cluster, failing early if one's process exits;
# record each one's node id in DIR/NAME.node_id (a dead node's resources read as empty, so
# its id is what still names it).
wait_alive() {
  local names=$1 pids
  pids=$(node_pids | awk '{print $2}' | paste -sd, -)
  "$PYTHON" - "$(cat "$STATE_DIR/address")" "$START_TIMEOUT_S" "$names" "$pids" "$STATE_DIR" \
    <<'PY'
import logging, sys, time
from pathlib import Path

import ray

address, timeout, names, pids, state_dir = sys.argv[1:]
timeout = float(timeout)
wanted = {f"rllm_node_{name}" for name in names.split(",")}
deadline = time.monotonic() + timeout


def exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
while True:
    alive = {name: node["NodeID"] for node in ray.nodes() if node["Alive"]
             for name in node["Resources"]}  # fmt: skip
    if wanted <= alive.keys():
        for name in wanted:
            Path(state_dir, f"{name.removeprefix('rllm_node_')}.node_id").write_text(alive[name])
        break
    dead = [pid for pid in map(int, pids.split(",")) if exited(pid)]
    if dead or time.monotonic() > deadline:
        missing = sorted(name.removeprefix("rllm_node_") for name in wanted - alive)
        why = f"process {dead} exited" if dead else f"not alive within {timeout:.0f}s"
        sys.exit(f"ray_local_cluster: node(s) {', '.join(missing)}: {why} (see their .log)")
    time.sleep(0.5)
PY
}

# Print each node of the cluster: name ("-": not started here), state, node id, resources.
print_nodes() {
  "$PYTHON" - "$(cat "$STATE_DIR/address")" "$STATE_DIR" <<'PY'
import logging, sys
from pathlib import Path

import ray

SKIP = ("node:", "memory", "object_store_memory")
names = {path.read_text(): path.stem for path in Path(sys.argv[2]).glob("*.node_id")}
ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
for node in sorted(ray.nodes(), key=lambda node: names.get(node["NodeID"], "~")):
    shown = " ".join(
        f"{name}={amount:g}" for name, amount in sorted(node["Resources"].items())
        if not name.startswith(SKIP)
    )
    state = "alive" if node["Alive"] else "dead"
    print(f"{names.get(node['NodeID'], '-'):<10} {state:<6} {node['NodeID']}  {shown}")
PY
}

# ---- commands ---------------------------------------------------------------------------
cmd_start() {
  local workers=1 gpus=1 cpus=8 dashboard=false names index
  while [[ $# -gt 0 ]]; do
    case $1 in
      --workers) workers=$2; shift 2 ;;
      --gpus-per-node) gpus=$2; shift 2 ;;
      --cpus-per-node) cpus=$2; shift 2 ;;
      --dashboard) dashboard=true; shift ;;
      *) die "start: unknown argument $1 (see --help)" ;;
    esac
  done
  head_running && die "a cluster already runs from $STATE_DIR: stop it first"
  cmd_stop --now >/dev/null # what is left of an earlier cluster whose head died
  mkdir -p "$STATE_DIR"
  printf 'gpus=%s\ncpus=%s\n' "$gpus" "$cpus" >"$STATE_DIR/config"
  # A start that fails or is interrupted half-way stops what it started.
  trap 'cmd_stop --now >/dev/null 2>&1' EXIT
  trap 'exit 130' INT TERM
  start_head "$dashboard"
  head_address >"$STATE_DIR/address"
  names=head
  for ((index = 1; index <= workers; index++)); do
    start_worker "$index"
    names+=",worker$index"
  done
  wait_alive "$names"
  trap - EXIT INT TERM
  echo "started $((workers + 1)) nodes (state in $STATE_DIR)"
  echo "RAY_ADDRESS=$(cat "$STATE_DIR/address")"
}

cmd_stop() {
  local all="[^/]*" pids
  [[ ${1:-} == --now ]] && STOP_GRACE_S=0
  [[ -f $STATE_DIR/temp_dir ]] || { rm -rf "$STATE_DIR"; return 0; }
  # SIGTERM first: each `ray start --block` stops its own node's processes.
  pids=$(signal_node TERM "$all")
  # shellcheck disable=SC2086 # pid lists
  if ! wait_gone "$all" "$STOP_GRACE_S" $pids; then
    pids+=" $(signal_node KILL "$all")"
    wait_gone "$all" 10 $pids ||
      die "processes of the cluster outlived SIGKILL: $(marked "$all")"
  fi
  rm -rf "$(cat "$STATE_DIR/temp_dir")" "$STATE_DIR"
  echo "stopped"
}

cmd_kill_worker() {
  local name=worker${1:-1} pids
  [[ -f $STATE_DIR/$name.pid ]] || die "no running $name in $STATE_DIR"
  # Everything at once, no grace: as when the machine goes away.
  pids=$(signal_node KILL "$name")
  # shellcheck disable=SC2086 # a pid list
  wait_gone "$name" 10 $pids ||
    die "processes of $name outlived SIGKILL: $(marked "$name")"
  rm "$STATE_DIR/$name.pid" # its pid may be reused; its log stays
  echo "killed $name"
}

cmd_add_worker() {
  local index
  head_running || die "no cluster runs from $STATE_DIR"
  index=$(next_worker_index)
  start_worker "$index"
  wait_alive "worker$index"
  echo "worker$index"
}

cmd_status() {
  head_running || die "no cluster runs from $STATE_DIR"
  echo "RAY_ADDRESS=$(cat "$STATE_DIR/address")"
  print_nodes
}

main() {
  local command=${1:-}
  if [[ $# -gt 0 ]]; then shift; fi
  local args=()
  # --dir may come with any command; --option=value means --option value.
  while [[ $# -gt 0 ]]; do
    case $1 in
      --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
      --dir) STATE_DIR=$2; shift 2 ;;
      *) args+=("$1"); shift ;;
    esac
  done
  case $command in
    start) cmd_start ${args[@]+"${args[@]}"} ;;
    stop) cmd_stop ${args[@]+"${args[@]}"} ;;
    kill-worker) cmd_kill_worker ${args[@]+"${args[@]}"} ;;
    add-worker) cmd_add_worker ;;
    status) cmd_status ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
