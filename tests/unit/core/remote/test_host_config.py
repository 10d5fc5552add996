"""A host as the settings keep it: checked before it is used, one short key
each, the token only ever in a private file of this user."""

from __future__ import annotations

import os

import pytest

from app.core.monitor.hosts import qualified_id, split_id
from app.core.remote.address import parse_address
from app.core.remote.host_config import (
    MAX_HOSTS,
    HostConfig,
    check_host,
    check_private_file,
    host_key,
    unique_keys,
)


def private(tmp_path, name="token", mode=0o600):
    path = tmp_path / name
    path.write_text("t" * 24 + "\n")
    os.chmod(path, mode)
    return str(path)


def test_a_good_host_comes_back_in_one_spelling(tmp_path):
    token, cert = private(tmp_path), private(tmp_path, "cert.pem", 0o644)
    assert check_host(HostConfig("HTTPS://gpu1:8443/", token, cert)) == \
        HostConfig("https://gpu1:8443", token, cert)
    assert check_host(HostConfig("ssh://me@gpu1", remote_command="  ~/venv/bin/vram-steward "
                                                                 )) == \
        HostConfig("ssh://me@gpu1", remote_command="~/venv/bin/vram-steward")
    assert check_host(HostConfig("ssh://gpu1", "", "", "  ")) == HostConfig("ssh://gpu1")


@pytest.mark.parametrize("config, error", [
    (HostConfig("gpu1"), "expected ssh://"),
    (HostConfig("https://gpu1"), "name the server's port"),
    (HostConfig("ssh://gpu1", token_file="/some/token"), "SSH does the authentication"),
    (HostConfig("ssh://gpu1", ca_file="/some/cert.pem"), "SSH does the authentication"),
    (HostConfig("https://gpu1:8443", remote_command="vram-steward"), "for ssh:// hosts"),
    (HostConfig("ssh://gpu1", remote_command="a\nb"), "one line"),
])
def test_a_bad_host_is_refused_saying_why(config, error):
    with pytest.raises(ValueError, match=error):
        check_host(config)


def test_a_token_file_must_exist_be_a_file_and_be_private(tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(ValueError, match="No such file"):
        check_host(HostConfig("https://gpu1:8443", missing))
    with pytest.raises(ValueError, match="not a regular file"):
        check_host(HostConfig("https://gpu1:8443", str(tmp_path)))
    shared = private(tmp_path, "shared", 0o640)
    with pytest.raises(ValueError, match=f"others may read it \\(chmod 600 {shared}\\)"):
        check_host(HostConfig("https://gpu1:8443", shared))
    link = tmp_path / "link"
    link.symlink_to(private(tmp_path))
    with pytest.raises(ValueError, match="not a regular file"):
        check_private_file(str(link), "token file")
    cert = str(tmp_path / "no-cert.pem")
    with pytest.raises(ValueError, match="certificate .* no such file"):
        check_host(HostConfig("https://gpu1:8443", ca_file=cert))
    with pytest.raises(ValueError, match="a certificate is for https://"):
        check_host(HostConfig("http://gpu1:8443", ca_file=private(tmp_path, "c.pem")))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root")
def test_a_token_file_of_someone_else_is_refused(tmp_path):
    theirs = private(tmp_path, "theirs")
    os.chown(theirs, 65534, 65534)
    with pytest.raises(ValueError, match="not yours \\(owner uid 65534\\)"):
        check_host(HostConfig("https://gpu1:8443", theirs))


def test_duplicates_and_too_many_hosts_are_refused():
    others = [HostConfig("ssh://gpu1"), HostConfig("https://gpu2:8443")]
    with pytest.raises(ValueError, match="ssh://gpu1 is already in the list"):
        check_host(HostConfig("SSH://gpu1/"), others)
    assert check_host(HostConfig("ssh://me@gpu1"), others) == HostConfig("ssh://me@gpu1")
    many = [HostConfig(f"ssh://gpu{n}") for n in range(MAX_HOSTS)]
    with pytest.raises(ValueError, match=f"at most {MAX_HOSTS} hosts"):
        check_host(HostConfig("ssh://one-more"), many)


def test_every_host_gets_a_short_key_of_its_own():
    assert host_key(parse_address("ssh://me@gpu1")) == "gpu1"
    assert host_key(parse_address("https://gpu1:8443")) == "gpu1:8443"
    assert host_key(parse_address("http://[::1]:9847")) == "::1:9847"
    configs = [HostConfig(u) for u in ("ssh://gpu1", "ssh://me@gpu1", "ssh://you@gpu1",
                                       "ssh://me@gpu1:22", "https://gpu2:8443",
                                       "ssh://gpu1")]
    keys = unique_keys(configs)
    assert keys == ["gpu1", "me@gpu1", "you@gpu1", "gpu1:22", "gpu2:8443", "gpu1#2"]
    assert len(set(keys)) == len(keys)
    for key in keys:  # a GPU id names its host, whatever the key holds
        assert split_id(qualified_id("0/mig1", key)) == (key, "0/mig1")


def test_a_token_never_crosses_the_network_in_the_clear(tmp_path):
    from app.core.remote.host_config import HostConfig, check_host

    token = tmp_path / "token"
    token.write_text("vst_secret\n")
    token.chmod(0o600)
    with pytest.raises(ValueError, match="in the clear: use https://"):
        check_host(HostConfig("http://gpu1:9847", str(token)))
    for url in ("http://127.0.0.1:9847", "http://localhost:9847", "http://[::1]:9847",
                "https://gpu1:9847"):
        assert check_host(HostConfig(url, str(token))).token_file == str(token)


def test_the_token_is_read_from_the_file_checked(tmp_path):
    from app.core.remote.host_config import read_token_file

    token = tmp_path / "token"
    token.write_text("# a comment\nvst_secret ana read,control\n")
    token.chmod(0o600)
    assert read_token_file(str(token)) == "vst_secret"
    link = tmp_path / "link"
    link.symlink_to(token)
    with pytest.raises(ValueError, match="token file .*link"):
        read_token_file(str(link))  # a link is not followed, whatever it names
    token.chmod(0o640)
    with pytest.raises(ValueError, match="others may read it"):
        read_token_file(str(token))
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    empty.chmod(0o600)
    with pytest.raises(ValueError, match="holds no token"):
        read_token_file(str(empty))
