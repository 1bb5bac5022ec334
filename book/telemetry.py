"""What the GPU did while a benchmark ran: its SM clock, power draw and temperature, sampled by nvidia-smi.

A GPU under load runs into its power limit and lowers its clock, and a warm GPU may lower it further. Two runs
minutes apart can then differ by several percent with nothing changed in the code. The provenance keeps the range
of each reading over the run, so a reader can see whether the clock moved while the numbers were taken.
"""

from __future__ import annotations

import os
import statistics
import subprocess

FIELDS = {"sm_mhz": "clocks.sm", "power_w": "power.draw", "temperature_c": "temperature.gpu"}
INTERVAL_MS = 500


def summarize(lines: list[str]) -> dict:
    """{reading: {min, median, max}} over the sampled lines of "clock, power, temperature" (unreadable lines are
    skipped), with the number of samples; {} without any readable line."""
    samples = []
    for line in lines:
        try:
            samples.append([float(value) for value in line.split(",")])
        except ValueError:
            continue
    samples = [s for s in samples if len(s) == len(FIELDS)]
    if not samples:
        return {}
    summary = {"samples": len(samples), "interval_ms": INTERVAL_MS}
    for i, name in enumerate(FIELDS):
        values = [s[i] for s in samples]
        summary[name] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    return summary


class Sampler:
    """`with Sampler() as sampler: ...` samples the first visible GPU every INTERVAL_MS; sampler.summary() then
    gives summarize()'s dict ({} where nvidia-smi is missing or says nothing)."""

    def __init__(self):
        self._process = None
        self._lines: list[str] = []

    def __enter__(self):
        device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        query = ",".join(FIELDS.values())
        try:
            self._process = subprocess.Popen(
                ["nvidia-smi", "-i", device, f"--query-gpu={query}", "--format=csv,noheader,nounits",
                 f"-lms={INTERVAL_MS}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self._process = None
        return self

    def __exit__(self, *exc):
        if self._process is not None:
            self._process.terminate()
            try:
                out, _ = self._process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                out, _ = self._process.communicate()
            self._lines = out.splitlines()
        return False

    def summary(self) -> dict:
        return summarize(self._lines)
