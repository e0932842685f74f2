"""Tier 1: where a batch's run id comes from (the streaming query id, or the caller)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spark_recoverable_sink import (
    ConfigError,
    RecoverableKafkaSink,
    RecoverableSinkError,
)
from spark_recoverable_sink.driver.query import QUERY_ID_PROPERTY, query_run_id


class _Context:
    def __init__(self, props: dict[str, str]) -> None:
        self.props = props

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 -- PySpark's name
        return self.props.get(key)


class _ConnectSession:
    @property
    def sparkContext(self):  # noqa: N802 -- PySpark's name
        raise AttributeError("JVM_ATTRIBUTE_NOT_SUPPORTED")  # as Spark Connect's session does


def _df(session) -> SimpleNamespace:
    return SimpleNamespace(sparkSession=session)


def test_the_run_is_the_compact_query_id():
    df = _df(SimpleNamespace(sparkContext=_Context({QUERY_ID_PROPERTY: "3ffbea50-19c4-4624-97c1-403f2390cf6e"})))
    assert query_run_id(df) == "3ffbea5019c44624"
    assert query_run_id(_df(SimpleNamespace(sparkContext=_Context({})))) is None  # not inside a streaming batch
    assert query_run_id(_df(_ConnectSession())) is None


def test_without_a_query_id_or_run_id_a_batch_fails_before_any_job(tmp_path):
    sink = RecoverableKafkaSink("s", {"bootstrap.servers": "x:1"}, topic="t", wal_dir=str(tmp_path))
    with pytest.raises(RecoverableSinkError, match="run_id="):
        sink(_df(_ConnectSession()), 0)
    with pytest.raises(ConfigError, match="run_id"):
        RecoverableKafkaSink("s", {"bootstrap.servers": "x:1"}, topic="t", wal_dir=str(tmp_path), run_id="a b")
