"""Scenario results: the row each fault scenario records in the results JSON, and the table printed from it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from .readback import Tally

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RESULTS = os.path.join(HERE, "results", "last_run.json")
REPO = os.path.dirname(os.path.dirname(HERE))


def results_path() -> str:
    return os.environ.get("RKS_FAULT_RESULTS") or DEFAULT_RESULTS


@dataclass
class ScenarioRow:
    scenario: str
    title: str
    status: str = "running"  # passed / failed / skipped
    rows_sent: int | None = None
    records_read: int | None = None
    distinct_ids: int | None = None
    lost: int | None = None
    duplicates: int | None = None
    recovery_s: float | None = None  # fault injected -> every row visible to a consumer
    fault: str = ""
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    finished_at: str = ""
    failure: str = ""
    commit: str = ""  # the code the scenario ran on: git's short HEAD, "+dirty" with uncommitted changes

    def apply(self, t: Tally) -> None:
        self.rows_sent, self.records_read, self.distinct_ids = t.rows_sent, t.records_read, t.distinct_ids
        self.lost, self.duplicates = t.lost, t.duplicates
        if t.lost:
            self.notes.append(f"lost sample: {t.lost_sample}")

    def recovery(self, fault_at: float | None, full_at: float | None) -> None:
        if fault_at is not None and full_at is not None:
            self.recovery_s = round(max(0.0, full_at - fault_at), 2)


def code_commit(repo: str = REPO) -> str:
    """The commit of the code under test: git's short HEAD, ``+dirty`` when tracked files differ from it.

    ``"unknown"`` outside a git checkout (or without git).
    """
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head


def record_result(row: ScenarioRow, path: str | None = None) -> None:
    """Replace this scenario's row in the results JSON (other scenarios' rows are kept).

    Test processes running at once (pytest-xdist workers, a soak) each read,
    change and replace the file: the whole read-modify-write holds an
    exclusive ``flock`` on ``<path>.lock``, so that no row another process
    just wrote is lost; the new file is written aside (a temporary file of
    this process and thread) and renamed over the old one.
    """
    path = path or results_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    row.commit = row.commit or code_commit()
    from devtools.kafka_broker import external_bootstrap, kafka_version

    cluster = "three-node KRaft clusters for scenarios 21-22 (tests/faults/cluster.py)"
    broker = (f"the cluster at KAFKA_BOOTSTRAP={external_bootstrap()} for shared-broker scenarios, "
              f"Apache Kafka {kafka_version()} for the others ({cluster})") if external_bootstrap() else \
        f"Apache Kafka {kafka_version()} (single-node KRaft, devtools/kafka_broker.py; {cluster})"
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # let go when the file closes
        data: dict[str, Any] = {"scenarios": {}}
        with contextlib.suppress(FileNotFoundError, ValueError):
            with open(path) as f:
                data = json.load(f)
        data.setdefault("scenarios", {})[row.scenario] = asdict(row)
        data["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        data["machine"] = f"{os.cpu_count()} cores, python {sys.version.split()[0]}"
        data["broker"] = broker
        tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)


def print_table(rows: Iterable[dict[str, Any]], out: Any = None) -> None:
    out = out or sys.stdout
    cols = ["scenario", "status", "rows_sent", "distinct_ids", "lost", "duplicates", "recovery_s"]
    lines = [cols] + [[str(r.get(c, "")) if r.get(c) is not None else "-" for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    for line in lines:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)), file=out)
