"""The process: composition root, config assembly, exporter host, self-metrics, data-dir lock."""
