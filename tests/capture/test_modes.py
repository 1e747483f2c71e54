"""Modes that do not depend on the umask, the shared-group layout end to end, and outbox files
another user wrote never delivered as the owner's turns."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from other_users_support import NOBODY, as_root

from memhoncho import ids
from memhoncho.capture.host import Host
from memhoncho.delivery.engine import deliver_conversation
from memhoncho.deployment import Deployment, initialise
from memhoncho.store.layout import Layout
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.runs import run_event

KEY = "sk-modes-key"

CAPTURE_UNDER_UMASK = """
import os, sys
os.umask(int(sys.argv[3], 8))
from memhoncho.capture.host import Host
from memhoncho.testing.runs import run_event
with Host(sys.argv[1], sys.argv[2], init=True) as host:
    for i in range(3):
        host.capture(run_event("c-modes", i))
    host.conversation_forked("c-modes", "c-fork", at_entry=2)
"""


def _capture_under_umask(config: Path, data: Path, umask: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    env["MEMHONCHO_API_KEY"] = KEY  # hints are published: the embedded broker's folders too
    done = subprocess.run(
        [sys.executable, "-c", CAPTURE_UNDER_UMASK, str(config), str(data), umask],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _modes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    folders, files = {str(root): stat.S_IMODE(root.stat().st_mode)}, {}
    for path in root.rglob("*"):
        info = path.lstat()
        name = str(path.relative_to(root))
        if stat.S_ISDIR(info.st_mode):
            folders[name] = stat.S_IMODE(info.st_mode)
        elif stat.S_ISREG(info.st_mode) and not name.startswith("broker"):
            files[name] = stat.S_IMODE(info.st_mode)  # kombu's files: inside 0700 folders
    return folders, files


@pytest.mark.parametrize("umask", ["000", "022", "077"])
def test_every_folder_is_0700_and_every_file_0600_whatever_the_umask(
    tmp_path: Path, umask: str
) -> None:
    data = tmp_path / "made" / "data"
    _capture_under_umask(tmp_path / "config", data, umask)
    folders, files = _modes(data)
    assert any(name.startswith("data/outbox") for name in files)
    assert any(name.startswith("state/forks") for name in files)
    assert any(name.startswith("broker") for name in folders)
    assert {n: oct(m) for n, m in folders.items() if m != 0o700} == {}
    assert {n: oct(m) for n, m in files.items() if m != 0o600} == {}
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o700  # a parent it made


@as_root
def test_the_shared_group_layout_makes_every_folder_2770_and_every_file_0660(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, -1, NOBODY)
    data.chmod(0o2770)  # the operator's two commands: chgrp, chmod 2770
    _capture_under_umask(tmp_path / "config", data, "077")  # a umask that would hide it all
    folders, files = _modes(data)
    assert {n: oct(m) for n, m in folders.items() if m != 0o2770} == {}
    assert {n: oct(m) for n, m in files.items() if m != 0o660} == {}
    groups = {p.lstat().st_gid for p in data.rglob("*") if not p.is_symlink()}
    assert groups == {NOBODY}


def _deliver_once(tmp_path: Path, data: Path, chown_to: int) -> tuple[list[str], Layout]:
    config = tmp_path / "config"
    with HonchoStandIn(api_key=KEY) as standin:
        point_at_standin(config, standin, "modes", KEY)
        with Host(config, data, init=True) as host:
            host.capture(run_event("c-planted", 0))
        layout = Layout(data)
        os.chown(layout.outbox(ids.conversation_key("c-planted")), chown_to, chown_to)
        deliver_conversation(Deployment.from_dirs(config, data), "c-planted")
        session = ids.session_id("modes", "c-planted")
        held = [m["content"] for m in standin.messages("modes", session)]
    return held, layout


@as_root
def test_an_outbox_file_another_user_wrote_is_set_aside_unread_and_never_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    held, layout = _deliver_once(tmp_path, tmp_path / "data", NOBODY)
    assert held == []
    assert not layout.outbox(ids.conversation_key("c-planted")).exists()
    aside = list(layout.quarantine_dir.glob("*.foreign-*.jsonl"))
    assert len(aside) == 1 and aside[0].stat().st_uid == NOBODY
    assert any(getattr(r, "action", None) == "outbox_foreign" for r in caplog.records)


@as_root
def test_in_the_shared_group_layout_a_group_members_outbox_file_is_delivered(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, -1, NOBODY)
    data.chmod(0o2770)
    initialise(data)
    held, _ = _deliver_once(tmp_path, data, NOBODY)  # nobody's primary group is the data's
    assert held == ["c-planted question 0", "c-planted answer 0"]
