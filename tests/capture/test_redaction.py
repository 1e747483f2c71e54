"""Secret redaction at capture: a planted key is on no disk, not in Honcho, only counted."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from memhoncho import Host, ids
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment
from memhoncho.errors import ConfigError
from memhoncho.privacy import redaction
from memhoncho.settings import invalid_keys
from memhoncho.status.render import prometheus, table
from memhoncho.status.view import status_view
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import write_api_key, write_settings

API_KEY = "standin-key-for-redaction"
# Synthetic keys of each default shape (none is a real credential).
PLANTED = {
    "openai": "sk-proj-" + "Ab3dE" * 8,
    "anthropic": "sk-ant-api03-" + "Zx9_y" * 10,
    "honcho": "hch-v2-" + "q1w2e3r4" * 4,
    "aws-id": "AKIA" + "IOSFODNN7EXAMPL9",
    "github": "ghp_" + "a1B2c3D4e5" * 4,
    "github-pat": "github_pat_" + "11ABCDEFG0" * 4,
    "slack": "xoxb-" + "123456789012-abcdefghij",
    "google": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "pem": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----",
}
BEARER_TOKEN = "tok_" + "9f8e7d6c5b4a" * 3
#: the shapes the attacker's probe found slipping past (issue 44): text -> what must remain
MISSED_SHAPES = {
    '{"AccessKeyId": "x", "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}': (
        '{"AccessKeyId": "x", "SecretAccessKey": "[REDACTED]"}'
    ),
    "store_url = postgresql://memhoncho:hunter2-pw@db:5432/memhoncho": (
        "store_url = postgresql://memhoncho:[REDACTED]@db:5432/memhoncho"
    ),
    "stripe: sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc": "stripe: [REDACTED]",
    "rk_test_" + "4eC39HqLyjWDarjtT1zdp7dc is restricted": "[REDACTED] is restricted",
    "login with password=Tr0ub4dor&3 now": "login with password=[REDACTED]&3 now",
    'config: {"password": "correct horse"}': 'config: {"password": "[REDACTED] horse"}',
    "PGPASSWORD: s3cr3t-value": "PGPASSWORD: [REDACTED]",
}
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_default_key_shape_is_replaced_inside_ordinary_text(name: str) -> None:
    text = f"here is my key: {PLANTED[name]} -- please keep it"
    redacted, count = redaction.redactor().redact(text)
    assert PLANTED[name] not in redacted and count == 1
    assert redacted == f"here is my key: {redaction.REPLACEMENT} -- please keep it"


def test_a_bearer_token_and_an_aws_secret_lose_the_secret_but_keep_their_label() -> None:
    text = f"Authorization: Bearer {BEARER_TOKEN}\naws_secret_access_key = {AWS_SECRET}"
    redacted, count = redaction.redactor().redact(text)
    assert count == 2
    assert redacted == "Authorization: Bearer [REDACTED]\naws_secret_access_key = [REDACTED]"


@pytest.mark.parametrize("text", sorted(MISSED_SHAPES))
def test_the_shapes_that_slipped_past_are_redacted(text: str) -> None:
    assert redaction.redactor().redact(text)[0] == MISSED_SHAPES[text]


@pytest.mark.parametrize(
    "text",
    [
        "see http://example.com:8080/path and write to me@example.org",
        "the password is strong; my pwd is short",
        "I asked about sk-learn and the ASIA trip; the bearer of bad news left.",
        "eyJ is how base64 of a JSON object starts; AIza is a prefix, nothing more.",
        "-----BEGIN PUBLIC KEY----- is not private",
        "",
    ],
)
def test_ordinary_text_is_left_exactly_as_it_was(text: str) -> None:
    assert redaction.redactor().redact(text) == (text, 0)


def test_a_private_key_cut_off_before_its_end_line_is_redacted_to_the_end() -> None:
    text = "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7"
    assert redaction.redactor().redact(text) == ("key:\n[REDACTED]", 1)


def test_extra_patterns_apply_and_a_secret_group_keeps_the_rest_of_the_match() -> None:
    custom = redaction.redactor((r"internal-[0-9]{6}", r"pin=(?P<secret>\d{4})"))
    assert custom.redact("id internal-123456, pin=1234") == ("id [REDACTED], pin=[REDACTED]", 2)


def test_the_redactor_is_compiled_once_per_distinct_pattern_set() -> None:
    assert redaction.redactor(("a+b",)) is redaction.redactor(("a+b",))
    assert redaction.redactor(("a+b",)) is not redaction.redactor(("c+d",))


@pytest.mark.parametrize("bad", ["(unclosed", "", "x*", "a" * 1001])
def test_a_bad_pattern_is_a_typed_config_error_that_does_not_echo_it(bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        redaction.redactor((bad,))
    assert caught.value.code == "ERR_CONFIG"
    assert caught.value.details == {"setting": "redact_patterns"}
    if len(bad) > 2:
        assert bad not in str(caught.value)


def _run(text: str, run_id: str = "r-1") -> dict[str, Any]:
    return {
        "conversation_id": "c-secret",
        "owner": "ana@example.com",
        "run_id": run_id,
        "inputs": [{"entry_id": 1, "text": text}],
        "outcome": {
            "status": "answered",
            "answer": {
                "entry_id": 2,
                "content": [{"type": "text", "text": f"Noted. Bearer {BEARER_TOKEN}"}],
            },
        },
    }


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_bad_pattern_setting_is_refused_by_name_and_nothing_is_captured(
    config_dir: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_settings(config_dir, redact_patterns=["(unclosed"])
    assert invalid_keys(config_dir) == ["redact_patterns"]
    before = sorted(p.relative_to(data_dir) for p in data_dir.rglob("*"))
    with pytest.raises(ConfigError) as refused:
        Host(config_dir=config_dir, data_dir=data_dir)
    assert "redact_patterns" in refused.value.message
    assert "(unclosed" not in refused.value.message + caplog.text
    assert sorted(p.relative_to(data_dir) for p in data_dir.rglob("*")) == before


def test_a_pattern_from_the_environment_is_a_json_list(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMHONCHO_REDACT_PATTERNS", json.dumps([r"acct-[0-9]{8}"]))
    with Host(config_dir=config_dir, data_dir=data_dir) as host:
        assert host.capture(_run("account acct-12345678")).redactions == 2


@pytest.mark.standin(api_key=API_KEY)
def test_a_planted_key_is_on_no_disk_in_no_log_and_never_reaches_honcho(
    config_dir: Path,
    data_dir: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_settings(
        config_dir,
        base_url=standin.url,
        workspace_id=workspace_id,
        max_message_length=100,  # the key straddles a split: redaction comes first
    )
    write_api_key(config_dir, API_KEY)
    caplog.set_level(logging.DEBUG)
    secrets = [*PLANTED.values(), BEARER_TOKEN]
    text = "x" * 90 + " " + " and ".join(PLANTED.values())
    with Host(config_dir=config_dir, data_dir=data_dir) as host:
        result = host.capture(_run(text))
    assert result.status == "captured"
    assert result.redactions == len(PLANTED) + 1  # every planted key and the answer's token
    on_disk = _all_bytes(data_dir)
    assert on_disk and not [s for s in secrets if s.encode() in on_disk]

    deployment = Deployment(config_dir, data_dir)
    report = deliver_conversation(deployment, "c-secret")
    assert report.delivered_messages > 0
    held = standin.messages(workspace_id, ids.session_id(workspace_id, "c-secret"))
    sent = "".join(m["content"] for m in held)
    assert redaction.REPLACEMENT in sent
    assert not [s for s in secrets if s in sent or s in json.dumps(held)]
    assert not [s for s in secrets if s.encode() in _all_bytes(data_dir)]

    view = status_view(deployment)
    assert view["redactions"]["count"] == result.redactions
    assert view["redactions"]["state"] == "ok"
    shown = json.dumps(view) + table(view) + prometheus(view)
    assert "memhoncho_redactions" in prometheus(view)
    assert not [s for s in secrets if s in shown or s in caplog.text]


def test_the_counter_adds_up_across_captures_and_hosts(config_dir: Path, data_dir: Path) -> None:
    for i in range(2):
        with Host(config_dir=config_dir, data_dir=data_dir) as host:
            host.capture(_run(f"key {PLANTED['github']}", run_id=f"r-{i}"))
            host.capture(_run("no secret here", run_id=f"clean-{i}"))  # the answer has one
    assert status_view(Deployment(config_dir, data_dir))["redactions"]["count"] == 6


def test_with_no_redaction_yet_the_status_counts_zero(config_dir: Path, data_dir: Path) -> None:
    view = status_view(Deployment(config_dir, data_dir))
    assert view["redactions"] == {"state": "ok", "count": 0, "last_at": None}


def test_each_default_pattern_has_a_gate_held_by_every_trigger() -> None:
    # A text without the gate is skipped by the pattern: sound only if every trigger holds it.
    for pattern in redaction._defaults():
        assert pattern.gate
        assert all(pattern.gate in trigger for trigger in pattern.triggers)
