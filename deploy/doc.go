// Package deploy holds no code: its tests check the deployment files of
// this directory (the Kubernetes manifests and their kustomization, the
// compose stack, the Dockerfile, the Prometheus alert rules and the Grafana
// dashboard) against the roomflow binary's commands, flags and metrics.
// It is a module of its own, so the libraries that read those files
// (kustomize, k8s.io, compose-go, Prometheus, the Prometheus operator) stay
// out of roomflow's go.mod.
package deploy
