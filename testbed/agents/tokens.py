"""Bearer tokens for ServiceAccounts on the test bed, for calls to the agent's REST API."""

from __future__ import annotations

from typing import Any

_ADMIN: dict[str, str] = {}  # API server URL -> its admin token: one ServiceAccount per test bed


def sa_token(api: Any, ns: str, sa: str) -> str:
    """A one-hour token of ServiceAccount ns/sa, creating the account if needed."""
    from kubernetes import client
    from kubernetes.client import ApiException

    core: Any = client.CoreV1Api(api)  # untyped: the client takes plain dicts
    try:
        core.create_namespaced_service_account(ns, {"metadata": {"name": sa}})
    except ApiException as e:
        if e.status != 409:
            raise
    return str(core.create_namespaced_service_account_token(sa, ns, {"spec": {"expirationSeconds": 3600}}).status.token)


def admin_token(api: Any) -> str:
    """A bearer token with cluster-admin, for the agent's REST API."""
    from kubernetes import client
    from kubernetes.client import ApiException

    server = str(api.configuration.host)
    if server not in _ADMIN:
        rbac: Any = client.RbacAuthorizationV1Api(api)
        try:
            rbac.create_cluster_role_binding(
                {
                    "metadata": {"name": "hami-place-test-reader"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}],
                }
            )
        except ApiException as e:
            if e.status != 409:
                raise
        _ADMIN[server] = sa_token(api, "default", "reader")
    return _ADMIN[server]


def user(name: str) -> dict[str, str]:
    """An RBAC subject for a test user (the test bed's client certificates, tmp_kubeconfig)."""
    return {"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def bind_role(api: Any, namespace: str, name: str, subjects: list[dict[str, str]], rules: list[dict[str, Any]]) -> None:
    """A Role with `rules` in `namespace`, bound to `subjects` (both named `name`; deleted with the namespace)."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api)
    # The client takes dicts as well as its models; its stubs say models only.
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})  # type: ignore[arg-type]
    binding: dict[str, Any] = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": subjects,
    }
    rbac.create_namespaced_role_binding(namespace, binding)  # type: ignore[arg-type]


def grant_cluster(api: Any, name: str, subjects: list[dict[str, str]], rules: list[dict[str, Any]]) -> Any:
    """A ClusterRole with `rules` and a ClusterRoleBinding to `subjects`, both named `name`.
    Returns the function that removes both."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})  # type: ignore[arg-type]
    binding: dict[str, Any] = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    }
    rbac.create_cluster_role_binding(binding)  # type: ignore[arg-type]

    def remove() -> None:
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete(name)
            except client.ApiException as e:
                if e.status != 404:
                    raise

    return remove


def grant_node_read(api: Any, name: str, subjects: list[dict[str, str]], nodes: list[str] | None = None) -> Any:
    """Let `subjects` get the named nodes (all nodes: get and list); a placement's author needs it
    (the webhook answers Forbidden before anything about a node). Returns the removal."""
    rule: dict[str, Any] = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    if nodes is None:
        rule["verbs"] = ["get", "list"]
    else:
        rule["resourceNames"] = nodes
    return grant_cluster(api, name, subjects, [rule])
