"""``python -m spark_recoverable_sink``: the ``rks`` operator command line (see :mod:`.ops.cli`)."""

from .ops.cli import main

if __name__ == "__main__":
    main(prog_name="rks")
