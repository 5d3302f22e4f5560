"""The test harness: what the tests, the benchmarks and the demo share, by purpose.

- ``controlplane``: the test bed itself (etcd, kube-apiserver, the schedulers, kwok) as local
  processes, its PKI, the CRDs and the chart installed on it, waiting on it;
- ``hami``: HAMi's scheduler run for real, its labelled stand-ins, the model of where it places a
  pod (``simulate``) and the differential Fit test against it;
- ``data``: the objects put on a test bed: fake GPU nodes, workloads, placements, the openb trace
  replay and seeded hostile annotations;
- ``agents``: the hami-place agent run as local processes (one or a set behind the chart's
  webhook registration), and its pod template run with podman;
- ``reference``: slow or exact implementations the product's algorithms are compared with;
- ``demo`` (``make demo``), ``chromium`` (renders ``plan --report`` in tests) and ``__main__``
  (``python -m testbed build|up|down|env|status``).

What the release tools share with it (the pinned Go tools, Debian packages, podman's flags) is in
the ``toolchain`` package, which imports no project package.
"""
