"""`gpufleet user …` and `gpufleet project …`: who may use GPUs, and the unit of ownership
(with its quotas and auto-approve policy: `project quota …`, `project auto-approve …`)."""

from typing import Annotated, Any

import typer

from gpufleet.cli.client import api_path, connect
from gpufleet.cli.commands.common import AllPages, JsonFlag, Limit, body, query, show_listing
from gpufleet.cli.output import Group, Text, done, emit, emit_done, fields, table, when
from gpufleet.cli.views import quota_table
from gpufleet.domain.access import Role

users = typer.Typer(help="Users: people who hold tokens and belong to projects.",
                    no_args_is_help=True)
projects = typer.Typer(help="Projects: the unit of ownership, quota and billing.",
                       no_args_is_help=True)

ProjectName = Annotated[str, typer.Argument(help="The project's name.")]


@users.command("create")
def create_user(
    name: Annotated[str, typer.Argument(help="Login-style name, e.g. alice.")],
    role: Annotated[Role, typer.Option("--role", help="What the user may do.")],
    email: Annotated[str | None, typer.Option("--email")] = None,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a user (give them a token with `gpufleet token create --user`)."""
    with connect() as api:
        user = api.post(api_path("users"), body(name=name, role=role, email=email,
                                                display_name=display_name))
    emit_done(user, as_json, f"created user {user['name']} (role {user['role']})")


@users.command("ls")
def list_users(limit: Limit = None, all_pages: AllPages = False,
               as_json: JsonFlag = False) -> None:
    """List users by name, with their projects."""
    show_listing(api_path("users"), query(limit=limit), all_pages=all_pages, as_json=as_json,
                 what="users", render=lambda us: table(
                     ["name", "role", "display name", "email", "projects", "created"],
                     [[u["name"], u["role"], u["display_name"], u["email"],
                       ", ".join(u["projects"]), when(u["created_at"])] for u in us]))


@projects.command("create")
def create_project(
    name: ProjectName,
    organisation: Annotated[str, typer.Option("--organisation", help="Owning organisation.")],
    department: Annotated[str | None, typer.Option("--department")] = None,
    cost_centre: Annotated[str | None, typer.Option(
        "--cost-centre", help="Where chargeback is booked.")] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a project."""
    with connect() as api:
        project = api.post(api_path("projects"), body(
            name=name, organisation=organisation, department=department,
            cost_centre=cost_centre, description=description))
    emit_done(project, as_json, f"created project {project['name']} "
                                f"(organisation {project['organisation']})")


@projects.command("ls")
def list_projects(limit: Limit = None, all_pages: AllPages = False,
                  as_json: JsonFlag = False) -> None:
    """List projects by name (members see their own only)."""
    show_listing(api_path("projects"), query(limit=limit), all_pages=all_pages,
                 as_json=as_json, what="projects", render=lambda ps: table(
                     ["name", "organisation", "department", "cost centre", "members",
                      "created"],
                     [[p["name"], p["organisation"], p["department"], p["cost_centre"],
                       len(p["members"]), when(p["created_at"])] for p in ps]))


def _project_fields(project: dict[str, Any]) -> Any:
    return fields({
        "name": project["name"], "organisation": project["organisation"],
        "department": project["department"], "cost centre": project["cost_centre"],
        "description": project["description"], "created": when(project["created_at"]),
        "members": ", ".join(project["members"]),
    }, title=f"project {project['name']}")


@projects.command("show")
def show_project(name: ProjectName, as_json: JsonFlag = False) -> None:
    """One project and its members."""
    with connect() as api:
        project = api.get(api_path("projects", name))
    emit(project, as_json, _project_fields)


@projects.command("add-member")
def add_member(project: ProjectName,
               user: Annotated[str, typer.Argument(help="The user to add.")]) -> None:
    """Add a user to a project."""
    with connect() as api:
        updated = api.post(api_path("projects", project, "members"), body(user=user))
    done(f"added {user} to project {updated['name']} "
         f"(members: {', '.join(updated['members'])})")


# --- project quota … and project auto-approve …: how much a project may hold, and when no
# operator needs to approve --------------------------------------------------------------
quota = typer.Typer(help="Quotas: the most a project may hold at once, per flavour.",
                    no_args_is_help=True)
auto_approve = typer.Typer(help="Auto-approval: requests small and short enough need no "
                                "operator.", no_args_is_help=True)
projects.add_typer(quota, name="quota")
projects.add_typer(auto_approve, name="auto-approve")

Flavour = Annotated[str, typer.Argument(
    help="H100-80GB (whole GPUs), H100-80GB/1g.10gb (a MIG profile) or L40S-48GB/shared.")]


def _policy_text(policy: dict[str, Any] | None) -> str:
    if policy is None:
        return "auto-approve: off (an operator approves every request)"
    return (f"auto-approve: requests of at most {policy['max_gpus']:g} GPUs and "
            f"{policy['max_hours']:g} hours")


def _quotas_view(data: dict[str, Any]) -> Any:
    return Group(quota_table(data["quotas"], title=f"quotas of project {data['project']}"),
                 "", Text(_policy_text(data["auto_approve"])))


@quota.command("set")
def set_quota(project: ProjectName, flavour: Flavour,
              limit: Annotated[float, typer.Argument(
                  help="Units: GPUs, MIG instances, or GPUs' worth of shared fractions.")],
              as_json: JsonFlag = False) -> None:
    """Set (or change) a project's quota of one flavour."""
    with connect() as api:
        data = api.put(api_path("projects", project, "quotas"),
                       body(flavour=flavour, limit=limit))
    emit_done(data, as_json, f"project {data['project']} may hold {limit:g} of {flavour}")


@quota.command("show")
def show_quota(project: ProjectName, as_json: JsonFlag = False) -> None:
    """A project's quotas, what it uses and has pooled of each, and its auto-approve policy."""
    with connect() as api:
        data = api.get(api_path("projects", project, "quotas"))
    emit(data, as_json, _quotas_view)


@quota.command("rm")
def remove_quota(project: ProjectName, flavour: Flavour, as_json: JsonFlag = False) -> None:
    """Remove a quota: requests of that flavour then always need an operator."""
    with connect() as api:
        data = api.delete(api_path("projects", project, "quotas", flavour))
    emit_done(data, as_json, f"removed the {flavour} quota of project {data['project']}")


@auto_approve.command("set")
def set_auto_approve(
    project: ProjectName,
    max_gpus: Annotated[float, typer.Option(
        "--max-gpus", help="Largest request, in GPUs (a MIG instance or fraction counts as "
                           "its share).")],
    max_hours: Annotated[float, typer.Option("--max-hours", help="Longest request.")],
    as_json: JsonFlag = False,
) -> None:
    """Approve a project's requests within these limits (and its quotas) without a person."""
    with connect() as api:
        data = api.put(api_path("projects", project, "auto-approve"),
                       body(max_gpus=max_gpus, max_hours=max_hours))
    emit_done(data, as_json, f"project {data['project']}: {_policy_text(data['auto_approve'])}")


@auto_approve.command("rm")
def remove_auto_approve(project: ProjectName, as_json: JsonFlag = False) -> None:
    """Stop auto-approving a project's requests."""
    with connect() as api:
        data = api.delete(api_path("projects", project, "auto-approve"))
    emit_done(data, as_json, f"project {data['project']}: {_policy_text(data['auto_approve'])}")
