"""Tier 1: bench/threads.py groups threads by name, diffs CPU snapshots and counts JFR samples by component.

Pure: snapshots and a JFR JSON shaped like ``jfr print --json`` of JDK 17 (its
frames' classes named with slashes); the tool itself reads /proc and runs Spark.
"""

from __future__ import annotations

from bench.threads import classify, jfr_components, thread_cpu, thread_group


def _sample(thread: str, *classes: str) -> dict:
    frames = [{"method": {"type": {"name": c.rsplit(".", 1)[0].replace(".", "/")}, "name": c.rsplit(".", 1)[1]}}
              for c in classes]
    return {"type": "jdk.ExecutionSample",
            "values": {"sampledThread": {"javaName": thread}, "stackTrace": {"frames": frames}}}


def test_threads_of_one_pool_share_a_group():
    assert thread_group("GC Thread#0") == thread_group("GC Thread#12") == "GC Thread#"
    assert thread_group("rdk:broker1") == "rdk:broker"
    assert thread_group("1234") == "?"


def test_cpu_is_the_difference_per_group_and_a_new_thread_counts_from_zero():
    before = {(1, 1): ("spark_jvm", "GC Thread#", 2.0), (1, 2): ("spark_jvm", "GC Thread#", 1.0),
              (7, 7): ("python", "python", 5.0)}
    after = {(1, 1): ("spark_jvm", "GC Thread#", 2.5), (1, 2): ("spark_jvm", "GC Thread#", 1.25),
             (7, 7): ("python", "python", 5.0), (7, 8): ("python", "rdk:broker", 0.5)}
    assert thread_cpu(before, after) == {"spark_jvm/GC Thread#": 0.75, "python/rdk:broker": 0.5}


def test_a_sample_belongs_to_the_first_known_component_from_the_leaf_up():
    assert classify(["java.util.HashMap.get", "org.apache.kafka.clients.producer.KafkaProducer.send",
                     "org.apache.spark.sql.kafka010.KafkaWriteTask.execute"]) == "kafka client"
    assert classify(["org.apache.spark.sql.execution.python.PythonArrowInput.writeNextInputToStream",
                     "org.apache.spark.sql.catalyst.expressions.GeneratedClass.processNext"]) == \
        "arrow and python runner"
    assert classify(["java.lang.Thread.run"]) == "jdk"


def test_jfr_samples_are_counted_per_thread_group_and_component():
    js = {"recording": {"events": [
        _sample("Executor task launch worker for task 1", "java.util.HashMap.get",
                "org.apache.kafka.clients.producer.KafkaProducer.send"),
        _sample("Executor task launch worker for task 2", "org.apache.spark.unsafe.Platform.getLong"),
        _sample("kafka-producer-network-thread | producer-1", "sun.nio.ch.SocketDispatcher.write"),
        {"type": "jdk.NativeMethodSample", "values": {}},
    ]}}
    assert jfr_components(js) == {"Executor task launch worker for task": {"kafka client": 1,
                                                                            "rows and generated code": 1},
                                  "kafka-producer-network-thread | producer-": {"jdk": 1}}


def test_the_section_has_a_column_per_writer_and_sums_the_small_threads():
    from bench.render_threads import threads_md
    from bench.threads import summarize

    runs = [{"writer": w, "round": r, "seconds": 2.0, "process_total": 6.0 + r,
             "threads": {"spark_jvm/Executor task": 2.0 + r, "python/python": 3.0 if w == "sink-sync" else 0.0,
                         "broker/VM Thread": 0.01}}
            for r in range(3) for w in ("spark-kafka", "sink-sync")]
    section = {"rows": 1_000_000, "value_bytes": 100, "rounds": 3, "writers": ["spark-kafka", "sink-sync"],
               "runs": runs, "summary": summarize(runs, ["spark-kafka", "sink-sync"], 1_000_000), "jfr": {}}
    text = threads_md(section)
    assert "| process / thread | Spark's Kafka sink | sink sync (native) |" in text
    assert "| spark_jvm/Executor task | 3.00 (2.00–4.00) | 3.00 (2.00–4.00) |" in text
    assert "| python/python | 0.00 (0.00–0.00) | 3.00 (3.00–3.00) |" in text
    assert "| other threads (each under 0.03) | 0.01 | 0.01 |" in text  # the VM thread's 0.01 µs
    assert "| rows/s (median) | 500,000 | 500,000 |" in text


def test_the_parts_line_up_for_both_writers_and_the_sentence_names_what_the_sink_spends_more_in():
    from bench.analysis_threads import parts_of, threads_sentence

    def st(x: float) -> dict:
        return {"median": x, "low": x, "high": x}

    spark = {"spark_jvm/Executor task i": st(1.0), "spark_jvm/kafka-producer-": st(0.5),
             "spark_jvm/GC Thread#": st(0.1), "broker/data-plane-kafk": st(0.5)}
    sink = {"spark_jvm/Executor task i": st(1.0), "spark_jvm/Thread-": st(0.2), "python/python": st(1.5),
            "python/rdk:broker": st(0.7), "broker/data-plane-kafk": st(0.5), "python/bench-x": st(0.05)}
    parts = parts_of(sink)
    assert parts["the Python workers' own threads"] == 1.5 and parts["librdkafka's threads"] == 0.7
    assert parts["Spark's other threads (those feeding the Python workers among them)"] == 0.2
    assert parts["other"] == 0.05 and parts["the broker"] == 0.5
    results = {"threads": {"rows": 2_000_000, "value_bytes": 100, "rounds": 5,
                           "summary": {"spark-kafka": {"us_per_record": spark}, "sink-sync": {"us_per_record": sink}}}}
    text = threads_sentence(results, "sink-sync", "spark-kafka")
    assert "Spark's Kafka sink: Spark's task threads 1.00, the Java producer's network thread 0.50" in text
    assert text.endswith("The sink spends more in the Python workers' own threads (+1.50), librdkafka's threads "
                         "(+0.70), Spark's other threads (those feeding the Python workers among them) (+0.20).")
    assert threads_sentence({}, "sink-sync", "spark-kafka") == ""
