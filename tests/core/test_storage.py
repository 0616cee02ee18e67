"""Inputs and OUT as pyarrow filesystem URIs, against a local S3-compatible server (moto)."""
from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile

import numpy as np

import pytest
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, make_sample, s3_download, tree_digest, write_jsonl

from rollout_cli.core import storage
from rollout_cli.cli.app import app

from pyarrow import fs as pafs


_download = s3_download


def _convert(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["convert", *args, "-q"])
    return r.exit_code, r.output


def _shards(root) -> dict:
    """Each file's digest by its layout path (an object store's generation folder left out). The
    manifest and the dataset card name the generation folders, so they are compared elsewhere
    (tests/output/test_card.py)."""
    from rollout_cli.core import layout

    return {layout.split_generation(k)[1]: v[1] for k, v in tree_digest(root).items()
            if not k.endswith("manifest.json") and k != layout.CARD}


def test_uri_helpers():
    assert storage.is_uri("s3://b/k") and storage.is_uri("gs://b") and not storage.is_uri("/tmp/x")
    assert not storage.is_uri("relative/s3://x")
    assert storage.join("s3://b/out/", "data/x.parquet") == "s3://b/out/data/x.parquet"
    assert storage.join("/tmp/out", "data") == os.path.join("/tmp/out", "data")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "pt"])
def test_s3_inputs_and_output_give_the_local_bytes(s3, tmp_path, fmt):
    local = tmp_path / "local"
    assert _convert(str(SAMPLE_DATA / fmt), str(local), "--workers", "1")[0] == 0
    code, out = _convert(f"s3://bkt/dumps/{fmt}", f"s3://bkt/out-{fmt}", "--workers", "2")
    assert code == 0, out
    _download(s3, f"bkt/out-{fmt}", tmp_path / "remote")
    assert _shards(tmp_path / "remote") == _shards(local)
    assert not s3.get_file_info(pafs.FileSelector(f"bkt/out-{fmt}/.staging", allow_not_found=True))
    # the manifest names the inputs by their URIs
    import json

    m = json.loads((tmp_path / "remote" / "manifest.json").read_text())
    assert all(i["path"].startswith(f"s3://bkt/dumps/{fmt}/") for i in m["inputs"])


def test_s3_output_exists_overwrite_and_resume(s3, tmp_path):
    import json

    uri = "s3://bkt/out-exists"
    assert _convert(str(SAMPLE_DATA / "jsonl"), uri)[0] == 0
    assert _convert(str(SAMPLE_DATA / "jsonl"), uri)[0] == 5
    before = storage.read_bytes(f"{uri}/manifest.json")
    stamp = storage.file_info(f"{uri}/manifest.json").mtime_ns
    # --resume with nothing changed: up to date, nothing is uploaded again, not even the manifest
    assert _convert(str(SAMPLE_DATA / "jsonl"), uri, "--resume")[0] == 0
    assert storage.read_bytes(f"{uri}/manifest.json") == before
    assert storage.file_info(f"{uri}/manifest.json").mtime_ns == stamp
    # --overwrite with fewer steps: the old steps are gone, the new manifest matches
    code, _ = _convert(str(SAMPLE_DATA / "jsonl"), uri, "--overwrite", "--steps", "2")
    assert code == 0
    _download(s3, "bkt/out-exists", tmp_path / "o")
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert sorted(p.name for p in (tmp_path / "o" / "gen").iterdir()) == [m["generation"]]
    assert sorted(p.name for p in (tmp_path / "o" / "gen" / m["generation"] / "data").iterdir()) == ["step-000002"]
    assert not (tmp_path / "o" / "gen" / m["generation"] / "eval").exists() and not (tmp_path / "o" / "data").exists()
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output


def test_invalid_input_on_s3_commits_nothing(s3, tmp_path):
    bad = make_sample(index=0, group_index=0)
    bad["loss_mask"] = [1]  # response_length is not 1
    write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=1, group_index=0), bad])
    pafs.copy_files(str(tmp_path / "in"), "bkt/bad", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    code, out = _convert("s3://bkt/bad", "s3://bkt/out-bad")
    assert code == 3
    assert "s3://bkt/bad/1.jsonl:line 2" in out and "loss_mask" in out
    assert not s3.get_file_info(pafs.FileSelector("bkt/out-bad", allow_not_found=True, recursive=True))


def test_missing_uri_is_a_usage_error(s3, tmp_path):
    assert _convert("s3://bkt/nothing-here", str(tmp_path / "o"))[0] == 2


def test_a_local_copy_that_cannot_be_read_leaves_no_folder(s3, tmp_path, monkeypatch):
    """A `.pt` or pickle on an object store is copied to a local file first; when the copy
    fails, the scratch folder goes with it."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(Exception):
        with storage.LocalCopy("s3://bkt/nothing-here/rollout_0.pt"):
            pass
    assert list(scratch.iterdir()) == []
    s3.create_dir("bkt/one")
    with s3.open_output_stream("bkt/one/rollout_0.pt") as f:
        f.write(b"x" * 10)
    with storage.LocalCopy("s3://bkt/one/rollout_0.pt") as local:
        assert open(local, "rb").read() == b"x" * 10
    assert list(scratch.iterdir()) == []


def test_ray_engine_reads_and_writes_s3(s3, tmp_path):
    """Ray tasks on any node reach inputs and OUT through the object store: no shared POSIX
    filesystem. Run in a subprocess so its own local Ray sees the endpoint."""
    import subprocess
    import sys

    import ray  # noqa: F401  (the test extra installs it)
    local = tmp_path / "local"
    assert _convert(str(SAMPLE_DATA / "jsonl"), str(local), "--workers", "1")[0] == 0
    r = subprocess.run(
        [sys.executable, "-m", "rollout_cli", "convert", "s3://bkt/dumps/jsonl", "s3://bkt/out-ray", "--engine", "ray",
         "--workers", "2", "-q"],
        env=dict(os.environ), capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    _download(s3, "bkt/out-ray", tmp_path / "remote")
    assert _shards(tmp_path / "remote") == _shards(local)


# --- local files: storage.LocalWriter ------------------------------------------------------

_CHUNK = storage.WRITE_CHUNK_BYTES


def _direct_accepted(folder) -> bool:
    """Whether this folder's file system opens a file with O_DIRECT."""
    try:
        fd = os.open(os.path.join(folder, "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return False
    os.close(fd)
    return True


@pytest.mark.parametrize("pieces", [[], [1], [4095], [4096], [_CHUNK - 1], [_CHUNK], [_CHUNK + 1],
                                    [3, _CHUNK - 3, 5000], [7] * 1000 + [2 * _CHUNK + 17],
                                    [5, 3 * _CHUNK, 9, _CHUNK - 9, 1]])
@pytest.mark.parametrize("direct", [True, False])
def test_local_writer_writes_exactly_the_bytes_given(tmp_path, pieces, direct):
    rng = np.random.default_rng(len(pieces))
    data = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in pieces]
    path = tmp_path / "f.bin"
    w = storage.LocalWriter(str(path), direct=direct)
    assert w.direct == (direct and _direct_accepted(tmp_path))
    for d in data:
        assert w.write(d) == len(d)
    w.close()
    w.close()  # a second close does nothing
    assert path.read_bytes() == b"".join(data)


def test_local_writer_takes_any_buffer(tmp_path):
    arr = np.arange(3000, dtype=np.int32)
    w = storage.LocalWriter(str(tmp_path / "f.bin"))
    w.write(arr)  # 4-byte items, not bytes
    w.write(memoryview(b"xyz"))
    w.close()
    assert (tmp_path / "f.bin").read_bytes() == arr.tobytes() + b"xyz"


def test_local_writer_hands_each_write_to_the_disk_in_order(tmp_path, monkeypatch):
    handed = []
    monkeypatch.setattr(storage, "start_writeback", lambda fd, a, n: handed.append((a, n)))
    w = storage.LocalWriter(str(tmp_path / "f.bin"), direct=False)
    small = bytes(range(256)) * (_CHUNK // 256 + 3)  # under two chunks: gathered
    big = bytes(range(255, -1, -1)) * (2 * _CHUNK // 256 + 1)  # over a chunk: written as it is
    for a, b in ((0, 100), (100, _CHUNK // 2), (_CHUNK // 2, len(small))):  # each under a chunk: gathered
        w.write(small[a:b])
    w.write(big)
    w.write(b"tail")
    w.close()
    assert (tmp_path / "f.bin").read_bytes() == small + big + b"tail"
    # the gathered chunk, the rest gathered before the large write, the large write, the tail
    assert handed == [(0, _CHUNK), (_CHUNK, len(small) - _CHUNK), (len(small), len(big)),
                      (len(small) + len(big), 4)]


def test_local_writer_on_tmpfs(monkeypatch):
    # tmpfs (/dev/shm) refused O_DIRECT at open before Linux 6.6 and takes it since: either way
    # the file holds exactly the bytes given, the unaligned tail included
    d = tempfile.mkdtemp(dir="/dev/shm")
    handed = []
    monkeypatch.setattr(storage, "start_writeback", lambda fd, a, n: handed.append(n))
    try:
        data = np.random.default_rng(5).integers(0, 256, 2 * _CHUNK + 4097, dtype=np.uint8).tobytes()
        w = storage.LocalWriter(os.path.join(d, "f.bin"), direct=True)
        direct = w.direct
        assert direct == _direct_accepted(d)
        w.write(data[:5])
        w.write(data[5:])
        w.close()
        with open(os.path.join(d, "f.bin"), "rb") as f:
            assert f.read() == data
        # direct: whole blocks to the device, the 1-byte tail through the page cache
        assert handed == ([1] if direct else [_CHUNK, _CHUNK, 4097])
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("tail", [0, 1, 4095])
def test_a_direct_writer_never_pads_nor_cuts_its_file(tmp_path, monkeypatch, tail):
    """The last part block goes through the page cache: the file is never longer than its
    bytes, and never truncated (a truncation reads the last block back from the device)."""
    monkeypatch.setattr(storage.os, "ftruncate", lambda *a: pytest.fail("truncated"))
    data = np.random.default_rng(tail).integers(0, 256, _CHUNK + 8192 + tail, dtype=np.uint8).tobytes()
    path = str(tmp_path / "f.bin")
    w = storage.LocalWriter(path, direct=True)
    w.write(data)
    w.close()
    with open(path, "rb") as f:
        assert f.read() == data


@pytest.mark.parametrize("refusal", [errno.EINVAL, errno.EOPNOTSUPP])
def test_local_writer_goes_through_the_cache_where_direct_is_refused_at_open(tmp_path, monkeypatch, refusal):
    real = os.open

    def no_direct(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(refusal, os.strerror(refusal))
        return real(path, flags, *a)

    monkeypatch.setattr(storage.os, "open", no_direct)
    w = storage.LocalWriter(str(tmp_path / "f.bin"), direct=True)
    assert not w.direct
    data = bytes(range(256)) * (2 * _CHUNK // 256 + 3)
    w.write(data)
    w.close()
    assert (tmp_path / "f.bin").read_bytes() == data


def test_local_writer_leaves_direct_io_when_a_direct_write_is_refused(tmp_path, monkeypatch):
    if not _direct_accepted(tmp_path):
        pytest.skip("this file system refuses O_DIRECT at open; the test above covers it")
    real = os.write
    refused = []

    def picky(fd, data):
        if not refused:  # the device wants a coarser alignment than a page
            refused.append(fd)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, data)

    monkeypatch.setattr(storage.os, "write", picky)
    w = storage.LocalWriter(str(tmp_path / "f.bin"), direct=True)
    assert w.direct
    data = b"abc" * (_CHUNK // 2) + b"tail"
    w.write(data)
    w.close()
    assert not w.direct and refused
    assert (tmp_path / "f.bin").read_bytes() == data


def test_local_writer_reports_a_full_disk(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    w = storage.LocalWriter(str(tmp_path / "f.bin"))
    w.write(b"y" * 5)  # gathered
    monkeypatch.setattr(storage.os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        w.write(b"x" * _CHUNK)
    with pytest.raises(OSError, match="No space left"):
        w.close()  # the tail, too; the file is still closed
    assert w.closed


@pytest.mark.parametrize("direct", [True, False])
def test_a_writer_takes_the_chunk_buffer_a_closed_one_left_and_none_of_its_bytes(tmp_path, direct):
    first = storage.LocalWriter(str(tmp_path / "a"), direct=direct)
    first.write(b"x" * (3 * _CHUNK + 5))
    first.close()
    second = storage.LocalWriter(str(tmp_path / "b"), direct=direct)
    assert second._buf is first._buf  # warm: no page of it faulted in again
    second.write(b"yz")
    second.close()
    assert (tmp_path / "b").read_bytes() == b"yz"
    assert (tmp_path / "a").read_bytes() == b"x" * (3 * _CHUNK + 5)


# --- inputs the storage cannot serve -------------------------------------------------------


def test_use_environment_makes_the_storage_variables_exactly_the_given_ones(monkeypatch):
    saved = storage.environment()  # the s3 fixture's, maybe: put back whole at the end
    monkeypatch.setenv("NOT_STORAGE", "kept")
    try:
        storage.use_environment({"AWS_ENDPOINT_URL": "http://a:1", "AWS_PROFILE": "node", "AWS_ACCESS_KEY_ID": "node-key"})
        given = {"AWS_ENDPOINT_URL": "http://b:2", "AWS_ACCESS_KEY_ID": "k"}
        storage._filesystem("file:///")
        storage.use_environment(given)
        assert storage.environment() == given and "AWS_PROFILE" not in os.environ
        assert os.environ["NOT_STORAGE"] == "kept"  # not a storage variable
        assert storage._filesystem.cache_info().currsize == 0  # resolved under other variables: forgotten
        storage._filesystem("file:///")
        storage.use_environment(dict(given))
        assert storage._filesystem.cache_info().currsize == 1  # the same variables: kept
    finally:
        storage.use_environment(saved)
    assert storage.environment() == saved


def test_use_environment_replaces_the_aws_shared_files(tmp_path):
    """The files of another process's profiles are read here through private copies (no file
    on disk); a shared file that process lacks is an empty one here, not this process's own."""
    saved = storage.environment()
    creds = b"[default]\naws_access_key_id = AKIAFROMDRIVER\n"
    try:
        storage.use_environment({}, {"AWS_SHARED_CREDENTIALS_FILE": creds})
        path = os.environ["AWS_SHARED_CREDENTIALS_FILE"]
        with open(path, "rb") as f:
            assert f.read() == creds
        assert not os.path.exists(os.path.realpath(path)) or os.path.realpath(path).startswith("/memfd:")
        assert os.environ["AWS_CONFIG_FILE"] == os.devnull
        assert storage.shared_files() == {"AWS_SHARED_CREDENTIALS_FILE": creds, "AWS_CONFIG_FILE": b""}
        storage.use_environment({}, {"AWS_SHARED_CREDENTIALS_FILE": creds})
        assert os.environ["AWS_SHARED_CREDENTIALS_FILE"] == path  # the same content: the same copy
    finally:
        storage.use_environment(saved)


@pytest.fixture
def store_down(s3, monkeypatch):
    """The S3 variables point at a port nobody listens on (the server itself keeps running);
    each request is tried once (AWS_MAX_ATTEMPTS), so the refusal is not retried for seconds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    storage._filesystem.cache_clear()
    yield
    storage._filesystem.cache_clear()


@pytest.fixture
def failing_store(monkeypatch):
    """An S3 endpoint that answers every request with 500 InternalError (a retryable error) and
    counts the requests; the S3 variables point at it."""
    import http.server
    import threading

    requests = []

    class Failing(http.server.BaseHTTPRequestHandler):
        def _fail(self):
            requests.append(self.command)
            body = b"<Error><Code>InternalError</Code><Message>try again</Message></Error>"
            self.send_response(500)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _fail

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    for k, v in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_port}", "AWS_ACCESS_KEY_ID": "test",
                 "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    storage._filesystem.cache_clear()
    yield requests
    server.shutdown()
    server.server_close()
    storage._filesystem.cache_clear()


@pytest.mark.parametrize("attempts", ["1", "2"])
def test_aws_max_attempts_is_how_many_times_a_request_is_tried(failing_store, monkeypatch, attempts):
    """AWS_MAX_ATTEMPTS, as the AWS SDKs read it: a request the store keeps failing is tried that
    many times, then is an input that cannot be read (exit 9)."""
    from rollout_cli.core.errors import InputUnavailableError
    from rollout_cli.output.manifest import file_fingerprint

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", attempts)
    with pytest.raises(InputUnavailableError, match="^s3://bkt/in/1.jsonl: cannot read this input from its storage"):
        file_fingerprint("s3://bkt/in/1.jsonl")
    assert len(failing_store) == int(attempts)


def test_aws_max_attempts_unset_or_not_a_number_keeps_pyarrow_s_default(monkeypatch):
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    assert storage.max_attempts() is None
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "many")
    assert storage.max_attempts() is None
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "0")
    assert storage.max_attempts() == 1


@pytest.mark.parametrize("fmt,name", [("jsonl", "1.jsonl"), ("parquet", "1.parquet"), ("pt", "1.pt")])
def test_reader_of_an_input_on_an_unreachable_store_raises_input_unavailable(store_down, fmt, name):
    from rollout_cli.core.errors import ExitCode, InputUnavailableError
    from rollout_cli.inputs.discover import InputFile
    from rollout_cli.inputs.registry import read_input

    uri = f"s3://bkt/dumps/{fmt}/rollout_data/{name}"
    with pytest.raises(InputUnavailableError) as e:
        list(read_input(InputFile(uri, uri, fmt, 1, "train", "name")))
    assert str(e.value).startswith(f"{uri}: cannot read this input from its storage (network, credentials or permission): ")
    assert "Could not connect" in str(e.value) and e.value.exit_code == ExitCode.INPUT_UNAVAILABLE == 9


def test_fingerprint_of_an_input_on_an_unreachable_store_raises_input_unavailable(store_down):
    from rollout_cli.core.errors import InputUnavailableError
    from rollout_cli.output.manifest import file_fingerprint

    with pytest.raises(InputUnavailableError, match="^s3://bkt/dumps/jsonl/rollout_data/1.jsonl: cannot read this input"):
        file_fingerprint("s3://bkt/dumps/jsonl/rollout_data/1.jsonl")


def test_convert_from_an_unreachable_store_exits_9_naming_the_input(store_down, tmp_path):
    code, out = _convert("s3://bkt/dumps/jsonl", str(tmp_path / "o"))
    assert code == 9, out
    assert "error: s3://bkt/dumps/jsonl: cannot read this input from its storage" in out and "invalid" not in out
    assert not (tmp_path / "o").exists()


def test_corrupt_input_on_s3_is_still_invalid_input(s3, tmp_path):
    """A storage fault is told apart from bad bytes: a gzip stream that is no gzip stays exit 3."""
    from rollout_cli.core.errors import InvalidInputError
    from rollout_cli.inputs.discover import InputFile
    from rollout_cli.inputs.registry import read_input

    with s3.open_output_stream("bkt/corrupt/1.jsonl.gz", compression=None) as f:
        f.write(b"not gzip at all\n")
    with pytest.raises(InvalidInputError, match="^s3://bkt/corrupt/1.jsonl.gz: cannot read: "):
        list(read_input(InputFile("s3://bkt/corrupt/1.jsonl.gz", "s3://bkt/corrupt/1.jsonl.gz", "jsonl", 1, "train", "name")))


def test_local_input_without_read_permission_exits_9(tmp_path):
    """A file the converting process may not read (mode 000; run as root, the command runs
    without the capabilities that let root read anything) is an input that cannot be read
    (exit 9), not invalid input."""
    import subprocess
    import sys

    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(SAMPLE_DATA / "jsonl" / "rollout_data" / "1.jsonl", src / "1.jsonl")
    os.chmod(src / "1.jsonl", 0)
    root = os.path.dirname(os.path.dirname(storage.__file__))
    plain = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
    r = subprocess.run([*plain, sys.executable, "-m", "rollout_cli", "convert", str(src / "1.jsonl"), str(tmp_path / "o"), "-q"],
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(root)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 9, r.stderr
    assert f"error: {src / '1.jsonl'}: cannot read this input from its storage (network, credentials or permission): Permission denied" in r.stderr


def test_convert_with_credentials_the_store_refuses_exits_9(s3, tmp_path, monkeypatch):
    """The store checks signatures (as a real one does) and knows no such key: exit 9 naming
    the input, the store's refusal in the message, the secret nowhere."""
    from moto import settings as moto_settings

    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # every request is checked
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-0a1b2c")
    storage._filesystem.cache_clear()
    try:
        code, out = _convert("s3://bkt/dumps/jsonl", str(tmp_path / "o"))
    finally:
        storage._filesystem.cache_clear()
    assert code == 9, out
    assert "error: s3://bkt/dumps/jsonl: cannot read this input from its storage (network, credentials or permission): " in out
    assert "AWS Error ACCESS_DENIED" in out and "wrong-secret-0a1b2c" not in out
