"""Ships ``rllm_envs_autoregister.pth`` at the top of site-packages (regular and editable
installs), which pyproject.toml alone cannot express. See src/rllm_envs_autoregister.py."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_FILE = "rllm_envs_autoregister.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / PTH_FILE
        self.copy_file(str(Path(__file__).parent / "src" / PTH_FILE), str(target))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH_FILE)]


setup(cmdclass={"build_py": BuildPyWithPth})
