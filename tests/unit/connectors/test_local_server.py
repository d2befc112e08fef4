"""What a private child server inherits from its parent's environment."""

from embedtext.connectors.local_server import LocalServer


def test_a_child_server_gets_the_settings_but_not_the_remote_servers_secrets(monkeypatch):
    for name, value in {
        "EMBEDTEXT_TOKEN": "s3cret",
        "EMBEDTEXT_TOKEN_FILE": "/run/token",
        "EMBEDTEXT_TLS_CA": "ca.pem",
        "EMBEDTEXT_TOKENIZER_THREADS": "3",
        "EMBEDTEXT_HOLD_BULK_TOKENIZING": "false",
    }.items():
        monkeypatch.setenv(name, value)
    env = LocalServer(["tiny=/nowhere"]).env
    assert "EMBEDTEXT_TOKEN" not in env and "EMBEDTEXT_TOKEN_FILE" not in env and "EMBEDTEXT_TLS_CA" not in env
    assert env["EMBEDTEXT_TOKENIZER_THREADS"] == "3" and env["EMBEDTEXT_HOLD_BULK_TOKENIZING"] == "false"
