"""The demo's rate card: stored once, audited like an administrator's, and pricing every
flavour the demo fleet has."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.demo.rate_card import DEMO_RATES, IN_FORCE_FROM, seed_rate_card
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.billing.rates import rate_card
from gpufleet.sim.fleet_spec import load_default_spec
from gpufleet.sim.shapes import shape_named
from gpufleet.wire.inventory import EnvironmentCreate


def test_the_demo_card_is_stored_once_and_audited(gf):
    gf.create_environment(SYSTEM, EnvironmentCreate(name="azure-koreacentral", kind="cloud"))
    assert seed_rate_card(gf) == len(DEMO_RATES)
    assert seed_rate_card(gf) is None  # a second start keeps the card
    rates = gf.list_billing_rates(SYSTEM)
    assert {(r.flavour, r.environment) for r in rates} == \
        {(flavour, env) for flavour, env, _ in DEMO_RATES}
    assert {r.currency for r in rates} == {"USD"}
    assert all(r.effective_from == IN_FORCE_FROM and r.effective_to is None for r in rates)
    audit = gf.audit_events(SYSTEM, subject_kind="billing_rate", subject=None, action=None,
                            cursor=None, limit=50)
    assert len(audit.items) == len(DEMO_RATES)


def test_rates_for_an_environment_the_fleet_lacks_are_left_out(gf):
    stored = seed_rate_card(gf)
    assert stored == sum(1 for _, env, _ in DEMO_RATES if env is None)
    assert all(r.environment is None for r in gf.list_billing_rates(SYSTEM))


def test_the_card_prices_every_gpu_of_the_demo_fleet(gf):
    """Every model in every environment of the default fleet, whole, sliced and shared, has
    a price from the card's start on: no demo allocation is left unpriced."""
    spec = load_default_spec()
    for name in {group.environment for group in spec.node_groups}:
        gf.create_environment(SYSTEM, EnvironmentCreate(name=name, kind="onprem"))
    seed_rate_card(gf)
    with gf.store.read() as session:
        card = rate_card(session)
    at = IN_FORCE_FROM + timedelta(days=200)
    for group in spec.node_groups:
        model_key = shape_named(group.shape).gpu.model_key
        for flavour in (model_key, f"{model_key}/shared"):
            assert card.rate_at(flavour, group.environment, at) is not None, flavour
        found = catalogue_model(model_key)
        for profile in (found.mig.profiles if found.mig else ()):
            key = f"{model_key}/{profile.name}"
            assert card.rate_at(key, group.environment, at) is not None, key
    assert card.rate_at("H100-80GB", "onprem-hpc", IN_FORCE_FROM - timedelta(seconds=1)) \
        is None
