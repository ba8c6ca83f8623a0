"""Hadoop FileSystem calls through the session's JVM: local paths and any Hadoop URI alike."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

__all__ = ["HadoopFS"]


class HadoopFS:
    """The few file operations the jobs need, on whatever filesystem ``root`` names."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm: Any = spark.sparkContext._jvm
        conf: Any = spark.sparkContext._jsc.hadoopConfiguration()
        self._path_class: Any = jvm.org.apache.hadoop.fs.Path
        self._fs: Any = self._path_class(root).getFileSystem(conf)

    def _path(self, path: str) -> Any:
        return self._path_class(path)

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def is_dir(self, path: str) -> bool:
        return bool(
            self._fs.exists(self._path(path))
            and self._fs.getFileStatus(self._path(path)).isDirectory()
        )

    def list(self, path: str) -> list[tuple[str, bool]]:
        """``(name, is_directory)`` of each child, sorted; empty if ``path`` does not exist."""
        if not self._fs.exists(self._path(path)):
            return []
        try:
            statuses = self._fs.listStatus(self._path(path))
        except Exception as error:  # a concurrent delete between exists and list
            if "FileNotFoundException" in str(error):
                return []
            raise
        return sorted((s.getPath().getName(), bool(s.isDirectory())) for s in statuses)

    def qualify(self, path: str) -> str:
        """The fully qualified URI of ``path`` (``file:/…``, ``hdfs://…``)."""
        return str(self._fs.makeQualified(self._path(path)).toString())
