"""``make kafka``: one Apache Kafka broker on ``127.0.0.1:29092`` for the README's quickstart, until Ctrl-C.

The broker of the tests and the demo (:class:`devtools.kafka_broker.KafkaBroker`: the release pinned in
``devtools/kafka/pom.xml``, run from its jars, fetched once with Maven), on the port docker-compose.yml's
broker offers to the host, so the quickstart runs against either. Topics are created on first use. Its log
lives in a temporary directory, removed when it stops.

    python -m devtools.local_kafka [--port 29092]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .kafka_broker import KafkaBroker, kafka_version

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=29092, help="the client port (default: 29092)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    broker = KafkaBroker(port=args.port).start()
    try:
        print(f"Apache Kafka {kafka_version()} at {broker.bootstrap} (KAFKA_BOOTSTRAP={broker.bootstrap}); "
              "Ctrl-C stops it", flush=True)
        while not stop.wait(1.0):
            if broker.proc is None or broker.proc.poll() is not None:
                print(f"the broker exited; its log: {broker.log_path}", file=sys.stderr)
                return 1
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
