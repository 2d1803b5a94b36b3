"""rllm-envs: Gymnasium environments for language-model agents.

Importing this package registers every ``rllm/...`` id with Gymnasium. Env modules are imported
only when an env is made, so optional extras never break this import.
"""

from rllm_envs.core.dataset_registry import DatasetRegistry, resolve_dataset
from rllm_envs.core.extras import MissingExtraError
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.registry import ENV_ENTRIES, register_envs
from rllm_envs.core.snapshots import EnvSnapshot, SnapshotUnsupported
from rllm_envs.core.spaces import UnicodeText
from rllm_envs.core.tasks import TaskSet, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition

__version__ = "0.1.0"

register_envs()

ENV_IDS: tuple[str, ...] = tuple(entry.id for entry in ENV_ENTRIES)

__all__ = [
    "DatasetRegistry",
    "ENV_IDS",
    "EnvSnapshot",
    "InfrastructureFailure",
    "MissingExtraError",
    "SnapshotUnsupported",
    "TaskSet",
    "TaskSources",
    "TextEnv",
    "Transition",
    "UnicodeText",
    "register_envs",
    "resolve_dataset",
]
