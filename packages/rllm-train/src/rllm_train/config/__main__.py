"""``python -m rllm_train.config``: the default config as YAML (agent_trainer.yaml's body)."""

import sys

import yaml

from rllm_train.config import TrainConfig

sys.stdout.write(yaml.safe_dump(TrainConfig().to_dict(), sort_keys=False))
