"""Tier 1: bench/instructions.py reads callgrind_annotate's text into instructions by shared object and function.

Pure: a text shaped like callgrind_annotate 3.19's (lines taken from a run of
the tool, shortened); the tool itself runs the processes under valgrind.
"""

from __future__ import annotations

import pytest

from bench.instructions import parse_annotate

TEXT = """--------------------------------------------------------------------------------
Profile data file 'callgrind.sink.2.out' (creator: callgrind-3.19.0)
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
10,811,596,326 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                    file:function
--------------------------------------------------------------------------------
158,916,418 ( 1.47%)  ???:rd_buf_write [/v/site-packages/confluent_kafka.libs/librdkafka-0cb94173.so.1]
144,493,903 ( 1.34%)  ./malloc/./malloc/malloc.c:_int_malloc [/usr/lib/x86_64-linux-gnu/libc.so.6]
 80,000,000 ( 0.74%)  ???:rd_kafka_producev [/v/site-packages/confluent_kafka.libs/librdkafka-0cb94173.so.1]
 65,123,128 ( 0.60%)  spark_recoverable_sink/native/rks_producer.c:Producer_produce_chunk [/w/native/_rks_native.abi3.so]
  1,000,000 ( 0.01%)  ???:0x0000000000012345

--------------------------------------------------------------------------------
-- Auto-annotated source: spark_recoverable_sink/native/rks_producer.c
--------------------------------------------------------------------------------
 9,999,999 ( 0.09%)  => ???:rd_kafka_producev (210,000x) [/v/librdkafka-0cb94173.so.1]
"""


def test_costs_are_summed_by_shared_object_and_function_from_the_function_list_only():
    total, objs, fns = parse_annotate(TEXT)
    assert total == 10_811_596_326
    # the hash of confluent-kafka's bundled librdkafka dropped; the annotated source's call lines not counted
    assert objs == {"librdkafka.so.1": 238_916_418, "libc.so.6": 144_493_903, "_rks_native.abi3.so": 65_123_128,
                    "?": 1_000_000}
    assert fns["rd_kafka_producev (librdkafka.so.1)"] == 80_000_000
    assert fns["Producer_produce_chunk (_rks_native.abi3.so)"] == 65_123_128


def test_a_text_that_is_not_callgrind_annotate_output_is_refused():
    with pytest.raises(ValueError, match="no program total"):
        parse_annotate("valgrind: the 'callgrind' tool failed\n")
