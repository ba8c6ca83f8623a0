"""A real Apache Kafka broker from Maven Central jars, with the kip714 plugin on its class path.

No Docker and no release tarball: ``tests/kafka/pom.xml`` lists the broker,
its tools and the Java client, and Maven copies them (with every transitive
jar) into ``~/.cache/kip714/kafka-<version>/`` once; later runs reuse the
directory and start no Maven at all. The plugin jar is built from
``broker-plugin/`` when its sources are newer than the jar.

``KafkaBroker`` runs one KRaft node (broker and controller in one JVM) on
free loopback ports: ``kafka.tools.StorageTool format``, then ``kafka.Kafka``,
logging to a file, with a bounded start and a clean stop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from telemetry.core.client_uuid import Uuid

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]
KAFKA_VERSION = "4.4.0"
CACHE = Path(os.environ.get("KIP714_KAFKA_CACHE", Path.home() / ".cache" / "kip714"))
PLUGIN_DIR = REPO / "broker-plugin"
PLUGIN_JAR = PLUGIN_DIR / "target" / "kip714-broker-plugin.jar"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
MAVEN_TIMEOUT_S = 600.0
_STARTED = "Kafka Server started"
#: The counters the plugin logs when the broker closes it.
FORWARDER_STOPPED = re.compile(
    r"kip714 forwarder stopped: received=(?P<received>\d+) forwarded=(?P<forwarded>\d+) "
    r"rejected=(?P<rejected>\d+) dropped=(?P<dropped>\d+)"
)


@contextlib.contextmanager
def maven_lock() -> Iterator[None]:
    """One Maven at a time across the test processes (pytest-xdist workers share ``~/.m2``).

    Maven's own locks are per JVM, and two ``mvn package`` runs in ``broker-plugin/target``
    would overwrite each other's jar while a broker of the other worker loads it.
    """
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".maven.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _maven(*args: str) -> None:
    """Run Maven (its local repository ~/.m2 is the download cache); its output on failure."""
    result = subprocess.run(
        ["mvn", "-B", "-q", *args],
        check=False,
        timeout=MAVEN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if result.returncode != 0:
        raise AssertionError(f"mvn {' '.join(args)} failed:\n{result.stdout[-5000:]}")


#: Jars a Kafka 3.x broker pulls in that bind SLF4J to Log4j 1 (reload4j): with Log4j 2's binding
#: also on the class path SLF4J 1.7 would pick either, so the binding is removed and the broker logs
#: through Log4j 2 as 4.x does. ``reload4j`` itself stays: 3.x's ``Log4jController`` calls it.
LOG4J1_BINDINGS = ("slf4j-reload4j-", "slf4j-log4j12-")


def kafka_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka ``version``'s jars, fetched through Maven on first use.

    Written to a unique temporary directory and renamed into place, so two test runs fetching
    the same version at once both end with a complete directory.
    """
    target = CACHE / f"kafka-{version}"
    if (target / ".complete").exists():
        return target
    with maven_lock():
        return _fetch_kafka_jars(version, target)


def _fetch_kafka_jars(version: str, target: Path) -> Path:
    if (target / ".complete").exists():  # another test process fetched them while this one waited
        return target
    partial = Path(tempfile.mkdtemp(prefix=f"kafka-{version}.", suffix=".partial", dir=CACHE))
    try:
        _maven(
            "-f", str(REPO / "tests" / "kafka" / "pom.xml"),
            f"-Dkafka.version={version}",
            "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
        )  # fmt: skip
        for jar in partial.glob("*.jar"):
            if jar.name.startswith(LOG4J1_BINDINGS):
                jar.unlink()
        (partial / ".complete").touch()
        try:
            partial.rename(target)
        except OSError:
            if not (target / ".complete").exists():  # a stale, incomplete directory: replace it
                shutil.rmtree(target, ignore_errors=True)
                partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def plugin_jar() -> Path:
    """The plugin jar, rebuilt (tests included) when a source or the pom is newer than the jar."""
    sources = [PLUGIN_DIR / "pom.xml", *(PLUGIN_DIR / "src").rglob("*.java")]
    newest = max(path.stat().st_mtime for path in sources)
    with maven_lock():  # checked under the lock: another worker may have just built it
        if not PLUGIN_JAR.exists() or PLUGIN_JAR.stat().st_mtime < newest:
            _maven("-f", str(PLUGIN_DIR / "pom.xml"), "package")
    return PLUGIN_JAR


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def java_command(class_path: list[Path], main: str, *args: str, heap: str = "256m") -> list[str]:
    """A short-lived JVM: small heap, C1 only (starts faster; these runs are short)."""
    return [
        "java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-cp", os.pathsep.join(str(p) for p in class_path), main, *args,
    ]  # fmt: skip


LOG4J2 = """
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
logger.kip714.name = io.kip714
logger.kip714.level = INFO
"""


class KafkaBroker:
    """One KRaft node (broker + controller) on 127.0.0.1 with ``extra`` server properties."""

    def __init__(self, workdir: Path, jars: Path, plugin: Path, extra: dict[str, str]) -> None:
        self.workdir = workdir
        self.class_path = [jars / "*", plugin]
        self.port = free_port()
        self.controller_port = free_port()
        self.log_path = workdir / "broker.log"
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "log4j2.properties").write_text(LOG4J2)
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            **extra,
        }
        self.properties_path = workdir / "server.properties"
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _jvm(self, main: str, *args: str, heap: str) -> list[str]:
        command = java_command(self.class_path, main, *args, heap=heap)
        command.insert(1, f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}")
        return command

    def start(self) -> KafkaBroker:
        """Format the storage (first start only), start the JVM, wait for "Kafka Server started"."""
        if not (self.workdir / "data" / "meta.properties").exists():
            cluster_id = str(Uuid.random())
            format_args = ("format", "-t", cluster_id, "-c", str(self.properties_path))
            subprocess.run(
                self._jvm("kafka.tools.StorageTool", *format_args, heap="256m"),
                check=True,
                timeout=START_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self._jvm("kafka.Kafka", str(self.properties_path), heap="512m"),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if _STARTED in self.log():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.kill()
        raise AssertionError(f"the Kafka broker did not start:\n{self.log()[-5000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> bool:
        """SIGTERM and wait; True for a clean shutdown (the plugin flushed and logged its counters).

        A JVM that ran its shutdown hooks after SIGTERM exits 143 (128 + 15).
        """
        process = self.process
        if process is None or process.poll() is not None:
            return False
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the Kafka broker did not stop within 30 s") from None
        return code in {0, 128 + signal.SIGTERM}

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def forwarder_counters(self) -> dict[str, int]:
        """The plugin's final counters from the broker's log (after ``stop``)."""
        match = FORWARDER_STOPPED.search(self.log())
        if match is None:
            raise AssertionError(f"no forwarder summary in the broker log:\n{self.log()[-3000:]}")
        return {key: int(value) for key, value in match.groupdict().items()}

    def tool(self, main: str, *args: str) -> str:
        """Run one of Kafka's command-line tools (its Java main class) against this broker."""
        result = subprocess.run(
            self._jvm(main, "--bootstrap-server", self.bootstrap, *args, heap="256m"),
            check=False,
            timeout=60,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise AssertionError(f"{main} {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result.stdout
