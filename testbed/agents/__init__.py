"""The hami-place agent on the test bed: local agent processes (one, or a set behind the chart's
webhook registration), ServiceAccount tokens for its REST API, and its pod template run with podman."""
