"""Arrow arrays built from their buffers, without pyarrow's pandas probe.

``pa.array`` and ``pa.scalar`` ask of the value they convert whether it is a
pandas object, and the first such question in a process imports pandas:
0.7 CPU-s and 39 MB of memory per process on this project's machine. PySpark's
``mapInArrow`` workers import no pandas of their own, and the sink's task code
runs in every Python worker, so the arrays the sink makes on the data path are
built here, from NumPy arrays and Python lists, with
``pa.Array.from_buffers`` (which asks nothing). A test
(``tests/spark/test_worker_imports.py``) runs both guarantees through Spark
and finds no pandas in the worker.

Where it runs: anywhere (driver and executors); nothing here pickles.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

__all__ = ["numeric", "values", "column", "record_batch", "binary_scalar"]

_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
          pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
          pa.float32(): np.float32, pa.float64(): np.float64}
_OFFSETS: dict[Any, Any] = {pa.string(): np.int32, pa.binary(): np.int32,
                             pa.large_string(): np.int64, pa.large_binary(): np.int64}


def numeric(values: Any, typ: pa.DataType) -> pa.Array:
    """A ``typ`` array (no nulls) of a NumPy array or sequence of numbers, sharing the array's memory when it can.

    The values are cast to ``typ``'s NumPy type as NumPy casts (unchecked, unlike ``pa.array``): callers pass
    values of that type.

    Raises:
        KeyError: ``typ`` is not one of the fixed-width types above.
        ValueError: ``values`` is not one-dimensional.
    """
    a = np.ascontiguousarray(values, dtype=_NUMPY[typ])
    if a.ndim != 1:
        raise ValueError(f"an array's values are one-dimensional, not of shape {a.shape}")
    return pa.Array.from_buffers(typ, len(a), [None, pa.py_buffer(a)])


def values(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-width array's values as NumPy's (a read-only view of its buffer; ``Array.to_numpy`` asks pandas).

    Raises:
        ValueError: the array holds nulls (as ``to_numpy()`` refuses them) or is not of a fixed-width type above.
    """
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    dtype = _NUMPY.get(a.type)
    if dtype is None:
        raise ValueError(f"a {a.type} array has no fixed-width NumPy view")
    if a.null_count:
        raise ValueError(f"a {a.type} array with {a.null_count} null(s) has no NumPy view")
    if len(a) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(a.buffers()[1], dtype=dtype, count=len(a), offset=a.offset * np.dtype(dtype).itemsize)


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def column(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """A ``typ`` array of Python values (``None`` a null): numbers, ``str`` or ``bytes``.

    Raises:
        KeyError: ``typ`` is none of the types above.
        TypeError: a ``string`` value is not a ``str``, a ``binary`` one not bytes.
        OverflowError: the values of a ``string``/``binary`` column exceed its 2 GiB of offsets.
    """
    n = len(values)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    nulls = int(n - valid.sum())
    if typ in _OFFSETS:
        text = typ in (pa.string(), pa.large_string())
        if not all(v is None or isinstance(v, str if text else (bytes, bytearray, memoryview)) for v in values):
            raise TypeError(f"a {typ} array takes {'str' if text else 'bytes'} values (or None)")
        raw = [b"" if v is None else v.encode() if text else bytes(v) for v in values]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter((len(b) for b in raw), dtype=np.int64, count=n), out=offsets[1:])
        width = _OFFSETS[typ]
        if offsets[-1] > np.iinfo(width).max:
            raise OverflowError(f"{offsets[-1]} bytes do not fit the offsets of a {typ} array")
        buffers = [_validity(valid), pa.py_buffer(offsets.astype(width)), pa.py_buffer(b"".join(raw))]
        return pa.Array.from_buffers(typ, n, buffers, null_count=nulls)
    data = np.array([0 if v is None else v for v in values], dtype=_NUMPY[typ])
    return pa.Array.from_buffers(typ, n, [_validity(valid), pa.py_buffer(data)], null_count=nulls)


def record_batch(rows: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """The batch of ``rows`` (a missing key is a null), columns of ``schema``'s types."""
    return pa.RecordBatch.from_arrays([column([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)


def binary_scalar(value: bytes) -> pa.Scalar:
    """``value`` as a binary scalar (an argument of Arrow's compute kernels)."""
    return column([value], pa.binary())[0]
