"""The shipped task families, by name (``FAMILIES``), and the rows that name their instances."""

from __future__ import annotations

from rllm_envs.web.tasks import forms, reading, sites
from rllm_envs.web.tasks.base import Family, Instance, Step, default_check, normalize

FAMILIES: dict[str, Family] = {
    family.name: family for family in (*forms.FAMILIES, *reading.FAMILIES, *sites.FAMILIES)
}


def suite_rows(families: list[str] | tuple[str, ...] | None = None, seeds: int = 100) -> list[dict]:
    """Rows ``{"family", "seed", "task_id"}``: `seeds` instances of each family (any seed works)."""
    names = list(families) if families is not None else list(FAMILIES)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown web task families {unknown}; choose from {sorted(FAMILIES)}")
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    return [
        {"family": name, "seed": seed, "task_id": f"web/{name}/{seed}"}
        for name in names
        for seed in range(seeds)
    ]


__all__ = ["FAMILIES", "Family", "Instance", "Step", "default_check", "normalize", "suite_rows"]
