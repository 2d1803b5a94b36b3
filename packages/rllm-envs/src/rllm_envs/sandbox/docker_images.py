"""Local Docker images that rllm builds itself: reading their labels, building them.

Every image rllm builds records its recipe (a hash of everything that went into it) in a label,
so a build is skipped when an image of the same recipe is already there and redone when an
input changed. Nothing is pulled here: builds start from images already in the local engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# How much of a failed build's log an error carries: the failing step and what led to it.
_BUILD_LOG_TAIL = 3000


class BuildError(RuntimeError):
    """An image could not be built (a download failed, a hash did not match, docker failed)."""


def image_labels(client: Any, tag: str) -> dict[str, str] | None:
    """The labels of the local image `tag`, or None when there is no such image."""
    try:
        return dict(client.images.get(tag).labels or {})
    except Exception:  # not there (or the engine cannot say: treated the same, a build follows)
        return None


def build_image(
    client: Any,
    context: Path,
    tag: str,
    labels: Mapping[str, str],
    *,
    nocache: bool = False,
    buildargs: Mapping[str, str] | None = None,
) -> None:
    """`docker build` of the folder `context` as `tag`, with `labels` added to its Dockerfile."""
    dockerfile = (context / "Dockerfile").read_text()
    added = "".join(f'LABEL {key}="{value}"\n' for key, value in labels.items())
    # A Dockerfile may end without a newline (Harbor's scaffolds do): the labels start a line.
    separator = "" if dockerfile.endswith("\n") or not dockerfile else "\n"
    (context / "Dockerfile").write_text(dockerfile + separator + added)
    try:
        client.images.build(
            path=str(context),
            tag=tag,
            rm=True,
            forcerm=True,
            nocache=nocache,
            buildargs=dict(buildargs or {}),
        )
    except Exception as error:
        log = "".join(
            str(item.get("stream", "") or item.get("error", ""))
            for item in getattr(error, "build_log", []) or []
        )
        raise BuildError(
            f"docker build of {tag} failed: {error}\n{log[-_BUILD_LOG_TAIL:]}"
        ) from error
