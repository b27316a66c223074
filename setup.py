"""The packages are found, never listed by hand (a subpackage added later cannot be left out of the wheel):
``torchtune_longshort`` and every package under it, plus the repository's ``configs/`` folder installed as the
data package ``torchtune_longshort.configs`` (``longshort-cp`` copies the shipped configs from it). Everything else
about the distribution is in ``pyproject.toml``; ``tests/test_wheel_install.py`` builds the wheel and runs the
README's commands from it."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["torchtune_longshort", "torchtune_longshort.*"]) + ["torchtune_longshort.configs"],
    package_dir={"torchtune_longshort.configs": "configs"},
)
