#!/usr/bin/env bash
# Runs every command README.md prints, exactly as printed, the way a new
# user pastes them into one shell from the repository root: each line of a
# ```sh/```bash/```shell block is one command (a trailing `\` joins lines),
# each ```python block is fed to `python3 -`, in README order. Commands
# share one session: `cd`, `export` and an activated venv carry over to
# the next command, as in a terminal.
#
# - Each command is bounded by `timeout` (README_TIMEOUT seconds, default
#   900); the whole run stops and fails at the first command that fails or
#   times out (README_KEEP_GOING=1: runs the rest anyway, still failing).
# - Commands ending in `&` (servers) run in their own process group; every
#   one of them is stopped (TERM, then KILL) when the run ends.
# - $HOME is a fresh temporary directory, so nothing installed earlier under
#   ~/.local can hide a broken instruction (cargo, rustup and pyenv keep
#   their real homes).
# - ```rust blocks are not run here: they are the core crate's doctests
#   (`ReadmeDoctests` in segcache/src/lib.rs), run by `cargo test`; other
#   blocks (```toml, plain ```) are listed as not commands.
# - `bash scripts/test.sh` is recognised and not run: .ci/run runs it
#   already, and it would run this script's caller again.
# - Ends with the list of what ran, how long each took, and what was not
#   run and why.
#
# It runs in this checkout as it is (CI's checkout is a fresh clone):
# locally, leftovers of an earlier run (.venv, target/, ~ is fresh though)
# can hide a failure a fresh clone would show.
#
# Usage: scripts/readme.sh [FILE.md]   (default README.md)
# Installs, as root, the tools the README assumes a user has (cc, make,
# pkg-config, nc, curl, nutcracker, python3-venv) when they are missing.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
readme="${1:-README.md}"
limit="${README_TIMEOUT:-900}"
[ -f "$readme" ] || { echo "readme.sh: no $readme" >&2; exit 1; }

# --- tools the README takes for granted --------------------------------
need=()
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v nc >/dev/null || need+=(netcat-openbsd)
command -v curl >/dev/null || need+=(curl)
command -v nutcracker >/dev/null || [ -x /usr/sbin/nutcracker ] || need+=(nutcracker)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== readme.sh: installing ${need[*]} =="
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") \
            >/dev/null || echo "readme.sh: apt-get could not install ${need[*]}" >&2
    else
        echo "readme.sh: missing ${need[*]}; the README's commands may fail" >&2
    fi
fi

work="$(mktemp -d)"
session_home="$work/home"
mkdir -p "$session_home"

# --- extract the commands ------------------------------------------------
# One record per line of $work/list: KIND<TAB>LINE<TAB>TEXT, where TEXT is
# the command (sh) or the file holding the block (python, rust).
awk -v dir="$work" '
    function flush_sh() {
        if (cmd != "") { printf "sh\t%d\t%s\n", cmd_line, cmd >> (dir "/list"); cmd = "" }
    }
    /^[ \t]*```/ {
        if (!open) {
            open = 1; lang = $0; sub(/^[ \t]*```[ \t]*/, "", lang); sub(/[ \t{,].*/, "", lang)
            start = NR + 1; nblock++
            if (lang == "python" || lang == "rust") {
                file = dir "/block" nblock "." lang
                printf "%s\t%d\t%s\n", lang, start, file >> (dir "/list")
            } else if (lang != "sh" && lang != "bash" && lang != "shell") {
                printf "other\t%d\t%s\n", start, (lang == "" ? "plain" : lang) >> (dir "/list")
            }
            next
        }
        flush_sh(); open = 0; lang = ""; next
    }
    open && (lang == "python" || lang == "rust") { print >> file; next }
    open && (lang == "sh" || lang == "bash" || lang == "shell") {
        line = $0
        if (cmd == "") {
            if (line ~ /^[ \t]*(#.*)?$/) next        # blank line or a comment
            cmd_line = NR
        }
        if (line ~ /\\$/) { sub(/\\$/, "", line); cmd = cmd line; next }
        cmd = cmd line; flush_sh(); next
    }
' "$readme"
[ -s "$work/list" ] || { echo "readme.sh: no commands found in $readme" >&2; exit 1; }

# --- the session ---------------------------------------------------------
# Environment carried from one command to the next (exported variables),
# and the working directory.
env_file="$work/env"
cwd_file="$work/cwd"
pids_file="$work/pids"
: >"$pids_file"
real_home="$HOME"
{
    printf 'export HOME=%q\n' "$session_home"
    printf 'export CARGO_HOME=%q\n' "${CARGO_HOME:-$real_home/.cargo}"
    printf 'export RUSTUP_HOME=%q\n' "${RUSTUP_HOME:-$real_home/.rustup}"
    [ -d "${PYENV_ROOT:-$real_home/.pyenv}" ] &&
        printf 'export PYENV_ROOT=%q\n' "${PYENV_ROOT:-$real_home/.pyenv}"
    # Python tools cache their downloads under $HOME: keep the real cache.
    printf 'export PIP_CACHE_DIR=%q\n' "${PIP_CACHE_DIR:-$real_home/.cache/pip}"
} >"$env_file"
echo "$root" >"$cwd_file"

cleanup() {
    local pid
    # Each backgrounded command is its own process group (job control on).
    while read -r pid; do
        [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null
    done <"$pids_file"
    sleep 1
    while read -r pid; do
        [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null
    done <"$pids_file"
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs $2 in the session (kind $1: sh or python); output to $3.
run_in_session() {
    local kind="$1" text="$2" out="$3"
    timeout -k 10 "$limit" bash -c '
        env_file=$1 cwd_file=$2 pids_file=$3 kind=$4 text=$5
        set -m                      # background jobs get their own process group
        . "$env_file"
        cd "$(cat "$cwd_file")" || exit 1
        if [ "$kind" = python ]; then
            python3 - <"$text"
        else
            eval "$text"
        fi
        rc=$?
        jobs -p >>"$pids_file"
        # Carry exported variables and the directory to the next command.
        export -p | grep -v -E "^declare -x (OLDPWD|PWD|SHLVL|_)=" >"$env_file.new" &&
            mv "$env_file.new" "$env_file"
        pwd >"$cwd_file"
        exit $rc
    ' _ "$env_file" "$cwd_file" "$pids_file" "$kind" "$text" >"$out" 2>&1 </dev/null
}

ran=()
skipped=()
status=0
n=0
while IFS=$'\t' read -r kind line text; do
    case "$kind" in
    rust)
        skipped+=("$readme:$line  rust block: a doctest of the core crate (cargo test)")
        continue
        ;;
    other)
        skipped+=("$readme:$line  $text block: not a command")
        continue
        ;;
    sh)
        if [[ "$text" =~ ^bash\ scripts/test\.sh([[:space:]]|$) ]]; then
            skipped+=("$readme:$line  $text  (run by .ci/run itself)")
            continue
        fi
        shown="$text"
        ;;
    python) shown="python3 - <<'EOF' (the python block at line $line)" ;;
    esac
    n=$((n + 1))
    echo "== readme.sh [$n] $readme:$line: $shown"
    out="$work/out.$n"
    t0=$(date +%s)
    run_in_session "$kind" "$text" "$out"
    rc=$?
    secs=$(($(date +%s) - t0))
    # Long build logs: show the end.
    if [ "$(wc -l <"$out")" -gt 40 ]; then
        echo "   ... ($(wc -l <"$out") lines, last 30:)"
        tail -n 30 "$out" | sed 's/^/   /'
    else
        sed 's/^/   /' "$out"
    fi
    # 124/137 with the time used up: our timeout; else the command's own
    # exit status (it may run a `timeout` of its own).
    if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ "$secs" -ge "$limit" ]; then
        echo "readme.sh: $readme:$line timed out after ${limit}s: $shown" >&2
        ran+=("TIMEOUT ${secs}s  $readme:$line  $shown")
        status=1
        [ -n "${README_KEEP_GOING:-}" ] || break
        continue
    elif [ $rc -ne 0 ]; then
        echo "readme.sh: $readme:$line failed (exit $rc): $shown" >&2
        ran+=("FAIL ${secs}s  $readme:$line  $shown")
        status=1
        [ -n "${README_KEEP_GOING:-}" ] || break
        continue
    fi
    ran+=("ok ${secs}s  $readme:$line  $shown")
done <"$work/list"

echo
echo "== readme.sh: $readme, ${#ran[@]} commands run =="
for r in "${ran[@]}"; do echo "  $r"; done
if [ ${#skipped[@]} -gt 0 ]; then
    echo "== not run here =="
    for s in "${skipped[@]}"; do echo "  $s"; done
fi
if [ $status -ne 0 ]; then
    echo "== readme.sh: FAILED ==" >&2
else
    echo "== readme.sh: all ${#ran[@]} commands passed =="
fi
exit $status
