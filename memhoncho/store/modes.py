"""The modes of what memhoncho creates, set explicitly (never the umask's), and whose files it
takes as the deployment's.

Private by default: folders 0700, files 0600, whatever the umask (under umask 000 every folder
was 0777, and a file another user planted in the outbox was delivered as the owner's turn).
The shared-group layout (``docs/compose.md``): the operator makes the data directory the
group's and setgid (``chgrp memhoncho DIR && chmod 2770 DIR``); a folder or file memhoncho
creates inside a setgid folder is then the group's too: folders 2770, files 0660. Outside
such a folder nothing is ever readable by the group or by others.

A file is the deployment's when its owner is this process's user, the data directory's owner,
or (in the shared-group layout) a member of the data directory's group: ``trusted_owner``.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
GROUP_DIR = 0o2770  # setgid: what is made inside stays the group's
GROUP_FILE = 0o660
MEMBERS_TTL_S = 30.0  # seconds a data directory's trusted uids are kept before a new look


def shared(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` is of the shared-group layout (setgid); False when it is absent."""
    try:
        return bool(os.stat(folder).st_mode & stat.S_ISGID)
    except OSError:
        return False


def make_dirs(path: str | os.PathLike[str]) -> None:
    """``mkdir -p`` where each folder made is 0700 (2770 inside a setgid folder), exactly:
    the mode is set after ``mkdir``, which the umask would narrow or (for 0777) widen."""
    folder = Path(path)
    if folder.is_dir():
        return
    missing = []
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for new in reversed(missing):
        mode = GROUP_DIR if shared(new.parent) else PRIVATE_DIR
        try:
            os.mkdir(new, mode)
        except FileExistsError:
            continue  # another process made it first, with the same rule
        os.chmod(new, mode)


def open_file(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open`` with the mode of a new file in the file's folder (0600, or 0660 in a
    setgid folder), exactly: in the shared-group layout the umask would narrow 0660, so the
    mode is set on the descriptor too (not where another member made the file: it got the
    same rule)."""
    group = shared(os.path.dirname(os.fspath(path)))
    fd = os.open(path, flags, GROUP_FILE if group else PRIVATE_FILE)
    if group:
        try:
            os.fchmod(fd, GROUP_FILE)
        except PermissionError:
            pass
    return fd


def set_file_mode(fd: int, folder: str | os.PathLike[str]) -> None:
    """Give a file just created in ``folder`` its mode: only the shared-group layout needs a
    call (a private file is created 0600, which no umask widens)."""
    if shared(folder):
        os.fchmod(fd, GROUP_FILE)


_members: dict[str, tuple[float, frozenset[int]]] = {}
_members_lock = threading.Lock()


def trusted_uids(root: str | os.PathLike[str]) -> frozenset[int]:
    """The users whose files in the data directory ``root`` are the deployment's."""
    key = os.fspath(root)
    now = time.monotonic()
    with _members_lock:
        found = _members.get(key)
        if found is not None and now - found[0] < MEMBERS_TTL_S:
            return found[1]
    uids = {os.geteuid()}
    try:
        info = os.stat(key)
    except OSError:
        return frozenset(uids)
    uids.add(info.st_uid)
    if info.st_mode & stat.S_ISGID:
        uids |= _group_members(info.st_gid)
    trusted = frozenset(uids)
    with _members_lock:
        _members[key] = (now, trusted)
    return trusted


def _group_members(gid: int) -> set[int]:
    """Every user whose primary or supplementary group is ``gid``."""
    import grp
    import pwd

    members: set[int] = set()
    try:
        names = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        names = set()
    for user in pwd.getpwall():
        if user.pw_gid == gid or user.pw_name in names:
            members.add(user.pw_uid)
    return members


def trusted_owner(uid: int, root: str | os.PathLike[str]) -> bool:
    return uid in trusted_uids(root)


def exposed(path: str | os.PathLike[str]) -> str | None:
    """Why the secret file at ``path`` can be read by users other than its owner (its mode),
    or None: readable by others, or by its group outside the shared-group layout."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    if mode & 0o004 or (mode & 0o040 and not shared(os.path.dirname(os.fspath(path)))):
        return f"mode {mode:04o}: other users can read it"
    return None
