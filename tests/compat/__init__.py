"""The compatibility tier: the sink's headline scenarios on every Spark release of devtools/sparkversions.py."""
