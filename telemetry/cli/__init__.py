"""The ``kip714`` command line: the server, the log tools, the demo, logging setup."""
