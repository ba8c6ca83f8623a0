"""The user's Kafka cluster as a store: the connection keys and the topics kip714 keeps there.

Shared by the two stores that can live in the cluster, the metadata store
(``[meta] store = "kafka"``) and the ingest log (``[log] store = "kafka"``),
so both spell, validate and use their connection alike. confluent-kafka is
imported only by :mod:`telemetry.cluster.topics`, which only a node that
uses the cluster loads.
"""
