"""Who is calling, as the services see it, and the checks every use case starts with."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.domain.access import ACTION_PHRASES, Action, Role, is_allowed, sees_all_projects
from gpufleet.domain.errors import Forbidden


@dataclass(frozen=True)
class Principal:
    role: Role
    token_id: int | None = None
    token_name: str | None = None
    user_id: int | None = None
    user_name: str | None = None
    node_id: int | None = None
    node_name: str | None = None
    project_names: frozenset[str] = field(default_factory=frozenset)

    @property
    def actor(self) -> str:
        """How this caller appears in the audit log."""
        if self.user_name:
            return f"user:{self.user_name}"
        if self.node_name:
            return f"node:{self.node_name}"
        if self.token_name:
            return f"token:{self.token_name}"
        return "system"

    @property
    def visible_projects(self) -> frozenset[str] | None:
        """The projects whose allocations this caller may see: None for every project
        (operators, admins), else a member's own (possibly none)."""
        return None if sees_all_projects(self.role) else self.project_names

    def sees_project(self, name: str | None) -> bool:
        return self.visible_projects is None or name in self.project_names

    def require(self, action: Action) -> None:
        if not is_allowed(self.role, action):
            raise Forbidden(f"role '{self.role}' may not {ACTION_PHRASES[action]}",
                            code="forbidden", details={"role": self.role.value,
                                                       "action": action.value})


SYSTEM = Principal(role=Role.ADMIN, token_name="system")
