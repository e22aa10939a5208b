"""The environment allow-list: only the listed keys survive, whatever the bytes look like."""

from __future__ import annotations

import pytest

from gpufleet.agent.attribution import environ as environ_module
from gpufleet.agent.attribution.environ import (
    ALLOWED,
    EnvironClaims,
    allowed_entries,
    claims_of,
    read_environ_claims,
)

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzSECRETKEY"


def environ(*entries: bytes) -> bytes:
    return b"".join(e + b"\0" for e in entries)


def test_only_allow_listed_keys_are_kept():
    raw = environ(b"PATH=/usr/bin", b"GPUFLEET_ALLOCATION=GR-7",
                  b"AWS_SECRET_ACCESS_KEY=" + SECRET.encode(),
                  b"GPUFLEET_TOKEN=" + SECRET.encode(),  # gpufleet's own secret: not a tag
                  b"GPUFLEET_DATABASE_URL=postgresql://u:" + SECRET.encode() + b"@db/x",
                  b"SLURM_JOB_ID=123", b"SLURM_JOB_NAME=my-job", b"HOSTNAME=node-1")
    kept = allowed_entries(raw)
    assert kept == {"GPUFLEET_ALLOCATION": "GR-7", "SLURM_JOB_ID": "123"}
    assert SECRET not in repr(kept)


def test_the_allow_list_is_exactly_the_documented_one():
    assert sorted(ALLOWED) == sorted([
        "GPUFLEET_ALLOCATION", "GPUFLEET_PROJECT", "GPUFLEET_MODEL", "GPUFLEET_DATASET",
        "GPUFLEET_EXPERIMENT", "GPUFLEET_TAGS", "SLURM_JOB_ID", "POD_NAME", "MY_POD_NAME",
        "POD_NAMESPACE", "MY_POD_NAMESPACE"])


@pytest.mark.parametrize("raw, expected", [
    (environ(b"GPUFLEET_ALLOCATION"), {}),  # no '='
    (environ(b"GPUFLEET_ALLOCATION=\xff\xfe"), {}),  # not UTF-8
    (environ(b"GPUFLEET_ALLOCATION="), {}),  # empty
    (environ(b"GPUFLEET_ALLOCATION=a\nb"), {}),  # control character
    (environ(b"GPUFLEET_ALLOCATION=" + b"x" * 254), {}),  # longer than a label
    (environ(b"GPUFLEET_ALLOCATION=GR-1", b"GPUFLEET_ALLOCATION=GR-2"),
     {"GPUFLEET_ALLOCATION": "GR-1"}),  # the first, as getenv(3)
    (environ(b"gpufleet_allocation=GR-1"), {}),  # keys are case-sensitive
    (environ(b"=GR-1", b"", b"\xff=\xff"), {}),
    (environ(b"SLURM_JOB_ID=12") + b"GPUFLEET_ALLOCATION=GR-cut", {"SLURM_JOB_ID": "12"}),
    (b"", {}),
    (b"\0\0\0", {}),
    (environ(b"POD_NAME=trainer-0=x"), {"POD_NAME": "trainer-0=x"}),  # '=' in the value
])
def test_defensive_parsing(raw, expected):
    assert allowed_entries(raw) == expected


def test_claims_from_entries():
    claims = claims_of({"GPUFLEET_ALLOCATION": "GR-7", "GPUFLEET_MODEL": "llama",
                        "GPUFLEET_TAGS": "team=vision, model=other,bad key=x,allocation=GR-1,x",
                        "SLURM_JOB_ID": "123", "MY_POD_NAME": "trainer-0",
                        "POD_NAMESPACE": "ml"})
    assert claims == EnvironClaims(claimed_allocation="GR-7", slurm_job="123",
                                   pod_name="trainer-0", namespace="ml",
                                   tags={"team": "vision", "model": "llama"})


def test_reading_a_file_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(environ_module, "MAX_ENVIRON_BYTES", 64)
    path = tmp_path / "environ"
    path.write_bytes(environ(b"GPUFLEET_ALLOCATION=GR-7", b"FILLER=" + b"x" * 100,
                             b"SLURM_JOB_ID=123"))
    assert read_environ_claims(path) == EnvironClaims(claimed_allocation="GR-7")


def test_an_unreadable_environ_is_no_claims(tmp_path):
    assert read_environ_claims(tmp_path / "gone" / "environ") == EnvironClaims()
    assert read_environ_claims(tmp_path) == EnvironClaims()  # a directory: read fails
