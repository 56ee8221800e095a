"""rank_lab.registry.Registry: the one name -> object table of every family (losses, backbones,
poolings, recipes, methods, dataset tables): names, decorator and direct registration, lookups that
name the family, filtered sorted listing, read-only mapping in registration order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.registry import Entry, Registry, UnknownNameError


def test_register_lookup_build_list_and_unregister():
    reg: Registry[object] = Registry("thing", {"Beta": 2})

    @reg.register("alpha-one", colour="red")
    class AlphaOne:
        """The first thing."""

        def __init__(self, x: int = 1) -> None:
            self.x = x

    reg.register("gamma", 3, colour="blue", summary="third")
    assert list(reg) == ["beta", "alpha_one", "gamma"]  # registration order
    assert reg.list() == ["alpha_one", "beta", "gamma"]  # sorted
    assert reg.list("*a") == ["beta", "gamma"] and reg.list("ALPHA-*") == ["alpha_one"]
    assert reg.list(colour="red") == ["alpha_one"] and reg.list(colour=None) == reg.list()
    assert reg["ALPHA_ONE"] is AlphaOne and reg[" Alpha-One "] is AlphaOne and reg["beta"] == 2
    assert "Alpha-One" in reg and "delta" not in reg and 5 not in reg and len(reg) == 3
    assert reg.entry("alpha_one") == Entry(
        "alpha_one", AlphaOne, {"colour": "red"}, "The first thing."
    )
    assert reg.entry("gamma").summary == "third" and reg.entry("beta").info == {}
    assert reg.build("alpha-one", x=4).x == 4
    assert reg.unregister("beta").obj == 2 and reg.list() == ["alpha_one", "gamma"]


def test_errors_name_the_family_and_the_known_names():
    reg: Registry[int] = Registry("pooling", {"mac": 1})
    with pytest.raises(
        UnknownNameError, match=r"unknown pooling name 'gem'; known: \['mac'\]"
    ) as info:
        reg["gem"]
    assert isinstance(info.value, ValueError) and isinstance(info.value, KeyError)
    assert str(info.value) == "unknown pooling name 'gem'; known: ['mac']"  # no KeyError quotes
    assert reg.get("gem") is None  # Mapping.get: a KeyError means absent
    with pytest.raises(ValueError, match="pooling name 'mac' already registered"):
        reg.register("MAC", 2)
    with pytest.raises(TypeError, match="name must be a str"):
        reg.register(3, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        reg.entry("  ")
    with pytest.raises(TypeError, match="not a class or a factory"):
        reg.build("mac")
    with pytest.raises(TypeError, match="filter must be a str"):
        reg.list(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kind must be a non-empty str"):
        Registry("")
    with pytest.raises(TypeError, match="does not support item assignment"):
        reg["x"] = 1  # type: ignore[index]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), unique=True, max_size=12))
def test_listing_is_the_sorted_names_and_iteration_the_registration_order(names):
    reg: Registry[int] = Registry("thing")
    for i, name in enumerate(names):
        reg.register(name.upper().replace("_", "-"), i)
    assert list(reg) == names and reg.list() == sorted(names)
    assert [reg[n] for n in names] == list(range(len(names)))
