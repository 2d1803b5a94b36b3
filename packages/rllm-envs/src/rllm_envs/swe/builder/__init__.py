"""How the shipped rllm/SWE-v0 tasks are made: pinned projects, their images, injected bugs.

``python -m rllm_envs.swe.builder images`` builds the project images (``scripts/build_swe_images.sh``
runs it); ``python -m rllm_envs.swe.builder instances`` mutates, validates and writes the shipped
rows (``data/*.jsonl``). See docs/envs/swe.md.
"""
