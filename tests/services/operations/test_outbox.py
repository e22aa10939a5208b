from sqlalchemy import func, select

from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.services.operations.outbox import notify, notify_all
from gpufleet.store.tables import OutboxMessage, Receiver
from tests.conftest import START


def _receiver(session, name, **fields):
    values = dict(kind="webhook", config={}, matchers=[], kinds=[], min_severity="info",
                  broadcast=True, tells_owners=False, enabled=True, created_by="admin",
                  created_at=START)
    values.update(fields)
    session.add(Receiver(name=name, **values))


def _quarantined(key="q-1", owners=("alice",), severity=Severity.CRITICAL):
    return Notification(kind="health.quarantined", severity=severity, summary="GPU out",
                        dedup_key=key, labels={"project": "vision", "environment": "onprem"},
                        owners=owners)


def test_notify_routes_by_matchers_severity_kind_and_owners(store):
    with store.write() as s:
        _receiver(s, "vision-channel", matchers=["project=vision"])
        _receiver(s, "nlp-channel", matchers=["project=nlp"])
        _receiver(s, "pager", min_severity="critical", kinds=["alert.*"])
        _receiver(s, "inbox", kind="inbox", broadcast=False, tells_owners=True)
        _receiver(s, "off", enabled=False)
    with store.write() as s:
        queued = notify(s, _quarantined(owners=("alice", "bob", "alice")), START)
        got = sorted((m.receiver, m.recipient) for m in queued)
    assert got == [("inbox", "alice"), ("inbox", "bob"), ("vision-channel", None)]


def test_the_same_dedup_key_is_queued_once(store):
    with store.write() as s:
        _receiver(s, "all")
    with store.write() as s:
        assert len(notify(s, _quarantined(), START)) == 1
    with store.write() as s:
        assert notify_all(s, [_quarantined(), _quarantined()], START) == []
        assert len(notify(s, _quarantined(key="q-2"), START)) == 1
    with store.read() as s:
        assert s.scalar(select(func.count()).select_from(OutboxMessage)) == 2


def test_a_rolled_back_cause_queues_nothing(store):
    with store.write() as s:
        _receiver(s, "all")
    try:
        with store.write() as s:
            notify(s, _quarantined(), START)
            raise RuntimeError("the change failed")
    except RuntimeError:
        pass
    with store.read() as s:
        assert s.scalar(select(func.count()).select_from(OutboxMessage)) == 0


def test_a_receiver_with_no_kinds_takes_everything_but_events(store):
    """Events are every audited change: they go only to receivers that name them."""
    with store.write() as s:
        _receiver(s, "everything")
        _receiver(s, "subscriber", kinds=["event.request.*"])
    event = Notification(kind="event.request.approved", severity=Severity.INFO,
                         summary="approved", dedup_key="event:1")
    with store.write() as s:
        assert [m.receiver for m in notify(s, event, START)] == ["subscriber"]
        assert sorted(m.receiver for m in notify(s, _quarantined(), START)) == [
            "everything"]
