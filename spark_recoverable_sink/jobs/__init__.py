"""What the spark-submit job templates (``jobs/*.py`` in the repository) share.

A template only defines its ``source`` settings (a frozen dataclass) and how
it builds its input DataFrame; the settings file, the sink, the query and its
graceful stop come from here::

    @dataclass(frozen=True)
    class Source:
        path: str

    def build(spark, source: Source):
        return spark.readStream.text(source.path).selectExpr("value")

    if __name__ == "__main__":
        sys.exit(run_template(Source, build))

See :mod:`.settings` (the conf file), :mod:`.resolve` (secrets and schema files read at
start) and :mod:`.runner` (the run).
"""

from .resolve import (
    CLIENT_CONF_PREFIXES,
    load_schema,
    producer_conf,
    resolve_client_conf,
)
from .runner import (
    BuildSource,
    build_sink,
    build_spark,
    ensure_topic,
    for_sink,
    run_job,
    run_template,
    start_query,
    stop_gracefully,
    summary,
    totals,
)
from .settings import (
    COMMON_SECTIONS,
    ENV_OVERRIDES,
    JobSettings,
    KafkaSettings,
    QuerySettings,
    SettingsError,
    SinkSettings,
    SparkSettings,
    check_client_conf,
    load_settings,
    parse_sections,
    read_json,
    required_keys,
    section_keys,
    sections_for,
    setting_keys,
    settings_from_dict,
)

__all__ = [
    "SettingsError", "SparkSettings", "KafkaSettings", "SinkSettings", "QuerySettings", "JobSettings",
    "COMMON_SECTIONS", "ENV_OVERRIDES", "CLIENT_CONF_PREFIXES", "sections_for", "setting_keys",
    "required_keys", "section_keys", "parse_sections", "settings_from_dict", "load_settings", "read_json",
    "check_client_conf", "resolve_client_conf", "producer_conf", "load_schema",
    "BuildSource", "for_sink", "ensure_topic", "build_spark", "build_sink", "start_query", "stop_gracefully", "totals",
    "summary", "run_job", "run_template",
]
