"""A real PostgreSQL for the tests: Debian's server binaries, a fresh cluster per use.

``initdb``/``pg_ctl``/``createdb`` from ``/usr/lib/postgresql/<version>/bin``
(``.ci/run`` installs the ``postgresql`` package). The server refuses to run
as root, so as root every command runs as the ``postgres`` user, in a
directory of its own under the system's temporary directory (pytest's are
private to root). It listens on 127.0.0.1 only, trusts local connections,
and is stopped (``-m immediate`` if need be) and removed on the way out.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

USER = "kip"
DATABASE = "lake"
_TIMEOUT_S = 120


def _bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        raise AssertionError("no PostgreSQL server: apt-get install -y postgresql")
    return found[-1].parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(slots=True)
class PostgresServer:
    root: Path
    port: int

    def _run(self, *command: str) -> None:
        argv = [str(_bin_dir() / command[0]), *command[1:]]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: {result.stderr.strip() or result.stdout}")

    def url(self, driver: str = "psycopg", password: str | None = None) -> str:
        """The SQLAlchemy URL of the test database (``postgresql+<driver>://…``)."""
        secret = f":{password}" if password else ""
        return f"postgresql+{driver}://{USER}{secret}@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> None:
        """Start the cluster (again: a catalog that was away comes back on the same port)."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        data, log = str(self.root / "data"), str(self.root / "log")
        self._run("pg_ctl", "-D", data, "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(AssertionError):
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", mode, "-w", "stop")


@contextlib.contextmanager
def postgres() -> Iterator[PostgresServer]:
    """A running PostgreSQL with database ``lake`` owned by ``kip``; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="kip714-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(root, _free_port())
    data = root / "data"
    try:
        server._run("initdb", "-D", str(data), "-A", "trust", "-U", USER, "--no-sync")
        server.start()
        server._run("createdb", "-h", "127.0.0.1", "-p", str(server.port), "-U", USER, DATABASE)
        yield server
    finally:
        server.stop()
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
