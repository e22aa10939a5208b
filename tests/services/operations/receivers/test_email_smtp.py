"""E-mail over SMTP to a local aiosmtpd server."""

from __future__ import annotations

from email import message_from_bytes

import pytest

from gpufleet.services.operations.receivers import email_smtp
from tests.local_receivers import free_port, local_smtp
from tests.services.operations.receivers.outgoing_world import outgoing, transport


def test_the_broadcast_copy_goes_to_the_list_and_an_owner_to_their_address():
    with local_smtp() as (port, envelopes), transport() as t:
        config = {"host": "127.0.0.1", "port": port, "from": "gpufleet@example.com",
                  "to": ["gpu-ops@example.com", "oncall@example.com"]}
        broadcast = email_smtp.deliver(outgoing("email", config), t)
        owner = email_smtp.deliver(outgoing("email", config, recipient="alice",
                                            email="alice@example.com"), t)
        nobody = email_smtp.deliver(outgoing("email", config, recipient="carol"), t)
    assert broadcast.ok and owner.ok
    assert (nobody.outcome, nobody.permanent) == ("no_email", True)
    assert [e.rcpt_tos for e in envelopes] == [
        ["gpu-ops@example.com", "oncall@example.com"], ["alice@example.com"]]
    mail = message_from_bytes(envelopes[0].content)
    assert mail["Subject"] == "[critical] GPU-3f2a quarantined by XID 79"
    assert mail["From"] == "gpufleet@example.com"
    assert "fallen off the bus" in mail.get_payload()
    assert "project=vision" in mail.get_payload()
    # The same message sent twice is recognisably the same mail.
    again = message_from_bytes(email_smtp.compose(outgoing("email", config), ["x@y.z"])
                               .as_bytes())
    assert again["Message-ID"] == mail["Message-ID"]


def test_an_smtp_server_that_is_down_is_a_retryable_failure():
    with transport(timeout_s=1) as t:
        attempt = email_smtp.deliver(outgoing("email", {
            "host": "127.0.0.1", "port": free_port(), "from": "g@example.com",
            "to": ["x@example.com"]}), t)
    assert (attempt.ok, attempt.outcome, attempt.permanent) == (False, "unreachable", False)


# No certificate here, so AUTH over plain SMTP, which aiosmtpd rightly warns about.
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_smtp_login_with_the_configured_credentials():
    config = {"host": "127.0.0.1", "from": "g@example.com", "to": ["ops@example.com"],
              "username": "gpufleet", "password": "right-password"}
    with local_smtp(login=("gpufleet", "right-password")) as (port, envelopes):
        with transport() as t:
            ok = email_smtp.deliver(outgoing("email", {**config, "port": port}), t)
            anonymous = email_smtp.deliver(outgoing("email", {
                "host": "127.0.0.1", "port": port, "from": "g@example.com",
                "to": ["ops@example.com"]}), t)
        with transport(timeout_s=1) as t:  # aiosmtpd may not answer a refused login
            wrong = email_smtp.deliver(outgoing("email", {**config, "port": port,
                                                          "password": "wrong"}), t)
    assert ok.ok
    assert (anonymous.ok, anonymous.outcome, anonymous.status) == (False, "smtp_530", 530)
    assert not wrong.ok and not wrong.permanent
    assert len(envelopes) == 1


@pytest.fixture
def ca(tmp_path):
    from tests.certificates import private_ca  # needs cryptography (the test extra)

    return private_ca(tmp_path)


def _tls_config(port, **more):
    return {"host": "127.0.0.1", "port": port, "from": "g@example.com",
            "to": ["ops@example.com"], "starttls": True, **more}


def test_starttls_to_a_server_signed_by_a_private_ca_named_by_ca_file(ca):
    with local_smtp(login=("gpufleet", "right-password"), tls=ca.server_context) as (
            port, envelopes), transport() as t:
        attempt = email_smtp.deliver(outgoing("email", _tls_config(
            port, ca_file=str(ca.ca_file), username="gpufleet",
            password="right-password")), t)
    assert attempt.ok, attempt
    [envelope] = envelopes
    assert envelope.over_tls and envelope.rcpt_tos == ["ops@example.com"]


def test_starttls_verifies_the_certificate(ca, tmp_path):
    """Not trusted (no ca_file: the system's CAs do not know this one), and trusted but
    for another name: both refused before anything — the password included — is sent."""
    other = tmp_path / "other"
    other.mkdir()
    from tests.certificates import private_ca

    with local_smtp(tls=ca.server_context) as (port, envelopes), transport() as t:
        untrusted = email_smtp.deliver(outgoing("email", _tls_config(
            port, username="gpufleet", password="secret-password")), t)
        other_ca = email_smtp.deliver(outgoing("email", _tls_config(
            port, ca_file=str(private_ca(other).ca_file))), t)
        wrong_name = email_smtp.deliver(outgoing("email", {
            **_tls_config(port, ca_file=str(ca.ca_file)), "host": "localhost"}), t)
    for attempt in (untrusted, other_ca, wrong_name):
        assert (attempt.ok, attempt.outcome, attempt.permanent) == (False, "tls_error", False)
        assert "CERTIFICATE_VERIFY_FAILED" in attempt.detail or "certificate" in attempt.detail
    assert envelopes == []


def test_a_server_that_requires_starttls_refuses_plain_mail(ca):
    with local_smtp(tls=ca.server_context) as (port, envelopes), transport() as t:
        plain = email_smtp.deliver(outgoing("email", {
            **_tls_config(port), "starttls": False}), t)
    assert (plain.ok, plain.outcome, plain.status) == (False, "smtp_530", 530)
    assert envelopes == []


def test_starttls_to_a_server_without_it_and_an_unreadable_ca_file(tmp_path):
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate")
    with local_smtp() as (port, envelopes), transport() as t:
        unsupported = email_smtp.deliver(outgoing("email", _tls_config(port)), t)
        missing = email_smtp.deliver(outgoing("email", _tls_config(
            port, ca_file=str(tmp_path / "missing.pem"))), t)
        garbage = email_smtp.deliver(outgoing("email", _tls_config(
            port, ca_file=str(not_pem))), t)
    assert (unsupported.ok, unsupported.outcome) == (False, "starttls_unsupported")
    assert (missing.outcome, garbage.outcome) == ("tls_ca_file", "tls_ca_file")
    assert "missing.pem" in missing.detail
    assert envelopes == []
