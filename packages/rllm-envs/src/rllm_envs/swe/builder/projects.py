"""The pinned projects the shipped SWE tasks are made from, and what their images hold.

Every project is a small, pure-Python library whose sdist ships its own test suite; the suite
runs in a few seconds with pytest and nothing else (plus the listed pure-Python wheels). An
sdist and every wheel is pinned by version *and* sha256, so an image built today holds the same
bytes as one built next year. Splits are by project: no test-split project is seen in training.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# The shipped task rows name their images ``rllm-swe/<repo>:<version>``. A machine may keep
# them under another prefix (RLLM_SWE_IMAGE_PREFIX, or ``rllm-envs setup --swe-image-prefix``):
# rows naming a shipped image are then read as naming the renamed one.
SHIPPED_IMAGE_PREFIX = "rllm-swe/"
IMAGE_PREFIX_VARIABLE = "RLLM_SWE_IMAGE_PREFIX"


def image_prefix() -> str:
    """The prefix this machine keeps the shipped SWE images under (read at call time)."""
    return os.environ.get(IMAGE_PREFIX_VARIABLE) or SHIPPED_IMAGE_PREFIX


def local_image(name: str, prefix: str | None = None) -> str:
    """`name` as this machine tags it: a shipped image under `prefix` (default: the
    environment's), any other image as it is."""
    if not name.startswith(SHIPPED_IMAGE_PREFIX):
        return name
    return (prefix or image_prefix()) + name.removeprefix(SHIPPED_IMAGE_PREFIX)


@dataclass(frozen=True)
class Pinned:
    """A file from PyPI, by name, version and content hash."""

    name: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Project:
    """How to build, test and mutate one project.

    sdist: the pinned source distribution; its tree becomes /testbed.
    import_root: the folder of the tree that goes on sys.path ("." or "src").
    packages: the library's own code, as paths in the tree (files or folders) mutations may touch.
    skip_modules: files under `packages` left alone (generated version files, CLI glue, ...).
    test_paths: what the full suite runs (passed to pytest).
    wheels: extra pure-Python wheels the library or its tests import.
    split: "train" or "test" (by project).
    """

    sdist: Pinned
    import_root: str
    packages: tuple[str, ...]
    test_paths: tuple[str, ...]
    split: str
    skip_modules: tuple[str, ...] = ()
    wheels: tuple[Pinned, ...] = ()

    @property
    def name(self) -> str:
        return self.sdist.name

    @property
    def version(self) -> str:
        return self.sdist.version

    @property
    def repo(self) -> str:
        """The short name task ids and image names use (``python-slugify`` → ``slugify``)."""
        return self.name.removeprefix("python-")

    @property
    def image(self) -> str:
        """The image's name in the shipped rows (see :func:`local_image` for this machine's)."""
        return f"{SHIPPED_IMAGE_PREFIX}{self.repo}:{self.version}"

    @property
    def source_root(self) -> str:
        return "/testbed" if self.import_root == "." else f"/testbed/{self.import_root}"


# pytest and what it needs on Python 3.11, in every project image.
PYTEST_WHEELS: tuple[Pinned, ...] = (
    Pinned("pytest", "9.2.0", "07acdcf88ec174f907dc01af70bf52d49b014bbab03faeeade31c96b18c2e588"),
    Pinned("pluggy", "1.7.0", "7dd7b0d8832ba3cb632c306926ded123429211b83641b35dc5c41ad2d34f9bec"),
    Pinned(
        "iniconfig", "2.3.1", "9121e2c1fdb355232495be3194c8dfe87ccc2d5dee45947b78e68f499790d7a7"
    ),
    Pinned("packaging", "26.3", "d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c"),
    Pinned(
        "pygments", "2.21.0", "2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9"
    ),
)

# Build backends pip needs to read an sdist's metadata while downloading it (installed into a
# private tools venv, so downloads skip pip's per-package isolated build environments).
SDIST_BACKENDS: tuple[str, ...] = (
    "setuptools>=80",
    "setuptools-scm>=8",
    "setuptools-git-versioning>=2",
    "hatchling>=1.20",
    "flit_core>=3.2",
)

# git (for the agent's repository and for applying patches), from Debian bookworm, on top of the
# sandbox's debootstrap rootfs: git's dependencies that minbase lacks, and perl-base, which the
# host's apt may know in a newer security release than the rootfs holds (perl needs the same).
GIT_DEBS: tuple[str, ...] = (
    "git",
    "git-man",
    "libbrotli1",
    "libcurl3-gnutls",
    "liberror-perl",
    "libgdbm-compat4",
    "libgdbm6",
    "libldap-2.5-0",
    "libnghttp2-14",
    "libperl5.36",
    "libpsl5",
    "librtmp1",
    "libsasl2-2",
    "libsasl2-modules-db",
    "libssh2-1",
    "perl",
    "perl-base",
    "perl-modules-5.36",
)

PROJECTS: tuple[Project, ...] = (
    Project(
        Pinned(
            "toolz", "1.2.0", "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490"
        ),
        import_root=".",
        packages=("toolz",),
        skip_modules=("toolz/compatibility.py", "toolz/_signatures.py", "toolz/curried"),
        test_paths=("toolz/tests",),
        split="train",
    ),
    Project(
        Pinned(
            "sqlparse", "0.6.1", "ca722573f848ff2d30e40ea30f53a104b7dea7635ea9285891263eb2c58fb6e7"
        ),
        import_root=".",
        packages=("sqlparse",),
        skip_modules=("sqlparse/__main__.py", "sqlparse/cli.py", "sqlparse/keywords.py"),
        test_paths=("tests",),
        split="train",
    ),
    Project(
        Pinned(
            "boltons", "26.2.0", "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c"
        ),
        import_root=".",
        packages=("boltons",),
        # Clock-, socket- and garbage-collector-dependent modules make flaky tasks.
        skip_modules=(
            "boltons/timeutils.py",
            "boltons/socketutils.py",
            "boltons/gcutils.py",
            "boltons/debugutils.py",
            "boltons/ecoutils.py",
            "boltons/deprutils.py",
            "boltons/easterutils.py",
        ),
        test_paths=("tests",),
        split="train",
    ),
    Project(
        Pinned(
            "parse", "1.22.4", "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5"
        ),
        import_root=".",
        packages=("parse/__init__.py",),
        test_paths=("tests",),
        split="train",
    ),
    Project(
        Pinned(
            "semver", "3.1.2", "bea193552413194252d33ff26ce0962b76669bd1c6fb17e8e203ac37f072feaf"
        ),
        import_root="src",
        packages=("src/semver",),
        skip_modules=("src/semver/__main__.py", "src/semver/__about__.py"),
        test_paths=("tests",),
        split="train",
    ),
    Project(
        Pinned(
            "tabulate", "0.10.0", "e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d"
        ),
        import_root=".",
        packages=("tabulate/__init__.py",),
        test_paths=("test",),
        split="train",
    ),
    Project(
        Pinned(
            "inflection",
            "0.5.1",
            "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
        ),
        import_root=".",
        packages=("inflection/__init__.py",),
        test_paths=("test_inflection.py",),
        split="train",
    ),
    Project(
        Pinned(
            "cachetools",
            "8.0.2",
            "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0",
        ),
        import_root="src",
        packages=("src/cachetools",),
        test_paths=("tests",),
        split="test",
    ),
    Project(
        Pinned(
            "isodate", "0.7.2", "4cd1aa0f43ca76f4a6c6c0292a85f40b35ec2e43e315b59f06e6d32171a953e6"
        ),
        import_root="src",
        packages=("src/isodate",),
        skip_modules=("src/isodate/version.py",),
        test_paths=("tests",),
        split="test",
    ),
    Project(
        Pinned(
            "python-slugify",
            "9.2.0",
            "cee32948083476013804de1667724fb1362dacb71e47b1d5d92adf8db6ee3298",
        ),
        import_root=".",
        packages=("slugify",),
        skip_modules=("slugify/__main__.py", "slugify/__version__.py"),
        test_paths=("tests",),
        split="test",
        wheels=(
            Pinned(
                "text-unidecode",
                "1.3",
                "1311f10e8b895935241623731c2ba64f4c455287888b18189350b67134a822e8",
            ),
        ),
    ),
)


def project_named(name: str) -> Project:
    """A project by its short name (``toolz``, ``slugify``) or PyPI name."""
    for project in PROJECTS:
        if name in (project.repo, project.name):
            return project
    known = sorted(project.repo for project in PROJECTS)
    raise KeyError(f"no SWE project {name!r}; choose from {known}")
