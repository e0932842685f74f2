"""Loading the native extension: the librdkafka it opens, and Arrow arrays split into buffers for it.

``_rks_native`` resolves librdkafka's public C API at run time from the copy
confluent-kafka's wheel ships (``confluent_kafka.libs/librdkafka-<hash>.so.1``;
``RKS_LIBRDKAFKA`` names another): no second copy is loaded, nothing is
linked at build time. :func:`module` is the loaded extension or ``None``
(:func:`why_unavailable` says why). :func:`column` and :func:`headers_column`
split pyarrow arrays into the buffers the C side bounds-checks before it
reads a row.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import threading
from typing import Any

try:
    from . import _rks_native as _native  # type: ignore[attr-defined]
    _WHY = ""
except ImportError as exc:  # built without a compiler, or for another platform
    _native = None
    _WHY = f"the _rks_native extension is not built ({exc})"

__all__ = ["available", "why_unavailable", "module", "find_librdkafka", "load", "kafka_exception", "column",
           "headers_column", "QUEUE_FULL_TEXT"]

QUEUE_FULL_TEXT = "client queue stayed full past the bound; retried from the WAL"
_ENV_LIB = "RKS_LIBRDKAFKA"  # explicit path to a librdkafka shared object
_load_lock = threading.Lock()
_version: str | None = None


def available() -> bool:
    """True when the extension is built and librdkafka could be loaded."""
    return module() is not None


def why_unavailable() -> str:
    """Why :func:`module` is ``None`` (``""`` when it is not)."""
    module()
    return _WHY


def module() -> Any:
    """The loaded extension, or ``None`` when it is not built or librdkafka cannot be loaded (tried once)."""
    global _WHY
    if _native is None:
        return None
    if _version is None and not _WHY:
        try:
            load()
        except ImportError as exc:
            _WHY = str(exc)
    return _native if _version is not None else None


def find_librdkafka() -> str:
    """Path of the librdkafka that confluent-kafka ships (``confluent_kafka.libs/librdkafka-<hash>.so.1``).

    ``RKS_LIBRDKAFKA`` overrides it. With several candidates, the one already
    mapped into this process (confluent_kafka imported) wins, else the newest.

    Raises:
        ImportError: confluent-kafka or its bundled librdkafka is not found.
    """
    env = os.environ.get(_ENV_LIB)
    if env:
        return env
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("confluent-kafka is not installed: its bundled librdkafka is needed")
    cands: list[str] = []
    for pkg_dir in spec.submodule_search_locations:
        site = os.path.dirname(os.path.abspath(pkg_dir))
        cands += glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*"))
    if not cands:
        raise ImportError(f"no librdkafka*.so* under confluent_kafka.libs next to {spec.origin} "
                          f"(a confluent-kafka built from source? set {_ENV_LIB})")
    if len(cands) > 1:
        try:
            with open("/proc/self/maps") as f:
                mapped = f.read()
            loaded = [c for c in cands if os.path.realpath(c) in mapped]
            if loaded:
                return loaded[0]
        except OSError:
            pass
        cands.sort(key=os.path.getmtime, reverse=True)
    return cands[0]


def load(path: str | None = None) -> str:
    """Load librdkafka into the extension once; returns its version string.

    Raises:
        ImportError: the extension is not built, or the library is missing or too old.
    """
    global _version
    if _native is None:
        raise ImportError(_WHY)
    with _load_lock:
        if _version is None:
            _version = _native.load(path or find_librdkafka())
        return _version


def kafka_exception(err: tuple) -> Exception:
    """``KafkaException(KafkaError(...))`` from C's ``(code, name, text, fatal, retriable, txn_requires_abort)``."""
    from confluent_kafka import KafkaError, KafkaException

    code, _name, text, fatal, retriable, abort = err
    return KafkaException(KafkaError(code, text, fatal=fatal, retriable=retriable, txn_requires_abort=abort))


# --- pyarrow arrays -> buffer tuples -------------------------------------------------------

def _plain(a: Any) -> Any:
    import pyarrow as pa

    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    elif not isinstance(a, pa.Array):
        a = pa.array(a)
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    return a


def _validity(a: Any) -> Any:
    return a.buffers()[0] if a.null_count else None


def column(a: Any, kind: str = "binary") -> tuple | None:
    """``(length, offset, validity, buf1, buf2, width)`` of an array for the C side.

    kind: ``binary`` (binary/string, large or not; other types are cast to binary),
    ``int32`` (partitions) or ``int64`` (timestamps in ms; timestamp types are converted).
    """
    import pyarrow as pa

    if a is None:
        return None
    a = _plain(a)
    t = a.type
    if kind == "binary":
        if pa.types.is_binary(t) or pa.types.is_string(t):
            w = 4
        elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
            w = 8
        else:
            a, w = a.cast(pa.binary()), 4
        b = a.buffers()
        return (len(a), a.offset, _validity(a), b[1], b[2], w)
    if kind == "int64" and pa.types.is_timestamp(t):
        a = a.cast(pa.timestamp("ms")).cast(pa.int64())
    want = pa.int32() if kind == "int32" else pa.int64()
    if a.type != want:
        a = a.cast(want)
    return (len(a), a.offset, _validity(a), a.buffers()[1], None, 4 if kind == "int32" else 8)


def headers_column(a: Any) -> tuple | None:
    """The four parts of a ``list<struct<key: string, value: binary>>`` array for the C side."""
    import pyarrow as pa

    if a is None:
        return None
    a = _plain(a)
    t = a.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        raise TypeError(f"headers must be list<struct<key, value>>, not {t}")
    st = a.values  # the whole child: list offsets index it directly
    lst = (len(a), a.offset, _validity(a), a.buffers()[1], None, 8 if pa.types.is_large_list(t) else 4)
    stc = (len(st), st.offset, _validity(st), None, None, 0)
    # field() is aligned with the struct's own offset: entry j of the struct is row j of each field
    return (lst, stc, column(st.field("key")), column(st.field("value")))
