"""Receivers, their delivery log, and each user's own notifications (docs/operations.md,
"Receivers" and "The outbox")."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gpufleet.api.deps import PageRequest, page_request, principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.base import Page
from gpufleet.wire.receivers import (
    DeliveryView,
    NotificationView,
    ReceiverCreate,
    ReceiverUpdate,
    ReceiverView,
    TestQueued,
)

router = APIRouter(prefix="/api/v1")
RECEIVERS = ["receivers"]


@router.post("/receivers", response_model=ReceiverView, status_code=201, tags=RECEIVERS)
def create_receiver(body: ReceiverCreate, p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """Add a receiver (admins). Its `config` is checked against its kind; secrets in it
    are never shown again (`"set"`)."""
    return gf.create_receiver(p, body)


@router.get("/receivers", response_model=Page[ReceiverView], tags=RECEIVERS)
def list_receivers(page: PageRequest = Depends(page_request),
                   p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """Receivers by name, with how many messages each has waiting and abandoned."""
    return gf.list_receivers(p, page.cursor, page.limit)


@router.get("/receivers/{name}", response_model=ReceiverView, tags=RECEIVERS)
def show_receiver(name: str, p: Principal = Depends(principal),
                  gf: Gpufleet = Depends(services)):
    return gf.show_receiver(p, name)


@router.patch("/receivers/{name}", response_model=ReceiverView, tags=RECEIVERS)
def update_receiver(name: str, body: ReceiverUpdate, p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """Enable or disable a receiver, or change its matchers, kinds or minimum severity
    (admins); only the fields given change. Disabled: nothing new is queued for it, and
    what is queued is held until it is enabled again."""
    return gf.update_receiver(p, name, body)


@router.delete("/receivers/{name}", response_model=ReceiverView, tags=RECEIVERS)
def delete_receiver(name: str, p: Principal = Depends(principal),
                    gf: Gpufleet = Depends(services)):
    """Remove a receiver with its waiting messages and delivery log (admins)."""
    return gf.delete_receiver(p, name)


@router.post("/receivers/{name}/test", response_model=TestQueued, status_code=202,
             tags=RECEIVERS)
def test_receiver(name: str, p: Principal = Depends(principal),
                  gf: Gpufleet = Depends(services)):
    """Queue a test notification for this receiver alone, whatever its filters (admins);
    its delivery shows in the receiver's delivery log."""
    return gf.test_receiver(p, name)


@router.get("/receivers/{name}/deliveries", response_model=Page[DeliveryView],
            tags=RECEIVERS)
def receiver_deliveries(name: str, page: PageRequest = Depends(page_request),
                        p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """The receiver's delivery log, newest attempt first: outcome, status, duration."""
    return gf.receiver_deliveries(p, name, page.cursor, page.limit)


@router.get("/notifications", response_model=Page[NotificationView], tags=["notifications"])
def list_notifications(page: PageRequest = Depends(page_request),
                       p: Principal = Depends(principal), gf: Gpufleet = Depends(services)):
    """The caller's own notifications, newest first: what inbox receivers delivered to
    them (an allocation quarantined, reclaimed, an alert on their units)."""
    return gf.list_notifications(p, page.cursor, page.limit)
