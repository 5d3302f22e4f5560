"""The tools the development machine builds or installs, shared by the test bed and the release
tools: the pinned Go tools (``build``, ``tools/``), Debian packages (``debian_packages``) and the
flags podman needs here (``podman_flags``). It imports no project package, so both may use it."""
