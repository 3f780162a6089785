#!/usr/bin/env bash
# One attack by hand, against any build of the attack target (e.g. one built
# against an older library, to see an attack succeed there):
#   tests/attack/run_attack.sh TARGET_BIN TRANSPORT ATTACKER_TRANSPORT MODE [attacker args...]
# @CANARY@ and @KEY@ in the arguments become the target's canary address and
# the trusted key in hex. Prints what the attacker saw and the target's report
# (canaries, counter, peers connected/refused, frames run/rejected, code
# refused, RSS and peak RSS in kB), or that it died. ATTACKER, KEY and
# TARGET_EXTRA (e.g. "--anyone yes") may be set in the environment.
set -u
target_bin=$1; transport=$2; attacker_transport=$3; shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
ATTACKER=${ATTACKER:-$root/build/tests/attack/threechains-attacker}
KEY=${KEY:-$root/build/keys/dev.pub}
key_hex=$(awk '{print $2}' "$KEY")
export UCX_LOG_LEVEL=error
# shellcheck disable=SC2086
coproc TARGET { exec "$target_bin" --transport "$transport" --trust "$KEY" ${TARGET_EXTRA:-} 2>/dev/null; }
port=; canary=
while read -r -t 30 line <&"${TARGET[0]}"; do
  case $line in port\ *) port=${line#port } ;; canary\ *) canary=${line#canary }; break ;; esac
done
args=("$@"); args=("${args[@]//@CANARY@/$canary}"); args=("${args[@]//@KEY@/$key_hex}")
out=$(mktemp)
timeout 300 "$ATTACKER" "${args[@]}" --port "$port" --transport "$attacker_transport" > "$out" 2>&1
echo "attacker exit $?: $(grep -E 'get:|churn:|half-open: hellos|junk-am: sent|hello: variants' "$out" | tr '\n' ' ')"
rm -f "$out"
if kill -0 "$TARGET_PID" 2>/dev/null; then
  echo report >&"${TARGET[1]}"
  while read -r -t 10 line <&"${TARGET[0]}"; do
    case $line in report\ *) echo "target alive: $line"; break ;; esac
  done
  echo quit >&"${TARGET[1]}" 2>/dev/null
  wait "$TARGET_PID" 2>/dev/null
else
  echo "target DIED"
fi
