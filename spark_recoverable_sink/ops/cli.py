"""``rks``: the operator's command line, run on the host where a sink's WAL lives.

Commands: ``inspect``, ``replay``, ``dead-letters``, ``quarantine``,
``abort-transactions`` (``rks COMMAND --help`` for each). Exit status: 0 done;
1 done in part (records left in the WAL, re-sends that failed, slots that
cannot be read); 2 nothing done (a wrong path, sink, option or Kafka conf
file, a Kafka client that cannot be created, a slot a live process owns:
``quarantine`` of it, ``replay`` of a sink whose every slot is one). Errors are one line on stderr; values of
secret Kafka options are never printed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from typing import Any, Callable, Iterator

import click

from ..config import AT_LEAST_ONCE, EXACTLY_ONCE, default_of
from ..errors import RecoverableSinkError
from ..wal.slots import slot_paths
from . import render
from .common import (
    OpsError,
    build_config,
    find_sinks,
    load_kafka_conf,
    lock_owner,
    scrubber,
)
from .dead_letters_cmd import held_slots, letter_json, resend
from .inspect import chunks_set_aside, inspect_wal
from .replay import replay_sink

__all__ = ["main", "EXIT_OK", "EXIT_PARTIAL", "EXIT_FAILED"]

EXIT_OK, EXIT_PARTIAL, EXIT_FAILED = 0, 1, 2
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
           "off": logging.CRITICAL + 10}


class _Stderr(logging.StreamHandler):
    """Log lines to whatever ``sys.stderr`` is when they are emitted."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


_QUIET_CLIENT = True  # librdkafka's own log lines (it prints them on stderr) only with --log-level


def _client_conf(path: str) -> dict[str, Any]:
    """The Kafka conf file, with librdkafka's logging quiet unless asked for (its errors still reach us)."""
    conf = load_kafka_conf(path)
    if _QUIET_CLIENT:
        conf.setdefault("log_level", 0)
    return conf


_HANDLER = _Stderr()
_HANDLER.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))


def _setup_logging(level: str) -> None:
    global _QUIET_CLIENT
    _QUIET_CLIENT = level == "off"
    root = logging.getLogger()
    if _HANDLER not in root.handlers:
        root.addHandler(_HANDLER)  # also keeps logging's last-resort handler quiet
    _HANDLER.setLevel(_LEVELS[level])
    if _LEVELS[level] < logging.CRITICAL and root.getEffectiveLevel() > _LEVELS[level]:
        root.setLevel(_LEVELS[level])


@contextlib.contextmanager
def _failing(scrub: Callable[[str], str] = lambda s: s) -> Iterator[None]:
    """Turn the package's errors into one line on stderr and an exit status."""
    from confluent_kafka import KafkaException

    try:
        yield
    except (OpsError, RecoverableSinkError, ValueError) as exc:
        render.error(scrub(str(exc)))
        raise click.exceptions.Exit(EXIT_FAILED) from None
    except KafkaException as exc:
        render.error(f"Kafka: {scrub(str(exc.args[0] if exc.args else exc))}")
        raise click.exceptions.Exit(EXIT_PARTIAL) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", type=click.Choice(list(_LEVELS), case_sensitive=False), default="off",
              show_default=True, help="Log lines of the sink (key=value) on stderr.")
def main(log_level: str) -> None:
    """Operate a spark_recoverable_sink write-ahead log on this host.

    Kafka conf files (--kafka-conf) are JSON objects of confluent-kafka
    settings; a value {"env": "VAR"} is read from environment variable VAR.
    """
    _setup_logging(log_level.lower())


@main.command()
@click.argument("wal_dir")
@click.option("--sink", help="Only this sink (default: every sink under WAL_DIR).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: `wal_dir`, `slots` (one object per slot) and `chunks_set_aside` (damaged "
                   "chunks recovery moved to <wal_dir>/<sink>/quarantine/: sink, file, why).")
def inspect(wal_dir: str, sink: str | None, as_json: bool) -> None:
    """Every slot: owner alive, pending / uncommitted records, dead letters, bytes, oldest pending age."""
    with _failing():
        rows = inspect_wal(wal_dir, sink)
        aside = chunks_set_aside(wal_dir, sink)
    if as_json:
        click.echo(json.dumps({"wal_dir": wal_dir, "slots": [r.as_dict() for r in rows], "chunks_set_aside": aside},
                              indent=2))
    else:
        out = render.console()
        out.print(render.slots_table(rows))
        live = [r for r in rows if r.pending_records is not None]
        out.print(f"pending records: {sum(r.pending_records or 0 for r in live):,} in slots of dead owners; "
                  f"slots owned by live processes: {sum(r.owner_alive for r in rows)}")
        for c in aside:
            out.print(f"chunk set aside (damaged) sink={c['sink']} file={c['file']}: {c['why']}")
    bad = [r for r in rows if r.error]
    for r in bad:
        render.error(f"slot {r.slot} of sink {r.sink} cannot be read: {r.error}")
    if bad:
        raise click.exceptions.Exit(EXIT_PARTIAL)


def _id_header_option() -> Callable[[Any], Any]:
    return click.option("--id-header", default=default_of("id_header"), show_default=True,
                        help="The sink's id_header: the header the record ids go in (must match the sink's).")


def _conf_option(required: bool = True) -> Callable[[Any], Any]:
    return click.option("--kafka-conf", "kafka_conf", required=required, metavar="FILE.json",
                        help='confluent-kafka settings, or the Java client\'s as format("kafka") takes them (JSON; '
                             '{"env": "VAR"} reads a value from the environment).')


@main.command()
@click.argument("wal_dir")
@click.option("--sink", required=True, help="The sink's name.")
@_conf_option()
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds to wait for acks before giving up (what is not acked stays in the WAL).")
@click.option("--exactly-once", is_flag=True,
              help="The sink uses guarantee='exactly_once': units are committed in their lanes' transactions "
                   "(give --topic and --marker-topic as the sink has them).")
@click.option("--topic", help="The sink's topic= option, if it has one (records keep the topics they were "
                              "written with; exactly-once lanes sweep it before they commit).")
@click.option("--marker-topic", default=default_of("marker_topic"), show_default=True,
              help="Exactly-once: the sink's marker_topic= (the lanes' markers: a unit they show committed is "
                   "skipped).")
@_id_header_option()
def replay(wal_dir: str, sink: str, kafka_conf: str, timeout_s: float, exactly_once: bool,
           topic: str | None, marker_topic: str, id_header: str) -> None:
    """Adopt the sink's slots whose owner is dead and deliver their committed records."""
    with _failing():
        conf = _client_conf(kafka_conf)
    scrub = scrubber(conf)
    with _failing(scrub):
        ((_name, sdir),) = find_sinks(wal_dir, sink)
        config = build_config(sink, conf, wal_dir, topic=topic, id_header=id_header, marker_topic=marker_topic,
                              guarantee=EXACTLY_ONCE if exactly_once else AT_LEAST_ONCE)
        with render.replay_progress(sys.stdout.isatty()) as on_progress:
            result = replay_sink(config, timeout_s, on_progress)
    for index in result.owned:
        owner = lock_owner(slot_paths(sdir, index)[0])
        render.notice(f"slot {index} of sink {sink} skipped: owned by a live process ({owner or 'holder unknown'}); "
                      "that process delivers it")
    for p in result.problems:
        render.error(scrub(p))
    mbps = result.bytes_done / 1e6 / result.seconds if result.seconds > 0 else 0.0
    click.echo(f"replay sink={sink} adopted_slots={','.join(map(str, result.adopted)) or '-'} "
               f"records={result.replayed} delivered={result.delivered} dead_lettered={result.dead_lettered} "
               f"pending={result.pending} seconds={result.seconds:.2f} mb_per_s={mbps:.2f}")
    if not result.adopted and result.owned and not result.problems:  # nothing done: a live process owns each slot
        render.error(f"nothing replayed: every slot of sink {sink} ({', '.join(map(str, result.owned))}) "
                     "is owned by a live process")
        raise click.exceptions.Exit(EXIT_FAILED)
    if result.pending:
        why = f"; last client error: {scrub(result.last_error)}" if result.last_error else ""
        render.error(f"{result.pending} records not delivered within {timeout_s:g}s; they stay in the WAL "
                     f"(run rks replay again once the broker is reachable){why}")
    if result.dead_lettered:
        render.error(f"{result.dead_lettered} records refused for good and dead-lettered: "
                     f"see rks dead-letters {wal_dir} --sink {sink}")
    if not result.ok:
        raise click.exceptions.Exit(EXIT_PARTIAL)


@main.command("dead-letters")
@click.argument("wal_dir")
@click.option("--sink", required=True, help="The sink's name.")
@click.option("--export", "export_path", metavar="FILE.jsonl",
              help="Write them as JSON lines (key, value and header values base64); '-' for stdout.")
@click.option("--resend", "do_resend", is_flag=True,
              help="Produce them again to their original topic; each is removed from the store once acked.")
@_conf_option(required=False)
@click.option("--id", "ids", multiple=True, help="Only this record id (repeatable).")
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True, help="Seconds to wait for acks.")
@_id_header_option()
def dead_letters(wal_dir: str, sink: str, export_path: str | None, do_resend: bool, kafka_conf: str | None,
                 ids: tuple[str, ...], timeout_s: float, id_header: str) -> None:
    """List, export or re-send the records the sink refused for good (slots of dead owners)."""
    if do_resend and not kafka_conf:
        render.error("--resend needs --kafka-conf FILE.json")
        raise click.exceptions.Exit(EXIT_FAILED)
    scrub: Callable[[str], str] = lambda s: s  # noqa: E731
    config = None
    with _failing():
        ((_name, sdir),) = find_sinks(wal_dir, sink)
        if do_resend:
            conf = _client_conf(kafka_conf)  # type: ignore[arg-type]
            scrub = scrubber(conf)
            config = build_config(sink, conf, wal_dir, id_header=id_header)
    partial = False
    with _failing(scrub), held_slots(sink, sdir) as held:
        for index, owner in sorted(held.owned.items()):
            render.notice(f"slot {index} of sink {sink} skipped: owned by a live process ({owner or 'holder unknown'})")
        for index, why in sorted(held.unreadable.items()):
            render.error(f"slot {index} of sink {sink} cannot be read: {why}")
            partial = True
        letters = held.letters(ids)
        items = [letter_json(sink, s) for s in letters]
        if export_path:
            _export(export_path, items)
        elif not do_resend:
            if items:
                render.console().print(render.letters_table(items))
            click.echo(f"dead_letters sink={sink} count={len(items)}")
        if do_resend and config is not None:
            result = resend(config, letters, timeout_s)
            click.echo(f"resend sink={sink} sent={len(letters)} acked={result.acked} removed={result.removed} "
                       f"failed={len(result.failed)}")
            if result.failed:
                rid, why = result.failed[0]
                render.error(f"{len(result.failed)} dead letters not re-sent (kept in the store); "
                             f"first: {rid}: {why}")
                partial = True
    if partial:
        raise click.exceptions.Exit(EXIT_PARTIAL)


def _export(path: str, items: list[dict[str, Any]]) -> None:
    lines = "".join(json.dumps(j) + "\n" for j in items)
    if path == "-":
        click.echo(lines, nl=False)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)  # records: private
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(lines)
    except OSError as exc:
        raise OpsError(f"cannot write {path}: {exc.strerror or exc}") from exc
    render.notice(f"exported {len(items)} dead letters to {path}")


@main.command()
@click.argument("wal_dir")
@click.option("--sink", required=True, help="The sink's name.")
@click.argument("slot", type=int)
def quarantine(wal_dir: str, sink: str, slot: int) -> None:
    """Move slot SLOT aside (bytes kept, under <wal_dir>/<sink>/quarantine/); refused if its owner is alive."""
    from ..wal.quarantine import quarantine_slot

    with _failing():
        find_sinks(wal_dir, sink)
        dest = quarantine_slot(wal_dir, sink, slot)
    click.echo(f"quarantine sink={sink} slot={slot} moved_to={dest}")


@main.command("abort-transactions")
@click.option("--sink", required=True, help="The sink's name.")
@_conf_option()
@click.option("--lane", "lanes", multiple=True, help="A lane (rks-eo.<sink>:<run>:<lane>); default: every lane "
                                                     "that ever committed. Repeatable.")
@click.option("--timeout", "timeout_s", type=float, default=30.0, show_default=True)
def abort_transactions(sink: str, kafka_conf: str, lanes: tuple[str, ...], timeout_s: float) -> None:
    """Exactly-once: abort every transaction the sink's lanes left open."""
    from ..delivery.exactly_once.lane import abort_lingering

    with _failing():
        conf = _client_conf(kafka_conf)
        config = build_config(sink, conf, "/nonexistent-wal-dir-not-used", guarantee=EXACTLY_ONCE)
    with _failing(scrubber(conf)):
        done = abort_lingering(config, list(lanes) or None, timeout_s)
    for lane in done:
        click.echo(f"abort-transactions sink={sink} lane={lane} initialised")
    click.echo(f"abort-transactions sink={sink} lanes={len(done)}")


