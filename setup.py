"""Build of the optional native extension ``spark_recoverable_sink.native._rks_native`` (metadata: pyproject.toml).

C against CPython's stable ABI (3.11+), linked to nothing but libc/libdl:
librdkafka is opened at run time from confluent-kafka's wheel. ``optional``:
without a C compiler the package installs as pure Python and the sink runs on
its Python delivery engine (it says so once, at INFO).

Environment:

* ``RKS_NO_NATIVE=1``: build without the extension (no ``ext_modules``, no
  compiler called): a pure-Python ``py3-none-any`` wheel. ``make wheels``
  (``devtools/build_wheels.sh``) builds that wheel once, then adds the
  extension cross-compiled for each architecture.
"""

import os

from setuptools import Extension, setup

NATIVE = "spark_recoverable_sink/native/"

ext_modules = [] if os.environ.get("RKS_NO_NATIVE", "") not in ("", "0") else [Extension(
    "spark_recoverable_sink.native._rks_native",
    sources=[NATIVE + c for c in ("rks_native.c", "rks_producer.c", "rks_hash.c", "rks_crc.c")],
    depends=[NATIVE + h for h in ("rks_internal.h", "rks_rdkafka.h")],
    include_dirs=[NATIVE],
    define_macros=[("Py_LIMITED_API", "0x030B0000")],
    py_limited_api=True,
    optional=True,
    extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
    libraries=["dl"],
)]

setup(
    ext_modules=ext_modules,
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if ext_modules else {},
)
