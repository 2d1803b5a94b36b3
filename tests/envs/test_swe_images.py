"""A project image builds from nothing and holds the tree the shipped rows were made on.

From nothing: every input downloaded again (the sdist, the project's and pytest's wheels and
git's Debian packages, into an empty folder, each checked against its pinned sha256), then the
base image and the project image built with Docker's cache off under fresh tags, on the
sandbox's debootstrap rootfs. The new image must carry the snapshot id the shipped rows name,
and the env must grade a shipped instance on it: the gold patch resolves it, no patch does not.
"""

from __future__ import annotations

import uuid

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.swe.builder import images
from rllm_envs.swe.builder.projects import project_named
from rllm_envs.swe.integrity import play

from tests.envs.swe_support import FAST_POLICY, require_images, shipped_rows

pytestmark = pytest.mark.slow

# The smallest shipped project: one module, one test file.
PROJECT = project_named("inflection")


def test_a_project_image_builds_from_nothing_and_grades_its_shipped_rows(tmp_path):
    client = require_images([images.ROOTFS_IMAGE, images.BASE_IMAGE])
    rows = [row for row in shipped_rows(PROJECT.split) if row["repo"] == PROJECT.repo]
    assert rows, f"no shipped rows of {PROJECT.repo}"
    suffix = uuid.uuid4().hex[:8]
    base_tag = f"rllm-swe-fresh/base:{suffix}"
    tag = f"rllm-swe-fresh/{PROJECT.repo}:{suffix}"
    tools = images.tools_python(images.cache_dir())
    env = None
    try:
        base = images.build_base_image(client, tmp_path, tag=base_tag, nocache=True)
        built = images.build_project_image(
            client, PROJECT, tmp_path, tools, base=base, tag=tag, nocache=True
        )
        assert base.built and built.built
        assert len(list((tmp_path / "sdists").glob("*.tar.gz"))) == 1
        # The same recipe as the base image the shipped rows were validated on.
        shipped_base = client.images.get(images.BASE_IMAGE).labels[images.RECIPE_LABEL]
        assert base.recipe == shipped_base
        labels = client.images.get(tag).labels
        assert labels[images.BASE_LABEL] == built.base == rows[0]["base"]

        row = dict(rows[0], image_name=tag)
        env = gym.make("rllm/SWE-v0", tasks=[row], policy=FAST_POLICY, pool_spares=0)
        gold = play(env, row, "gold")
        assert gold.failure is None and gold.reward == 1.0, gold.info.get("reason")
        noop = play(env, row, "noop")
        assert noop.failure is None and noop.reward == 0.0
    finally:
        if env is not None:
            env.close()
        for image in (tag, base_tag):
            try:
                client.images.remove(image, force=True)
            except Exception:  # never built
                pass
