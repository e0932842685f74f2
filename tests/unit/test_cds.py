"""The test JVMs' class-data archives (devtools/cds.py): named after what they map, silent where they do not fit."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from devtools import cds


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RKS_KAFKA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_an_archive_is_named_after_its_jars_and_used_only_once_it_exists(cache, tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"a")
    java = shutil.which("java") or "/bin/sh"
    first = cds.kafka_archive(java, str(jars))
    assert cds.kafka_archive(java, str(jars)) == first
    assert cds.use_options(first) == ()
    (jars / "b.jar").write_bytes(b"b")
    assert cds.kafka_archive(java, str(jars)) != first, "a new jar maps other classes: another archive"
    with open(first, "wb") as f:
        f.write(b"x")
    assert cds.use_options(first)[0] == f"-XX:SharedArchiveFile={first}"


@pytest.mark.skipif(shutil.which("javac") is None or shutil.which("jar") is None, reason="needs a JDK on PATH")
def test_an_archive_that_does_not_fit_a_jvm_leaves_its_output_alone(cache, tmp_path):
    # spark-class reads its launcher JVM's standard output, and every Spark JVM of the tests gets the driver's
    # archive: a JVM whose class path is another must print exactly what it prints without one.
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    (tmp_path / "Hello.java").write_text('public class Hello { public static void main(String[] a) '
                                         '{ System.out.println("hello"); } }')
    subprocess.run(["javac", "-d", str(tmp_path), str(tmp_path / "Hello.java")], check=True, timeout=120)
    for d in ("a", "b"):
        subprocess.run(["jar", "cf", str(tmp_path / d / "hello.jar"), "-C", str(tmp_path), "Hello.class"],
                       check=True, timeout=120)
    archive = tmp_path / "a.jsa"
    subprocess.run(["java", f"-XX:ArchiveClassesAtExit={archive}", "-cp", str(tmp_path / "a" / "hello.jar"),
                    "Hello"], check=True, capture_output=True, timeout=120,
                   env={k: v for k, v in os.environ.items() if k != "JDK_JAVA_OPTIONS"})

    def run(options: str) -> str:
        env = dict(os.environ, JDK_JAVA_OPTIONS=options)
        done = subprocess.run(["java", "-cp", str(tmp_path / "b" / "hello.jar"), "Hello"], capture_output=True,
                              text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run(f"-XX:SharedArchiveFile={archive}") != "hello\n", \
        "premise: the JVM reports an archive of another class path on standard output"
    assert run(" ".join(cds.use_options(str(archive)))) == "hello\n"
