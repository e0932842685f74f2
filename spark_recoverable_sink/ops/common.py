"""What every operator command shares: finding a WAL's sinks, reading a Kafka conf file, the error type.

A *WAL directory* is a sink's ``wal_dir``: it holds one directory per sink
name, each with ``slot-NNNNN.lock`` files and ``slot-NNNNN/`` LMDB
directories. A slot drained of every record is removed, so a sink directory
may hold no slot at all: it counts as one while it holds nothing but what the
sink puts there (slots, ``quarantine/``, the ``broker-reached`` marker), empty
included (see :func:`find_sinks`). Nothing here creates anything: a command
pointed at the wrong path says so instead of making a WAL there.

A Kafka conf file is a JSON object of confluent-kafka settings. A value may
be ``{"env": "VAR"}``: it is read from the environment variable ``VAR``, so
secrets need not sit in a file. Values of secret options are never printed
(see :func:`.config.redact`); :func:`scrubber` removes them from any text.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, Callable, Mapping

from ..config import SinkConfig, resolve_env_values, scrub_secrets
from ..delivery.contact import MARKER
from ..errors import ConfigError, RecoverableSinkError, WalError
from ..wal.quarantine import QUARANTINE_DIR
from ..wal.slots import list_slots, resolve_wal_dir

__all__ = ["OpsError", "find_sinks", "load_kafka_conf", "build_config", "scrubber", "lock_owner"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: Every name the sink creates in a sink directory: slot lock files and LMDB directories (a slot is removed
#: directory first, then lock file), the slots set aside, the marker of a broker once reached.
_SINK_ENTRY_RE = re.compile(rf"^(slot-\d{{5}}(\.lock)?|{re.escape(QUARANTINE_DIR)}|{re.escape(MARKER)})$")


class OpsError(RecoverableSinkError):
    """An operator command cannot run as asked; the message is the one line the CLI prints."""


def find_sinks(wal_dir: str, sink: str | None = None) -> list[tuple[str, str]]:
    """``(sink name, sink directory)`` of every sink under ``wal_dir`` (or of ``sink`` only).

    A sink whose slots were all drained (and so removed) is listed, with no
    slots. The rule, since a drained sink leaves no slot behind: a *sink
    directory* is a real directory (not a link) named as a sink may be named
    that holds a slot, or else holds only what the sink itself creates there --
    ``quarantine/``, the ``broker-reached`` marker (:data:`.delivery.contact.MARKER`),
    nothing at all. ``wal_dir`` is a WAL directory when it holds one. An empty
    directory, or one of files and of directories holding anything else, is not.

    Raises:
        OpsError: ``wal_dir`` is not a directory or holds no sink with slots, or ``sink`` has no slots there.
    """
    try:
        path = resolve_wal_dir(wal_dir)
    except WalError as exc:
        raise OpsError(str(exc)) from exc
    if not os.path.lexists(path):
        raise OpsError(f"{wal_dir}: no such directory")
    if os.path.islink(path) or not os.path.isdir(path):
        raise OpsError(f"{wal_dir} is not a WAL directory: not a directory (or a symbolic link)")
    try:
        names = sorted(n for n in os.listdir(path) if _is_sink_dir(os.path.join(path, n)))
    except OSError as exc:
        raise OpsError(f"{wal_dir} cannot be read: {exc.strerror or exc}") from exc
    if sink is None:
        if not names:
            raise OpsError(f"{wal_dir} is not a WAL directory: no <sink>/slot-NNNNN.lock under it")
        return [(n, os.path.join(path, n)) for n in names]
    if not _NAME_RE.match(sink):
        raise OpsError(f"{sink!r} is not a sink name (letters, digits, '.', '_', '-')")
    if sink not in names:
        if not names and not os.path.isdir(os.path.join(path, sink)):
            raise OpsError(f"{wal_dir} is not a WAL directory: no <sink>/slot-NNNNN.lock under it")
        raise OpsError(f"sink {sink!r} has no slots under {wal_dir} (sinks there: {', '.join(names) or 'none'})")
    return [(sink, os.path.join(path, sink))]


def _is_sink_dir(sdir: str) -> bool:
    """A sink directory: it has slots, or had them (drained slots are removed: only what the sink leaves is left)."""
    if os.path.islink(sdir) or not os.path.isdir(sdir) or not _NAME_RE.match(os.path.basename(sdir)):
        return False
    try:
        return bool(list_slots(sdir)) or all(_SINK_ENTRY_RE.match(n) for n in os.listdir(sdir))
    except OSError:
        return False


def lock_owner(lock_path: str) -> str:
    """What a slot's lock file says about its holder (``pid=... host=...``), or ``""``."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        text = os.read(fd, 200).decode("utf-8", "replace")
    finally:
        os.close(fd)
    return " ".join(text.split())


def load_kafka_conf(path: str) -> dict[str, Any]:
    """A confluent-kafka configuration from a JSON file; ``{"env": "VAR"}`` values read from the environment.

    Raises:
        OpsError: the file cannot be read, is not a JSON object, or names an unset variable
            (messages name keys and variables, never values).
    """
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as exc:
        raise OpsError(f"kafka conf {path} cannot be read: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        # JSONDecodeError.msg never quotes the document (a secret may be in it)
        where = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise OpsError(f"kafka conf {path} is not valid JSON: {where}") from None
    if not isinstance(raw, dict):
        raise OpsError(f"kafka conf {path} must be a JSON object of confluent-kafka settings")
    for key, value in raw.items():
        ok = isinstance(value, (str, int, float, bool)) or (
            isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str) and value["env"])
        if not ok:  # the value itself is never echoed: it may be a secret
            raise OpsError(f"kafka conf {path}: {key!r} must be a string, a number, a boolean "
                           'or {"env": "VARIABLE"}')
    try:
        return resolve_env_values(raw)  # the job templates' rule for {"env": ...}
    except ConfigError as exc:
        raise OpsError(f"kafka conf {path}[{exc.option!r}]: {exc.reason}") from None


def scrubber(conf: Mapping[str, Any]) -> Callable[[str], str]:
    """A function replacing every secret value of ``conf`` in a text by ``***`` (:func:`.config.scrub_secrets`)."""
    return functools.partial(scrub_secrets, conf)


def build_config(name: str, kafka_conf: Mapping[str, Any], wal_dir: str, **options: Any) -> SinkConfig:
    """The sink configuration a command publishes with (validated as the sink does).

    Raises:
        OpsError: an option or the Kafka configuration is refused (secrets scrubbed).
    """
    try:
        return SinkConfig.build(name, dict(kafka_conf), wal_dir, **options)
    except ConfigError as exc:
        raise OpsError(scrubber(kafka_conf)(str(exc))) from None  # the cause may quote secret values
