"""The GitHub workflows follow GitHub's schema and pass a security linter with no findings."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from book import ROOT

WORKFLOWS = sorted((ROOT / ".github/workflows").glob("*.yml"))


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed; run `make setup`")
    return found


def test_workflows_exist():
    assert {w.name for w in WORKFLOWS} >= {"ci.yml", "gpu.yml"}


def test_workflows_follow_the_github_schema():
    command = [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_finds_nothing():
    done = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", str(ROOT / ".github/workflows")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings" in done.stdout + done.stderr


def test_actions_are_pinned_by_commit():
    for workflow in WORKFLOWS:
        for line in workflow.read_text().splitlines():
            if "uses:" in line:
                ref = line.split("uses:")[1].split("#")[0].strip()
                assert "@" in ref and len(ref.split("@")[1]) == 40, f"{workflow.name}: {ref} is not pinned by SHA"


def test_gpu_workflow_never_runs_on_pull_requests():
    text = (ROOT / ".github/workflows/gpu.yml").read_text()
    assert "pull_request" not in text.split("jobs:")[0]
    assert "self-hosted" in text
