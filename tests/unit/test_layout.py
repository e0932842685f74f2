"""Tier 1: the package's folders read in the order a record travels, and every import points down.

driver -> task -> recovery -> delivery -> wal, with the shared modules at the
root below all of them, and the job templates and operator tools on top.
Lazy imports inside functions count as imports.
"""

from __future__ import annotations

import ast
import os

import spark_recoverable_sink

ROOT = os.path.dirname(spark_recoverable_sink.__file__)
PKG = "spark_recoverable_sink"
#: Sub-package -> rank; a module may import only modules of its own rank or below. Root modules are 0.
RANKS = {"wal": 1, "delivery": 2, "recovery": 3, "task": 4, "driver": 5, "jobs": 6, "ops": 7}
TOP = 9  # the package itself and __main__: they may import anything


def _modules() -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


MODULES = _modules()


def _rank(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return TOP
    return RANKS.get(parts[1], 0)


def _imports(module: str) -> set[str]:
    path = MODULES[module]
    tree = ast.parse(open(path, encoding="utf-8").read())
    base = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == PKG or m.startswith(PKG + ".")}


GRAPH = {m: _imports(m) for m in MODULES}


def test_every_import_points_down():
    up = sorted(f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps if _rank(d) > _rank(m))
    assert up == []


def test_no_import_circles():
    circles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for dep in sorted(GRAPH.get(node, ())):
            if state.get(dep) == "open":
                circles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = "done"

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [])
    assert circles == []


def test_modules_say_what_they_hold():
    # A module holds one concept, whole (docs/DESIGN.md, "Layout"): no cap on its length, which scattered one
    # concept over several files; its docstring says what it holds.
    silent = [m for m, p in MODULES.items() if not ast.get_docstring(ast.parse(open(p, encoding="utf-8").read()))]
    assert silent == []


def test_the_layout_checks_can_fail():
    # the rank rule itself: a delivery module importing the driver would be refused
    assert _rank(f"{PKG}.driver.sink") > _rank(f"{PKG}.delivery.publisher") > _rank(f"{PKG}.wal.log") > _rank(
        f"{PKG}.config")
    assert f"{PKG}.task.writer" in GRAPH[f"{PKG}.driver.sink"]  # lazy and relative imports are seen


def _design_layout() -> dict[str, str]:
    """docs/DESIGN.md's layout block, cut into the package root and one text per top-level folder."""
    with open(os.path.join(os.path.dirname(ROOT), "docs", "DESIGN.md"), encoding="utf-8") as f:
        design = f.read()
    block = design.split("\n## Layout\n", 1)[1].split("```", 2)[1]
    sections: dict[str, str] = {"": ""}
    current, started = "", False
    for line in block.splitlines():
        if line.startswith(f"{PKG}/"):
            started = True
            continue
        if not started:
            continue
        if line and not line.startswith(" "):
            break  # past the package: files beside it (devtools/, tests/, ...)
        head = line[2:].split(" ", 1)[0] if line.startswith("  ") and not line.startswith("   ") else ""
        if head.endswith("/"):
            current = head[:-1]
            sections.setdefault(current, "")
        sections[current] += line + "\n"
    return sections


def _layout_misses(sections: dict[str, str]) -> list[str]:
    """Package files (modules and C sources) that DESIGN.md's layout block does not name in their folder."""
    missing = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel = os.path.relpath(dirpath, ROOT)
        parts = [] if rel == "." else rel.split(os.sep)
        text = sections.get(parts[0] if parts else "", "")
        for f in sorted(filenames):
            if not f.endswith((".py", ".c")) or f == "__init__.py":
                continue
            if f not in text or any(f"{p}/" not in text for p in parts[1:]):
                missing.append("/".join(parts + [f]))
    return missing


def test_the_design_layout_names_every_module():
    sections = _design_layout()
    assert set(RANKS) <= set(sections), sorted(set(RANKS) - set(sections))
    assert _layout_misses(sections) == []
    # the check can fail: a folder's text without one of its modules is caught
    cut = dict(sections, delivery=sections["delivery"].replace("engine.py", ""))
    assert _layout_misses(cut) == ["delivery/engine.py"]
