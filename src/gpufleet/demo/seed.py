"""The people of the demo fleet: a KT-like organisation of departments, projects and users.

Deterministic for a seed, and idempotent: seeding a store that already has projects does
nothing, so a second `gpufleet demo` on the same data dir keeps what the first made.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy import select

from gpufleet.domain.access import Role
from gpufleet.services.access import people
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.services.operations.receiver_admin import create_receiver
from gpufleet.store.tables import Project
from gpufleet.wire.inventory import ProjectCreate, ProjectMemberAdd, UserCreate
from gpufleet.wire.receivers import ReceiverCreate, ReceiverKind

# The demo's one receiver: every notification that names owners lands in their inbox, so
# a demo user sees what gpufleet told them (`gpufleet notifications ls`).
OWNERS_INBOX = ReceiverCreate(name="owners-inbox", kind=ReceiverKind.INBOX)

ORGANISATION = "KT"

# department -> (cost centre, projects)
DEPARTMENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "AI Research Center": ("CC-4100", (
        "vision", "llm-pretrain", "llm-alignment", "multimodal", "rl-agents", "graph-ml",
        "efficient-inference", "ai-safety")),
    "AI Platform": ("CC-4200", (
        "mlops-platform", "notebook-service", "model-serving", "feature-store",
        "eval-harness", "data-pipeline")),
    "Language AI": ("CC-4300", (
        "korean-llm", "llm-finetune", "rag-search", "translation", "summarisation",
        "code-assistant", "chatbot-cs")),
    "Speech AI": ("CC-4400", ("speech-asr", "speech-tts", "voice-biometrics",
                              "call-analytics")),
    "Vision AI": ("CC-4500", ("video-analytics", "ocr-documents", "face-anti-spoofing",
                              "retail-vision", "medical-imaging", "satellite-imagery")),
    "Network Technology": ("CC-5100", ("network-anomaly", "traffic-forecast",
                                       "ran-optimisation", "fault-prediction", "5g-slicing")),
    "Media & Content": ("CC-5200", ("genie-tv-recsys", "content-tagging", "music-recsys",
                                    "ad-targeting", "webtoon-gen")),
    "Enterprise AI": ("CC-5300", ("b2b-copilot", "contract-analysis", "fraud-detection",
                                  "credit-scoring", "smart-factory", "energy-forecast")),
    "Cloud Business": ("CC-6100", ("gpuaas-tenant-a", "gpuaas-tenant-b", "gpuaas-tenant-c",
                                   "sovereign-ai", "public-sector-llm")),
    "Customer Experience": ("CC-6200", ("churn-prediction", "customer-360", "voc-analytics",
                                        "next-best-offer")),
    "Robotics & Mobility": ("CC-7100", ("service-robots", "autonomous-driving",
                                        "drone-inspection", "digital-twin")),
    "Healthcare AI": ("CC-7200", ("genomics", "clinical-nlp", "drug-discovery")),
}

GIVEN = ("minjun", "seoyeon", "jiho", "haeun", "doyun", "jiwoo", "siwoo", "subin", "yejun",
         "chaewon", "hyunwoo", "yuna", "junseo", "sooah", "taeyang", "eunji", "geonwoo",
         "dahyun", "woojin", "sohee")
FAMILY = ("kim", "lee", "park", "choi", "jung", "kang", "cho", "yoon", "jang", "lim")


@dataclass(frozen=True)
class SeedSummary:
    projects: int
    users: int
    memberships: int


def demo_projects() -> list[ProjectCreate]:
    return [ProjectCreate(name=name, organisation=ORGANISATION, department=department,
                          cost_centre=cost_centre, description=f"{department}: {name}")
            for department, (cost_centre, names) in DEPARTMENTS.items() for name in names]


def seed_people(gf: Gpufleet, seed: int) -> SeedSummary | None:
    """Create the demo's projects, users and memberships; None when already seeded."""
    rng = random.Random(seed)
    now = gf.clock.now()
    with gf.store.write() as session:
        if session.scalar(select(Project.id).limit(1)) is not None:
            return None
        projects = [people.create_project(session, SYSTEM, body, now) for body in demo_projects()]
        users = []
        for role, names in ((Role.OPERATOR, ("ops-jisoo", "ops-hyunjin", "ops-sungmin")),
                            (Role.VIEWER, ("finance-mina", "cto-office"))):
            users += [people.create_user(session, SYSTEM, UserCreate(name=n, role=role), now)
                      for n in names]
        member_names = sorted({f"{g}.{f}" for g in GIVEN for f in FAMILY})
        members = rng.sample(member_names, 90)
        for name in members:
            users.append(people.create_user(session, SYSTEM, UserCreate(
                name=name, role=Role.MEMBER, email=f"{name}@kt.example"), now))
        memberships = 0
        for project in projects:
            for name in rng.sample(members, rng.randint(2, 5)):
                people.add_member(session, SYSTEM, project.name, ProjectMemberAdd(user=name),
                                  now)
                memberships += 1
        create_receiver(session, SYSTEM, OWNERS_INBOX, now)
    return SeedSummary(projects=len(projects), users=len(users), memberships=memberships)
