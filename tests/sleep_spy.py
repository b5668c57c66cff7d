"""The `time` module as huggingface_hub's retry loops see it, with each sleep recorded and skipped: shared by
test_hub's retry_sleeps fixture and the fresh CLI process its subprocess tests start (CLI_COUNTING_SLEEPS)."""
from __future__ import annotations

import time


class SleepSpy:
    def __init__(self, sleeps: list[float]):
        self._sleeps = sleeps

    def sleep(self, seconds: float) -> None:
        self._sleeps.append(seconds)

    def __getattr__(self, name):
        return getattr(time, name)
