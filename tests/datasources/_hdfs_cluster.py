"""A real single-node HDFS (Apache Hadoop 2.7.3 NameNode + DataNode) on 127.0.0.1, for tests.

Adapted from ``shared/INFRA.md``.  Hadoop's server jars come from the ``pyspark==2.4.8`` sdist
on PyPI (downloaded once with pip into ``~/.cache/roofline-hdfs/dl``, or
``$ROOFLINE_HDFS_CACHE``, and filtered to ~72 MB of jars in ``lib/``); they run on the system
Java.  WebHDFS is disabled (it needs Jersey 1 jars that no registry here ships); the JAX-RS API
jar is kept because the NameNode's RPC ``create`` path loads ``javax.ws.rs`` classes.
Each cluster gets fresh name/data directories and free ports, and :meth:`HDFSCluster.stop`
always kills both JVMs.  Python clients talk to it with ``hdfs-native`` (``hdfs://`` URLs).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

PYSPARK = "pyspark==2.4.8"
_SKIP_JARS = (
    "spark-", "scala-", "hive-", "breeze", "kubernetes",
    "parquet", "orc-", "arrow-", "mesos", "py4j", "pyrolite", "datanucleus", "derby", "json4s",
    "chill", "kryo", "calcite", "janino", "commons-compiler", "antlr", "zstd", "snappy", "lz4",
    "avro", "jackson-module-scala",
)


class HDFSUnavailable(RuntimeError):
    """The prerequisites (java, the Hadoop jars) are missing: tests should skip."""


def cache_dir() -> Path:
    return Path(os.environ.get("ROOFLINE_HDFS_CACHE", Path.home() / ".cache" / "roofline-hdfs"))


def _skip_jar(name: str) -> bool:
    if name.startswith("jersey-") and name.endswith("2.22.2.jar"):
        return True
    return name.startswith(_SKIP_JARS)


_MARKER = ".roofline-jars-v2"  # bump when the jar selection changes


def ensure_jars(cache: Path | None = None, timeout: float = 600) -> Path:
    """Hadoop jars in ``cache/lib``, extracted from the pyspark sdist (downloaded once into
    ``cache/dl`` and kept there)."""
    cache = cache or cache_dir()
    lib = cache / "lib"
    if (lib / _MARKER).exists():
        return lib
    if shutil.which("java") is None:
        raise HDFSUnavailable("java is not installed (HDFS needs a JVM)")
    dl = cache / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    sdist = dl / "pyspark-2.4.8.tar.gz"
    if not sdist.exists():
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
               "--no-build-isolation", "--no-binary", ":all:", "-d", str(dl), PYSPARK]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise HDFSUnavailable(f"downloading {PYSPARK} timed out") from exc
        if r.returncode != 0 or not sdist.exists():
            raise HDFSUnavailable(
                f"cannot download {PYSPARK} (needs PyPI access and `wheel`): {r.stderr[-500:]}"
            )
    tmp = cache / "lib.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            name = os.path.basename(m.name)
            if (m.isfile() and "/deps/jars/" in m.name and name.endswith(".jar")
                    and not _skip_jar(name)):
                with tf.extractfile(m) as src, open(tmp / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    if not (tmp / "hadoop-hdfs-2.7.3.jar").exists():
        raise HDFSUnavailable(f"{sdist} has no hadoop-hdfs-2.7.3.jar")
    (tmp / _MARKER).write_text(PYSPARK + "\n")
    shutil.rmtree(lib, ignore_errors=True)
    tmp.rename(lib)
    return lib


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prop(k, v):
    return f"<property><name>{k}</name><value>{v}</value></property>"


class HDFSCluster:
    """Start with :meth:`start`, always :meth:`stop` (also a context manager)."""

    def __init__(self, root: Path, lib: Path | None = None):
        self.root = Path(root)
        self.lib = lib
        self.procs = []
        self.nn_port = self.http_port = None

    @property
    def url(self) -> str:
        return f"hdfs://127.0.0.1:{self.nn_port}"

    def _conf(self):
        r = self.root
        for d in ("conf", "name", "data", "tmp", "logs"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for a in ("hdfs", "datanode", "secondary", "static"):
            w = r / "web" / "webapps" / a / "WEB-INF"
            w.mkdir(parents=True, exist_ok=True)
            (w / "web.xml").write_text(
                '<web-app xmlns="http://java.sun.com/xml/ns/javaee" version="2.5"></web-app>'
            )
        self.nn_port, self.http_port = _free_port(), _free_port()
        (r / "conf" / "core-site.xml").write_text(
            "<configuration>" + _prop("fs.defaultFS", self.url)
            + _prop("hadoop.tmp.dir", r / "tmp") + "</configuration>"
        )
        props = [
            ("dfs.replication", 1), ("dfs.permissions.enabled", "false"),
            ("dfs.webhdfs.enabled", "false"),  # WebHDFS would need Jersey 1 jars; not used
            ("dfs.namenode.name.dir", f"file://{r / 'name'}"),
            ("dfs.datanode.data.dir", f"file://{r / 'data'}"),
            ("dfs.namenode.http-address", f"127.0.0.1:{self.http_port}"),
            ("dfs.namenode.safemode.extension", 0),
            ("dfs.datanode.address", "127.0.0.1:0"), ("dfs.datanode.http.address", "127.0.0.1:0"),
            ("dfs.datanode.ipc.address", "127.0.0.1:0"), ("dfs.datanode.hostname", "127.0.0.1"),
            ("dfs.namenode.datanode.registration.ip-hostname-check", "false"),
        ]
        (r / "conf" / "hdfs-site.xml").write_text(
            "<configuration>" + "".join(_prop(k, v) for k, v in props) + "</configuration>"
        )
        (r / "conf" / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, c\nlog4j.appender.c=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.c.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.c.layout.ConversionPattern=%d{HH:mm:ss} %p %c{2}: %m%n\n"
        )

    def _java(self, cls, *args, log):
        cp = f"{self.root / 'conf'}:{self.root / 'web'}:{self.lib}/*"
        cmd = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
               "-cp", cp, cls, *args]
        return cmd, open(self.root / "logs" / log, "wb")

    def _jmx(self, q):
        url = f"http://127.0.0.1:{self.http_port}/jmx?qry={q}"
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.load(r)["beans"][0]

    def start(self, timeout: float = 120) -> HDFSCluster:
        if shutil.which("java") is None:
            raise HDFSUnavailable("java is not installed (HDFS needs a JVM)")
        if self.lib is None:
            self.lib = ensure_jars()
        self._conf()
        cmd, log = self._java("org.apache.hadoop.hdfs.server.namenode.NameNode", "-format",
                              "-force", "-nonInteractive", log="format.log")
        with log:
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"namenode -format failed; see {self.root / 'logs/format.log'}")
        for cls, name in (("org.apache.hadoop.hdfs.server.namenode.NameNode", "nn.log"),
                          ("org.apache.hadoop.hdfs.server.datanode.DataNode", "dn.log")):
            cmd, log = self._java(cls, log=name)
            with log:
                self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True))
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if any(p.poll() is not None for p in self.procs):
                self.stop()
                raise RuntimeError(f"an HDFS daemon exited early; see {self.root / 'logs'}")
            try:
                st = self._jmx("Hadoop:service=NameNode,name=FSNamesystemState")
                info = self._jmx("Hadoop:service=NameNode,name=NameNodeInfo")
                if st.get("NumLiveDataNodes") == 1 and info.get("Safemode") == "":
                    return self
            except (OSError, ValueError, KeyError, IndexError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"HDFS did not come up in {timeout} s; see {self.root / 'logs'}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        self.procs = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
