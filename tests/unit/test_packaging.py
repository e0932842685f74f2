"""The wheel ships the runtime package only: no test hooks, no broker launcher."""

from __future__ import annotations

import os
import tomllib

from setuptools import find_packages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_package_find_includes_the_runtime_package_only():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        find = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(ROOT, include=find["include"], exclude=find.get("exclude", ()))
    assert packages and all(p.split(".")[0] == "spark_recoverable_sink" for p in packages), packages
    assert not any(p.startswith(("tests", "devtools", "bench", "templates")) for p in packages), packages


def test_runtime_package_holds_no_test_or_dev_code():
    pkg = os.path.join(ROOT, "spark_recoverable_sink")
    modules = sorted(os.path.relpath(os.path.join(d, n), pkg)
                     for d, _, names in os.walk(pkg) for n in names if n.endswith(".py"))
    names = {os.path.basename(m) for m in modules}
    assert not names & {"kafka_broker.py", "jvm.py", "_faults.py"}, modules
    for name in modules:
        with open(os.path.join(pkg, name)) as f:
            text = f.read()
        assert "import tests" not in text and "from tests" not in text and "devtools" not in text, name
