"""Ships ``rllm_envs_autoregister.pth`` at the top of site-packages, for regular and editable
installs, which pyproject.toml alone cannot express. See src/rllm_envs_autoregister.py."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_FILE = "rllm_envs_autoregister.pth"
PTH_SOURCE = Path(__file__).parent / "src" / PTH_FILE


class BuildPyWithPth(build_py):
    """Regular wheels: the .pth goes next to the packages, i.e. into site-packages."""

    def run(self):
        super().run()
        self.copy_file(str(PTH_SOURCE), str(Path(self.build_lib) / PTH_FILE))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH_FILE)]


class EditableWheelWithPth(editable_wheel):
    """Editable wheels hold only a path .pth; everything written to the unpacked wheel
    directory at this step lands in site-packages, so the hook's .pth is added there."""

    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        shutil.copyfile(PTH_SOURCE, Path(installation_dir) / PTH_FILE)


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
