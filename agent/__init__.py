"""The in-cluster agent: admission webhooks, watch cache, REST API and evictor (Sanic)."""
