"""Per-server API keys: a private file of ours, checked before any key is used."""

from __future__ import annotations

import json
import os

import pytest

from app.core.servers.http import Auth
from app.core.servers.keys import key_for, parse_keys, read_keys, save_key


def test_saved_keys_are_private_and_read_back_by_kind_and_port(tmp_path) -> None:
    path = str(tmp_path / "server-keys.json")
    save_key("a1111", 7860, None, "ada:s3cret", path)
    save_key("lmstudio", None, "sk-lm-1", None, path)
    save_key("a1111", 7860, None, "ada:n3w", path)  # replaces the first
    assert os.stat(path).st_mode & 0o777 == 0o600
    keys, problem = read_keys(path)
    assert problem is None and len(keys) == 2
    assert key_for(keys, "a1111", 7860) == Auth(basic="ada:n3w")
    assert key_for(keys, "a1111", 7861) is None
    assert key_for(keys, "lmstudio", 1234) == Auth(bearer="sk-lm-1")  # any port of its kind
    assert key_for(keys, "ollama", 11434) is None


def test_a_file_open_to_others_is_refused_and_no_key_is_used(tmp_path) -> None:
    path = tmp_path / "server-keys.json"
    path.write_text(json.dumps([{"kind": "vllm", "bearer": "k"}]))
    path.chmod(0o644)
    keys, problem = read_keys(str(path))
    assert keys == [] and "open to group/others" in problem


def test_a_link_is_never_followed(tmp_path) -> None:
    real = tmp_path / "elsewhere.json"
    real.write_text("[]")
    real.chmod(0o600)
    link = tmp_path / "server-keys.json"
    link.symlink_to(real)
    keys, problem = read_keys(str(link))
    assert keys == [] and problem is not None


@pytest.mark.parametrize("text, words", [
    ("{", "not JSON"),
    ('{"kind": "a1111"}', "a list of entries"),
    ('[{"kind": "nope", "bearer": "k"}]', "needs a kind"),
    ('[{"kind": "tgw"}]', 'needs "bearer" or "basic"'),
    ('[{"kind": "a1111", "basic": "no-colon"}]', 'needs "bearer" or "basic"'),
    ('[{"kind": "tgw", "bearer": "k", "port": 70000}]', "port must be 1..65535"),
])
def test_bad_entries_are_named(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_keys(text, "keys")
