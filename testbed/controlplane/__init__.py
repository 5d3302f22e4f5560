"""The test bed itself: a real control plane (etcd, kube-apiserver, controller-manager, the
schedulers) and kwok as local processes, its PKI, the CRDs and the chart on it, waiting on it."""
