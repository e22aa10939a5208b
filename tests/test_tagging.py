"""`gpufleet.tag`: validation in the workload, the spool file it writes, where it writes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpufleet
from gpufleet import tagging
from gpufleet.tagging import (
    MAX_TAGS,
    TagError,
    check_tag,
    default_tag_dir,
    parse_tag_file_name,
    pid_namespace_of,
    start_ticks_of,
    tag_file_name,
)

LINUX = Path("/proc/self/stat").exists()
needs_proc = pytest.mark.skipif(not LINUX, reason="tag files are named from /proc")


@pytest.fixture
def tag_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "tags"
    monkeypatch.setenv("GPUFLEET_TAG_DIR", str(directory))
    return directory


def own_file(directory: Path) -> Path:
    start = start_ticks_of(Path("/proc/self/stat").read_text())
    namespace = pid_namespace_of(os.readlink("/proc/self/ns/pid"))
    return directory / tag_file_name(namespace, os.getpid(), start)


def written(path: Path) -> dict:
    return json.loads(path.read_text())["tags"]


@pytest.mark.parametrize("key", ["Model", "1st", "a b", "", "x" * 64, "model\n", "é", 7, None])
def test_a_bad_key_raises_value_error_in_the_workload(key):
    with pytest.raises(ValueError, match="tag key"):
        check_tag(key, "llama")


@pytest.mark.parametrize("value", ["", "x" * 254, "a\nb", "tab\there", "\x7f", [1], True, None])
def test_a_bad_value_raises_value_error(value):
    with pytest.raises(ValueError, match="tag model"):
        check_tag("model", value)


def test_good_keys_and_values():
    assert check_tag("team.name", "vision") == ("team.name", "vision")
    assert check_tag("run-id", 42) == ("run-id", "42")
    assert check_tag("lr", 0.5) == ("lr", "0.5")
    assert check_tag("x" * 63, "y" * 253)[1] == "y" * 253


def test_bad_key_raises_before_anything_is_written(tag_dir):
    with pytest.raises(TagError):
        gpufleet.tag(model="llama", **{"Bad Key": "x"})
    assert not tag_dir.exists()


@needs_proc
def test_tag_writes_this_process_file_keyed_by_pid_namespace_and_start_time(tag_dir):
    path = gpufleet.tag(allocation="GR-9", model="llama", dataset="c4", epochs=3)
    assert path == own_file(tag_dir)
    assert written(path) == {"allocation": "GR-9", "model": "llama", "dataset": "c4",
                             "epochs": "3"}
    assert [p.name for p in tag_dir.iterdir()] == [path.name]  # no temporary file left


@needs_proc
def test_later_calls_override_key_by_key_and_untag_removes(tag_dir):
    gpufleet.tag(allocation="GR-9", model="llama", dataset="c4")
    gpufleet.tag(model="mistral", stage="eval")
    path = gpufleet.untag("dataset")
    assert written(path) == {"allocation": "GR-9", "model": "mistral", "stage": "eval"}


@needs_proc
def test_too_many_tags_is_refused(tag_dir):
    gpufleet.tag(**{f"k{i}": "v" for i in range(MAX_TAGS)})
    with pytest.raises(TagError, match="at most"):
        gpufleet.tag(one_more="v")
    assert len(written(own_file(tag_dir))) == MAX_TAGS


def test_without_proc_tagging_is_a_logged_none(tag_dir, monkeypatch, caplog):
    def no_proc():
        raise FileNotFoundError("/proc/self/stat")
    monkeypatch.setattr(tagging, "_own_identity", no_proc)
    with caplog.at_level(logging.DEBUG, logger="gpufleet.tagging"):
        assert gpufleet.tag(model="llama") is None
    assert "no /proc" in caplog.text


@needs_proc
def test_an_unwritable_directory_is_a_warning_not_a_crash(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GPUFLEET_TAG_DIR", str(blocker / "tags"))
    with caplog.at_level(logging.WARNING, logger="gpufleet.tagging"):
        assert gpufleet.tag(model="llama") is None
    assert "could not write" in caplog.text


def test_default_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(tagging, "SYSTEM_TAG_DIR", tmp_path / "missing")
    assert default_tag_dir({"GPUFLEET_TAG_DIR": "/x/tags"}) == Path("/x/tags")
    assert default_tag_dir({"XDG_RUNTIME_DIR": "/run/user/1000"}) == \
        Path("/run/user/1000/gpufleet/tags")
    fallback = default_tag_dir({})
    assert fallback.name == f"gpufleet-{os.getuid()}-tags"
    system = tmp_path / "run-gpufleet-tags"
    system.mkdir()
    monkeypatch.setattr(tagging, "SYSTEM_TAG_DIR", system)
    assert default_tag_dir({"XDG_RUNTIME_DIR": "/run/user/1000"}) == system


@needs_proc
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_private_fallback_directory_of_another_user_is_refused(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("GPUFLEET_TAG_DIR", raising=False)
    monkeypatch.setattr(tagging, "SYSTEM_TAG_DIR", tmp_path / "missing")
    runtime = tmp_path / "runtime"
    (runtime / "gpufleet" / "tags").mkdir(parents=True)
    os.chown(runtime / "gpufleet" / "tags", 12345, 12345)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    with caplog.at_level(logging.WARNING, logger="gpufleet.tagging"):
        assert gpufleet.tag(model="llama") is None
    assert "another user" in caplog.text


def test_file_names_round_trip():
    assert parse_tag_file_name(tag_file_name(4026531836, 12, 9876)) == (4026531836, 12, 9876)
    for other in ["x.json", "1-2.json", "1-2-3.tmp", ".1-2-3.json.tmp", "a-2-3.json"]:
        assert parse_tag_file_name(other) is None


def test_start_time_is_field_22_even_with_a_strange_command_name():
    fields = " ".join(str(n) for n in range(3, 53))
    assert start_ticks_of(f"42 (my (odd) name) {fields}") == 22
    assert start_ticks_of("42 (truncated") is None
    assert pid_namespace_of("pid:[4026531836]") == 4026531836
    assert pid_namespace_of("net:[1]") is None


def test_a_tag_file_is_read_only_in_its_format_version():
    assert tagging.parse_tag_file(b'{"v": 1, "tags": {"model": "llama", "Bad": "x"}}') \
        == {"model": "llama"}
    for other in (b'{"v": 2, "tags": {"model": "llama"}}', b'{"tags": {"model": "llama"}}',
                  b'{"v": 1, "tags": []}', b"[]", b"not json"):
        assert tagging.parse_tag_file(other) == {}, other


@needs_proc
def test_a_file_of_another_version_is_replaced_not_merged(tag_dir):
    path = own_file(tag_dir)
    tag_dir.mkdir(mode=0o700)
    path.write_text(json.dumps({"v": 2, "tags": {"dataset": "from-a-newer-sdk"}}))
    gpufleet.tag(model="llama")
    assert json.loads(path.read_text()) == {"v": tagging.FORMAT_VERSION,
                                            "tags": {"model": "llama"}}


def test_import_gpufleet_stays_light():
    """`import gpufleet` loads nothing else (the CLI imports it first); `gpufleet.tag`
    loads the tagging module on first use, and nothing of the server."""
    loaded = ("print(sorted(m for m in sys.modules "
              "if m.startswith(('gpufleet', 'pydantic', 'sqlalchemy', 'fastapi', 'httpx'))))")
    code = f"import sys, gpufleet; {loaded}; gpufleet.tag; {loaded}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines() == [
        "['gpufleet']", "['gpufleet', 'gpufleet.tagging', 'gpufleet.text_limits']"]


def test_tags_the_environment_and_the_wire_share_one_label_text_rule():
    from pydantic import TypeAdapter, ValidationError

    from gpufleet.agent.attribution.environ import allowed_entries
    from gpufleet.text_limits import LABEL_TEXT_MAX
    from gpufleet.wire.telemetry import LabelText

    wire = TypeAdapter(LabelText)
    for text in ("x" * LABEL_TEXT_MAX, "x" * (LABEL_TEXT_MAX + 1), "a\tb", ""):
        try:
            check_tag("model", text)
            tagged = True
        except TagError:
            tagged = False
        from_environ = allowed_entries(f"GPUFLEET_MODEL={text}\0".encode()) != {}
        assert tagged == from_environ, text
        if tagged:
            wire.validate_python(text)
    with pytest.raises(ValidationError):
        wire.validate_python("x" * (LABEL_TEXT_MAX + 1))
