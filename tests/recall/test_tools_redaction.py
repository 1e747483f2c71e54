"""The recall tools redact what they send, as capture does: a key the model puts in a
conclusion or a query never reaches Honcho, and only the count is kept."""

from __future__ import annotations

from typing import Any

import pytest
import tools_support
from tools_support import ANA, SECRET_KEY

from memhoncho.deployment import Deployment
from memhoncho.honcho import adapter
from memhoncho.recall.honcho_tools import honcho_chat, honcho_remember, honcho_search
from memhoncho.status.view import status_view
from memhoncho.testing import HonchoStandIn

pytestmark = pytest.mark.standin(llm=True, api_key=SECRET_KEY)
settings = tools_support.settings  # a fixture

OPENAI_KEY = "sk-proj-" + "Ab3dE" * 8
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_a_remembered_conclusion_reaches_honcho_without_its_keys(
    deployment: Deployment, standin: HonchoStandIn, workspace_id: str
) -> None:
    content = (
        f"Ana's OpenAI key is {OPENAI_KEY} and her AWS CLI prints"
        f' {{"AccessKeyId": "AKIAIOSFODNN7EXAMPL9", "SecretAccessKey": "{AWS_SECRET}"}}'
    )
    honcho_remember(deployment, ANA, {"content": content})
    (stored,) = standin.conclusions(workspace_id)
    assert OPENAI_KEY not in stored["content"] and AWS_SECRET not in stored["content"]
    assert "AKIAIOSFODNN7EXAMPL9" not in stored["content"]
    assert stored["content"].startswith("Ana's OpenAI key is [REDACTED]")
    assert status_view(deployment)["redactions"]["count"] == 3


@pytest.mark.parametrize("tool", ["search", "chat"])
def test_a_query_holding_a_secret_is_sent_redacted(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    sent: list[str] = []
    name = "search_user_messages" if tool == "search" else "chat"
    real = getattr(adapter, name)

    def recording(client: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(args[1] if tool == "search" else args[2])
        return real(client, *args, **kwargs)

    monkeypatch.setattr(adapter, name, recording)
    query = "what did I do with postgresql://ana:hunter2-db-pw@db.internal:5432/app ?"
    if tool == "search":
        honcho_search(deployment, ANA, {"query": query})
    else:
        honcho_chat(deployment, ANA, {"query": query})
    assert sent == ["what did I do with postgresql://ana:[REDACTED]@db.internal:5432/app ?"]
