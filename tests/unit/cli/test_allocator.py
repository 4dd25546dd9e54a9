"""The allocator thresholds: set on glibc, left alone elsewhere or when the operator set them."""

from __future__ import annotations

import platform

import pytest
from privstream.cli import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only: mallopt")
def test_glibc_takes_the_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")  # another tunable
    assert allocator.tune_allocator() is True


@pytest.mark.parametrize("variable", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_the_operators_environment_wins(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "131072")
    assert allocator.tune_allocator() is False


def test_another_c_library_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "libc_name", lambda: "")
    assert allocator.tune_allocator() is False


def test_the_c_library_is_named_as_platform_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert allocator.libc_name() == platform.libc_ver()[0]

    def unknown(name: str) -> str:
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(allocator.os, "confstr", unknown)  # musl, macOS
    assert allocator.libc_name() == ""


@pytest.mark.parametrize(
    "tunables",
    [
        "glibc.malloc.mmap_threshold=131072",
        "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=0",
    ],
)
def test_the_operators_glibc_tunables_win(monkeypatch: pytest.MonkeyPatch, tunables: str) -> None:
    """``GLIBC_TUNABLES`` is glibc's own spelling of the same thresholds."""
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", tunables)
    assert allocator.tune_allocator() is False
