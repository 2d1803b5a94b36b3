"""A transformers copy of the policy in a child process of its own (``engine.ProcessEngine``),
and that child's side (``child``, run as ``python -m rllm_agents.engines.process.child``).
Names load on first use.
"""

from rllm_agents.engines import lazy_exports

__getattr__ = lazy_exports(__name__, {"ProcessEngine": "engine"})
__all__ = ["ProcessEngine"]
