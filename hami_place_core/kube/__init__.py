"""The one Kubernetes layer the CLI and the agent share.

``config`` turns a kubeconfig (or a pod's service account) into :class:`config.Credentials`;
``auth`` keeps the Authorization header current (token files, exec plugins); ``errors`` maps an
HTTP status and ``Status`` body to typed exceptions; ``watch`` decodes a watch stream's lines;
``wire`` has the request pieces both transports share. The transports themselves are thin
adapters next to their users: urllib3 in ``kubectl_hami_place.kube`` (sync, the CLI) and aiohttp
in ``agent.kube`` (async). Nothing here imports a transport, so the core stays importable by both.
"""
