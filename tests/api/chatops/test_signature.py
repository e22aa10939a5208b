"""Slack request signatures: a verdict from headers, body and clock, before any parsing."""

from __future__ import annotations

import hashlib
import hmac
import logging
from datetime import UTC, datetime

import pytest

from gpufleet.api.chatops.signature import MAX_BODY_BYTES, RequestVerifier, Verdict
from gpufleet.clock import ManualClock

# Slack's documented example ("Verifying requests from Slack").
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TIMESTAMP = 1531420618
SLACK_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
    b"G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-"
    b"collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F3977008"
    b"85554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c44"
    b"7fce8b6703c")
SLACK_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

SECRET = "test-signing-secret-0123456789"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BODY = b"command=%2Fgpu&text=mine&user_id=U1&team_id=T1&channel_id=C1"


def sign(body: bytes, timestamp: int, secret: str = SECRET) -> dict[str, str]:
    """Headers as Slack sends them, made here from a known secret."""
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": str(timestamp),
            "X-Slack-Signature": f"v0={digest.hexdigest()}"}


@pytest.fixture
def verifier() -> RequestVerifier:
    return RequestVerifier(SECRET, ManualClock(NOW))


def test_slacks_documented_example_is_accepted():
    clock = ManualClock(datetime.fromtimestamp(SLACK_TIMESTAMP + 10, UTC))
    headers = {"X-Slack-Request-Timestamp": str(SLACK_TIMESTAMP),
               "X-Slack-Signature": SLACK_SIGNATURE}
    check = RequestVerifier(SLACK_SECRET, clock).check(headers, SLACK_BODY)
    assert check.accepted and check.http_status == 200
    assert check.body.raw == SLACK_BODY
    assert sign(SLACK_BODY, SLACK_TIMESTAMP, SLACK_SECRET)["X-Slack-Signature"] == \
        SLACK_SIGNATURE


def test_a_good_signature_is_accepted_with_its_body(verifier):
    check = verifier.check(sign(BODY, int(NOW.timestamp())), BODY)
    assert check.verdict is Verdict.ACCEPTED and check.body.raw == BODY


def test_header_names_in_any_case(verifier):
    headers = {k.lower(): v for k, v in sign(BODY, int(NOW.timestamp())).items()}
    assert verifier.check(headers, BODY).accepted


@pytest.mark.parametrize("age_s, verdict", [
    (0, Verdict.ACCEPTED), (299, Verdict.ACCEPTED), (300, Verdict.ACCEPTED),
    (301, Verdict.STALE), (86_400, Verdict.STALE),
    (-300, Verdict.ACCEPTED), (-301, Verdict.FUTURE), (-86_400, Verdict.FUTURE),
], ids=lambda value: str(value))
def test_replay_window_is_five_minutes_either_way(verifier, age_s, verdict):
    timestamp = int(NOW.timestamp()) - age_s
    assert verifier.check(sign(BODY, timestamp), BODY).verdict is verdict


def tampered_cases():
    stamp = int(NOW.timestamp())
    good = sign(BODY, stamp)
    return {
        "body changed": (good, BODY.replace(b"mine", b"idle"), Verdict.BAD_SIGNATURE),
        "body extended": (good, BODY + b"&text=release", Verdict.BAD_SIGNATURE),
        "other secret": (sign(BODY, stamp, "another-secret"), BODY, Verdict.BAD_SIGNATURE),
        "timestamp moved, signature kept": (
            {**good, "X-Slack-Request-Timestamp": str(stamp - 1)}, BODY, Verdict.BAD_SIGNATURE),
        "v1 instead of v0": ({**good, "X-Slack-Signature": "v1" + good["X-Slack-Signature"][2:]},
                             BODY, Verdict.BAD_SIGNATURE),
        "signature truncated": ({**good, "X-Slack-Signature": good["X-Slack-Signature"][:-1]},
                                BODY, Verdict.BAD_SIGNATURE),
        "signature in capitals": ({**good, "X-Slack-Signature":
                                   good["X-Slack-Signature"].upper()}, BODY,
                                  Verdict.BAD_SIGNATURE),
        "non-ASCII signature": ({**good, "X-Slack-Signature": "v0=é"}, BODY,
                                Verdict.BAD_SIGNATURE),
        "body not UTF-8": (sign(b"\xff\xfe", stamp), b"\xff\xfe", Verdict.BAD_SIGNATURE),
        "no signature": ({"X-Slack-Request-Timestamp": str(stamp)}, BODY,
                         Verdict.MISSING_HEADERS),
        "no timestamp": ({"X-Slack-Signature": good["X-Slack-Signature"]}, BODY,
                         Verdict.MISSING_HEADERS),
        "empty headers": ({}, BODY, Verdict.MISSING_HEADERS),
        "empty signature": ({**good, "X-Slack-Signature": ""}, BODY, Verdict.MISSING_HEADERS),
        "timestamp not a number": ({**good, "X-Slack-Request-Timestamp": "soon"}, BODY,
                                   Verdict.MALFORMED_TIMESTAMP),
        "timestamp negative": ({**good, "X-Slack-Request-Timestamp": "-5"}, BODY,
                               Verdict.MALFORMED_TIMESTAMP),
        "timestamp fractional": ({**good, "X-Slack-Request-Timestamp": f"{stamp}.5"}, BODY,
                                 Verdict.MALFORMED_TIMESTAMP),
        "timestamp huge": ({**good, "X-Slack-Request-Timestamp": "9" * 400}, BODY,
                           Verdict.MALFORMED_TIMESTAMP),
        "timestamp in other digits": ({**good, "X-Slack-Request-Timestamp": "١٢٣"}, BODY,
                                      Verdict.MALFORMED_TIMESTAMP),
    }


@pytest.mark.parametrize("headers, body, verdict", tampered_cases().values(),
                         ids=tampered_cases().keys())
def test_a_bad_request_is_refused_with_401_and_no_body(verifier, headers, body, verdict):
    check = verifier.check(headers, body)
    assert check.verdict is verdict
    assert check.http_status == 401 and check.body is None and check.message


def test_a_body_larger_than_any_slack_request_is_413(verifier):
    body = b"x" * (MAX_BODY_BYTES + 1)
    check = verifier.check(sign(body, int(NOW.timestamp())), body)
    assert check.verdict is Verdict.TOO_LARGE and check.http_status == 413


def test_refusals_are_logged_without_secret_or_signature(verifier, caplog):
    headers = sign(BODY, int(NOW.timestamp()), "forged-secret")
    with caplog.at_level(logging.DEBUG):
        assert verifier.check(headers, BODY).verdict is Verdict.BAD_SIGNATURE
        assert verifier.check(sign(BODY, 1), BODY).verdict is Verdict.STALE
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "bad_signature" in logged and "stale" in logged
    for secret in (SECRET, "forged-secret", headers["X-Slack-Signature"][3:]):
        assert secret not in logged
    assert SECRET not in repr(verifier)


def test_the_clock_moves_the_window():
    clock = ManualClock(NOW)
    verifier = RequestVerifier(SECRET, clock)
    headers = sign(BODY, int(NOW.timestamp()))
    assert verifier.check(headers, BODY).accepted
    clock.advance(301)
    assert verifier.check(headers, BODY).verdict is Verdict.STALE


def test_an_empty_secret_is_refused_at_start():
    with pytest.raises(ValueError, match="empty"):
        RequestVerifier("  ", ManualClock(NOW))
