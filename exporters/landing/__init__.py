"""The landing before the table: logged pushes flattened into Arrow rows, by worker processes.

``flatten`` (with the vectorised ``fast`` path) turns pushes into the rows
``schema`` defines; ``pool`` runs the worker processes that do it off the
serving process. ``exporters.iceberg`` writes those rows into the table and
commits them.
"""
