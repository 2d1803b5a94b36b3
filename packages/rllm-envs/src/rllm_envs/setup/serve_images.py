"""Stage ``serve-images``: one Docker image per env id that serves it (``rllm-envs setup serve ID``).

The image's entrypoint is ``python3 -m rllm_envs serve ID --host 0.0.0.0 --port 8000``;
arguments given to ``docker run`` after the image go to the server (``--max-sessions 8``,
``--env-kwargs '{...}'``). It is ``<prefix><slug>:<recipe>`` and ``<prefix><slug>:latest``
(prefix: ``--serve-image-prefix``, default ``$RLLM_SERVE_IMAGE_PREFIX`` or ``rllm-serve/``;
slug: the id in lowercase without the ``rllm/`` namespace, ``rllm/FrozenLake-v0`` ->
``frozenlake-v0``). ``docker stop`` ends the server as SIGTERM does: every session's env
closed, exit status 0.

The base is the official Python image where it is in the engine, else the Debian rootfs (made
first when missing); its Python and C library choose the wheels (see :mod:`.serve_wheels`).
``docker build`` copies the dependencies and rllm-envs (two layers: a change of rllm-envs
alone reuses the first) and makes the env once, as the server does when it starts, so an env
that cannot be made in the image fails here and not at ``docker run``; the server runs as an
unprivileged user. The image records its recipe (Dockerfile, id, extras, base image, rllm-envs'
files): an unchanged recipe is not built again; ``--force`` rebuilds it, dependencies resolved
anew. Envs that start containers or a browser themselves are refused: their server runs beside
Docker on the host (``rllm-envs serve ID``), not inside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rllm_envs.core.usage import UsageError, check_env_id
from rllm_envs.sandbox.docker_images import BuildError, build_image, image_labels
from rllm_envs.setup.base import SetupRun, Stage, StageProgress
from rllm_envs.setup.rootfs import ensure_rootfs
from rllm_envs.setup.sandbox_image import PYTHON_BASE, image_id
from rllm_envs.setup.serve_wheels import (
    ImagePython,
    cache_dir,
    download,
    package_digest,
    package_wheel,
    require_pip,
    resolve,
    unpack,
    wheel_summary,
)

DEFAULT_PREFIX = "rllm-serve/"
PREFIX_VARIABLE = "RLLM_SERVE_IMAGE_PREFIX"
PORT = 8000
RECIPE_LABEL = "rllm.serve.recipe"
ENV_LABEL = "rllm.serve.env"
BASE_LABEL = "rllm.serve.base"
WHEELS_LABEL = "rllm.serve.wheels"
# The server's user in the image: nobody (it writes nothing but its HOME, /tmp).
SERVER_USER = "65534:65534"
# Envs whose server must run where their containers or browser are: not in an image.
NEEDS_THE_HOST = {
    "rllm/SWE-v0": "starts Docker containers",
    "rllm/Code-v0": "runs code in sandboxes (bubblewrap or Docker containers)",
    "rllm/Harbor-v0": "starts Docker containers",
    "rllm/Web-v0": "drives a Chromium browser",
}
# Ids an image cannot serve by themselves, and what to name instead.
NOT_SERVABLE = {
    "rllm/Remote-v0": "plays an env served elsewhere: build the image of the env it plays",
    "rllm/GymText-v0": "needs the Gymnasium id it plays: name that id (e.g. CartPole-v1)",
}
_PROBE = (
    "import json, platform, site, sys; print(json.dumps({'version': '%d.%d' % "
    "sys.version_info[:2], 'machine': platform.machine(), 'libc': platform.libc_ver(), "
    "'site': site.getsitepackages()[0]}))"
)
# Makes the env once as the server does when it starts (GymText for a non-text env), after
# importing what `python3 -m rllm_envs` imports; the bytecode of both stays in the image.
_CHECK = (
    "import sys; from rllm_envs.setup.cli import build_parser; "
    "from rllm_envs.serve.cli import served_env; "
    "build_parser().parse_args(['serve', sys.argv[1]]); served_env(sys.argv[1], {}, print)"
)
DOCKERFILE = """\
ARG BASE
FROM ${{BASE}}
COPY deps {site}/
COPY rllm-envs {site}/
ENV PYTHONUNBUFFERED=1 HOME=/tmp
RUN {check}
USER {user}
EXPOSE {port}
ENTRYPOINT {entrypoint}
"""


def default_prefix() -> str:
    return os.environ.get(PREFIX_VARIABLE) or DEFAULT_PREFIX


def checked_serve_id(env_id: str) -> str:
    """The plain id of an env an image can serve, or a UsageError saying why not."""
    if ":" in env_id:
        raise UsageError(
            f"{env_id!r} comes from your own module, which an image cannot hold: serve it "
            f"from your project with rllm-envs serve {env_id}"
        )
    plain_id = check_env_id(env_id, option="rllm-envs serve")
    if plain_id in NEEDS_THE_HOST:
        where = (
            "on a machine with Chromium"
            if plain_id == "rllm/Web-v0"
            else "beside Docker, on the Docker host"
        )
        raise UsageError(
            f"{plain_id} {NEEDS_THE_HOST[plain_id]}, so its server runs {where}, not in an "
            f"image: run rllm-envs serve {plain_id} --host 0.0.0.0 there instead"
        )
    if plain_id in NOT_SERVABLE:
        raise UsageError(f"{plain_id} {NOT_SERVABLE[plain_id]}")
    return plain_id


def slug(env_id: str) -> str:
    """``rllm/FrozenLake-v0`` -> ``frozenlake-v0``; another namespace stays: ``ns-name-v1``."""
    return re.sub(r"[^a-z0-9]+", "-", env_id.lower().removeprefix("rllm/")).strip("-")


def image_repository(prefix: str, env_id: str) -> str:
    return f"{prefix}{slug(env_id)}"


def run_command(prefix: str, env_id: str, port: int = PORT) -> str:
    return f"docker run --rm -p {port}:{PORT} {image_repository(prefix, env_id)}"


def extras_of(env_id: str) -> tuple[str, ...]:
    """The rllm-envs extras the served env needs: its own (if any) and ``serve``."""
    from rllm_envs.core.registry import DEPRECATED_ENTRIES, ENV_ENTRIES

    entries = {entry.id: entry for entry in (*ENV_ENTRIES, *DEPRECATED_ENTRIES)}
    extra = entries[env_id].extra if env_id in entries else None
    return tuple(sorted({"serve", *([extra] if extra else [])}))


def dockerfile(env_id: str, site: str) -> str:
    entrypoint = ["python3", "-m", "rllm_envs", "serve", env_id]
    entrypoint += ["--host", "0.0.0.0", "--port", str(PORT)]
    return DOCKERFILE.format(
        site=site.rstrip("/"),
        check=json.dumps(["python3", "-c", _CHECK, env_id]),
        user=SERVER_USER,
        port=PORT,
        entrypoint=json.dumps(entrypoint),
    )


def recipe(env_id: str, base_id: str, digest: str) -> str:
    parts = [DOCKERFILE, _CHECK, env_id, ",".join(extras_of(env_id)), base_id, digest]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@dataclass
class ServeImageBuilder:
    """Builds the serve images of one setup run; what all of them share (the base, its
    Python, the rllm-envs wheel) is worked out once, when the first build needs it."""

    run: SetupRun
    progress: StageProgress
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rllm-serve-")))
    _base: str | None = None
    _digest: str | None = None
    _python: ImagePython | None = None
    _wheel: Path | None = None

    def base(self) -> str:
        if self._base is None:
            client = self.run.docker()
            if image_id(client, PYTHON_BASE) is not None:
                self._base = PYTHON_BASE
            else:
                self.progress.note(f"{self.run.options.rootfs_image}: the base")
                ensure_rootfs(self.run, self.progress)
                self._base = self.run.options.rootfs_image
        return self._base

    def digest(self) -> str:
        if self._digest is None:
            self._digest = package_digest()
        return self._digest

    def python(self) -> ImagePython:
        if self._python is None:
            self.progress.note(f"the Python of {self.base()}")
            try:
                output = self.run.docker().containers.run(
                    self.base(), ["python3", "-c", _PROBE], remove=True, network_disabled=True
                )
                found = json.loads(output)
            except Exception as error:
                raise BuildError(f"{self.base()} has no working python3: {error}") from error
            libc, libc_version = found["libc"]
            glibc = None
            if libc == "glibc":
                glibc = tuple(int(part) for part in libc_version.split(".")[:2])
            self._python = ImagePython(found["version"], found["machine"], glibc, found["site"])
        return self._python

    def wheel(self) -> Path:
        if self._wheel is None:
            self.progress.note("the rllm-envs wheel")
            self._wheel = package_wheel(self.scratch / "package")
        return self._wheel

    def ensure(self, env_id: str) -> str:
        """The image serving `env_id`, kept when its recipe holds, else built."""
        client = self.run.docker()
        repository = image_repository(self.run.options.serve_image_prefix, env_id)
        base = self.base()
        base_id = image_id(client, base)
        if base_id is None:
            raise BuildError(f"the base image {base} vanished while setup ran: run this again")
        wanted = recipe(env_id, base_id, self.digest())
        tag = f"{repository}:{wanted}"
        labels = image_labels(client, tag)
        if labels is not None and labels.get(RECIPE_LABEL) == wanted and not self.run.options.force:
            client.images.get(tag).tag(repository, "latest")
            return f"{repository} up to date"
        wheels = self.build(env_id, tag, base, wanted)
        client.images.get(tag).tag(repository, "latest")
        self.forget_older(repository, wanted)
        return f"built {repository}:{wanted} on {base} ({wheels} wheels)"

    def build(self, env_id: str, tag: str, base: str, wanted: str) -> int:
        require_pip()
        python = self.python()
        wheel = self.wheel()
        self.progress.note(f"{env_id}: resolving its wheels for Python {python.version}")
        pinned = resolve(wheel, extras_of(env_id), python, self.scratch)
        self.progress.note(f"{env_id}: {len(pinned)} wheels (downloaded once, then cached)")
        paths, _ = download(pinned, python, self.run.options.serve_cache or cache_dir())
        with tempfile.TemporaryDirectory(prefix="rllm-serve-image-", dir=self.scratch) as folder:
            context = Path(folder)
            for path in paths:
                unpack(path, context / "deps")
            unpack(wheel, context / "rllm-envs")
            labels = {
                ENV_LABEL: env_id,
                BASE_LABEL: base,
                RECIPE_LABEL: wanted,
                WHEELS_LABEL: wheel_summary(paths),
            }
            # One LABEL instruction: the classic builder commits a layer per instruction.
            label_line = " ".join(f"{key}={json.dumps(value)}" for key, value in labels.items())
            text = dockerfile(env_id, python.site) + f"LABEL {label_line}\n"
            (context / "Dockerfile").write_text(text)
            self.progress.note(f"docker build of {tag} on {base}")
            build_image(
                self.run.docker(),
                context,
                tag,
                {},
                nocache=self.run.options.force,
                buildargs={"BASE": base},
            )
        return len(paths) + 1

    def forget_older(self, repository: str, wanted: str) -> None:
        """Untag the images of `repository`'s earlier recipes (layers they share stay; one a
        container still runs stays too)."""
        client = self.run.docker()
        keep = {f"{repository}:{wanted}", f"{repository}:latest"}
        for image in client.images.list(name=repository):
            for tag in image.tags:
                if tag.rsplit(":", 1)[0] == repository and tag not in keep:
                    with contextlib.suppress(Exception):
                        client.images.remove(tag)

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def ensure_serve_images(run: SetupRun, progress: StageProgress) -> str:
    env_ids = run.options.serve_envs
    if not env_ids:
        return "no env id named"
    builder = ServeImageBuilder(run, progress)
    outcomes = []
    try:
        progress.items(len(env_ids))
        for env_id in env_ids:
            outcomes.append(builder.ensure(env_id))
            progress.advance(outcomes[-1])
    finally:
        builder.close()
    return "; ".join(outcomes)


STAGE = Stage("serve-images", "serve images (rllm-envs serve in Docker)", ensure_serve_images)
