"""Fixtures for the datasource tests: power-law CSC data, an HTTP server, a real HDFS."""

import numpy as np
import pytest

from tests._helpers import powerlaw_matrix


@pytest.fixture
def data(dtype):
    """``(X, y, w)``: 1037 power-law examples over 300 features, half of them empty."""
    X = powerlaw_matrix(300, 1037, 8, dtype=dtype, seed=7, empty_examples=0.5, signed=True)
    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, X.shape[1]).astype(dtype)
    w = rng.random(X.shape[1]).astype(dtype)
    return X, y, w


# -- a real HTTP server with Range support (http.server), started per test -----------------------

import http.server  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves files of ``server.root`` with single-range ``Range: bytes=a-b`` support and logs
    every request as ``(method, path, range header, bytes sent)`` in ``server.log``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _file(self):
        path = os.path.join(self.server.root, self.path.split("?")[0].lstrip("/"))
        return path if os.path.isfile(path) else None

    def do_HEAD(self):
        path = self._file()
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.server.log.append(("HEAD", self.path, None, 0))
            return
        self.send_response(200)
        self.send_header("Content-Length", str(os.path.getsize(path)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.server.log.append(("HEAD", self.path, None, 0))

    def do_GET(self):
        path = self._file()
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.server.log.append(("GET", self.path, None, 0))
            return
        size = os.path.getsize(path)
        rng = self.headers.get("Range")
        start, stop = 0, size
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
        if m:
            a, b = m.groups()
            if a == "":
                start, stop = max(0, size - int(b)), size
            else:
                start, stop = int(a), min(size, int(b) + 1 if b else size)
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.server.log.append(("GET", self.path, rng, 0))
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            self.wfile.write(f.read(stop - start))
        self.server.log.append(("GET", self.path, rng, stop - start))


@pytest.fixture
def http_server(tmp_path):
    """``(base_url, root_dir, log)`` of a Range-capable HTTP server on 127.0.0.1."""
    root = tmp_path / "www"
    root.mkdir()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
    srv.daemon_threads = True
    srv.root = str(root)
    srv.log = []
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", root, srv.log
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=10)


# -- a real HDFS (NameNode + DataNode JVMs), once per session, always stopped ---------------------


@pytest.fixture(scope="session")
def hdfs_cluster(tmp_path_factory):
    """A started :class:`tests.datasources._hdfs_cluster.HDFSCluster`; skips when java or the
    jars are missing."""
    pytest.importorskip("hdfs_native", reason="hdfs:// needs the hdfs-native client")
    from tests.datasources._hdfs_cluster import HDFSCluster, HDFSUnavailable

    cluster = HDFSCluster(tmp_path_factory.mktemp("hdfs"))
    try:
        cluster.start()
    except HDFSUnavailable as exc:
        cluster.stop()
        pytest.skip(f"no HDFS: {exc}")
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()
