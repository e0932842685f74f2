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
    assert packages == ["spark_recoverable_sink"], packages


def test_runtime_package_holds_no_test_or_dev_code():
    pkg = os.path.join(ROOT, "spark_recoverable_sink")
    modules = sorted(n for n in os.listdir(pkg) if n.endswith(".py"))
    assert "devbroker.py" not in modules and "_faults.py" not in modules, modules
    for name in modules:
        with open(os.path.join(pkg, name)) as f:
            text = f.read()
        assert "import tests" not in text and "from tests" not in text and "devtools" not in text, name
