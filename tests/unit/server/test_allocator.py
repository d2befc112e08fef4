"""Which allocator vLLM-CPU engines preload (server/host/allocator.py): the choice, from real files."""

import logging

import pytest

from embedtext.server.host.allocator import PRELOAD_VAR, TCMALLOC_VAR, AllocatorError, engine_allocator, find_tcmalloc


@pytest.fixture()
def libdir(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    return lib


def test_finds_tcmalloc_minimal_first(libdir):
    (libdir / "libtcmalloc.so.4").write_bytes(b"\x7fELF")
    (libdir / "libtcmalloc_minimal.so.4").write_bytes(b"\x7fELF")
    assert find_tcmalloc([str(libdir)]) == str(libdir / "libtcmalloc_minimal.so.4")


def test_finds_nothing_in_empty_folders(libdir):
    assert find_tcmalloc([str(libdir), str(libdir / "absent")]) is None


def test_found_library_goes_first_in_preload_and_keeps_the_rest(libdir):
    (libdir / "libtcmalloc_minimal.so.4.5.10").write_bytes(b"\x7fELF")
    choice = engine_allocator({PRELOAD_VAR: "/opt/libfoo.so"}, dirs=[str(libdir)])
    assert choice.env == {PRELOAD_VAR: f"{libdir}/libtcmalloc_minimal.so.4.5.10:/opt/libfoo.so"}
    assert not choice.advice and "tcmalloc" in choice.message


def test_no_library_changes_nothing_and_says_how_to_get_one(libdir):
    choice = engine_allocator({}, dirs=[str(libdir)])
    assert choice.env == {} and choice.advice
    assert "libtcmalloc-minimal4" in choice.message and TCMALLOC_VAR in choice.message
    assert ".json" not in choice.message and "bench" not in choice.message  # nothing of our repository


def test_a_missing_tcmalloc_is_said_once_at_info(libdir, monkeypatch):
    """A default start on a host without tcmalloc logs no warning: speed, not correctness, is at stake."""
    from embedtext.server.host import tuning

    monkeypatch.setattr(tuning, "engine_allocator", lambda: engine_allocator({}, dirs=[str(libdir)]))
    notes = tuning.host_tuning("cpu").notes
    assert [level for level, message in notes if "engine allocator" in message] == [logging.INFO]


@pytest.mark.parametrize("preloaded", ["/usr/lib/libjemalloc.so.2", "/x/libtcmalloc.so.4:/y/libgomp.so"])
def test_an_allocator_the_user_preloads_is_left_alone(libdir, preloaded):
    (libdir / "libtcmalloc_minimal.so.4").write_bytes(b"\x7fELF")
    choice = engine_allocator({PRELOAD_VAR: preloaded}, dirs=[str(libdir)])
    assert choice.env == {} and not choice.advice and preloaded in choice.message


def test_off_turns_it_off(libdir):
    (libdir / "libtcmalloc_minimal.so.4").write_bytes(b"\x7fELF")
    choice = engine_allocator({TCMALLOC_VAR: "off"}, dirs=[str(libdir)])
    assert choice.env == {} and not choice.advice and "glibc" in choice.message


def test_an_explicit_path_wins_over_the_search(libdir, tmp_path):
    (libdir / "libtcmalloc_minimal.so.4").write_bytes(b"\x7fELF")
    mine = tmp_path / "my_tcmalloc.so"
    mine.write_bytes(b"\x7fELF")
    choice = engine_allocator({TCMALLOC_VAR: str(mine)}, dirs=[str(libdir)])
    assert choice.env == {PRELOAD_VAR: str(mine)}


def test_an_explicit_path_that_is_not_there_is_an_error(tmp_path):
    with pytest.raises(AllocatorError, match="no readable file"):
        engine_allocator({TCMALLOC_VAR: str(tmp_path / "typo.so")}, dirs=[])
