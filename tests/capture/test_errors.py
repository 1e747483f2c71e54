"""The error tree: one root, a unique stable code and a default message for every class."""

from __future__ import annotations

import re

import pytest

from memhoncho import errors
from memhoncho.errors import MemhonchoError, all_error_classes


def test_every_error_has_a_unique_err_code() -> None:
    codes = [cls.code for cls in all_error_classes()]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"ERR_[A-Z_]+", code) for code in codes)


def test_every_error_has_a_docstring_that_is_its_default_message() -> None:
    for cls in all_error_classes():
        assert cls.__doc__ and cls.__doc__.strip(), cls.__name__
        assert cls().message == cls.__doc__.strip()
        assert str(cls()) == f"{cls.code}: {cls.__doc__.strip()}"


def test_every_error_class_in_the_module_is_in_the_tree_and_its_drawing() -> None:
    defined = {
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, MemhonchoError)
    }
    assert defined == set(all_error_classes())
    drawing = errors.__doc__ or ""
    for cls in defined:
        assert re.search(rf"\b{cls.__name__}\s+{cls.code}\b", drawing), cls.__name__


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: c.__name__)
def test_as_dict_carries_code_message_and_details(cls: type[MemhonchoError]) -> None:
    shown = cls("the limit is 3", limit=3).as_dict()
    assert shown["code"] == cls.code
    assert shown["message"] == "the limit is 3"
    assert shown["limit"] == 3
