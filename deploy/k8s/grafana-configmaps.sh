#!/usr/bin/env sh
# Create (or update) Grafana's provisioning and dashboards as ConfigMaps from deploy/grafana,
# for overlays/local's Grafana. The labels grafana_datasource=1 / grafana_dashboard=1 are what
# the provisioning sidecars of a kube-prometheus-stack Grafana watch, for production.
#   deploy/k8s/grafana-configmaps.sh NAMESPACE
set -eu
namespace=${1:?usage: grafana-configmaps.sh NAMESPACE}
grafana=$(dirname "$0")/../grafana
apply_dir() {  # name folder sidecar-label
  kubectl -n "$namespace" create configmap "$1" --from-file="$2" --dry-run=client -o yaml \
    | kubectl label --local -f - "$3=1" app.kubernetes.io/part-of=agl-stream -o yaml \
    | kubectl apply -f -
}
apply_dir agl-grafana-datasources "$grafana/provisioning/datasources" grafana_datasource
apply_dir agl-grafana-providers "$grafana/provisioning/dashboards" grafana_dashboard_provider
apply_dir agl-grafana-dashboards "$grafana/dashboards" grafana_dashboard
