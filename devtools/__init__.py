"""Development tools kept out of the wheel: the test Kafka broker (Apache Kafka from Maven Central)."""
