#!/usr/bin/env sh
# Create (or update) one Secret per role from deploy/k8s/secrets/<role>.env, which you copy
# from the matching .env.example and fill; git ignores the .env files.
#   deploy/k8s/create-secrets.sh NAMESPACE
# Roles without a .env file are skipped (clickhouse-server and grafana exist only in
# overlays/local, inference only for gated models). In-cluster ClickHouse of overlays/local:
# AGL_CLICKHOUSE_DSN=http://agl_writer:<password>@clickhouse:8123/agl (agl_migrator for jobs,
# agl_reader for store).
set -eu
namespace=${1:?usage: create-secrets.sh NAMESPACE}
dir=$(dirname "$0")/secrets
kubectl get namespace "$namespace" >/dev/null 2>&1 || kubectl create namespace "$namespace"
for role in jobs processors ingest store runners learner inference clickhouse-server grafana; do
  file="$dir/$role.env"
  if [ ! -f "$file" ]; then
    echo "skip agl-$role: no $file"
    continue
  fi
  if grep -q 'change-me' "$file"; then
    echo "refusing agl-$role: $file still contains change-me" >&2
    exit 1
  fi
  kubectl -n "$namespace" create secret generic "agl-$role" --from-env-file="$file" \
    --dry-run=client -o yaml | kubectl apply -f -
done
