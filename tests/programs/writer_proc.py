"""A worker process for crash tests: writes one partition, then dies without cleanup.

Usage: python -m tests.programs.writer_proc CONFIG_JSON BATCH PARTITION ROWS VALUE_SIZE DIE_AT
DIE_AT: "after_commit" (os._exit right after write_partition returns, acks or not)
or "mid_task:<rows>" (the test hook ends the process once <rows> rows are in the WAL),
or "delivered" (waits, at most 60 s, until the publisher holds nothing, then os._exit without close),
or "then:<batch>:<go-file>" (prints the first report, waits at most 120 s for <go-file>, writes
<batch> of the same partition in the same process, prints its report, then os._exit without close).
CONFIG_JSON holds the sink's options and "run".
"""

from __future__ import annotations

import json
import os
import sys

from tests.broker.rows import batches


def main() -> None:
    conf_json, batch, partition, rows, size, die_at = sys.argv[1:7]
    if die_at.startswith("mid_task:"):  # hooks installed through RKS_TEST_HOOKS / RKS_HOOK_DIR (tests/hooks.py)
        from tests.hooks import ENV_DIR, Hooks

        Hooks(os.environ[ENV_DIR]).crash("task.mid_task", after_rows=int(die_at.split(":")[1]))
    from spark_recoverable_sink.config import SinkConfig
    from spark_recoverable_sink.task.writer import write_partition

    opts = json.loads(conf_json)
    run = opts.pop("run", "")
    cfg = SinkConfig.build(opts.pop("name"), opts.pop("kafka_conf"), opts.pop("wal_dir"), **opts)
    report = write_partition(cfg, int(batch), int(partition), 0, batches(int(partition), int(rows), int(size)),
                             run=run)
    if die_at.startswith("then:"):
        import time

        _, later, go = die_at.split(":", 2)
        print(json.dumps(report.to_row()), flush=True)
        end = time.monotonic() + 120
        while not os.path.exists(go):
            if time.monotonic() > end:
                raise SystemExit(f"{go} never appeared")
            time.sleep(0.05)  # waiting for the test's go, bounded; nothing races on it
        report = write_partition(cfg, int(later), int(partition), 0, batches(int(partition), int(rows), int(size)),
                                 run=run)
    if die_at == "delivered":
        import time

        from spark_recoverable_sink.task.runtime import get_runtime

        rt = get_runtime(cfg)
        end = time.monotonic() + 60
        while not rt.publisher.idle() and time.monotonic() < end:
            time.sleep(0.05)  # waiting for a condition, bounded; nothing races on it
    print(json.dumps(report.to_row()), flush=True)
    os._exit(0)  # no close(), no atexit: whatever the producer still buffers is lost


if __name__ == "__main__":
    main()
