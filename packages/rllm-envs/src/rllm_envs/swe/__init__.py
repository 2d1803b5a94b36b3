"""rllm/SWE-v0 (contract card written with the env)."""
