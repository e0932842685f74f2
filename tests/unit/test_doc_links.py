"""Every link of README.md and docs/*.md resolves: the file exists, and so does the anchor (a heading of that file)."""

from __future__ import annotations

from ..docs import REPO, anchors, doc_paths, link_problems, links, slug


def test_every_link_of_the_docs_resolves():
    paths = doc_paths()
    assert len(paths) > 10 and sum(len(links(p)) for p in paths) > 50, "the documents or their links were not found"
    assert link_problems(paths) == []


def test_a_missing_file_or_anchor_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# Title\n\n## Choosing a guarantee\n\nSee [ops](docs/ops.md#a-stuck-lane), [gone](docs/gone.md),\n"
        "[here](#choosing-a-guarantee), [there](#nowhere) and [web](https://example.com/x#y).\n\n"
        "```\n[in code](docs/none.md)\n```\n`[in a span](docs/none.md)`\n", encoding="utf-8")
    (tmp_path / "docs" / "ops.md").write_text(
        "# Ops\n\n## A stuck lane\n\nBack to the [README](../README.md#choosing-a-guarantee) and "
        "[a lane](#a-stuck-lane-1).\n\n## A stuck lane\n\n[wrong](../README.md#choosing)\n", encoding="utf-8")
    found = link_problems([str(tmp_path / "README.md"), str(tmp_path / "docs" / "ops.md")])
    assert len(found) == 3, found
    assert "README.md:5: docs/gone.md: no file" in found[0]
    assert "README.md:6: #nowhere: no anchor #nowhere in" in found[1]
    assert "ops.md:9: ../README.md#choosing: no anchor #choosing in" in found[2]


def test_anchors_are_github_slugs():
    assert slug('Migrating from `format("kafka")`') == "migrating-from-formatkafka"
    assert slug("SASL: PLAIN and SCRAM") == "sasl-plain-and-scram"
    assert slug("The WAL format (version 3)") == "the-wal-format-version-3"
    assert slug("`max_wal_bytes` per worker") == "max_wal_bytes-per-worker"
    assert slug("See [the guide](x.md)") == "see-the-guide"
    assert "layout" in anchors(f"{REPO}/docs/DESIGN.md")
