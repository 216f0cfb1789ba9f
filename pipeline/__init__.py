"""Spark ingestion pipelines: records (CSV, ndjson, timestamped N-Triples) from files, a
TCP socket or NATS JetStream are mapped to timestamped RDF triples by a declarative
spec and injected into Jindou's streams as Arrow batches, exactly once.

Modules: ``spec`` (the YAML/JSON spec), ``expr`` (vectorized expressions of a mapping),
``mapping`` (records -> triples and dead letters, pure pyarrow, runs in Spark workers),
``citybench`` (the CityBench mappings), ``injector`` (HTTP / in-process delivery),
``deadletter``, ``jetstream`` (a PySpark streaming data source), ``job`` (the Spark job)
and ``cli`` (``jindou pipeline ...``). See docs/PIPELINES.md.
"""
