#!/usr/bin/env bash
# Build the test cluster binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, kwok) from the pinned Go builder modules in tools/*/.
#
# Usage: tools/build.sh [all|k8s|node|coredns|etcd|kwok|kueue|jobset|check]...
#   all: the control plane, kwok and the real node's programs (kubelet, kube-proxy, pause, coredns);
#   kueue and jobset are optional
#   check: verify tools/*/go.mod pin the versions of versions.env (no build)
# Output: ${CW_CACHE_DIR:-~/.cache/cw}/bin/<component>-<version>/<binary>
# Only missing binaries are built (a warm run takes well under a second).
# Set CW_FORCE_BUILD=1 to rebuild.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC1091
source "${here}/versions.env"
cache="${CW_CACHE_DIR:-${HOME}/.cache/cw}/bin"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly
# One build at a time per cache: two (a test's `cluster up` and `.ci/run`, say) would share the
# same <component>.tmp folders and break each other.
mkdir -p "${cache}"
exec 9>"${cache}/.build.lock"
flock 9

build_k8s() {
  local out="${cache}/kubernetes-${KUBERNETES_VERSION}"
  local v="${KUBERNETES_VERSION#v}" major minor
  major="${v%%.*}"; minor="${v#*.}"; minor="${minor%%.*}"
  if [[ -z "${CW_FORCE_BUILD:-}" && -x "${out}/kube-apiserver" && -x "${out}/kube-controller-manager" && -x "${out}/kube-scheduler" ]]; then
    return 0
  fi
  mkdir -p "${out}.tmp"
  local pkg="k8s.io/component-base/version"
  local ld="-s -w -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  ld="${ld} -X k8s.io/client-go/pkg/version.gitVersion=${KUBERNETES_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=${major} -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
  (cd "${here}/k8s" && go build -trimpath -ldflags "${ld}" -o "${out}.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)
  rm -rf "${out}"; mv "${out}.tmp" "${out}"
}

# The real node's programs (`cw cluster up` runs them when the machine can): kubelet and kube-proxy
# from the same builder module as the control plane, and the pod sandbox's pause program.
build_node() {
  local out="${cache}/node-${KUBERNETES_VERSION}"
  if [[ -z "${CW_FORCE_BUILD:-}" && -x "${out}/kubelet" && -x "${out}/kube-proxy" && -x "${out}/pause" ]]; then
    return 0
  fi
  mkdir -p "${out}.tmp"
  local v="${KUBERNETES_VERSION#v}" major minor
  major="${v%%.*}"; minor="${v#*.}"; minor="${minor%%.*}"
  local pkg="k8s.io/component-base/version"
  local ld="-s -w -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  (cd "${here}/k8s" && go build -trimpath -ldflags "${ld}" -o "${out}.tmp/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  (cd "${here}/pause" && go build -trimpath -ldflags "-s -w" -o "${out}.tmp/pause" .)
  rm -rf "${out}"; mv "${out}.tmp" "${out}"
}

# The real node's cluster DNS: CoreDNS with only the plugins its Corefile uses (tools/coredns/main.go);
# no forward plugin, so a name outside the cluster is refused at once.
build_coredns() {
  local out="${cache}/coredns-${COREDNS_VERSION}"
  if [[ -z "${CW_FORCE_BUILD:-}" && -x "${out}/coredns" ]]; then return 0; fi
  mkdir -p "${out}.tmp"
  (cd "${here}/coredns" && go build -trimpath -ldflags "-s -w" -o "${out}.tmp/coredns" .)
  rm -rf "${out}"; mv "${out}.tmp" "${out}"
}

build_etcd() {
  local out="${cache}/etcd-${ETCD_VERSION}"
  if [[ -z "${CW_FORCE_BUILD:-}" && -x "${out}/etcd" ]]; then return 0; fi
  mkdir -p "${out}.tmp"
  (cd "${here}/etcd" && go build -trimpath -ldflags "-s -w" -o "${out}.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "${out}"; mv "${out}.tmp" "${out}"
}

build_kwok() {
  local out="${cache}/kwok-${KWOK_VERSION}"
  if [[ -z "${CW_FORCE_BUILD:-}" && -x "${out}/kwok" ]]; then return 0; fi
  mkdir -p "${out}.tmp"
  (cd "${here}/kwok" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
      -o "${out}.tmp/kwok" sigs.k8s.io/kwok/cmd/kwok)
  rm -rf "${out}"; mv "${out}.tmp" "${out}"
}

# Kueue (optional: `cw cluster up --kueue`). Built from its module with one line changed: with its
# own certificate management off, Kueue reads its metrics certificate from the fixed path
# /etc/kueue/metrics/certs; the vendored copy built here reads that path from
# CW_KUEUE_METRICS_CERTS instead, so a test cluster never writes to /etc. (Go refuses overlays of
# the module cache, hence a vendored copy.) Its CRDs and webhook manifests are copied beside it.
build_kueue() {
  local out="${cache}/kueue-${KUEUE_VERSION}"
  if [[ -z "${CW_FORCE_BUILD:-}" && -x "${out}/kueue" && -f "${out}/webhooks.yaml" ]]; then return 0; fi
  rm -rf "${out}.tmp"; mkdir -p "${out}.tmp/crds" "${out}.tmp/src"
  cp "${here}/kueue/go.mod" "${here}/kueue/go.sum" "${here}/kueue/tools.go" "${out}.tmp/src/"
  (cd "${out}.tmp/src" && GOFLAGS=-mod=mod go mod vendor)
  local main="${out}.tmp/src/vendor/sigs.k8s.io/kueue/cmd/kueue/main.go"
  sed -i 's|"/etc/kueue/metrics/certs"|os.Getenv("CW_KUEUE_METRICS_CERTS")|' "${main}"
  grep -q 'os.Getenv("CW_KUEUE_METRICS_CERTS")' "${main}" || { echo "kueue ${KUEUE_VERSION}: metrics cert path not found in cmd/kueue/main.go" >&2; return 1; }
  (cd "${out}.tmp/src" && GOFLAGS=-mod=vendor go build -trimpath -ldflags "-s -w" -o "${out}.tmp/kueue" sigs.k8s.io/kueue/cmd/kueue)
  local src; src="$(cd "${here}/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
  cp "${src}"/config/components/crd/bases/*.yaml "${out}.tmp/crds/"
  cp "${src}/config/components/webhook/manifests.yaml" "${out}.tmp/webhooks.yaml"
  rm -rf "${out}.tmp/src"
  rm -rf "${out}"; mv "${out}.tmp" "${out}"
}

# JobSet (optional: `cw cluster up --kueue` runs it beside Kueue). Built from its module unchanged:
# its configuration file turns its own certificate management off and names the webhook and
# metrics certificate folders. Its CRDs, its webhook manifests and the kustomize patches that
# give its pod webhooks their objectSelector (the raw manifests have none) are copied beside it.
build_jobset() {
  local out="${cache}/jobset-${JOBSET_VERSION}"
  if [[ -z "${CW_FORCE_BUILD:-}" && -x "${out}/jobset" && -f "${out}/webhooks.yaml" ]]; then return 0; fi
  rm -rf "${out}.tmp"; mkdir -p "${out}.tmp/crds" "${out}.tmp/webhook-patches"
  (cd "${here}/jobset" && go build -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=${JOBSET_VERSION}" \
      -o "${out}.tmp/jobset" sigs.k8s.io/jobset)
  local src; src="$(cd "${here}/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)"
  cp "${src}"/config/components/crd/bases/*.yaml "${out}.tmp/crds/"
  cp "${src}/config/components/webhook/manifests.yaml" "${out}.tmp/webhooks.yaml"
  cp -r "${src}/config/components/webhook/kustomization.yaml" "${src}/config/components/webhook/patches" "${out}.tmp/webhook-patches/"
  chmod -R u+w "${out}.tmp"  # files copied from the read-only module cache
  rm -rf "${out}"; mv "${out}.tmp" "${out}"
}

check() {
  local bad=0
  grep -q "^require k8s.io/kubernetes ${KUBERNETES_VERSION}\$" "${here}/k8s/go.mod" || { echo "tools/k8s/go.mod does not require k8s.io/kubernetes ${KUBERNETES_VERSION}" >&2; bad=1; }
  local staging="v0.${KUBERNETES_VERSION#v1.}"
  if grep -E '^\s+k8s\.io/[a-z-]+ => k8s\.io/[a-z-]+ v' "${here}/k8s/go.mod" | grep -vq " ${staging}\$"; then
    echo "tools/k8s/go.mod: a staging replace is not ${staging}" >&2; bad=1
  fi
  grep -q "^require github.com/coredns/coredns ${COREDNS_VERSION}\$" "${here}/coredns/go.mod" || { echo "tools/coredns/go.mod does not require coredns ${COREDNS_VERSION}" >&2; bad=1; }
  grep -q "^require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}\$" "${here}/etcd/go.mod" || { echo "tools/etcd/go.mod does not require etcd ${ETCD_VERSION}" >&2; bad=1; }
  grep -q "^require sigs.k8s.io/kwok ${KWOK_VERSION}\$" "${here}/kwok/go.mod" || { echo "tools/kwok/go.mod does not require kwok ${KWOK_VERSION}" >&2; bad=1; }
  grep -q "^require sigs.k8s.io/kueue ${KUEUE_VERSION}\$" "${here}/kueue/go.mod" || { echo "tools/kueue/go.mod does not require kueue ${KUEUE_VERSION}" >&2; bad=1; }
  grep -q "^require sigs.k8s.io/jobset ${JOBSET_VERSION}\$" "${here}/jobset/go.mod" || { echo "tools/jobset/go.mod does not require jobset ${JOBSET_VERSION}" >&2; bad=1; }
  return $bad
}

targets=("$@"); [[ ${#targets[@]} -eq 0 ]] && targets=(all)
for t in "${targets[@]}"; do
  case "$t" in
    all) build_etcd; build_kwok; build_k8s; build_node; build_coredns ;;
    node) build_node ;;
    coredns) build_coredns ;;
    k8s|kubernetes) build_k8s ;;
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    kueue) build_kueue ;;
    jobset) build_jobset ;;
    check) check && echo "versions consistent: k8s ${KUBERNETES_VERSION}, coredns ${COREDNS_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}, kueue ${KUEUE_VERSION}, jobset ${JOBSET_VERSION}" ;;
    *) echo "unknown target: $t" >&2; exit 2 ;;
  esac
done
