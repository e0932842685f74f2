"""How the operator commands print: rich tables for people, a progress bar on a terminal, one-line errors.

Tables go to stdout; errors and notices to stderr, one line each, prefixed
``rks:``. On a terminal rich sizes the table to the screen; elsewhere it is
printed wide enough not to be cut.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator, Sequence

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from .inspect import SlotRow
from .replay import ReplayProgress

__all__ = ["console", "error", "notice", "slots_table", "letters_table", "replay_progress", "human_bytes",
           "human_age"]


def console() -> Console:
    """A console on the current stdout (looked up at each call: tests swap it)."""
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if tty else 200, highlight=False, soft_wrap=not tty)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def error(text: str) -> None:
    """``rks: error: <text>`` on stderr, on one line."""
    click.echo(f"rks: error: {one_line(text)}", err=True)


def notice(text: str) -> None:
    """``rks: <text>`` on stderr, on one line."""
    click.echo(f"rks: {one_line(text)}", err=True)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def human_age(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def _n(v: int | None) -> str:
    return "—" if v is None else f"{v:,}"


def slots_table(rows: Sequence[SlotRow]) -> Table:
    """The ``rks inspect`` table (reasons a slot cannot be read are printed under it)."""
    t = Table(title=None, show_lines=False)
    for col, just in (("sink", "left"), ("slot", "right"), ("owner", "left"), ("pending", "right"),
                      ("uncommitted", "right"), ("dead letters", "right"), ("on disk", "right"),
                      ("oldest pending", "right"), ("state", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rows:
        owner = f"alive ({escape(r.owner)})" if r.owner_alive and r.owner else ("alive" if r.owner_alive else "dead")
        state = "unreadable (see below)" if r.error else ("not read (live owner)" if r.owner_alive else "ok")
        t.add_row(escape(r.sink), str(r.slot), owner, _n(r.pending_records), _n(r.uncommitted_records),
                  _n(r.dead_letters), human_bytes(r.bytes_on_disk), human_age(r.oldest_pending_age_s), state)
    return t


def letters_table(items: Sequence[dict[str, Any]]) -> Table:
    """The ``rks dead-letters`` table: id, topic, partition, error, record time."""
    import datetime as dt

    t = Table()
    for col in ("slot", "record id", "topic", "partition", "time (record)", "error"):
        t.add_column(col)
    for j in items:
        ts = j["timestamp_ms"]
        when = ("—" if ts is None
                else dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
        t.add_row(str(j["slot"]), escape(j["record_id"]), escape(j["topic"]),
                  "—" if j["partition"] is None else str(j["partition"]), when, escape(j["error"]))
    return t


@contextlib.contextmanager
def replay_progress(enabled: bool) -> Iterator[Callable[[ReplayProgress], None] | None]:
    """A progress callback drawing records and MB/s on a terminal; ``None`` (no bar) otherwise."""
    if not enabled:
        yield None
        return
    bar = Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TextColumn("records"),
                   TextColumn("{task.fields[mbps]:.1f} MB/s"), TimeElapsedColumn(), console=console())
    task = bar.add_task("replay", total=None, mbps=0.0)

    def update(p: ReplayProgress) -> None:
        mbps = p.bytes_done / 1e6 / p.seconds if p.seconds > 0 else 0.0
        bar.update(task, total=p.records_total or None, completed=p.records_done, mbps=mbps)

    with bar:
        yield update
