"""rllm/SWE-v0 with agents, rllm-eval and rllm-train: the agents' tests' model fixture."""

from tests.agents.conftest import smollm2_tokenizer, tiny_engine  # noqa: F401 - shared fixtures
