"""A worker process for the CLI tests: writes one partition through ``write_partition``, then dies.

Usage: ``python -m tests.programs.cli_writer CONFIG_JSON BATCH PARTITION ROWS``

Its records carry every column a chunk can hold (key, topic, partition,
headers, timestamp), so a replay can be checked field by field (see
``expected`` in tests/broker/rows.py). After ``write_partition`` returns it ends with
``os._exit(0)``: no close, no flush, its slot lock dropped by the kernel. A
test that wants it alive arms a park at ``task.after_commit`` (tests/hooks.py;
the variables come from tests/conftest.py): it then holds its slot until
released.
"""

from __future__ import annotations

import json
import os
import sys

from tests.broker.rows import cli_batches


def main() -> None:
    conf_json, batch, partition, rows = sys.argv[1:5]
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task.writer import write_partition

    opts = json.loads(conf_json)
    topic = opts.pop("records_topic")
    cfg = SinkConfig.build(opts.pop("name"), opts.pop("kafka_conf"), opts.pop("wal_dir"), **opts)
    report = write_partition(cfg, int(batch), int(partition), 0, cli_batches(topic, int(partition), int(rows)),
                             run="r1")
    print(json.dumps(report.to_row()), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
