"""``rllm/Harbor-v0``: Harbor task folders (Terminal-Bench's format) as one Gymnasium env.

A Harbor task is a folder: ``task.toml`` (limits, timeouts, verifier mode), ``instruction.md``
(the prompt), ``environment/`` (a Dockerfile: the container the agent works in, or
``docker_image`` in task.toml), ``tests/test.sh`` (run after the agent, writes the reward) and
optionally ``solution/solve.sh`` (the oracle). Each episode is one task: its image is built
(once per folder content, as ``rllm-harbor/<task>:<digest>``), a container started with the
task's CPU and memory limits, and the agent works in it through shell tools. Shipped: 10 small
tasks of rllm's own (file edits, scripts to fix, a service to configure), in
``rllm_envs/harbor/tasks`` and as ``DatasetRegistry``'s ``harbor`` set.

## Observation
Text. First: the instruction, the working directory, the tools as JSON schemas and how to call
them (``info["tools"]`` holds them in OpenAI function format). After a turn: one
``<tool_response name="...">`` block per call, in order, as in ``rllm/SWE-v0`` (long output cut
in the middle; a command killed at ``command_timeout`` says so). The last observation ends with
the tests' reward.

## Action grammar
``rllm/SWE-v0``'s: ``<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>``
blocks (up to 8 a reply) or OpenAI-style JSON, or exactly one ```` ```bash ```` block. Tools:
``bash`` (as root in the working directory) and ``submit``, plus ``view``, ``str_replace``,
``create`` and ``search`` where the task's image has a ``python3`` to run them. A malformed
reply is an invalid action (``info["action_valid"] = False``, ``format_penalty`` subtracted)
and changes nothing.

## Reward
The task's own tests decide, after the agent ends: every process the agent started is killed,
``/tests`` and ``/logs/verifier`` are emptied (a planted reward file or test cannot count),
``tests/`` is copied to ``/tests``, and ``bash /tests/test.sh`` runs under the task's verifier
timeout, in the agent's container (``verifier.environment_mode = "shared"``) or in a fresh one
that receives only the task's ``artifacts``, each at its own path, and ``/logs/artifacts``
(``"separate"``). The
reward is ``/logs/verifier/reward.json``'s ``reward`` (or the mean of its named numbers, all
kept in ``info["rewards"]``), else ``reward.txt``'s number; no readable reward is 0.0 with
``info["verifier_error"]`` saying why. ``info["is_correct"]`` is reward ≥ 1.

## Episode end
``submit`` ends the episode (terminated). The turn limit, or the task's agent timeout
(``[agent] timeout_sec``, counted from reset), ends it truncated, graded all the same. A Docker
failure ends it truncated with ``info["failure"] = "sandbox"``. ``env.unwrapped.play_oracle()``
plays the running episode with the task's ``solution/solve.sh`` instead of an agent: a task's
built-in check (``rllm-envs harbor-check`` runs it on every task of a folder).

## Arguments
``gym.make("rllm/Harbor-v0", tasks=None, split="train", max_turns=30, command_timeout=60.0,
max_output_chars=10000, allow_network=False, format_penalty=0.0, docker_url=None)``.
``tasks``: a task folder, a folder of tasks (its subfolder named ``split`` when it has one),
``registry:NAME`` or rows with a ``task_dir``; None plays the shipped tasks. Containers have no
network unless ``allow_network`` and the task allows internet. Multi-step tasks
(``[[steps]]``) are refused with a clear error.

## Version history
- v0: first version.
"""

from rllm_envs.harbor.env import HarborEnv

__all__ = ["HarborEnv"]
