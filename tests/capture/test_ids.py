"""ids: every user name maps to a stable, collision-free Honcho id; no id escapes its folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memhoncho import ids
from memhoncho.errors import InvalidId, MemhonchoError
from memhoncho.store.layout import Layout

EXAMPLES = settings(max_examples=1000, deadline=None)

#: visible text: what ``ids.check_characters`` takes (no control, unassigned, line-separating
#: or invisible format character), the rule of every id on every surface
visible = st.characters(blacklist_categories=("Cc", "Cs", "Cn", "Zl", "Zp", "Cf"))
user_names = st.one_of(
    st.text(visible, min_size=1, max_size=256),
    st.emails().filter(lambda e: len(e) <= 256),
    st.text(alphabet="._-/\\@+ %", min_size=1, max_size=40),
)
anything = st.one_of(
    st.none(),
    st.integers(),
    st.binary(max_size=20),
    st.text(max_size=300),
    st.lists(st.text(max_size=3), max_size=2),
)


def _is_honcho_id(value: str) -> bool:
    return ids.HONCHO_ID.fullmatch(value) is not None


@EXAMPLES
@given(user_names)
def test_any_user_name_maps_to_a_stable_valid_honcho_id(name: str) -> None:
    peer = ids.peer_id(name)
    assert _is_honcho_id(peer)
    assert peer == ids.peer_id(name)
    if not peer.startswith("-h"):
        assert ids.decode(peer) == name


@EXAMPLES
@given(user_names, user_names)
def test_different_user_names_never_share_a_peer_id(a: str, b: str) -> None:
    if a != b:
        assert ids.peer_id(a) != ids.peer_id(b)


@EXAMPLES
@given(st.text(visible, min_size=1, max_size=256))
def test_a_name_and_a_one_character_change_of_it_get_different_ids(name: str) -> None:
    changed = name[:-1] + ("a" if name[-1] != "a" else "b")
    assert ids.peer_id(name) != ids.peer_id(changed)


def test_long_names_are_hashed_and_stay_distinct() -> None:
    a, b = "x" * 255 + "a", "x" * 255 + "b"
    assert ids.peer_id(a).startswith("-h") and ids.peer_id(b).startswith("-h")
    assert ids.peer_id(a) != ids.peer_id(b)
    assert ids.decode(ids.peer_id(a)) is None
    # A plain encoding never starts with "-h", so no short name meets a hashed one.
    assert not ids.peer_id("h").startswith("-h")
    assert not ids.peer_id("-h").startswith("-h")


def test_an_ownerless_conversation_is_the_default_user() -> None:
    assert ids.peer_id(None) == ids.DEFAULT_USER == "user"


@pytest.mark.parametrize(
    "bad",
    ["", "x" * 257, 7, b"bytes", ["a"], "a\ud800b", "ana\x00", "ana\u202e", "\ufeffana"],
)
def test_an_unmappable_user_name_is_refused_with_invalid_id(bad: object) -> None:
    with pytest.raises(InvalidId) as caught:
        ids.peer_id(bad)
    assert caught.value.code == "ERR_INVALID_ID"


@EXAMPLES
@given(anything)
def test_a_conversation_id_maps_safely_or_is_refused_with_invalid_id(value: object) -> None:
    try:
        key = ids.conversation_key(value)
    except InvalidId:
        return
    except MemhonchoError as exc:  # pragma: no cover - a different error is a bug
        pytest.fail(f"refused with {exc.code}, not ERR_INVALID_ID")
    assert isinstance(value, str)
    assert _is_honcho_id(key)
    assert "." not in key and "/" not in key
    assert len(key) <= ids.MAX_ENCODED_LEN
    if not key.startswith("-h"):
        assert ids.decode(key) == value
    assert ids.conversation_key(value) == key


@EXAMPLES
@given(st.text(min_size=1, max_size=256), st.text(min_size=1, max_size=256))
def test_different_conversation_ids_never_share_a_key(a: str, b: str) -> None:
    try:
        ka, kb = ids.conversation_key(a), ids.conversation_key(b)
    except InvalidId:
        return
    assert (a == b) == (ka == kb)


@EXAMPLES
@given(st.text(min_size=1, max_size=256))
def test_no_conversation_id_escapes_the_data_directory(value: str) -> None:
    try:
        key = ids.conversation_key(value)
    except InvalidId:
        return
    root = Path("/srv/memhoncho-data")
    layout = Layout(root)
    for path in (
        layout.outbox(key),
        layout.ledger(key),
        layout.cache(key),
        layout.outbox_lock(key),
    ):
        resolved = path.resolve()
        assert resolved.parent == path.parent.resolve()
        assert resolved.is_relative_to(root)
        assert len(path.name.encode()) <= 255


@pytest.mark.parametrize(
    "bad",
    ["", " ", " c-1", "c-1 ", "c\x00", "c\n1", "a\u2028b", "\ud800", "x" * 257, 42, None, b"c"]
    + ["c\u202e1", "c\u200b1", "\ufeffc-1", "c\u2066x\u2069", "wo\u200drk"],
)
def test_an_unsafe_conversation_id_is_refused(bad: object) -> None:
    with pytest.raises(InvalidId):
        ids.conversation_key(bad)


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("c-42", "c-2d42"),
        ("../etc/passwd", "-2e-2e-2fetc-2fpasswd"),
        ("a.b", "a-2eb"),
        ("é", "-c3-a9"),
    ],
)
def test_traversal_characters_are_encoded_not_kept(value: str, key: str) -> None:
    assert ids.conversation_key(value) == key
    assert ids.decode(key) == value


def test_session_ids_differ_per_workspace_and_are_valid() -> None:
    a = ids.session_id("ws-a", "c-1")
    b = ids.session_id("ws-b", "c-1")
    assert a != b and _is_honcho_id(a) and _is_honcho_id(b)
    assert a == ids.session_id("ws-a", "c-1")


@pytest.mark.parametrize(
    "key", ["-h" + "0" * 64, "a.b", "", "-2", "-zz", "-ff", "-41", "-C3-A9", "-2d-"]
)
def test_decode_gives_none_for_a_key_that_is_not_a_plain_encoding(key: str) -> None:
    assert ids.decode(key) is None


@EXAMPLES
@given(st.text(alphabet="abcAF019_-h", max_size=30))
def test_decode_accepts_only_keys_that_encode_back_to_themselves(key: str) -> None:
    value = ids.decode(key)
    if value is not None:
        assert ids.peer_id(value) == key


owners = st.one_of(
    st.none(), st.just(ids.DEFAULT_USER), st.just(ids.NAMED_DEFAULT_USER), user_names
)


@EXAMPLES
@given(owners, owners)
def test_distinct_owners_never_share_a_peer_not_even_user_and_no_owner(
    a: str | None, b: str | None
) -> None:
    if a != b:
        assert ids.peer_id(a) != ids.peer_id(b)


def test_the_name_user_and_an_ownerless_conversation_get_different_peers() -> None:
    assert ids.peer_id(None) == "user"  # ownerless conversations keep the peer they always had
    assert ids.peer_id("user") == "-75ser"
    assert ids.decode("-75ser") == "user"
    assert ids.HONCHO_ID.fullmatch(ids.peer_id("user"))


@EXAMPLES
@given(user_names)
def test_every_other_name_keeps_its_plain_encoding(name: str) -> None:
    if name != ids.DEFAULT_USER:
        assert ids.peer_id(name) == ids._encode(name)
