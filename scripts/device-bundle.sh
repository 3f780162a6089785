# scripts/device-bundle.sh — sourced by the scripts that run on the device
# machine (gpu-check.sh, cores-check.sh): their first argument says where
# they are.
#   device_bundle MODE PATH...   pack: pack PATHs here (../shared/tools/device-bundle)
#                                and exit; unpack: unpack .device/bundle.tar.xz
#                                there; run: nothing. Then the bundle's
#                                environment (its libraries, UCX's modules).
device_bundle() {
  local mode=$1
  shift
  case "$mode" in
    pack) exec ../shared/tools/device-bundle "$@" ;;
    unpack) xz -dc .device/bundle.tar.xz | tar -C / -xf - || exit 1 ;;
  esac
  [ -f /tmp/device-deps/env.sh ] && . /tmp/device-deps/env.sh
  return 0
}
