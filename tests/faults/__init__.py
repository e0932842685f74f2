"""The fault suite: inject faults from outside the code under test and count what arrived.

Everything works on real processes and real sockets; no broker is mocked.
The helpers, one module per concern:

* ``procs`` -- pids found through ``/proc`` by ancestry, never by name (Spark's
  Python workers, executor JVMs), ``kill9``; ``run_cli`` starts the no-Spark
  writer program (tests/programs/writer_cli.py);
* ``slots`` -- WAL slots seen from outside: the holder of each slot's ``flock``
  (``/proc/locks``), a slot's attempts and rows read-only, ``explain_missing``;
* ``streams`` -- source rows (parquet files, Arrow batches), ``BatchProbe``,
  ``start_stream``;
* ``proxy`` -- ``TcpProxy``: refuses, cuts or stalls the connections of chosen
  clients (by Kafka ``client.id``);
* ``brokers`` -- ``HurtableBroker``: Apache Kafka advertising the proxy's port (so
  the proxy stays in the path after metadata), paused, SIGKILLed, restarted on
  its log;
* ``cluster`` -- ``KafkaCluster``: three KRaft nodes (replication factor 3,
  ``min.insync.replicas=2``), each partition's leader and each transactional
  id's coordinator found, a node SIGKILLed, SIGSTOPped or restarted on its
  log; ``wire`` -- the Kafka requests it sends to a chosen node itself
  (FindCoordinator, DescribeTransactions, Metadata, ListOffsets);
  ``kafka_log`` -- a partition's log and transaction index read from a node's
  disk (how each transaction ended; what a fetch lists as aborted);
* ``readback`` -- ``LiveReader`` (when each row first became visible), ``tally``
  and ``read_back`` (a full read against the rows sent);
* ``scenario_results`` -- ``ScenarioRow`` and ``record_result``: each scenario's row
  in the results JSON (``RKS_FAULT_RESULTS`` overrides the path).

Faults are timed by the test hooks of tests/hooks.py (a task parked at a named
point until the test releases it), never by polling for a moment.
"""
