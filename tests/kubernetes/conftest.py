"""Fixtures of the Kubernetes tests: one real control plane per session, a namespace per test."""

from support.kube_cluster import kube_cluster, kube_namespace

__all__ = ["kube_cluster", "kube_namespace"]
