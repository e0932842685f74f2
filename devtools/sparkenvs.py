"""One cached virtual environment per Spark release of the compatibility tier, and the package's wheel for it.

A release's environment (:func:`spark_env`) holds its ``pyspark[connect]``,
the package's dependencies (read from the wheel's metadata, with its
``registry`` extra) and the release's pins. It is built once under
``devtools.jvm.cache_root()`` (``pyspark-<version>-<key>``, the key a hash of
what it installs: a change of the package's dependencies makes a new one),
complete once it holds a ``.complete`` stamp; two processes building the same
one take turns (``flock``), like the jars of :mod:`devtools.jvm`.

The environment holds no code of the package: every checkout on the machine
shares it. The wheel of the tree under test (:func:`build_wheel`) is
installed into a directory of the test run's own (:func:`install_wheel`,
``pip install --no-deps --no-compile --target``) that goes first on
``PYTHONPATH``: what the tier runs is the installed wheel, never the source tree.

``python -m devtools.sparkenvs [VERSION ...]`` builds the environments (all
of the tier's releases by default) and fetches their jars.
"""

from __future__ import annotations

import email.parser
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

from devtools.jvm import (
    MavenError,
    cache_root,
    spark_avro_jars,
    spark_connect_jars,
    spark_kafka_connector_jars,
)
from devtools.sparkversions import COMPAT, SparkRelease, release

__all__ = ["EnvError", "spark_env", "build_wheel", "install_wheel", "release_jars", "wheel_requirements"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Extras of the package the environments install the dependencies of.
EXTRAS = ("registry",)
_PIP_TIMEOUT_S = 1200


class EnvError(RuntimeError):
    """A virtual environment or the wheel could not be built."""


def _clean_env() -> dict[str, str]:
    """This environment without a test session's additions (repository path, test hooks, venv)."""
    drop = ("PYTHONPATH", "RKS_TEST_HOOKS", "RKS_HOOK_DIR", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
            "PIP_REQUIRE_VIRTUALENV")
    return {k: v for k, v in os.environ.items() if k not in drop}


def build_wheel(out_dir: str, root: str = ROOT) -> str:
    """The package's wheel built from ``root`` into ``out_dir`` (``python -m build --wheel``, this Python).

    Raises:
        EnvError: the build failed.
    """
    os.makedirs(out_dir, exist_ok=True)
    p = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", out_dir, root], capture_output=True,
                       text=True, timeout=900, env=_clean_env())
    wheels = glob.glob(os.path.join(out_dir, "spark_recoverable_sink-*.whl"))
    if p.returncode != 0 or len(wheels) != 1:
        raise EnvError(f"the wheel did not build (rc={p.returncode}): {(p.stdout + p.stderr)[-3000:]}")
    return wheels[0]


def wheel_requirements(wheel: str, extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """The wheel's ``Requires-Dist`` for its base and ``extras``, markers dropped (pyspark left out)."""
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    out = []
    for req in email.parser.Parser().parsestr(meta).get_all("Requires-Dist") or []:
        spec, _, marker = req.partition(";")
        spec = spec.strip()
        extra = marker.split("extra ==", 1)[1].strip().strip("'\"") if "extra ==" in marker else None
        if (extra is None or extra in extras) and not spec.lower().startswith("pyspark"):
            out.append(spec)
    return sorted(set(out))


def _requirements(r: SparkRelease, wheel: str) -> list[str]:
    return [f"pyspark[connect]=={r.version}", *wheel_requirements(wheel), *r.pins]


def spark_env(r: SparkRelease | str, wheel: str) -> str:
    """Path of the Python of ``r``'s virtual environment, built once (see the module doc).

    ``wheel`` gives the package's dependencies (its code is not installed here).

    Raises:
        EnvError: pip failed (the message has its output's tail).
    """
    r = release(r) if isinstance(r, str) else r
    reqs = _requirements(r, wheel)
    key = hashlib.sha256("\n".join([sys.version.split()[0], *reqs]).encode()).hexdigest()[:10]
    root = cache_root()
    dest = os.path.join(root, f"pyspark-{r.version}-{key}")
    python, stamp = os.path.join(dest, "bin", "python"), os.path.join(dest, ".complete")
    if os.path.exists(stamp):
        return python
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, f".pyspark-{r.version}-{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now
        if os.path.exists(stamp):
            return python
        shutil.rmtree(dest, ignore_errors=True)  # a build that died halfway
        env = _clean_env()
        try:
            subprocess.run([sys.executable, "-m", "venv", dest], check=True, capture_output=True, timeout=300, env=env)
            p = subprocess.run([python, "-m", "pip", "install", "--quiet", *reqs],
                               capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, env=env)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise EnvError(f"the PySpark {r.version} environment could not be built: {exc}") from exc
        if p.returncode != 0:
            shutil.rmtree(dest, ignore_errors=True)
            raise EnvError(f"pip could not install {reqs} for PySpark {r.version} (rc={p.returncode}): "
                           f"{(p.stdout + p.stderr)[-3000:]}")
        with open(os.path.join(dest, "requirements.txt"), "w") as f:
            f.write("\n".join(reqs) + "\n")
        open(stamp, "w").close()
    return python


def install_wheel(python: str, wheel: str, target: str) -> str:
    """``wheel`` installed (no dependencies, no ``.pyc``) into ``target`` for ``python``; returns ``target``.

    Raises:
        EnvError: pip failed.
    """
    p = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", target,
                        wheel], capture_output=True, text=True, timeout=300, env=_clean_env())
    if p.returncode != 0:
        raise EnvError(f"pip could not install {wheel} into {target}: {(p.stdout + p.stderr)[-3000:]}")
    return target


def release_jars(r: SparkRelease) -> dict[str, list[str]]:
    """The jars PySpark ``r`` lacks that Maven Central serves: ``kafka`` (connector), ``avro``, ``connect``.

    ``connect`` is Spark Connect's server, which PySpark ships from 4.0 on
    (empty then). A kind Maven Central does not serve for ``r`` is empty.

    Raises:
        MavenError: as :func:`devtools.jvm.maven_jars`.
    """
    return {"kafka": spark_kafka_connector_jars(r.version, r.scala) if r.kafka_connector else [],
            "avro": spark_avro_jars(r.version, r.scala) if r.avro else [],
            "connect": spark_connect_jars(r.version, r.scala) if r.version.startswith("3.") else []}


def main(argv: list[str]) -> int:
    """``python -m devtools.sparkenvs [VERSION ...]``: environments and jars of the tier's releases, built once."""
    import tempfile

    wanted = [release(v) for v in argv] or list(COMPAT)
    with tempfile.TemporaryDirectory(prefix="rks-wheel-") as tmp:
        wheel = build_wheel(tmp)
        for r in wanted:
            try:
                python = spark_env(r, wheel)
                jars = release_jars(r)
            except (EnvError, MavenError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            print(f"PySpark {r.version}: {python}; jars: {sum(len(v) for v in jars.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
