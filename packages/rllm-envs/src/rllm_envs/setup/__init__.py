"""``rllm-envs setup`` and ``rllm-envs doctor``: what the envs need on a machine, from the package.

``rllm-envs setup code|swe|web|all`` makes, from an installed wheel, every part an env needs
that the package can make itself, one stage after another (see :mod:`rllm_envs.setup.stages`
for the stages of each env); ``rllm-envs doctor`` says which envs are ready here and why not.
Both are also ``python -m rllm_envs setup|doctor``. The command line is in
:mod:`rllm_envs.setup.cli`.
"""
