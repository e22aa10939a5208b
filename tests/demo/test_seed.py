"""The demo's people come with an inbox receiver, so a demo owner sees what gpufleet
told them."""

from __future__ import annotations

from sqlalchemy import select

from gpufleet.demo.seed import seed_people
from gpufleet.domain.access import Role
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.services.access.principal import Principal
from gpufleet.services.operations.outbox import notify
from gpufleet.store.tables import User


def test_a_demo_owner_is_told_through_the_inbox(gf, clock):
    assert seed_people(gf, 7) is not None
    assert seed_people(gf, 7) is None  # idempotent: one receiver
    with gf.store.read() as s:
        owner = s.scalar(select(User.name).where(User.role == "member").limit(1))
    with gf.store.write() as s:
        notify(s, Notification(kind="health.quarantined", severity=Severity.CRITICAL,
                               summary="GPU-1 quarantined by XID 79", dedup_key="q-demo",
                               owners=(owner,)), clock.now())
    gf.send_notifications()
    gf.outbox_sender.wait()
    inbox = gf.list_notifications(Principal(role=Role.MEMBER, user_name=owner), None, 10)
    assert [n.summary for n in inbox.items] == ["GPU-1 quarantined by XID 79"]
