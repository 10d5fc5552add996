"""Tokens: one user each, scopes, private files, constant-time lookups."""

from __future__ import annotations

import os

import pytest

from app.core.serve.access import (
    CONTROL,
    READ,
    client_token,
    create_token_file,
    find_grant,
    own_user,
    parse_tokens,
    read_token_file,
)

TOKEN = "t" * 20


def test_each_line_is_a_token_bound_to_a_user_with_scopes():
    user, uid = own_user()
    grants = parse_tokens(f"# comment\n{TOKEN} {user} read,control\n{'r' * 16} no-such-reader read\n")
    assert [(g.user, g.uid, g.scopes) for g in grants] == [
        (user, uid, frozenset({READ, CONTROL})), ("no-such-reader", None, frozenset({READ}))]
    assert find_grant(grants, TOKEN) is grants[0]
    assert find_grant(grants, TOKEN + "x") is None


@pytest.mark.parametrize("text, error", [
    (f"{TOKEN} root", "expected TOKEN USER SCOPES"),
    (f"{TOKEN} root admin", "scopes are read and/or control"),
    ("short root read", "at least 16 characters"),
    (f"{TOKEN} no-such-user-here control", "there is no user 'no-such-user-here'"),
])
def test_a_bad_line_is_named(text, error):
    with pytest.raises(ValueError, match=error) as info:
        parse_tokens(f"\n{text}\n", "tokens")
    assert "tokens, line 2" in str(info.value)


def test_a_control_token_always_names_a_real_user():
    # There is no "everyone" user: a control grant acts as one uid.
    user, uid = own_user()
    (grant,) = parse_tokens(f"{TOKEN} {user} control")
    assert grant.uid == uid


def test_the_generated_file_is_private_and_never_overwrites(tmp_path):
    path = str(tmp_path / "tokens")
    token = create_token_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    (grant,) = read_token_file(path)
    assert find_grant([grant], token) is grant and grant.scopes == {READ, CONTROL}
    with pytest.raises(FileExistsError):
        create_token_file(path)
    assert client_token(path) == token  # a client may use the server's file as is


def test_a_token_file_open_to_others_or_a_link_is_refused(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN} {own_user()[0]} read\n")
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="open to group/others"):
        read_token_file(str(path))
    os.chmod(path, 0o600)
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(ValueError):
        read_token_file(str(link))
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    os.chmod(empty, 0o600)
    with pytest.raises(ValueError, match="holds no token"):
        read_token_file(str(empty))


def test_client_token_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_STEWARD_TOKEN", "from-env")
    assert client_token(None) == "from-env"
    f = tmp_path / "t"
    f.write_text("\n# c\n  abc def\n")
    assert client_token(str(f)) == "abc"
