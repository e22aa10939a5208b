"""E-mail over SMTP (stdlib smtplib): the broadcast copy to the receiver's `to` list, an
owner's copy to their gpufleet e-mail. `Message-ID` is made from the idempotency key, so a
mail sent twice (at least once) is recognisably the same mail.

STARTTLS verifies the server's certificate and its name (`ssl.create_default_context`, with
the receiver's `ca_file` for a private CA): smtplib's own default context verifies
nothing, which would let anyone on the path read the mail and the SMTP password."""

from __future__ import annotations

import hashlib
import smtplib
import ssl
from email.message import EmailMessage

from gpufleet.domain.operations.delivery import Attempt
from gpufleet.domain.operations.rendering import email_subject, plain_text
from gpufleet.services.operations.receivers.outgoing import (
    DELIVERED,
    Outgoing,
    Transport,
    no_email,
)


def compose(message: Outgoing, to: list[str]) -> EmailMessage:
    config = message.config
    mail = EmailMessage()
    mail["From"] = config["from"]
    mail["To"] = ", ".join(to)
    mail["Subject"] = email_subject(message.payload)
    digest = hashlib.sha256(message.idempotency_key.encode()).hexdigest()[:32]
    mail["Message-ID"] = f"<{digest}@gpufleet>"
    mail["X-Gpufleet-Kind"] = message.kind
    mail["X-Gpufleet-Idempotency-Key"] = message.idempotency_key[:200]
    mail.set_content(plain_text(message.payload))
    return mail


def deliver(message: Outgoing, transport: Transport) -> Attempt:
    config = message.config
    if message.recipient is None:
        to = list(config.get("to") or [])
    elif not message.recipient_email:
        return no_email(message)
    else:
        to = [message.recipient_email]
    try:
        tls = tls_context(config) if config.get("starttls") else None
    except OSError as exc:  # ca_file unreadable or not PEM: the admin must fix the config
        return Attempt(ok=False, outcome="tls_ca_file",
                       detail=f"ca_file {config.get('ca_file')}: {exc}"[:500])
    try:
        with smtplib.SMTP(config["host"], int(config.get("port", 25)),
                          timeout=transport.timeout_s) as smtp:
            if tls is not None:
                smtp.starttls(context=tls)
            if config.get("username"):
                smtp.login(config["username"], config.get("password") or "")
            smtp.send_message(compose(message, to))
    except smtplib.SMTPRecipientsRefused as exc:
        code = next(iter(exc.recipients.values()), (0, b""))[0]
        return Attempt(ok=False, outcome=f"smtp_{code}", status=code,
                       detail=str(exc.recipients)[:500])
    except smtplib.SMTPResponseException as exc:
        return Attempt(ok=False, outcome=f"smtp_{exc.smtp_code}", status=exc.smtp_code,
                       detail=_text(exc.smtp_error))
    except smtplib.SMTPNotSupportedError as exc:
        return Attempt(ok=False, outcome="starttls_unsupported", detail=str(exc)[:500])
    except ssl.SSLError as exc:  # a certificate not trusted, not for this host, …
        return Attempt(ok=False, outcome="tls_error", detail=f"{type(exc).__name__}: {exc}"[:500])
    except TimeoutError as exc:
        return Attempt(ok=False, outcome="timeout", detail=str(exc) or "timed out")
    except (smtplib.SMTPException, OSError) as exc:
        return Attempt(ok=False, outcome="unreachable", detail=f"{type(exc).__name__}: {exc}")
    return DELIVERED


def tls_context(config: dict) -> ssl.SSLContext:
    """Verifying: the system's CAs, or only those of `ca_file` when it is set."""
    return ssl.create_default_context(cafile=config.get("ca_file"))


def _text(value: bytes | str) -> str:
    return (value.decode(errors="replace") if isinstance(value, bytes) else value)[:500]
