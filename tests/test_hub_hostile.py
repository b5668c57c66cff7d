"""Issue #14 at the Hub boundary: a gated config is never served from a cache to a request without the right token,
and a hostile endpoint or environment gives one line in bounded time. The real huggingface_hub client against the
FakeHub of tests/test_hub.py on 127.0.0.1; the app's loader through AppTest."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from test_hub import (MAIN, REPO_ROOT, FakeRepo, cache_file, closed_port, fake_hub, hub_env, llama_config,  # noqa: F401
                      one_line)

import kvplan
from app_pages import support as sup
from kvplan.errors import ConfigError, ModelNotAvailableError
from kvplan.sources import hub

GATED = "acme/gated"


@pytest.fixture
def gated(fake_hub):
    """A gated repository that answers only `Authorization: Bearer good`."""
    fake_hub.repos[GATED] = FakeRepo({MAIN: {"config.json": llama_config(16)}}, refs={"main": MAIN}, token="good")
    st.cache_data.clear()
    yield fake_hub
    st.cache_data.clear()


# ---------------------------------------------------------------------------------------------- gated: library


@pytest.mark.parametrize("token", ["bad", None])
def test_gated_config_fetched_with_a_good_token_is_refused_to_others(gated, monkeypatch, token):
    assert kvplan.load_model(GATED, token="good").num_layers == 16  # now in huggingface_hub's on-disk cache
    with pytest.raises(ModelNotAvailableError) as err:
        kvplan.load_model(GATED, token=token)
    assert one_line(err).startswith(f"{GATED} is gated: accept its license")


def test_gated_config_in_the_cache_is_refused_without_a_token(gated, hub_env):
    """The copy was put there by someone else (another user, an old login): the Hub's 401 wins over it."""
    cache_file(hub_env, GATED, MAIN, llama_config(16))
    with pytest.raises(ModelNotAvailableError, match="is gated") as err:
        kvplan.load_model(GATED)
    one_line(err)


def test_private_repo_in_the_cache_is_refused_when_the_hub_says_not_found(fake_hub, hub_env):
    cache_file(hub_env, "acme/private", MAIN, llama_config(16))  # no FakeRepo: 401 RepoNotFound without a token
    with pytest.raises(ModelNotAvailableError, match="was not found on the Hub"):
        kvplan.load_model("acme/private")


# ---------------------------------------------------------------------------------------------- gated: the app


def test_app_loader_keeps_tokens_apart(gated):
    """sup.load_hub_model (what the app calls) and common.load_hub (its st.cache_data around it)."""
    from app_pages import common

    assert sup.load_hub_model(GATED, "good").num_layers == 16
    assert common.load_hub(GATED, common.token_identity("good"), "good").num_layers == 16
    for token in ("bad", None):
        with pytest.raises(ModelNotAvailableError, match="is gated"):
            sup.load_hub_model(GATED, token)
        with pytest.raises(ModelNotAvailableError, match="is gated"):
            common.load_hub(GATED, common.token_identity(token), token)
    assert common.token_identity("good") not in ("good", common.token_identity("bad"), "")


def test_app_never_lends_the_servers_own_token(gated, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "good")  # the operator's login: a visitor without a token must not ride on it
    with pytest.raises(ModelNotAvailableError, match="is gated"):
        sup.load_hub_model(GATED, None)


def test_app_serves_no_cached_copy_during_an_outage(fake_hub, hub_env):
    cache_file(hub_env, GATED, MAIN, llama_config(16))
    fake_hub.repos[GATED] = FakeRepo({}, status=503)
    with pytest.raises(ModelNotAvailableError, match="HTTP 503"):
        sup.load_hub_model(GATED, None)


def hub_page(token: str | None) -> AppTest:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=30)
    at.query_params["src"] = "Hub"
    at.query_params["hub"] = GATED
    at.run()
    if token:
        at.text_input(key="hf_token").input(token).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_app_page_refuses_a_gated_config_to_a_wrong_or_missing_token(gated):
    good = hub_page("good")
    assert not good.error and GATED in " ".join(c.value for c in good.caption)
    for token in ("bad", None):
        at = hub_page(token)
        message = " | ".join(e.value for e in at.error)
        assert message.startswith(f"Could not load the model: {GATED} is gated"), message


# ---------------------------------------------------------------------------------------------- hostile Hub


def test_oversized_config_is_refused_before_download(fake_hub, hub_env):
    fake_hub.repos["acme/huge"] = FakeRepo({MAIN: {"config.json": llama_config(16)}}, refs={"main": MAIN},
                                           claimed_size=200_000_000)
    with pytest.raises(ConfigError, match="is 200,000,000 bytes, too large for a config.json") as err:
        kvplan.load_model("acme/huge")
    one_line(err)
    assert [p.split()[0] for p in fake_hub.paths()] == ["HEAD"]  # never a GET
    assert not list(hub_env.rglob("blobs/*"))


def test_trickling_endpoint_fails_in_bounded_time(fake_hub, monkeypatch):
    fake_hub.repos["acme/slow"] = FakeRepo({}, trickle=True)
    monkeypatch.setattr(hub, "FETCH_DEADLINE_S", 1.5)
    start = time.monotonic()
    with pytest.raises(ModelNotAvailableError, match="the Hub took more than 1.5 s to send acme/slow") as err:
        kvplan.load_model("acme/slow")
    assert time.monotonic() - start < 4
    one_line(err)


def test_truncated_download_is_one_line(fake_hub, hub_env):
    content = llama_config(16)
    fake_hub.repos["acme/cut"] = FakeRepo({MAIN: {"config.json": content}}, refs={"main": MAIN},
                                          sent_bytes=len(content) // 2)
    with pytest.raises(ModelNotAvailableError) as err:
        kvplan.load_model("acme/cut")
    assert "could not reach the Hub for acme/cut" in one_line(err)


def run_cli(args: list[str], env: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO_ROOT),
           "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "PATH": "/usr/bin:/bin", **env}
    return subprocess.run([sys.executable, "-m", "kvplan", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("env, words", [
    ({"HF_HUB_ETAG_TIMEOUT": "abc"}, "HF_HUB_ETAG_TIMEOUT='abc' is not a whole number of seconds"),
    ({"HF_HUB_DOWNLOAD_TIMEOUT": "1e9x"}, "HF_HUB_DOWNLOAD_TIMEOUT='1e9x' is not a whole number of seconds"),
    ({"HF_TOKEN": "hf_h\u00e9llo"}, "holds non-ASCII or control characters"),
    ({"HF_TOKEN": "hf_a\tb"}, "holds non-ASCII or control characters"),
])
def test_cli_bad_hub_environment_is_one_line(tmp_path, env, words):
    result = run_cli(["estimate", "x/y", "--seq-len", "5"], env, tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
