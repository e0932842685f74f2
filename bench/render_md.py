"""Names and markdown helpers shared by the builders of docs/PERFORMANCE.md (bench/render.py).

The page's file names, the writers' labels, and the small formatters every section uses:
numbers (``_f``), tables, a failed section's line, the delivery engines each sink writer ran with.
"""

from __future__ import annotations

from typing import Any

DOC_NAME, PNG_NAME, SCALING_PNG_NAME = "PERFORMANCE.md", "performance.png", "performance-scaling.png"

NOOP, RAW, FLUSH, SYNC, ASYNC, EXACTLY = ("noop", "raw", "flush-writer", "sink-sync", "sink-async",
                                          "sink-exactly-once")
SYNC_PY = "sink-sync-python"
LABELS = {NOOP: "no-op (Spark's floor)", RAW: "raw (ceiling)", FLUSH: "flush-writer", SYNC: "sink sync (native)",
          SYNC_PY: "sink sync (Python engine)", ASYNC: "sink async (native)", EXACTLY: "sink exactly-once (native)",
          "flush-writer-id": "flush-writer + rks-id header", "spark-kafka": "Spark's Kafka sink",
          "spark-kafka-alike": "Spark's Kafka sink, batching as librdkafka's",
          "sink-exactly-once-no-resplit": "sink exactly-once, no re-split", "raw-poll": "raw, ending by polling",
          "sink-sync-partition-ids": "sink sync (native), record_ids=\"partition\""}


def _ok(section: Any) -> bool:
    return isinstance(section, dict) and "error" not in section


# -- markdown ---------------------------------------------------------------------------------------


def _f(x: Any, fmt: str = "{:,.0f}", none: str = "–") -> str:
    if x is None:
        return none
    try:
        return fmt.format(x)
    except (TypeError, ValueError):
        return str(x)


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _err(section: Any) -> str:
    return f"**This section failed:** `{section.get('error')}`\n" if isinstance(section, dict) else "*Not run.*\n"


def _engines_text(engines: Any) -> str:
    """Which delivery engine each sink writer ran with, as its worker processes reported it."""
    if not engines:
        return ""
    parts = [f"{LABELS.get(wr, wr)}: {', '.join(e['engines'])} in {e['workers']} worker process"
             f"{'es' if e['workers'] != 1 else ''}" for wr, e in engines.items() if e]
    return ("Delivery engine of each sink writer, asked in the worker processes before its first timed run: "
            + "; ".join(parts) + ".")
