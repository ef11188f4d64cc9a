#!/usr/bin/env bash
# One visit of the air-gapped H200 VM (16 cores, no Docker, no package index; at most 64 MiB per
# command with the checkout, 10 minutes a command, released 30 s after a command ends: run these
# back to back) that measures the compile cache again (after the store's timeouts were fixed and
# the labels became one step) and re-runs examples/h200-source at main:
#   visit.sh in1 DIR        # kit piece 1, harness wheels, FlashInfer sdist: staged
#   visit.sh in2 DIR        # kit piece 2, ccache: dockerd up, the base import started
#   visit.sh in3 DIR        # the vLLM sdist
#   visit.sh in4 DIR        # the dependency bundle: wheelhouse, models, ccache into the base,
#                           # then the cold build of matrix/h200-source.toml started (setsid)
#   visit.sh cold S         # wait up to S s on the cold build
#   visit.sh oneline S      # the cold build's end, its image audited (finish), then the
#                           # one-line rebuild, quiet
#   visit.sh stock-serve S  # the stock twin started, the source image's two cells served beside
#                           # it (the twin's time is then an upper bound), the twin waited on
#   visit.sh stock S        # the twin waited on, then the summary
# DIR: one of the four input folders (tools/device-inputs.sh OUT, regrouped so that each fits
# beside the checkout; the 46 MB Docker kit split in two with `split -a 2`, joined by
# gather.sh once its sha256 checks). Everything each command writes is in $OUT/vout.tgz
# (/tmp/vout on the VM, cumulative): the console of every step, the builds' logs and records,
# the images' ninja logs, the audit, the run folder.
set -u
here=examples/h200-cache
V=/tmp/vout
FINAL=${OUT:-/tmp/out}
mkdir -p "$V" "$FINAL"
export DEV=/tmp/inputs
step() {  # step NAME CMD...: CMD with OUT=/tmp/vout, its console kept as NAME.log
  local name=$1; shift
  echo "=== $name ($(date -u +%T))"
  OUT=$V "$@" 2>&1 | tee "$V/$name.log"
}
T0=$(date +%s)
rest() { echo $(( $1 - ($(date +%s) - T0) )); }  # of a command's S seconds, what is left
pack() { tar czf "$FINAL/vout.tgz" -C "$V" . && echo "packed $(du -sh "$FINAL/vout.tgz" | cut -f1)"; }
trap pack EXIT

case "${1:-}" in
in1)
  bash $here/gather.sh "${2:?DIR}"
  step 1-machine bash -c 'nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv; nproc; free -g | head -2; df -h /tmp | tail -1'
  step 1-stage bash examples/h200-source/visit.sh stage ;;
in2)
  bash $here/gather.sh "${2:?DIR}"
  step 2-up bash examples/h200-source/visit.sh up ;;
in3)
  bash $here/gather.sh "${2:?DIR}"
  step 3-stage bash examples/h200-source/visit.sh stage ;;
in4)
  bash $here/gather.sh "${2:?DIR}"
  step 4-build bash examples/h200-source/visit.sh build ;;
cold)
  step 5-cold bash $here/device.sh build cold "${2:-560}" ;;
oneline)
  S=${2:-560}
  step 6-cold bash $here/device.sh build cold "$(( S - 200 ))"
  [ -f /tmp/cc-cold/done ] || { echo "the cold build has not ended: run oneline again"; exit 0; }
  step 6-finish bash examples/h200-source/visit.sh finish
  step 6-oneline bash $here/device.sh build oneline "$(rest "$S")" ;;
stock-serve)
  S=${2:-560}
  step 7-stock-start bash $here/device.sh build stock 1
  step 7-serve bash examples/h200-source/visit.sh serve src-0251 "$(rest "$S")"
  step 7-stock bash $here/device.sh build stock "$(rest "$S")" ;;
stock)
  step 8-stock bash $here/device.sh build stock "${2:-560}"
  step 8-summary bash $here/device.sh summary ;;
*)
  trap - EXIT
  echo "usage: visit.sh in1|in2|in3|in4 DIR | cold S | oneline S | stock-serve S | stock S"; exit 2 ;;
esac
