"""``python -m rllm_envs setup|doctor``: the ``rllm-envs`` command (see rllm_envs.setup.cli)."""

import sys

from rllm_envs.setup.cli import main

sys.exit(main())
