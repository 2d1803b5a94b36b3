import sys

from rllm_agents.viewer.cli import main

sys.exit(main())
