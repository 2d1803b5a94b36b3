"""llama.cpp as a rollout engine: its OpenAI servers, children of this process (``server``),
in-process batches driven by a LocalEngine (``batch``), and the policy exported to GGUF after
each update (``gguf_export``, ``gguf_retype``, ``sync``). Names load on first use.
"""

from rllm_agents.engines import lazy_exports

__getattr__ = lazy_exports(
    __name__,
    {
        "LlamaCppEngine": "server",
        "LlamaCppServer": "server",
        "LlamaCppModel": "batch",
        "export_gguf": "gguf_export",
    },
)
__all__ = ["LlamaCppEngine", "LlamaCppModel", "LlamaCppServer", "export_gguf"]
