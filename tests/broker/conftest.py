from __future__ import annotations

from typing import Iterator

import pytest

from spark_recoverable_sink.task.runtime import reset_runtimes


@pytest.fixture(autouse=True)
def _close_runtimes() -> Iterator[None]:
    """Each test's in-process runtimes are closed after it (tasks never need this)."""
    yield
    reset_runtimes()
