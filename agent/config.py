"""Agent configuration: environment variables with typed defaults, validated at start-up.

Every setting is listed here with its variable name and default; nothing else reads os.environ.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field, fields

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ConfigError(ValueError):
    """A setting has a value the agent cannot use; the message names the variable."""


def _env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def _env_float(name: str, default: float, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (true/false)")


def _env_list(name: str, default: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in os.environ.get(name, default).split(",") if x.strip())


def _labels(selector: str) -> dict[str, str]:
    return dict((k.strip(), v.strip()) for k, v in (t.split("=", 1) for t in selector.split(",") if t.strip()))


@dataclass(frozen=True)
class Settings:
    host: str = "0.0.0.0"  # noqa: S104 - a pod must listen on its pod IP
    port: int = 8083
    # The read-only listener for the API server's service proxy (the CLI's progress stream);
    # 0 (the default) turns it off. See docs/security.md: who may reach it is decided by RBAC on
    # services/proxy, and the chart's NetworkPolicy keeps everyone else off this port.
    proxy_port: int = 0
    # A plain HTTP listener for Prometheus (and the probes): /metrics, /healthz, /readyz only; 0: off.
    metrics_port: int = 0
    # The node label whose value names a node's pool in the per-pool gauges ("" : one pool, "all").
    metrics_pool_label: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # Webhook callers must present a client certificate from this CA (agent/tls.py); empty: off.
    webhook_client_ca_file: str = ""
    webhook_client_names: tuple[str, ...] = ()  # accepted certificate CNs; empty: any from the CA
    # How often the TLS files are checked for a renewal (agent/tls.py); 0: never (restart to renew).
    cert_reload_seconds: float = 10.0
    kubeconfig: str = ""  # empty: in-cluster service account
    token_file: str = ""  # optional: read the API token from this file (rotating projected tokens)
    agent_id: str = field(default_factory=socket.gethostname)
    namespace: str = "kube-system"  # where the agent runs (its Lease and its own Events)
    claim_lease_seconds: float = 30.0
    controller_interval_seconds: float = 1.0
    cache_sync_timeout_seconds: float = 60.0
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    # Only act on placements in namespaces with these labels ("k=v,k2=v2"; empty: all namespaces).
    namespace_selector: str = ""
    leader_election: bool = False
    lease_name: str = "hami-place-agent"
    lease_duration_seconds: int = 15
    validation_enabled: bool = True  # a test switch for issue-6 style checks; never off in production
    max_moves_in_flight: int = 4
    max_moves_per_node: int = 2
    max_unavailable_per_workload: int = 1
    eviction_qps: float = 1.0
    eviction_burst: int = 3
    eviction_backoff_max_seconds: int = 30
    eviction_timeout_seconds: int = 300  # when a placement has no spec.timeouts (the CRD defaults it)
    replacement_timeout_seconds: int = 600
    # The autopilot (agent/autopilot.py): watch HamiDefragPolicies and act on them (leader only).
    # Off: the agent neither watches nor needs RBAC for policies (the chart's autopilot.enabled).
    autopilot_enabled: bool = False
    autopilot_interval_seconds: float = 15.0  # between evaluations of each policy (and on changes)
    # Only policies with these labels ("k=v,k2=v2"; empty: every policy): one agent deployment per
    # set of policies, e.g. a canary agent that evaluates only its own.
    autopilot_policy_selector: str = ""
    # The key autopilot intents are signed with (agent/intents.py), shared by every replica; empty:
    # a key of this process's own (forged intents are still refused; see the module).
    intent_key_file: str = ""
    log_level: str = "INFO"

    @classmethod
    def from_env(cls) -> Settings:
        s = cls(
            host=_env_str("HAMI_PLACE_HOST", cls.host),
            port=_env_int("HAMI_PLACE_PORT", cls.port, 1),
            proxy_port=_env_int("HAMI_PLACE_PROXY_PORT", cls.proxy_port, 0),
            metrics_port=_env_int("HAMI_PLACE_METRICS_PORT", cls.metrics_port, 0),
            metrics_pool_label=_env_str("HAMI_PLACE_METRICS_POOL_LABEL", ""),
            tls_cert_file=_env_str("HAMI_PLACE_TLS_CERT_FILE", ""),
            tls_key_file=_env_str("HAMI_PLACE_TLS_KEY_FILE", ""),
            webhook_client_ca_file=_env_str("HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE", ""),
            webhook_client_names=_env_list("HAMI_PLACE_WEBHOOK_CLIENT_NAMES", ""),
            cert_reload_seconds=_env_float("HAMI_PLACE_CERT_RELOAD_SECONDS", cls.cert_reload_seconds, 0.0),
            kubeconfig=_env_str("HAMI_PLACE_KUBECONFIG", ""),
            token_file=_env_str("HAMI_PLACE_TOKEN_FILE", ""),
            agent_id=_env_str("HAMI_PLACE_AGENT_ID", "") or socket.gethostname(),
            namespace=_env_str("HAMI_PLACE_NAMESPACE", cls.namespace),
            claim_lease_seconds=_env_float("HAMI_PLACE_CLAIM_LEASE_SECONDS", cls.claim_lease_seconds, 1),
            controller_interval_seconds=_env_float("HAMI_PLACE_CONTROLLER_INTERVAL_SECONDS", 1.0, 0.05),
            cache_sync_timeout_seconds=_env_float("HAMI_PLACE_CACHE_SYNC_TIMEOUT_SECONDS", 60.0, 1),
            excluded_namespaces=_env_list("HAMI_PLACE_EXCLUDED_NAMESPACES", "kube-system"),
            namespace_selector=_env_str("HAMI_PLACE_NAMESPACE_SELECTOR", ""),
            leader_election=_env_bool("HAMI_PLACE_LEADER_ELECTION", False),
            lease_name=_env_str("HAMI_PLACE_LEASE_NAME", cls.lease_name),
            lease_duration_seconds=_env_int("HAMI_PLACE_LEASE_DURATION_SECONDS", 15, 2),
            validation_enabled=_env_bool("HAMI_PLACE_VALIDATION_ENABLED", True),
            max_moves_in_flight=_env_int("HAMI_PLACE_MAX_MOVES_IN_FLIGHT", 4, 1),
            max_moves_per_node=_env_int("HAMI_PLACE_MAX_MOVES_PER_NODE", 2, 1),
            max_unavailable_per_workload=_env_int("HAMI_PLACE_MAX_UNAVAILABLE_PER_WORKLOAD", 1, 1),
            eviction_qps=_env_float("HAMI_PLACE_EVICTION_QPS", 1.0, 0.01),
            eviction_burst=_env_int("HAMI_PLACE_EVICTION_BURST", 3, 1),
            eviction_backoff_max_seconds=_env_int("HAMI_PLACE_EVICTION_BACKOFF_MAX_SECONDS", 30, 1),
            eviction_timeout_seconds=_env_int("HAMI_PLACE_EVICTION_TIMEOUT_SECONDS", 300, 1),
            replacement_timeout_seconds=_env_int("HAMI_PLACE_REPLACEMENT_TIMEOUT_SECONDS", 600, 1),
            autopilot_enabled=_env_bool("HAMI_PLACE_AUTOPILOT_ENABLED", False),
            autopilot_interval_seconds=_env_float("HAMI_PLACE_AUTOPILOT_INTERVAL_SECONDS", 15.0, 0.2),
            autopilot_policy_selector=_env_str("HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR", ""),
            intent_key_file=_env_str("HAMI_PLACE_INTENT_KEY_FILE", ""),
            log_level=_env_str("HAMI_PLACE_LOG_LEVEL", "INFO").upper(),
        )
        if bool(s.tls_cert_file) != bool(s.tls_key_file):
            raise ConfigError("HAMI_PLACE_TLS_CERT_FILE and HAMI_PLACE_TLS_KEY_FILE must be set together")
        if s.webhook_client_ca_file and not s.tls_cert_file:
            raise ConfigError("HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE needs TLS (HAMI_PLACE_TLS_CERT_FILE and _KEY_FILE)")
        if s.webhook_client_names and not s.webhook_client_ca_file:
            raise ConfigError("HAMI_PLACE_WEBHOOK_CLIENT_NAMES needs HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE")
        for var, value in (
            ("HAMI_PLACE_NAMESPACE_SELECTOR", s.namespace_selector),
            ("HAMI_PLACE_AUTOPILOT_POLICY_SELECTOR", s.autopilot_policy_selector),
        ):
            for term in (t for t in value.split(",") if t.strip()):
                if term.count("=") != 1 or not all(x.strip() for x in term.split("=")):
                    raise ConfigError(f"{var} term {term!r} must be key=value")
        if not _DNS_SUBDOMAIN.match(s.lease_name):
            raise ConfigError(f"HAMI_PLACE_LEASE_NAME={s.lease_name!r} must be a lowercase RFC 1123 subdomain")
        if s.log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"HAMI_PLACE_LOG_LEVEL={s.log_level!r} must be DEBUG, INFO, WARNING or ERROR")
        if s.proxy_port and s.proxy_port == s.port:
            raise ConfigError(f"HAMI_PLACE_PROXY_PORT={s.proxy_port} must differ from HAMI_PLACE_PORT (or be 0: off)")
        if s.metrics_port and s.metrics_port in (s.port, s.proxy_port):
            raise ConfigError(
                f"HAMI_PLACE_METRICS_PORT={s.metrics_port} must differ from HAMI_PLACE_PORT and HAMI_PLACE_PROXY_PORT "
                "(or be 0: off)"
            )
        return s

    def namespace_labels(self) -> dict[str, str]:
        return _labels(self.namespace_selector)

    def policy_labels(self) -> dict[str, str]:
        return _labels(self.autopilot_policy_selector)

    def describe(self) -> dict[str, object]:
        """The effective configuration, logged at start-up (no secrets are held here)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
