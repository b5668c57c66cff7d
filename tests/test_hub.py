"""The Hub path of `kvplan.load_model`, offline, with the real huggingface_hub client.

Two stand-ins for huggingface.co, both on this machine: a Hub cache laid out as huggingface_hub lays it
out (checked against what the client itself writes), and a small HTTP server on 127.0.0.1 that answers
`/{repo}/resolve/{revision}/{file}` with the status codes and headers the Hub uses, so
`hf_raise_for_status` raises its own GatedRepoError, RepositoryNotFoundError, ... Nothing in kvplan is
mocked; huggingface_hub's import-time constants (cache, endpoint, offline flag) are pointed at them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

huggingface_hub = pytest.importorskip("huggingface_hub")
from huggingface_hub import constants  # noqa: E402

import kvplan  # noqa: E402
from kvplan.cli import main  # noqa: E402
from kvplan.errors import ConfigError, ModelNotAvailableError  # noqa: E402
from kvplan.sources.hub import quiet_hub_logs  # noqa: E402
from kvplan.weights.rule import weights_bytes  # noqa: E402
from sleep_spy import SleepSpy  # noqa: E402  (tests/sleep_spy.py)

REPO_ROOT = Path(__file__).resolve().parents[1]
MAIN = "a" * 40   # commit hashes: 40 lowercase hex digits, as REGEX_COMMIT_HASH wants
OLD = "b" * 40


def llama_config(layers: int, kv_heads: int = 8, **extra) -> bytes:
    """A small Llama config.json; the layer count tells which revision was read."""
    data = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": layers,
            "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": kv_heads,
            "torch_dtype": "bfloat16", **extra}
    return json.dumps(data, indent=2).encode()


def git_blob_sha1(content: bytes) -> str:
    """The ETag the Hub sends for a file stored in git (not LFS), and so the blob's name in the cache."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


# --------------------------------------------------------------------------------------------------
# A Hub cache, laid out as huggingface_hub's file_download.py writes it


def cache_file(cache: Path, repo_id: str, commit: str, content: bytes, *, refs: tuple[str, ...] = ("main",),
               filename: str = "config.json") -> Path:
    """models--org--name/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>, refs/<ref> = commit}."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))  # constants.REPO_ID_SEPARATOR
    blob = repo / "blobs" / git_blob_sha1(content)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(content)
    pointer = repo / "snapshots" / commit / filename
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.symlink_to(os.path.relpath(blob, pointer.parent))  # relative, as _create_symlink makes it
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # no trailing newline: the client reads it verbatim
    return pointer


def cache_no_exist(cache: Path, repo_id: str, commit: str, filename: str = "config.json") -> None:
    """What the client records after the Hub answered EntryNotFound: .no_exist/<commit>/<file> + refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    marker = repo / ".no_exist" / commit / filename
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


def tree(root: Path) -> dict[str, str]:
    """Relative path -> 'link:<target>' / 'file:<content>' for everything under root."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = "file:" + path.read_bytes().decode()
    return out


def closed_port() -> int:
    """A loopback port nobody listens on: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """An empty Hub cache, no token, online, endpoint on a closed loopback port (so nothing leaves the machine).

    huggingface_hub reads its environment once, at import, into `constants`: patch both.
    """
    cache = tmp_path / "hub"
    cache.mkdir()
    endpoint = f"http://127.0.0.1:{closed_port()}"
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                "HF_HUB_ETAG_TIMEOUT", "HF_HUB_VERBOSITY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("NO_PROXY", "no_proxy"):  # a CI proxy must not see loopback requests
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "home" / "token"))  # no saved login
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "home" / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", constants.DEFAULT_ETAG_TIMEOUT)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_SYMLINKS", False, raising=False)  # newer clients only
    point_endpoint(monkeypatch, endpoint)
    huggingface_hub.close_session()  # the shared client reads proxy settings when it is created
    yield cache
    huggingface_hub.close_session()  # drop pooled connections to servers that are gone


def point_endpoint(monkeypatch, endpoint: str) -> None:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")


def go_offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# --------------------------------------------------------------------------------------------------
# A Hub on 127.0.0.1


@dataclass
class FakeRepo:
    files: dict[str, dict[str, bytes]]             # commit -> filename -> content
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> commit
    token: str | None = None                       # gated: the token of an account that accepted the license
    status: int | None = None                      # answer every request with this status (a Hub outage)
    hub_headers: bool = True                       # False: a proxy or captive portal, not the Hub
    claimed_size: int | None = None                # Content-Length to announce instead of the file's own
    sent_bytes: int | None = None                  # GET sends only this many bytes, then closes (a cut download)
    trickle: bool | frozenset = False              # answer one byte every 0.2 s (a stalled link): all, or these files
    sizes: dict[str, int] = field(default_factory=dict)  # a file's whole size where `files` holds only its start
                                                   # (a safetensors header): zeros follow it


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


class FakeHub:
    """`HEAD|GET /{org}/{name}/resolve/{revision}/{file}` as huggingface.co answers it.

    Error answers carry the X-Error-Code header `hf_raise_for_status` keys on: RepoNotFound (401 without
    a token, 404 with one), GatedRepo (401 / 403), RevisionNotFound (404), EntryNotFound (404, with
    X-Repo-Commit so the client caches the absence). A file answers 200 with ETag (git blob sha1) and
    X-Repo-Commit, which the client needs to name the blob and the snapshot.
    """

    def __init__(self):
        self.repos: dict[str, FakeRepo] = {}
        self.requests: list[Request] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self):
                hub.answer(self, body=False)

            def do_GET(self):
                hub.answer(self, body=True)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.requests]

    def answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append(Request(h.command, h.path, {k.lower(): v for k, v in h.headers.items()}))
        parts = [unquote(p) for p in urlsplit(h.path).path.strip("/").split("/")]
        if len(parts) < 5 or parts[2] != "resolve":
            return self.send(h, 404, {"X-Error-Message": "Not found"}, b"", body)
        repo_id, revision, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        auth = h.headers.get("Authorization")
        repo = self.repos.get(repo_id)
        if repo is None:
            return self.send(h, 404 if auth else 401, {"X-Error-Code": "RepoNotFound",
                                                       "X-Error-Message": "Repository not found"}, b"", body)
        if repo.trickle is True or (not isinstance(repo.trickle, bool) and filename in repo.trickle):
            return self.trickle(h)
        if repo.status:
            return self.send(h, repo.status, {}, b"upstream error", body)
        if repo.token and auth != f"Bearer {repo.token}":
            message = f"Access to model {repo_id} is restricted and you are not in the authorized list."
            return self.send(h, 403 if auth else 401, {"X-Error-Code": "GatedRepo", "X-Error-Message": message},
                             b"", body)
        commit = repo.refs.get(revision) or (revision if revision in repo.files else None)
        if commit is None:
            return self.send(h, 404, {"X-Error-Code": "RevisionNotFound",
                                      "X-Error-Message": "Invalid rev id: " + revision}, b"", body)
        content = repo.files[commit].get(filename)
        if content is None:
            return self.send(h, 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit,
                                      "X-Error-Message": "Entry not found"}, b"", body)
        headers = {"Content-Type": "application/json", "ETag": f'"{git_blob_sha1(content)}"',
                   "X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if not repo.hub_headers:
            headers = {"Content-Type": "text/html"}
        size = repo.sizes.get(filename, len(content))
        ranged = self.byte_range(h.headers.get("Range"), size)
        if ranged is not None:  # what the Hub's CDN does for `Range: bytes=0-100000` (safetensors headers)
            start, stop = ranged
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
            part = content[start:stop]
            return self.send(h, 206, headers, part + bytes(stop - start - len(part)), body)
        claimed = repo.claimed_size if repo.claimed_size is not None else repo.sizes.get(filename)
        self.send(h, 200, headers, content, body, claimed, repo.sent_bytes)

    @staticmethod
    def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
        """`bytes=a-b` (inclusive, b clipped to the file) as a slice; None for no or another kind of range."""
        if not header or not header.startswith("bytes=") or "," in header:
            return None
        first, _, last = header[6:].partition("-")
        start = int(first)
        stop = min(int(last) + 1, size) if last else size
        return start, stop

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], content: bytes, body: bool,
             claimed_size: int | None = None, sent_bytes: int | None = None) -> None:
        h.send_response(status)
        length = len(content) if claimed_size is None else claimed_size
        for key, value in {**headers, "Content-Length": str(length)}.items():
            h.send_header(key, value)
        h.end_headers()
        if body:
            h.wfile.write(content if sent_bytes is None else content[:sent_bytes])
            if sent_bytes is not None:
                h.close_connection = True

    @staticmethod
    def trickle(h: BaseHTTPRequestHandler) -> None:
        for byte in b"HTTP/1.1 200 OK\r\n" * 100:
            try:
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            except OSError:  # the client gave up
                return
            time.sleep(0.2)


@pytest.fixture
def fake_hub(hub_env, monkeypatch):
    hub = FakeHub()
    point_endpoint(monkeypatch, hub.url)
    yield hub
    hub.close()


def one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message and message.count(": ") >= 1, message
    return message


# --------------------------------------------------------------------------------------------------
# Offline: HF_HUB_OFFLINE=1 and a cache written as huggingface_hub writes it


@pytest.fixture
def offline_cache(hub_env, monkeypatch):
    cache_file(hub_env, "acme/llama-mini", MAIN, llama_config(16), refs=("main",))
    cache_file(hub_env, "acme/llama-mini", OLD, llama_config(12), refs=("v1.0",))
    go_offline(monkeypatch)
    return hub_env


def test_offline_cached_model_loads(offline_cache):
    model = kvplan.load_model("acme/llama-mini")
    assert (model.name, model.source, model.model_type) == ("acme/llama-mini", "hub", "llama")
    assert (model.num_layers, model.kv_heads, model.head_dim) == (16, 8, 64)  # 2048 / 32 heads
    assert kvplan.estimate(model, seq_len=1000).kv_cache_bytes == 16 * 2 * 8 * 64 * 1000 * 2


@pytest.mark.parametrize(("revision", "layers"), [
    (None, 16),       # refs/main -> MAIN
    ("main", 16),     # the same ref, named
    ("v1.0", 12),     # a cached tag
    (OLD, 12),        # a cached commit hash: the snapshot folder itself
    (MAIN, 16),
])
def test_offline_cached_revisions(offline_cache, revision, layers):
    assert kvplan.load_model("acme/llama-mini", revision=revision).num_layers == layers


def test_offline_no_request_leaves_the_machine(offline_cache, monkeypatch):
    hub = FakeHub()  # would answer 503 to anything; offline must not ask it
    hub.repos["acme/llama-mini"] = FakeRepo({}, status=503)
    try:
        point_endpoint(monkeypatch, hub.url)
        assert kvplan.load_model("acme/llama-mini").num_layers == 16
        with pytest.raises(ModelNotAvailableError):
            kvplan.load_model("acme/other")
        assert hub.requests == []
    finally:
        hub.close()


def test_offline_uncached_id(offline_cache):
    with pytest.raises(ModelNotAvailableError) as err:
        kvplan.load_model("acme/never-downloaded")
    message = one_line(err)
    assert "acme/never-downloaded/config.json is not in the Hub cache" in message
    assert "HF_HUB_OFFLINE" in message and "config.json path" in message


def test_offline_uncached_revision(offline_cache):
    with pytest.raises(ModelNotAvailableError, match=r"at revision 'v2\.0' is not in the Hub cache"):
        kvplan.load_model("acme/llama-mini", revision="v2.0")


def test_offline_revision_skips_the_bundled_copy(offline_cache):
    """A revision names a Hub file, and a bundled id is not one: one line that says what to do instead."""
    assert kvplan.load_model("meta-llama/Llama-3.1-8B").source == "bundled"
    with pytest.raises(ModelNotAvailableError, match="--revision applies to Hub ids only"):
        kvplan.load_model("meta-llama/Llama-3.1-8B", revision="main")


def test_offline_cached_absence_is_no_config(offline_cache):
    """The client notes a config.json the Hub said is missing (.no_exist): offline, report that, not 'not cached'."""
    cache_no_exist(offline_cache, "acme/gguf-only", MAIN)
    with pytest.raises(ConfigError, match=r"acme/gguf-only has no config\.json"):
        kvplan.load_model("acme/gguf-only")


def test_offline_env_var_set_after_import(hub_env, monkeypatch):
    """HF_HUB_OFFLINE set after huggingface_hub was imported still keeps kvplan off the network."""
    cache_file(hub_env, "acme/llama-mini", MAIN, llama_config(16))
    hub = FakeHub()
    try:
        point_endpoint(monkeypatch, hub.url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert constants.HF_HUB_OFFLINE is False
        assert kvplan.load_model("acme/llama-mini").num_layers == 16
        with pytest.raises(ModelNotAvailableError, match="HF_HUB_OFFLINE is set"):
            kvplan.load_model("acme/other")
        assert hub.requests == []
    finally:
        hub.close()


def test_offline_multimodal_config_unwraps(offline_cache):
    wrapper = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
               "vision_config": {"model_type": "clip_vision_model", "num_hidden_layers": 24},
               "text_config": json.loads(llama_config(20, kv_heads=4))}
    cache_file(offline_cache, "acme/llava-mini", MAIN, json.dumps(wrapper).encode())
    model = kvplan.load_model("acme/llava-mini")
    assert (model.num_layers, model.kv_heads) == (20, 4)


def test_offline_broken_cached_file(offline_cache):
    cache_file(offline_cache, "acme/broken", MAIN, b'{"model_type": "llama",')
    with pytest.raises(ConfigError, match="is not valid JSON") as err:
        kvplan.load_model("acme/broken")
    one_line(err)


@pytest.fixture
def retry_sleeps(monkeypatch) -> list[float]:
    """Every backoff wait huggingface_hub would take: http_backoff (utils/_http.py, 1+2+4+8+8 = 23 s over five
    retries) and http_get's resume after a dropped stream (file_download.py, 1 s each). A count of retries, not a
    stopwatch, so a loaded machine cannot fail the tests that use it and a retry loop cannot pass them."""
    from huggingface_hub import file_download
    from huggingface_hub.utils import _http

    sleeps: list[float] = []
    monkeypatch.setattr(_http, "time", SleepSpy(sleeps))
    monkeypatch.setattr(file_download, "time", SleepSpy(sleeps))
    return sleeps


def cli_env() -> dict[str, str]:
    """This process's environment without the Hub's variables, loopback kept off any proxy."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_"))}
    base.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return base


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """`python -m kvplan ...` in a fresh interpreter, so huggingface_hub reads these variables at import."""
    return subprocess.run([sys.executable, "-m", "kvplan", *args], env={**cli_env(), **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


# `python -m kvplan ARGS` in a fresh interpreter with a spy like retry_sleeps' installed; the waits it would have taken
# are written as a JSON list to the file named first, whichever way the CLI exits
CLI_COUNTING_SLEEPS = f"""
import atexit, json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from huggingface_hub import file_download
from huggingface_hub.utils import _http
from sleep_spy import SleepSpy
sleeps, out = [], sys.argv.pop(1)
_http.time = file_download.time = SleepSpy(sleeps)
atexit.register(lambda: open(out, "w").write(json.dumps(sleeps)))
from kvplan.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_cli_offline_env_vars(tmp_path):
    """The documented route: HF_HUB_OFFLINE=1 and HF_HUB_CACHE in the environment of a fresh process."""
    cache = tmp_path / "hub"
    cache_file(cache, "acme/llama-mini", MAIN, llama_config(16))
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(REPO_ROOT)}
    ok = run_cli(["estimate", "acme/llama-mini", "--seq-len", "1000", "--json"], env, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["kv_cache_bytes"] == 16 * 2 * 8 * 64 * 1000 * 2
    assert ok.stderr == ""
    missing = run_cli(["estimate", "acme/other", "--seq-len", "5"], env, tmp_path)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "is not in the Hub cache" in missing.stderr


# --------------------------------------------------------------------------------------------------
# Online, against the loopback Hub


def test_online_download_fills_the_cache_then_works_offline(fake_hub, hub_env, monkeypatch):
    config = llama_config(16)
    fake_hub.repos["acme/llama-mini"] = FakeRepo({MAIN: {"config.json": config}}, refs={"main": MAIN})
    model = kvplan.load_model("acme/llama-mini", weights="config")  # the config alone (test_checkpoint: headers)
    assert (model.source, model.num_layers) == ("hub", 16)
    # config.json, and the hf_quant_config.json vLLM reads beside a config.json without quantization_config (none here)
    assert {r.path for r in fake_hub.requests} == {"/acme/llama-mini/resolve/main/config.json",
                                                   "/acme/llama-mini/resolve/main/hf_quant_config.json"}
    assert [r.method for r in fake_hub.requests if r.path.endswith("/config.json")][-1] == "GET"

    # what the client wrote is exactly the layout the offline fixtures build by hand
    expected = tmp = hub_env.parent / "expected"
    cache_file(expected, "acme/llama-mini", MAIN, config)
    repo = "models--acme--llama-mini"
    assert tree(hub_env / repo) == tree(tmp / repo)

    fake_hub.close()  # the Hub is gone: a cached file is still served, online or offline
    assert kvplan.load_model("acme/llama-mini").num_layers == 16
    go_offline(monkeypatch)
    assert kvplan.load_model("acme/llama-mini").num_layers == 16


NVIDIA_235B = REPO_ROOT / "tools/checkpoint_sources/nvidia__Qwen3-235B-A22B-NVFP4"


def test_online_hf_quant_config_beside_config_json_is_read(fake_hub, hub_env, monkeypatch):
    """nvidia/Qwen3-235B-A22B-NVFP4 declares its quantization in hf_quant_config.json only (config.json has no
    quantization_config), which vLLM reads beside it (0.27.1 transformers_utils/config.py): before, kvplan fetched
    config.json alone and priced the checkpoint in bf16, 470,187,269,120 B against its 134,101,652,144 B
    (tests/test_quant_formats.py), and its FP8 KV calibration unread. Cached with the config, it is read offline too."""
    files = {name: (NVIDIA_235B / name).read_bytes() for name in ("config.json", "hf_quant_config.json")}
    fake_hub.repos["nvidia/Qwen3-235B-A22B-NVFP4"] = FakeRepo({MAIN: files}, refs={"main": MAIN})
    for _ in ("online", "offline"):
        model = kvplan.load_model("nvidia/Qwen3-235B-A22B-NVFP4", weights="config")
        quant = model.require_arch().quant
        assert (quant.method, quant.algo, quant.group_size, quant.kv_cache_dtype) == ("modelopt", "NVFP4", 16, "fp8")
        assert weights_bytes(model.require_arch()).total_bytes == 134_101_651_392  # test_quant_formats: total - 752 B
        go_offline(monkeypatch)
    own = json.dumps({**json.loads(files["config.json"]), "quantization_config": {"quant_method": "fp8"}}).encode()
    fake_hub.repos["acme/own-scheme"] = FakeRepo({MAIN: {"config.json": own, "hf_quant_config.json": b"[]"}},
                                                 refs={"main": MAIN})
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    fake_hub.requests.clear()
    assert kvplan.load_model("acme/own-scheme", weights="config").require_arch().quant.method == "fp8"
    assert not any(r.path.endswith("hf_quant_config.json") for r in fake_hub.requests)  # config.json's own wins


def test_online_new_commit_on_main_is_fetched(fake_hub, hub_env):
    """Online, the cache is only a cache: a config changed upstream is downloaded again."""
    cache_file(hub_env, "acme/llama-mini", OLD, llama_config(12))
    fake_hub.repos["acme/llama-mini"] = FakeRepo({MAIN: {"config.json": llama_config(16)}}, refs={"main": MAIN})
    assert kvplan.load_model("acme/llama-mini").num_layers == 16
    assert (hub_env / "models--acme--llama-mini" / "refs" / "main").read_text() == MAIN


def test_online_revision_by_tag_and_commit(fake_hub):
    fake_hub.repos["acme/llama-mini"] = FakeRepo(
        {MAIN: {"config.json": llama_config(16)}, OLD: {"config.json": llama_config(12)}},
        refs={"main": MAIN, "v1.0": OLD})
    assert kvplan.load_model("acme/llama-mini", revision="v1.0").num_layers == 12
    assert kvplan.load_model("acme/llama-mini", revision=MAIN).num_layers == 16


def test_online_hf_token_is_sent(fake_hub, monkeypatch):
    fake_hub.repos["acme/gated"] = FakeRepo({MAIN: {"config.json": llama_config(16)}}, refs={"main": MAIN},
                                            token="hf_accepted")
    monkeypatch.setenv("HF_TOKEN", "hf_accepted")
    assert kvplan.load_model("acme/gated").num_layers == 16
    assert {r.headers.get("authorization") for r in fake_hub.requests} == {"Bearer hf_accepted"}


def test_online_explicit_token_wins_over_hf_token(fake_hub, monkeypatch):
    fake_hub.repos["acme/gated"] = FakeRepo({MAIN: {"config.json": llama_config(16)}}, refs={"main": MAIN},
                                            token="hf_accepted")
    monkeypatch.setenv("HF_TOKEN", "hf_other")
    assert kvplan.load_model("acme/gated", token="hf_accepted").num_layers == 16


def test_online_only_config_json_is_requested(fake_hub):
    """auto_map names code in the repository: kvplan reads the config as data and asks for nothing else."""
    config = llama_config(16, auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                        "AutoModelForCausalLM": "modeling_evil.EvilModel"})
    fake_hub.repos["acme/remote-code"] = FakeRepo(
        {MAIN: {"config.json": config, "modeling_evil.py": b"raise SystemExit('ran remote code')",
                "configuration_evil.py": b"raise SystemExit('ran remote code')"}}, refs={"main": MAIN})
    before = set(sys.modules)
    assert kvplan.load_model("acme/remote-code").num_layers == 16
    # the config and ModelOpt's hf_quant_config.json beside it (JSON data), then the checkpoint's safetensors
    # headers (kvplan.sources.hub_headers): never code
    assert {r.path.rsplit("/", 1)[1] for r in fake_hub.requests} == {"config.json", "hf_quant_config.json",
                                                                     "model.safetensors",
                                                                     "model.safetensors.index.json"}
    assert not any("evil" in name for name in set(sys.modules) - before)


HUB_ERRORS = [
    # (why, repo set-up, token, revision, error type, words the message must hold)
    ("gated, no token: 401 GatedRepo",
     FakeRepo({MAIN: {"config.json": b"{}"}}, refs={"main": MAIN}, token="hf_ok"), None, None,
     ModelNotAvailableError, ["acme/repo is gated", "accept its license", "HF_TOKEN"]),
    ("gated, token of an account without access: 403 GatedRepo",
     FakeRepo({MAIN: {"config.json": b"{}"}}, refs={"main": MAIN}, token="hf_ok"), "hf_wrong", None,
     ModelNotAvailableError, ["acme/repo is gated"]),
    ("no such repository: 401 RepoNotFound",
     None, None, None, ModelNotAvailableError, ["acme/repo was not found on the Hub", "check the id"]),
    ("no such repository, with a token: 404 RepoNotFound",
     None, "hf_any", None, ModelNotAvailableError, ["acme/repo was not found on the Hub"]),
    ("no such branch: 404 RevisionNotFound",
     FakeRepo({MAIN: {"config.json": b"{}"}}, refs={"main": MAIN}), None, "no-such-branch",
     ModelNotAvailableError, ["acme/repo has no revision 'no-such-branch'", "existing branch, tag or commit"]),
    ("GGUF-only repository: 404 EntryNotFound",
     FakeRepo({MAIN: {"model.gguf": b"GGUF"}}, refs={"main": MAIN}), None, None,
     ConfigError, ["acme/repo has no config.json", "pass a config.json path"]),
    ("Hub outage: 503",
     FakeRepo({}, status=503), None, None, ModelNotAvailableError, ["HTTP 503", "retry later"]),
    ("Hub error: 500",
     FakeRepo({}, status=500), None, None, ModelNotAvailableError, ["HTTP 500", "retry later"]),
    ("rate limited: 429",
     FakeRepo({}, status=429), None, None, ModelNotAvailableError, ["HTTP 429", "retry later"]),
    ("token without read access: plain 403",
     FakeRepo({}, status=403), "hf_any", None, ModelNotAvailableError, ["HTTP 403", "HF_TOKEN"]),
    ("a proxy answering 200 without the Hub's headers",
     FakeRepo({MAIN: {"config.json": b"<html>login</html>"}}, refs={"main": MAIN}, hub_headers=False), None, None,
     ModelNotAvailableError, ["did not answer like the Hugging Face Hub", "HF_ENDPOINT"]),
]


@pytest.mark.parametrize(("repo", "token", "revision", "error", "words"), [case[1:] for case in HUB_ERRORS],
                         ids=[case[0] for case in HUB_ERRORS])
def test_hub_errors_are_one_actionable_line(fake_hub, monkeypatch, retry_sleeps, repo, token, revision, error,
                                           words):
    if repo is not None:
        fake_hub.repos["acme/repo"] = repo
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(error) as err:
        kvplan.load_model("acme/repo", revision=revision)
    assert retry_sleeps == []  # no retry with backoff (huggingface_hub's would wait 23 s)
    assert type(err.value) is error
    message = one_line(err)
    for word in words:
        assert word in message
    assert len(fake_hub.requests) <= 2  # the probe, and at most one HEAD more: never a retry loop


def test_hub_outage_with_a_cached_copy_serves_the_cache(fake_hub, hub_env, retry_sleeps, caplog):
    cache_file(hub_env, "acme/llama-mini", MAIN, llama_config(16))
    fake_hub.repos["acme/llama-mini"] = FakeRepo({}, status=503)
    model = kvplan.load_model("acme/llama-mini")
    assert model.num_layers == 16 and "not in the Hub cache and the Hub could not be reached" in model.checkpoint_note
    config_requests = [r for r in fake_hub.requests if r.path.endswith("/config.json")]
    quant_requests = [r for r in fake_hub.requests if r.path.endswith("/hf_quant_config.json")]  # none cached: none
    assert retry_sleeps == [] and len(config_requests) == len(quant_requests) == 1
    assert len(fake_hub.requests) == 3  # + one header request, no retry of any


def test_malformed_config_on_the_hub(fake_hub):
    fake_hub.repos["acme/repo"] = FakeRepo({MAIN: {"config.json": b"[1, 2]"}}, refs={"main": MAIN})
    with pytest.raises(ConfigError, match="holds a JSON list, not an object") as err:
        kvplan.load_model("acme/repo")
    one_line(err)


def test_unreachable_hub_fails_fast(hub_env, retry_sleeps):
    """Connection refused and nothing cached: one error at once, not 5 retries over 23 s."""
    with pytest.raises(ModelNotAvailableError) as err:
        kvplan.load_model("acme/llama-mini")
    assert retry_sleeps == []
    message = one_line(err)
    assert message.startswith("could not reach the Hub for acme/llama-mini (")
    assert "config.json path" in message


def test_silent_hub_times_out_with_hf_hub_etag_timeout(hub_env, monkeypatch, retry_sleeps):
    """A Hub that accepts the connection and never answers: HF_HUB_ETAG_TIMEOUT bounds the wait.

    A timeout is what this test is about, so it keeps a stopwatch: 0.3 s set here, 3 s allowed, and kvplan's own
    FETCH_DEADLINE_S (30 s) is what a lost timeout would wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
        point_endpoint(monkeypatch, f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 0.3)
        start = time.monotonic()
        with pytest.raises(ModelNotAvailableError, match="could not reach the Hub for acme/llama-mini"):
            kvplan.load_model("acme/llama-mini")
        assert time.monotonic() - start < 3 and retry_sleeps == []


def test_invalid_hub_id(hub_env):
    with pytest.raises(ModelNotAvailableError, match="is not a valid Hub id") as err:
        kvplan.load_model("acme/bad..name")
    one_line(err)


def test_cli_unreachable_hub_prints_one_line(tmp_path):
    """The issue's report: `kvplan estimate x/y --seq-len 5` printed six 'Retrying in Ns' lines first."""
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HUB_CACHE": str(tmp_path / "hub"),
           "HF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO_ROOT)}
    sleeps = tmp_path / "sleeps.json"
    result = subprocess.run([sys.executable, "-c", CLI_COUNTING_SLEEPS, str(sleeps), "estimate", "x/y", "--seq-len",
                             "5"], env={**cli_env(), **env}, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            check=False)
    assert json.loads(sleeps.read_text()) == []  # the retry loop (five waits, 23 s) is gone
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("kvplan: error: could not reach the Hub for x/y")
    assert result.stderr.count("\n") == 1, result.stderr


def test_cli_hub_error_in_process(fake_hub, capsys):
    fake_hub.repos["acme/repo"] = FakeRepo({MAIN: {"config.json": b"{}"}}, refs={"main": MAIN}, token="hf_ok")
    assert main(["estimate", "acme/repo", "--seq-len", "5"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("kvplan: error: acme/repo is gated")


def test_quiet_hub_logs_holds_back_warnings_and_restores(capfd):
    hub_logger = logging.getLogger("huggingface_hub")
    before = hub_logger.level
    with quiet_hub_logs():
        with quiet_hub_logs():  # nested or concurrent calls: the outermost restores
            logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        logging.getLogger("huggingface_hub.file_download").error("Could not cache non-existence of file.")
    assert hub_logger.level == before
    assert capfd.readouterr().err == ""


def test_quiet_hub_logs_keeps_verbosity_the_user_asked_for():
    hub_logger = logging.getLogger("huggingface_hub")
    before = hub_logger.level
    hub_logger.setLevel(logging.INFO)  # HF_HUB_VERBOSITY=info
    try:
        with quiet_hub_logs():
            assert hub_logger.getEffectiveLevel() == logging.INFO
        assert hub_logger.level == logging.INFO
    finally:
        hub_logger.setLevel(before)
