"""Section 10 of docs/PERFORMANCE.md: both sinks thread by thread (bench/threads.py's results).

:func:`threads_md` is the section's text (also what ``python bench/threads.py`` prints);
:func:`threads_section_md` appends it, with its heading, to the page bench/render.py builds.
"""

from __future__ import annotations

from typing import Any, Callable

from bench.common import median
from bench.render_md import LABELS, _err, _ok

__all__ = ["threads_md", "threads_section_md"]

FLOOR_US = 0.03  # a thread group under this many µs per record for every writer is summed into "other threads"
MIN_SAMPLES = 50  # a thread group with fewer JFR samples is left out of the method split


def _cell(st: dict[str, float] | None) -> str:
    if st is None:
        return "–"
    return f"{st['median']:.2f} ({st['low']:.2f}–{st['high']:.2f})"


def threads_md(section: dict[str, Any]) -> str:
    """One table of CPU µs per record by process and thread group, a column per writer; then the JFR split."""
    summary: dict[str, Any] = section["summary"]
    writers = [w for w in section["writers"] if w in summary]
    groups = sorted({g for w in writers for g in summary[w]["us_per_record"]})
    shown = [g for g in groups if any(summary[w]["us_per_record"].get(g, {}).get("median", 0) >= FLOOR_US
                                      for w in writers)]
    shown.sort(key=lambda g: -max(summary[w]["us_per_record"].get(g, {}).get("median", 0) for w in writers))
    lines = [f"{section['rows']:,} cached rows of {section['value_bytes']} B, {section.get('partitions', 2)} Spark "
             f"partitions, topics of {section.get('topic_partitions', 4)}; {section['rounds']} rounds, the writers "
             "interleaved. CPU µs per record from /proc, per process and thread (threads of one pool together), "
             "median over the rounds (lowest–highest).", ""]
    head = "| process / thread | " + " | ".join(LABELS.get(w, w) for w in writers) + " |"
    lines += [head, "|---|" + "---:|" * len(writers)]
    for g in shown:
        lines.append(f"| {g} | " + " | ".join(_cell(summary[w]["us_per_record"].get(g)) for w in writers) + " |")
    rest = [sum(st["median"] for g, st in summary[w]["us_per_record"].items() if g not in shown) for w in writers]
    lines.append("| other threads (each under {:.2f}) | ".format(FLOOR_US) + " | ".join(f"{x:.2f}" for x in rest)
                 + " |")
    lines.append("| **threads' sum** | " + " | ".join(_cell(summary[w]["threads_sum"]) for w in writers) + " |")
    lines.append("| processes' total (threads that ended within a write included) | "
                 + " | ".join(_cell(summary[w]["process_total"]) for w in writers) + " |")
    rps = [f"{median(summary[w]['rows_per_s']) or 0:,.0f}" for w in writers]
    lines.append("| rows/s (median) | " + " | ".join(rps) + " |")
    jfr = section.get("jfr") or {}
    if jfr:
        lines += ["", "Spark's JVM by method (Java Flight Recorder, one more write per writer, Java code sampled "
                      "every 1 ms): each thread group's samples by the first frame, from the leaf up, of a known "
                      "component (`jdk`: JDK code only, e.g. sockets, collections).", ""]
        for w, per in jfr.items():
            for g, comps in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
                n = sum(comps.values())
                if n < MIN_SAMPLES:
                    continue
                parts = ", ".join(f"{c} {k / n:.0%}" for c, k in sorted(comps.items(), key=lambda kv: -kv[1]))
                lines.append(f"* {LABELS.get(w, w)}, `{g}` ({n:,} samples): {parts}")
    return "\n".join(lines) + "\n"


def threads_section_md(w: Callable[[str], Any], results: dict[str, Any]) -> None:
    """Append section 10 (``results["threads"]``, from ``bench/run.py --only threads``) to the page."""
    w("## 10. Both sinks, thread by thread\n")
    section = results.get("threads")
    if not _ok(section):
        w(_err(section))
        return
    w("Where each writer's CPU goes on the same cached rows and the same broker (bench/threads.py): Spark's "
      "Kafka sink (a Java producer in Spark's JVM), this sink in sync mode (WAL and librdkafka in the Python "
      "workers), and the raw confluent-kafka loop (no WAL, no header). In local mode Spark's JVM is the "
      "executor: its `Executor task` threads run the tasks (for this sink and the raw loop: the rows to Arrow "
      "and the re-split's shuffle), `Thread-` threads feed the Python workers; the broker's "
      "`data-plane-kafka` threads handle the requests.\n")
    w(threads_md(section))
