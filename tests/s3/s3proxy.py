"""A real S3 server for the tests: S3Proxy from Maven Central, filesystem backend, on loopback.

No Docker and no mock: ``tests/s3/pom.xml`` names ``org.gaul:s3proxy``; Maven
resolves it (and its dependencies) into ``~/.m2`` once and its class path is
cached in ``~/.cache/kip714/s3proxy-<version>/classpath`` (written to a
temporary directory and renamed, so two test runs fetching at once never see
half a cache). ``S3Proxy`` starts ``org.gaul.s3proxy.Main`` on a free
127.0.0.1 port with a bucket directory of its own and stops it.

The AWS SDK inside pyarrow sends streaming checksums that S3Proxy 2.6.0
rejects (``XAmzContentSHA256Mismatch``) unless
``AWS_REQUEST_CHECKSUM_CALCULATION`` and ``AWS_RESPONSE_CHECKSUM_VALIDATION``
are ``WHEN_REQUIRED``; ``CHECKSUM_ENV`` holds them for every process that
talks to the server (the SDK reads them when it starts).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Final

from tests.kafka.kafka_dist import CACHE, REPO, _maven, free_port, java_command, maven_lock

S3PROXY_VERSION: Final = "2.6.0"
POM: Final = REPO / "tests" / "s3" / "pom.xml"
START_TIMEOUT_S: Final = 60.0
ACCESS_KEY: Final = "kip714-access"
SECRET_KEY: Final = "kip714-secret-key"
REGION: Final = "us-east-1"
CHECKSUM_ENV: Final = {
    "AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED",
}


def s3proxy_class_path() -> list[Path]:
    """S3Proxy's jars, resolved through Maven on first use (or when a cached jar vanished)."""
    target = CACHE / f"s3proxy-{S3PROXY_VERSION}"
    cached = target / "classpath"
    if cached.exists():
        jars = [Path(p) for p in cached.read_text().strip().split(os.pathsep) if p]
        if jars and all(p.exists() for p in jars):
            return jars
    partial = target.with_name(f"{target.name}.partial-{uuid.uuid4().hex[:8]}")
    partial.mkdir(parents=True)
    try:
        with maven_lock():
            _maven(
                "-f", str(POM), f"-Ds3proxy.version={S3PROXY_VERSION}",
                "dependency:build-classpath", f"-Dmdep.outputFile={partial / 'classpath'}",
            )  # fmt: skip
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    except OSError:
        if not cached.exists():  # another run renamed its copy first
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return [Path(p) for p in cached.read_text().strip().split(os.pathsep) if p]


class S3Proxy:
    """One S3Proxy process on 127.0.0.1 storing buckets under ``workdir/buckets``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "s3proxy.log"

    def start(self) -> S3Proxy:
        class_path = s3proxy_class_path()
        (self.workdir / "buckets").mkdir(parents=True, exist_ok=True)
        properties = self.workdir / "s3proxy.properties"
        properties.write_text(
            "\n".join(
                [
                    f"s3proxy.endpoint={self.endpoint}",
                    "s3proxy.authorization=aws-v2-or-v4",
                    f"s3proxy.identity={ACCESS_KEY}",
                    f"s3proxy.credential={SECRET_KEY}",
                    "jclouds.provider=filesystem",
                    f"jclouds.filesystem.basedir={self.workdir / 'buckets'}",
                    "",
                ]
            )
        )
        command = java_command(
            class_path, "org.gaul.s3proxy.Main", "--properties", str(properties), heap="256m"
        )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"S3Proxy exited:\n{self.log_path.read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError(f"S3Proxy did not listen within {START_TIMEOUT_S} s")

    def create_bucket(self, name: str) -> None:
        from pyarrow import fs  # noqa: PLC0415

        s3 = fs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            endpoint_override=self.endpoint,
            region=REGION,
            scheme="http",
            allow_bucket_creation=True,
        )
        s3.create_dir(name)

    def lake_options(self) -> dict[str, str]:
        """The ``[lake]`` keys (and pyiceberg properties) that reach this server."""
        return {
            "s3_endpoint": self.endpoint,
            "s3_region": REGION,
            "s3_access_key_id": ACCESS_KEY,
            "s3_secret_access_key": SECRET_KEY,
        }

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
