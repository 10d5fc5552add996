import pytest

from app.core.remote.address import RemoteAddress, parse_address


@pytest.mark.parametrize("text, expected", [
    ("ssh://gpu-box", RemoteAddress("ssh", "gpu-box", None)),
    ("ssh://me@gpu-box:2222", RemoteAddress("ssh", "gpu-box", 2222, "me")),
    ("https://10.0.0.5:9847", RemoteAddress("https", "10.0.0.5", 9847)),
    ("http://[::1]:9847/", RemoteAddress("http", "::1", 9847)),
])
def test_addresses(text, expected):
    assert parse_address(text) == expected
    assert parse_address(expected.url) == expected


@pytest.mark.parametrize("text, error", [
    ("gpu-box", "expected ssh://"),
    ("ftp://gpu-box", "expected ssh://"),
    ("https://gpu-box", "name the server's port"),
    ("https://me@gpu-box:1", "token"),
    ("ssh://me:secret@gpu-box", "no password"),
    ("ssh://-oProxyCommand=x", "no host name"),
    ("ssh://gpu-box:99999", "port"),
    ("https://gpu-box:1/api", "scheme, host and port only"),
    ("ssh://-me@gpu-box", "not a user name"),
])
def test_bad_addresses_are_refused_with_the_reason(text, error):
    with pytest.raises(ValueError, match=error):
        parse_address(text)
