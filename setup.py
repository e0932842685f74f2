"""Build of the optional native extension ``spark_recoverable_sink.native._rks_native`` (metadata: pyproject.toml).

C against CPython's stable ABI (3.11+), linked to nothing but libc/libdl:
librdkafka is opened at run time from confluent-kafka's wheel. ``optional``:
without a C compiler the package installs as pure Python and the sink runs on
its Python delivery engine (it says so once, at INFO).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension(
        "spark_recoverable_sink.native._rks_native",
        sources=[f"spark_recoverable_sink/native/{c}" for c in ("rks_native.c", "rks_producer.c", "rks_hash.c")],
        depends=[f"spark_recoverable_sink/native/{h}" for h in ("rks_internal.h", "rks_rdkafka.h")],
        include_dirs=["spark_recoverable_sink/native"],
        define_macros=[("Py_LIMITED_API", "0x030B0000")],
        py_limited_api=True,
        optional=True,
        extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
        libraries=["dl"],
    )],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
