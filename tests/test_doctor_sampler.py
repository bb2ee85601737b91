"""The doctor's stack sampler parks its clock while no window is open (a long forward, backward
or optimizer step) and resumes it when one opens: no ticks, so no GIL taken and no thread woken,
where there is nothing to sample. Counts of wake-ups, not timings: the bounds hold on a loaded
machine too (a busy machine only makes the ticks fewer)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from pitstop.doctor.record.stacks import StackSampler


def _busy_here(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.0005)  # this file's line, the GIL released between samples


@pytest.fixture
def sampler(monkeypatch):
    monkeypatch.chdir(Path(__file__).parent)  # this file is the "user's code" of the samples
    s = StackSampler(interval=0.005)
    s.start()
    yield s
    s.stop()
    assert s.join(timeout=5)


def test_a_closed_window_parks_the_clock_and_an_opening_resumes_it(sampler):
    time.sleep(0.3)  # no window open: a free-running 5 ms clock would tick ~60 times
    parked = sampler.ticks
    assert parked <= 4, parked
    sampler.open()
    _busy_here(0.3)
    sampler.close()
    assert sampler.ticks >= parked + 3  # the opening woke the clock
    assert sampler.samples["host"] >= 1 and all("test_doctor_sampler.py:" in site for _, site in sampler.counts)
    after = sampler.ticks
    time.sleep(0.3)
    assert sampler.ticks - after <= 3  # parked again


def test_parking_leaves_the_scripts_random_state_alone(sampler):
    random.seed(1234)
    expected = [random.random() for _ in range(3)]
    random.seed(1234)
    for _ in range(5):  # park and resume a few times (each resume draws a phase)
        time.sleep(0.03)
        sampler.open()
        _busy_here(0.01)
        sampler.close()
    assert sampler.ticks >= 3
    assert [random.random() for _ in range(3)] == expected


def test_stop_ends_a_parked_clock():
    s = StackSampler(interval=0.005)
    s.start()
    time.sleep(0.05)
    s.stop()
    assert s.join(timeout=5)
