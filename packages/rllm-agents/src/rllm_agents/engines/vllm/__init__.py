"""vLLM as a rollout engine: in this process (``engine.VLLMEngine`` on AsyncLLM) or as vLLM's
OpenAI server, a child of this process (``server``); the policy's versions and weight syncs
(``policy``, ``worker``: the worker extension vLLM calls by name); its settings (``config``); and
the plugin that keeps the CPU build's weights reloadable (``cpu_reload``).

Nothing is imported here until a name is used: vLLM loads ``worker`` and ``cpu_reload`` in each
of its own processes.
"""

from rllm_agents.engines import lazy_exports

__getattr__ = lazy_exports(
    __name__,
    {
        "INSTALL_HINT": "engine",
        "VLLMEngine": "engine",
        "VLLMServer": "server",
        "VLLMServerEngine": "server",
        "VLLMSettings": "config",
    },
)
__all__ = ["INSTALL_HINT", "VLLMEngine", "VLLMServer", "VLLMServerEngine", "VLLMSettings"]
