"""Every gpufleet setting, declared once.

Each field's description is its documentation: `gpufleet config show` prints the effective
value of each with where it came from, `gpufleet config docs` writes docs/settings.md, and a
test fails when a field has no description or the docs are stale.

Where a value comes from, highest priority first:
  1. command-line flags (passed to `load_settings(overrides=...)`),
  2. `GPUFLEET_<NAME>` environment variables,
  3. the TOML file named by `GPUFLEET_CONFIG_FILE` (default `<config dir>/config.toml`),
  4. the login file written by `gpufleet login` (server URL and token only),
  5. the defaults below.
Nothing is read at import time: settings are loaded by the entry points and passed down.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gpufleet.config_files import (
    DEFAULT_SERVER_URL,
    ENV_PREFIX,
    SettingsFileError,
    config_dir,
    config_file_path,
    config_file_to_read,
    default_data_dir,
    login_file_path,
    read_login_file,
    store_login,
    stored_login_url,
)
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.health_rules import APPLICATION_XIDS
from gpufleet.domain.operations.mig_health import check_instance_xids

# Where the files are and how a login is stored live in `gpufleet.config_files` (standard
# library only, for the CLI's start-up); they are named here too for the server's callers.
__all__ = [
    "ENV_PREFIX", "Settings", "SettingsFileError", "config_dir", "config_file_path",
    "default_data_dir", "describe_settings", "load_settings", "login_file_path",
    "settings_markdown", "store_login", "stored_login_url",
]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid",
                                      validate_default=True)

    # --- server -------------------------------------------------------------------------
    data_dir: Path = Field(default_factory=default_data_dir, description=(
        "Directory for the server's files: the SQLite state store, the admin token, the "
        "embedded telemetry store."))
    database_url: str | None = Field(default=None, description=(
        "State store URL. Empty: SQLite in the data dir. Production: "
        "`postgresql+psycopg://user@host:5432/gpufleet`."))
    host: str = Field(default="127.0.0.1", description="Address `gpufleet serve` listens on.")
    port: int = Field(default=8080, ge=1, le=65535,
                      description="TCP port `gpufleet serve` listens on.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Server log level.")
    sqlite_synchronous: Literal["FULL", "NORMAL"] = Field(default="FULL", description=(
        "SQLite `synchronous` pragma. FULL: an acknowledged write survives power loss; "
        "NORMAL: survives a crash of the process, not of the machine."))
    database_pool_size: int = Field(default=40, ge=1, le=1000, description=(
        "Database connections each server process keeps open. The API serves up to 40 "
        "requests at once; with fewer connections they queue for one, and connections "
        "beyond the pool are opened and closed for each use, which costs PostgreSQL a "
        "process each time. Lower it when many replicas share one PostgreSQL."))
    max_request_body_bytes: int = Field(default=1_048_576, ge=1024, description=(
        "Largest request body the API accepts; larger ones get 413."))
    page_size_default: int = Field(default=100, ge=1, le=10_000,
                                   description="Items per page when a listing names no limit.")
    page_size_max: int = Field(default=1000, ge=1, le=100_000,
                               description="Largest page a listing may ask for.")

    # --- fleet and agents ----------------------------------------------------------------
    heartbeat_interval_s: float = Field(default=30.0, gt=0, le=3600, description=(
        "How often agents heartbeat; told to every agent in its registration reply."))
    unreachable_after_missed_heartbeats: int = Field(default=3, ge=1, le=1000, description=(
        "A node silent for this many heartbeat intervals becomes `unreachable`."))
    join_token_ttl_s: int = Field(default=86_400, ge=60, description=(
        "How long a join token stays valid when its creator names no expiry."))
    token_cache_s: float = Field(default=5.0, ge=0, le=300, description=(
        "How long a server process trusts a token it has found valid without reading it "
        "again (agents authenticate every upload). A revocation made through another "
        "server process takes effect here within this time; 0 reads every time."))
    api_token_ttl_days: int = Field(default=90, ge=1, description=(
        "Lifetime of API tokens (including the bootstrap admin token) when none is named."))

    # --- lifecycle -----------------------------------------------------------------------
    placement_policy: Literal["default", "binpack", "spread"] = Field(
        default="default", description=(
            "How placement chooses units: `default` (fragmentation-aware), `binpack` or "
            "`spread` (docs/placement.md)."))
    max_request_days: float = Field(default=90.0, gt=0, le=3660, description=(
        "Longest a GPU request may last, from its start to its end."))
    default_request_days: float = Field(default=7.0, gt=0, le=3660, description=(
        "How long a GPU request that names no end (`--days`, `--hours`, `--until`) is held "
        "once active; never more than `max_request_days`."))
    lifecycle_interval_s: float = Field(default=15.0, gt=0, le=3600, description=(
        "How often the server expires ended allocations and grants approved requests that "
        "wait for capacity or their start time."))
    placement_cache_max_age_s: float = Field(default=300.0, gt=0, le=86400, description=(
        "Longest the server decides placements on its in-memory copy of the fleet before "
        "re-reading all of it. Changes made through this server are followed at once; this "
        "bounds how long one made by another server process can go unseen (the database "
        "still refuses a unit held twice). Telemetry ingest keeps each node's GPUs in memory "
        "as long, and reads them again at once when an upload names one it lacks."))

    # --- telemetry -----------------------------------------------------------------------
    telemetry_url: str | None = Field(default=None, description=(
        "Empty: telemetry is kept in the embedded DuckDB store in the data dir (one server "
        "process). Set: a Prometheus-compatible engine receives it by remote-write at "
        "`<url>/api/v1/write` and answers PromQL at `<url>/api/v1/query_range`, e.g. "
        "VictoriaMetrics `http://vm:8428`, or a cluster's vminsert "
        "`http://vminsert:8480/insert/0/prometheus` (docs/telemetry-store.md)."))
    telemetry_query_url: str | None = Field(default=None, description=(
        "Where PromQL queries go when it is not `telemetry_url` (a VictoriaMetrics "
        "cluster's vmselect, `http://vmselect:8481/select/0/prometheus`)."))
    telemetry_raw_retention_days: float = Field(default=7.0, gt=0, le=3660, description=(
        "Days the embedded store keeps raw samples (once rolled up)."))
    telemetry_minute_retention_days: float = Field(default=30.0, gt=0, le=3660, description=(
        "Days the embedded store keeps 1-minute rollups."))
    telemetry_hour_retention_days: float = Field(default=400.0, gt=0, le=36600, description=(
        "Days the embedded store keeps 1-hour rollups."))
    telemetry_rollup_interval_s: float = Field(default=60.0, gt=0, le=3600, description=(
        "How often the embedded store folds closed minutes and hours into its rollups and "
        "applies retention."))
    telemetry_rollup_grace_s: float = Field(default=120.0, ge=0, le=86400, description=(
        "How long after a minute ends it is rolled up: samples that arrive later (a "
        "spool replay) still land in the raw tier, and later rollups of that minute "
        "are not redone, so this is how late a sample may be and still count in the "
        "1-minute and 1-hour tiers. On a Prometheus-compatible store: how long after a "
        "minute ends the funnel and idle lists judge it; keep it above the engine's "
        "`-search.latencyOffset` (30 s)."))
    telemetry_duckdb_threads: int | None = Field(default=None, ge=1, le=256, description=(
        "Threads DuckDB may use for telemetry queries. Empty: DuckDB's default (all "
        "cores)."))
    telemetry_max_batch_bytes: int = Field(default=8 * 1024**2, ge=1024, description=(
        "Largest telemetry batch or remote-write body the server accepts, compressed; "
        "larger ones get 413. Telemetry is exempt from `max_request_body_bytes`."))
    telemetry_max_batch_uncompressed_bytes: int = Field(
        default=64 * 1024**2, ge=1024, description=(
            "Largest a telemetry batch may be once decompressed (a small body can "
            "inflate enormously); larger ones get 413."))
    telemetry_max_sample_age_s: float = Field(default=7 * 86400.0, gt=0, description=(
        "Samples older than this are dropped and counted (`too_old`) on ingest: the raw "
        "tier would not keep them anyway."))
    telemetry_max_sample_future_s: float = Field(default=300.0, ge=0, description=(
        "Samples stamped further ahead of the server's clock than this are dropped and "
        "counted (`in_future`): a node's clock is wrong. The embedded store's replay "
        "check relies on it: raise it freely, but lower it only with the server stopped "
        "for at least the old value."))
    activity_threshold_percent: float = Field(default=5.0, ge=0, le=100, description=(
        "A minute is *active* when the unit's activity is at least this (docs/design.md, "
        "Funnel and activity); a unit below it for the whole idle window is *idle*."))
    effective_sm_active_percent: float = Field(default=50.0, ge=0, le=100, description=(
        "A minute is *effective* when the unit's `gpu.sm_active` is at least this."))
    idle_window_hours: float = Field(default=4.0, gt=0, le=24 * 90, description=(
        "How long a unit's activity must stay below the activity threshold for it to be "
        "idle, and a process's own SM activity at zero for it to be a zombie."))
    idle_held_memory_bytes: int = Field(default=1024**3, ge=0, description=(
        "An idle unit whose used memory is at least this is *idle-held*: memory held, "
        "nothing computed."))

    # --- CLI client ----------------------------------------------------------------------
    url: str = Field(default=DEFAULT_SERVER_URL, description=(
        "Server URL the CLI talks to (`gpufleet login` stores it; `GPUFLEET_URL` overrides)."))
    token: SecretStr | None = Field(default=None, description=(
        "Bearer token the CLI sends (`gpufleet login` stores it; `GPUFLEET_TOKEN` overrides)."))

    # --- operations: events (docs/operations.md, "Events") --------------------------------
    event_poll_interval_s: float = Field(default=1.0, gt=0, le=60, description=(
        "How often a reader waiting for events (a long poll, an event stream) reads the "
        "state store again without being woken. Events this server writes wake it at "
        "once; this bounds how late it sees those another server process writes."))
    event_stream_heartbeat_s: float = Field(default=15.0, gt=0, le=300, description=(
        "How often an idle event stream (`GET /api/v1/events/stream`) sends a comment, so "
        "proxies and clients know it is alive."))
    event_subscription_cache_s: float = Field(default=5.0, ge=0, le=3600, description=(
        "How long the server trusts its copy of the event subscriptions before reading "
        "them again. Its own changes are seen at once; this bounds how long one made "
        "through another server process goes unseen."))
    # --- operations: alert state (docs/operations.md, "Alert lifecycle") ----------------
    alert_evaluation_interval_s: float = Field(default=60.0, gt=0, le=3600, description=(
        "How often the server evaluates the alert rules and moves alerts through pending, "
        "firing and resolved (one replica evaluates: the others find it leading)."))
    alert_repeat_interval_s: float = Field(default=4 * 3600.0, gt=0, le=30 * 86400,
                                           description=(
        "How long a firing alert that nobody acknowledged waits before it is told again."))
    alert_flap_window_s: float = Field(default=3600.0, gt=0, le=7 * 86400, description=(
        "The window in which an alert's changes between firing and not firing are counted "
        "to detect flapping."))
    alert_flap_max_changes: int = Field(default=6, ge=2, le=1000, description=(
        "An alert that changed between firing and not firing more often than this within "
        "`alert_flap_window_s` is flapping and tells nobody until it settles (at half as "
        "many changes or fewer)."))
    alert_resolved_retention_days: float = Field(default=30.0, gt=0, le=3660, description=(
        "How long a resolved alert and its history are kept before they are deleted."))
    # --- Reclamation (docs/operations.md, "Reclamation"): the server's default policy;
    # environments and projects override it field by field (`gpufleet reclaim policy set`).
    # Its idle window is `idle_window_hours`.
    reclaim_enabled: bool = Field(default=True, description=(
        "Reclaim idle allocations by default (environment and project policies may differ)."))
    reclaim_action: Literal["release", "shrink", "notify"] = Field(
        default="notify", description=(
            "What happens to an allocation still idle when its grace period ends: "
            "`release` it, `shrink` it to its used units, or `notify` (take nothing: "
            "tell, and count it in `gpufleet reclaim report`). Safe by default: an "
            "operator chooses to take units."))
    reclaim_idle_held: Literal["reclaim", "spare"] = Field(default="reclaim", description=(
        "Whether an idle-held unit (memory held, no compute) counts as idle (`reclaim`) "
        "or as in use (`spare`)."))
    reclaim_grace_minutes: float = Field(default=60.0, ge=0, le=7 * 24 * 60, description=(
        "From the warning to the action: used again meanwhile, nothing happens."))
    reclaim_dry_run: bool = Field(default=False, description=(
        "Record what reclamation would do; warn nobody and take nothing."))
    reclaim_end_warning_lead_hours: float = Field(default=24.0, ge=0, le=30 * 24,
                                                  description=(
        "Warn an allocation's owner this long before its end (`request.ending`; 0: no "
        "warning)."))
    reclaim_interval_s: float = Field(default=60.0, gt=0, le=3600, description=(
        "How often the server's reclaim loop runs a round (one replica, leader-locked)."))
    # --- operations: the outbox sender (docs/operations.md, "The outbox") ----------------
    outbox_send_interval_s: float = Field(default=1.0, gt=0, le=3600, description=(
        "How often the server looks for outbox messages due for delivery."))
    outbox_receiver_timeout_s: float = Field(default=10.0, gt=0, le=300, description=(
        "Longest one delivery attempt may take (connect, send, answer) before it counts "
        "as failed and is retried."))
    outbox_receiver_batch: int = Field(default=50, ge=1, le=10_000, description=(
        "Messages one receiver's worker takes per round; a claimed message not settled "
        "within batch × timeout + 10 s (the process died) is sent again."))
    outbox_workers: int = Field(default=16, ge=1, le=256, description=(
        "Receivers delivered to at the same time, each by its own worker: one slow "
        "receiver holds one worker and delays no other receiver."))
    outbox_retry_base_s: float = Field(default=10.0, gt=0, le=86_400, description=(
        "Wait after a failed attempt; doubles per attempt (with jitter) up to "
        "outbox_retry_max_s, never shorter than the receiver's Retry-After."))
    outbox_retry_max_s: float = Field(default=900.0, gt=0, le=86_400, description=(
        "Longest wait between two attempts of one message (Retry-After aside)."))
    outbox_retry_after_max_s: float = Field(default=3600.0, gt=0, le=86_400, description=(
        "Longest Retry-After a receiver is obeyed for."))
    outbox_give_up_after_s: float = Field(default=172_800.0, gt=0, le=90 * 86_400,
                                          description=(
        "Age at which a message still failing is abandoned (kept, with its delivery log); "
        "default two days, so a receiver down for an hour, or a weekend night, loses none."))
    # --- operations: GPU health and quarantine (docs/operations.md) ----------------------
    health_interval_s: float = Field(default=60.0, gt=0, le=3600, description=(
        "How often the server applies the GPU health rules to the telemetry and the "
        "inventory (one replica evaluates; docs/operations.md, GPU health and quarantine)."))
    health_window_s: float = Field(default=600.0, ge=60, le=86400, description=(
        "The window the health rules read: counter increases (XIDs, ECC, NVLink errors) "
        "and the share of throttled samples are taken over the last this many seconds."))
    health_xid_quarantine: list[int] = Field(
        default=[48, 64, 74, 79, 95, 119, 120], description=(
            "XID codes that quarantine a GPU when they occur (JSON list). Application XIDs "
            "(13, 31, 43, 45) are refused: they never mark a GPU."))
    health_xid_suspect: list[int] = Field(default=[63, 94], description=(
        "XID codes that mark a GPU suspect when they occur (JSON list)."))
    health_mig_xid_quarantine: list[int] = Field(default=[94], description=(
        "XID codes that quarantine only the MIG instance the XID event names (JSON list): "
        "errors NVIDIA confines to one GPU instance. GPU-wide codes (48, 63, 64, 74, 79, "
        "95, 119, 120) and application XIDs are refused."))
    health_mig_xid_suspect: list[int] = Field(default=[], description=(
        "XID codes that mark only the MIG instance the XID event names suspect (JSON "
        "list); the same codes are refused as for health_mig_xid_quarantine."))
    health_ecc_uncorrected_min_increase: float = Field(default=1, gt=0, description=(
        "Quarantine a GPU whose uncorrectable ECC errors rose by at least this within the "
        "window."))
    health_nvlink_suspect_per_s: float = Field(default=0.01, gt=0, description=(
        "Mark a GPU suspect when its NVLink CRC and replay errors, all links together, "
        "run at this rate or more over the window."))
    health_nvlink_quarantine_per_s: float | None = Field(default=None, gt=0, description=(
        "Quarantine at this NVLink error rate or more. Empty: NVLink errors only mark "
        "a GPU suspect."))
    health_slowdown_min_share: float = Field(default=0.9, gt=0, le=1, description=(
        "Mark a GPU suspect when a thermal (or power) slowdown reason is set in at least "
        "this share of its samples over the window."))
    health_slowdown_min_span_s: float = Field(default=600.0, ge=0, description=(
        "The samples must span at least this long for a slowdown to count as sustained."))
    health_missing_quarantine_s: float | None = Field(default=1800.0, ge=0, description=(
        "Quarantine a GPU missing from its node's inventory for this long (it is suspect "
        "from the first registration that lacks it). Empty: it stays suspect."))
    health_suspect_hold_s: float = Field(default=1800.0, ge=0, description=(
        "A GPU a health rule marked suspect returns to healthy by itself once no rule "
        "finds anything against it, and not before it has been suspect this long. "
        "Quarantine is only ever cleared by an operator."))
    # --- chat-ops (docs/chatops.md) ------------------------------------------------------
    slack_signing_secret: SecretStr | None = Field(default=None, description=(
        "The Slack app's signing secret: every request to the Slack endpoints is verified "
        "with it before anything is read. Empty: the Slack endpoints answer 404."))
    slack_bot_token: SecretStr | None = Field(default=None, description=(
        "The Slack app's bot token (`xoxb-…`), for posting approval requests and thread "
        "updates and reading a user's e-mail to link them. Empty: nothing is posted."))
    slack_api_url: str = Field(default="https://slack.com/api/", description=(
        "Base URL of Slack's Web API (a test or an air-gapped proxy points it elsewhere)."))
    slack_approvals_channel: str | None = Field(default=None, max_length=80, description=(
        "Slack channel ID where requests that need an operator are posted with Approve / "
        "Reject buttons. Empty: approvals are not posted."))
    mattermost_command_token: SecretStr | None = Field(default=None, description=(
        "The token Mattermost sends with its `/gpu` slash command (Mattermost signs "
        "nothing; the token is compared in constant time). Empty: the Mattermost endpoint "
        "answers 404."))
    # --- billing showback on /metrics (docs/billing.md, "Showback in Prometheus") ---------
    billing_showback_refresh_s: float = Field(default=900.0, ge=0, description=(
        "How often the upkeep recomputes this month's statement for the `gpufleet_cost_*` "
        "series on /metrics when no fresher one was asked for (a month at 100,000 "
        "bindings costs ~10 s of CPU). 0: no cost series, nothing computed for them."))

    @field_validator("health_xid_quarantine", "health_xid_suspect")
    @classmethod
    def _no_application_xids(cls, codes: list[int]) -> list[int]:
        wrong = sorted(set(codes) & APPLICATION_XIDS)
        if wrong:
            raise ValueError(f"XID {', '.join(map(str, wrong))} is an application error "
                             "(13, 31, 43, 45 never mark a GPU)")
        return codes

    @field_validator("health_mig_xid_quarantine", "health_mig_xid_suspect")
    @classmethod
    def _instance_xids_only(cls, codes: list[int], info: ValidationInfo) -> list[int]:
        try:
            check_instance_xids(frozenset(codes), info.field_name)
        except InvalidInput as exc:
            raise ValueError(exc.message) from None
        return codes

    # Values the program itself chose, by name, with who chose them ("command line" for a
    # flag; the demo for its own defaults): `describe_settings` names them as the source.
    _chosen_by_program: dict[str, str] = PrivateAttr(default_factory=dict)

    def with_program_value(self, name: str, value: Any, chosen_by: str) -> Settings:
        """A copy with `name` set to `value` by the program (`describe_settings` says so)."""
        copy = self.model_copy(update={name: value})
        copy._chosen_by_program = {**self._chosen_by_program, name: chosen_by}
        return copy

    @model_validator(mode="after")
    def _samples_no_older_than_raw_tier(self) -> Settings:
        # Upload keys (replay detection) are kept as long as raw samples; a sample older
        # than that could be a replay no longer recognised, so it must be refused instead.
        if self.telemetry_max_sample_age_s > self.telemetry_raw_retention_days * 86400:
            raise ValueError(
                f"telemetry_max_sample_age_s ({self.telemetry_max_sample_age_s:g}) exceeds "
                f"the raw tier's retention (telemetry_raw_retention_days = "
                f"{self.telemetry_raw_retention_days:g}, "
                f"{self.telemetry_raw_retention_days * 86400:g} s)")
        return self

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'gpufleet.db'}"

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                   dotenv_settings, file_secret_settings):
        return tuple(_sources(settings_cls, init_settings.init_kwargs))


class LoginFileSource(PydanticBaseSettingsSource):
    """The server URL and token stored by `gpufleet login` (JSON, mode 600)."""

    def get_field_value(self, field, field_name):  # pragma: no cover - unused by __call__
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return read_login_file()


def _sources(settings_cls: type[BaseSettings], init_kwargs: dict[str, Any]) -> list:
    toml_path = config_file_to_read()
    return [
        InitSettingsSource(settings_cls, init_kwargs=init_kwargs),
        EnvSettingsSource(settings_cls, env_prefix=ENV_PREFIX),
        TomlConfigSettingsSource(settings_cls, toml_file=toml_path),
        LoginFileSource(settings_cls),
    ]


def load_settings(**overrides: Any) -> Settings:
    """Settings from flags (`overrides`, None values ignored), env, TOML, login file, defaults."""
    given = {k: v for k, v in overrides.items() if v is not None}
    settings = Settings(**given)
    settings._chosen_by_program = dict.fromkeys(given, "command line")
    return settings


@dataclass(frozen=True)
class SettingView:
    name: str
    value: Any
    source: str
    description: str


def describe_settings(settings: Settings | None = None) -> list[SettingView]:
    """The value of every setting of `settings` (None: this process's, loaded now) and the
    source it came from; secrets and the passwords in URLs are masked.

    The sources are read again to tell where each value came from, so a server describes
    its settings once, when it starts (`Gpufleet.server_settings`)."""
    settings = settings if settings is not None else load_settings()
    sources = _sources(Settings, {})
    labels = [f"environment ({ENV_PREFIX}*)", f"file {config_file_path()}",
              f"login {login_file_path()}"]
    provided = [src() for src in sources[1:]]
    views = []
    for name, field in Settings.model_fields.items():
        source = settings._chosen_by_program.get(name) or next(
            (label for label, values in zip(labels, provided, strict=True) if name in values),
            "set by the program" if name in settings.model_fields_set else "default")
        views.append(SettingView(name, _masked(getattr(settings, name)), source,
                                 field.description or ""))
    return views


def _masked(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return "********" if value.get_secret_value() else None
    if isinstance(value, str) and "://" in value:
        parts = urlsplit(value)
        if parts.password:
            host = parts.netloc.rsplit("@", 1)[1]
            return urlunsplit(parts._replace(netloc=f"{parts.username}:********@{host}"))
    return value


def settings_markdown() -> str:
    """docs/settings.md, generated from the declarations above."""
    lines = [
        "# Settings",
        "",
        "Generated by `gpufleet config docs` from `src/gpufleet/settings.py`; do not edit.",
        "",
        "Each setting is read from, highest priority first: command-line flags, the",
        f"`{ENV_PREFIX}<NAME>` environment variable, the TOML file named by",
        f"`{ENV_PREFIX}CONFIG_FILE` (default `~/.config/gpufleet/config.toml`), the login",
        "file written by `gpufleet login` (url and token only), and the default.",
        "",
        "`gpufleet config show` prints the values this CLI process would use (what",
        "`gpufleet serve` would start with here) and where each came from;",
        "`gpufleet config show --server` (admins; `GET /api/v1/server/settings`) prints",
        "those of the running server, as it started. Secrets and passwords in URLs are",
        "masked in both.",
        "",
        "| setting | environment variable | default | description |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "`~/.local/share/gpufleet`" if name == "data_dir" else "(computed)"
        elif field.default is None:
            default = "(empty)"
        else:
            default = f"`{field.default}`"
        env = f"`{ENV_PREFIX}{name.upper()}`"
        lines.append(f"| `{name}` | {env} | {default} | {field.description} |")
    lines.append("")
    return "\n".join(lines)
