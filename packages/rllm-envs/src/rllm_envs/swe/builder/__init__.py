"""How the shipped rllm/SWE-v0 tasks are made: pinned projects, their images, injected bugs.

``rllm-envs setup swe`` builds the project images with :mod:`.images`;
``python -m rllm_envs.swe.builder instances`` mutates, validates and writes the shipped rows
(``data/*.jsonl``) on those images. See docs/envs/swe.md.
"""
