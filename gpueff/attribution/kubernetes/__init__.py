"""Kubernetes pod attribution: which pod holds each GPU (kubelet pod-resources API) and which pod
each GPU process belongs to (/proc/<pid>/cgroup, with hostPID)."""
