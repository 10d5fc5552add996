"""Why a host is not connected, in one line that says what to do: what the
window shows in place of a host's figures."""

from __future__ import annotations

import pytest

from app.core.remote.address import parse_address
from app.core.remote.advice import reason
from app.core.remote.errors import RemoteError, RemoteUnavailable

SSH = parse_address("ssh://me@gpu1:2222")
PLAIN_SSH = parse_address("ssh://gpu1")
HTTPS = parse_address("https://gpu1:8443")


def ended(stderr: str, address=SSH) -> str:
    return reason(RemoteUnavailable(f"{address.url}: the connection ended (ssh exit status "
                                    f"255): {stderr}"), address)


def test_an_unknown_host_key_says_to_run_ssh_once_in_a_terminal():
    text = ended("Host key verification failed.")
    assert text.startswith("ssh://me@gpu1:2222: the connection ended")
    assert "add it by running `ssh -p 2222 me@gpu1` once in a terminal" in text
    assert "`ssh gpu1` once in a terminal" in ended("Host key verification failed.", PLAIN_SSH)
    changed = ended("@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @", PLAIN_SSH)
    assert "the host key is not known here" in changed


def test_a_refused_login_says_to_load_the_key_or_check_a_login_works():
    text = ended("me@gpu1: Permission denied (publickey).")
    assert "ssh-add" in text and "`ssh -p 2222 me@gpu1` logs in without a password" in text


@pytest.mark.parametrize("stderr, hint", [
    ("ssh: Could not resolve hostname gpu1: Name or service not known", "check the address"),
    ("ssh: connect to host gpu1 port 2222: Connection refused", "check the port"),
    ("ssh: connect to host gpu1 port 2222: Connection timed out", "network or VPN"),
    ("ssh: connect to host gpu1 port 2222: No route to host", "network or VPN"),
    ("Enter passphrase for key '/home/me/.ssh/id_ed25519':", "run `ssh-add`"),
])
def test_other_ssh_failures_say_what_to_check(stderr, hint):
    assert hint in ended(stderr)


def test_an_ssh_failure_without_advice_is_said_as_it_is():
    assert ended("kex_exchange_identification: read: reset") == \
        "ssh://me@gpu1:2222: the connection ended (ssh exit status 255): " \
        "kex_exchange_identification: read: reset"
    # the same words from an HTTP server get no SSH advice
    text = reason(RemoteUnavailable("cannot reach https://gpu1:8443: connection refused"),
                  HTTPS)
    assert text == "cannot reach https://gpu1:8443: connection refused"


def test_another_wire_version_names_both_versions():
    exc = RemoteError("https://gpu1:8443 speaks wire version 2, this one speaks 1: upgrade "
                      "VRAM Steward here", "version")
    text = reason(exc, HTTPS)
    assert "wire version 2" in text and "speaks 1" in text and "upgrade" in text


def test_a_wrong_token_and_a_missing_token_say_different_things():
    wrong = reason(RemoteError("https://gpu1:8443: wrong token", "unauthorized"), HTTPS)
    assert wrong.startswith("https://gpu1:8443 refused the token:")
    assert "copy a token from the server's token file" in wrong and "tokens: FILE" in wrong
    missing = reason(RemoteError("https://gpu1:8443: a token is required (Authorization: "
                                 "Bearer <token>) (pass --token-file FILE or set "
                                 "VRAM_STEWARD_TOKEN)", "unauthorized"), HTTPS)
    assert missing.startswith("https://gpu1:8443 wants a token:")
    assert "give this host a token file" in missing and "refused" not in missing


def test_a_read_only_token_says_control_is_needed_and_tls_is_said_as_it_is():
    text = reason(RemoteError("https://gpu1:8443: this token may only read", "forbidden"),
                  HTTPS)
    assert text.endswith("ask for a token with the control scope to act there")
    tls = RemoteError("https://gpu1:8443: the server's certificate is not trusted (self-signed "
                      "certificate); for a self-signed certificate pass --tls-ca FILE", "tls")
    assert reason(tls, HTTPS) == str(tls)
