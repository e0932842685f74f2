"""Section 10's figures (bench/threads.py) folded into the explanation of a missed target against Spark's sink.

:func:`threads_sentence` sums the per-thread CPU of each writer into a few named parts
(the same for every writer, so that they line up) and says where the sink spends more.
"""

from __future__ import annotations

from typing import Any

from bench.render_md import LABELS, _ok

__all__ = ["PARTS", "parts_of", "threads_sentence"]

#: (part, process kind, thread-group prefixes); a group no part claims counts as "other".
PARTS = (
    ("Spark's task threads", "spark_jvm", ("Executor task",)),
    ("the Java producer's network thread", "spark_jvm", ("kafka-producer",)),
    ("the JVM's JIT and GC", "spark_jvm", ("C CompilerThre", "GC Thread", "G Conc", "G Refine", "G Service",
                                           "VM Thread")),
    ("Spark's other threads (those feeding the Python workers among them)", "spark_jvm", ("",)),
    ("the Python workers' own threads", "python", ("python",)),
    ("librdkafka's threads", "python", ("rdk:",)),
    ("the broker", "broker", ("",)),
)


def parts_of(us_per_record: dict[str, dict[str, float]]) -> dict[str, float]:
    """Median µs per record of one writer (``summary[writer]["us_per_record"]``) summed per :data:`PARTS`."""
    out = {name: 0.0 for name, _, _ in PARTS}
    out["other"] = 0.0
    for group, st in us_per_record.items():
        kind, _, thread = group.partition("/")
        name = next((n for n, k, prefixes in PARTS if k == kind and thread.startswith(prefixes)), "other")
        out[name] += st["median"]
    return out


def threads_sentence(results: dict[str, Any], us: str, them: str) -> str:
    """'Thread by thread (section 10) ...' for writers ``us`` and ``them`` ('' without that section)."""
    section = results.get("threads")
    if not _ok(section) or us not in section["summary"] or them not in section["summary"]:
        return ""
    a, b = (parts_of(section["summary"][w]["us_per_record"]) for w in (us, them))

    def line(p: dict[str, float]) -> str:
        return ", ".join(f"{n} {v:.2f}" for n, v in p.items() if v >= 0.05)

    more = sorted(((a[n] - b[n], n) for n in a if a[n] - b[n] >= 0.1), reverse=True)
    text = (f"Thread by thread (section 10, {section['rows']:,} rows of {section['value_bytes']} B, µs of CPU per "
            f"record, medians of {section['rounds']} rounds): {LABELS.get(them, them)}: {line(b)}; "
            f"{LABELS.get(us, us)}: {line(a)}.")
    if more:
        text += " The sink spends more in " + ", ".join(f"{n} (+{d:.2f})" for d, n in more) + "."
    return text
