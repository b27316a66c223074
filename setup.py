"""The packages are found, never listed by hand (a subpackage added later cannot be left out of the wheel):
``torchtune_longshort`` and every package under it, plus the repository's ``configs/`` folder installed as the
data package ``torchtune_longshort.configs`` (``longshort-cp`` copies the shipped configs from it). Everything else
about the distribution is in ``pyproject.toml``; ``tests/test_wheel_install.py`` builds the wheel and runs the
README's commands from it.

setuptools copies the package into ``build/lib`` and zips that folder, adding to what an earlier build left there:
a module, task YAML or config removed or renamed since an earlier ``pip install .`` / ``pip wheel .`` in the same
checkout was still shipped. :class:`BuildPyWithoutStaleFiles` removes from ``build/lib/torchtune_longshort`` (a
folder only the build writes) every file this build did not put there.

A wheel built from a git checkout (``pip install .`` of a clone, ``pip install git+https://...``) records that
checkout's commit and dirty flag in ``torchtune_longshort/_build_commit.json``, which every results file's provenance
then names (:mod:`torchtune_longshort.provenance`; a checkout names its own). An sdist built from a git checkout
(``python -m build``, ``setup.py sdist``) carries that file, and a wheel built from the unpacked sdist (``pip install
torchtune_longshort-*.tar.gz``), which is no git checkout, ships it."""

import json
import os
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

PACKAGE = "torchtune_longshort"


class BuildPyWithoutStaleFiles(build_py):
    """``build_py``, then the files under the build folder's package that are not this build's outputs removed (and
    the folders left empty by it). Not in editable mode, whose build folder is a temporary one of its own."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        keep = {os.path.normpath(p) for p in self.get_outputs(include_bytecode=True)}
        for folder, _, files in os.walk(os.path.join(self.build_lib, PACKAGE), topdown=False):
            for name in files:
                path = os.path.normpath(os.path.join(folder, name))
                if path not in keep:
                    os.remove(path)
            if not os.listdir(folder):
                os.rmdir(folder)
        _record_commit(os.path.join(self.build_lib, PACKAGE))


class SdistWithCommit(sdist):
    """``sdist``, with the checkout's commit written into the release tree's package (:func:`_record_commit`)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        _record_commit(os.path.join(base_dir, PACKAGE))


def _record_commit(package_dir):
    """The build's checkout commit written into the built package; outside a git checkout, the commit an unpacked
    sdist's source tree carries (written there by :class:`SdistWithCommit`), else nothing."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:  # the source tree's own module (stdlib only at import); the same rule the installed package reads with
        from torchtune_longshort.provenance import BUILD_COMMIT, checkout_commit
    finally:
        sys.path.pop(0)
    commit = checkout_commit()
    carried = os.path.join(here, PACKAGE, BUILD_COMMIT.name)
    if commit["git_commit"] is None and os.path.isfile(carried):
        with open(carried) as f:
            commit = json.load(f)
    if commit.get("git_commit") is not None and os.path.isdir(package_dir):
        target = os.path.join(package_dir, BUILD_COMMIT.name)
        if os.path.lexists(target):  # the sdist's release tree hard-links the source's files: never write through
            os.remove(target)
        with open(target, "w") as f:
            json.dump(commit, f)


def _config_packages():
    """``torchtune_longshort.configs`` and a package name for each folder under ``configs/`` that holds a YAML (a data
    folder under a package but in no list made setuptools warn, once a folder, 'Package would be ignored')."""
    names = [f"{PACKAGE}.configs"]
    for folder, subfolders, files in os.walk("configs"):
        subfolders.sort()
        if folder != "configs" and any(f.endswith(".yaml") for f in files):
            names.append(f"{PACKAGE}.configs." + os.path.relpath(folder, "configs").replace(os.sep, "."))
    return names


setup(
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]) + _config_packages(),
    package_dir={f"{PACKAGE}.configs": "configs"},
    cmdclass={"build_py": BuildPyWithoutStaleFiles, "sdist": SdistWithCommit},
)
