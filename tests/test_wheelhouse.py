"""The maintainer path on an air-gapped GPU machine: with WHEELHOUSE=DIR every pip install of `make refresh` reads
that folder alone, and `make wheelhouse` fetches the wheels for the GPU machine's Python and platform."""

import shutil
import subprocess

import pytest

from book import ROOT


def dry_run(*args: str) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run([make, "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_setup_gpu_installs_from_the_wheelhouse_alone():
    installs = [line for line in dry_run("setup-gpu", "WHEELHOUSE=/air/gapped").splitlines() if "pip install" in line]
    assert len(installs) == 2 and all("--no-index --find-links /air/gapped" in line for line in installs)
    assert all("--no-index" not in line for line in dry_run("setup-gpu").splitlines())  # the network by default


def test_wheelhouse_fetches_wheels_for_the_gpu_python_and_every_requirement():
    command = " ".join(dry_run("wheelhouse", "WHEELHOUSE=/tmp/wh").split())
    assert "pip download" in command and "--only-binary=:all: -d /tmp/wh" in command
    assert "--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64" in command
    assert "-r requirements/docs.txt -r requirements/test.txt" in command and "setuptools" in command
