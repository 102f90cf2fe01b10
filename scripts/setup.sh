#!/usr/bin/env bash
# Set up flagperf with the Python environment you have (docs/install.md).
#   scripts/setup.sh                 the driver's dependencies and torch
#   scripts/setup.sh --test          the same plus the test tools (pytest, ruff, mypy, setuptools, torchao, an sshd)
#   scripts/setup.sh --print-python  print the interpreter to run flagperf with; install nothing
#   scripts/setup.sh --link          also put a `flagperf` command on PATH (what `make run` does, below)
#   scripts/setup.sh --path-note     say whether `flagperf` is on PATH, else the export line; install nothing
# stdout: one line, the interpreter; run flagperf from this checkout as `<interpreter> -m flagperf`.
# Progress and errors go to stderr.
#
# The active interpreter is $PYTHON, else python3 on PATH (the activated venv or conda env). When it already
# imports torch and every dependency, it is used as it is: nothing is downloaded or installed. Otherwise
# ./.venv is created from it; a .pth file there lists the interpreter's site-packages, so what is installed
# there (torch on a GPU server) is seen, and only what is missing is installed into ./.venv.
# On a machine with a GPU, a missing torch is never replaced by a CPU build: setup stops and says which
# torch to install (or set FLAGPERF_TORCH_SPEC to the pip arguments of the build to install).
# FLAGPERF_ASSUME_GPU=1 (or 0) overrides the GPU detection (nvidia-smi -L, /dev/nvidia0).
# --link writes build/bin/flagperf, a two-line script that runs `<interpreter> -m flagperf` from this checkout,
# and links it as flagperf in ~/.local/bin (or ~/bin) when that folder is on PATH; an existing flagperf there
# that is not such a link is left alone. --path-note prints the `export PATH=...` line when flagperf is not on
# PATH (make run prints it after the run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=$ROOT/.venv

say() { echo "setup: $*" >&2; }
die() { echo "setup: $*" >&2; exit 1; }

want_test=0
print_only=0
want_link=0
path_note=0
for arg in "$@"; do
  case $arg in
    --test) want_test=1 ;;
    --print-python) print_only=1 ;;
    --link) want_link=1 ;;
    --path-note) path_note=1 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    *) die "unknown option '$arg'; expected --test, --print-python, --link, --path-note or --help" ;;
  esac
done

# --- the flagperf command (--link, --path-note) ----------------------------------------------------------
COMMAND=$ROOT/build/bin/flagperf
# The folder of PATH to link flagperf into: ~/.local/bin, else ~/bin, when it is on PATH.
link_dir() {
  local d
  [ -n "${HOME:-}" ] || return 1
  for d in "$HOME/.local/bin" "$HOME/bin"; do
    case ":$PATH:" in *":$d:"*|*":$d/:"*) echo "$d"; return 0 ;; esac
  done
  return 1
}
# The flagperf that PATH gives is this checkout's command.
on_path() {
  local found
  found=$(command -v flagperf 2>/dev/null) || return 1
  [ -e "$COMMAND" ] && [ "$(readlink -f "$found")" = "$(readlink -f "$COMMAND")" ]
}
write_command() {       # write_command PYTHON: build/bin/flagperf, then the link into PATH
  local py=$1 dir link
  mkdir -p "$(dirname "$COMMAND")"
  printf '#!/usr/bin/env bash\n# written by scripts/setup.sh --link: flagperf from this checkout\nPYTHONPATH=%q${PYTHONPATH:+:$PYTHONPATH} exec %q -m flagperf "$@"\n' \
    "$ROOT" "$py" > "$COMMAND.tmp"
  chmod 755 "$COMMAND.tmp"
  mv -f "$COMMAND.tmp" "$COMMAND"
  dir=$(link_dir) || return 0
  link=$dir/flagperf
  if [ -L "$link" ] && [ "$(readlink "$link")" = "$COMMAND" ]; then
    return 0
  elif [ -e "$link" ] || [ -L "$link" ]; then
    if [ -L "$link" ] && [[ "$(readlink "$link")" == */build/bin/flagperf ]]; then
      say "relinking $link (it pointed at $(readlink "$link")) to $COMMAND"
    else
      say "note: $link exists and is not set-up's link; left as it is ($COMMAND is this checkout's flagperf)"
      return 0
    fi
  else
    say "linking $link to $COMMAND"
  fi
  mkdir -p "$dir" && ln -sfn "$COMMAND" "$link" || say "note: could not link $link to $COMMAND"
}
if [ $path_note = 1 ]; then
  if [ ! -x "$COMMAND" ]; then
    say "no flagperf command yet: run scripts/setup.sh --link (make run does)"
  elif on_path; then
    say "flagperf is on PATH ($(command -v flagperf)): flagperf --help"
  else
    say "flagperf is not on PATH; to run it as flagperf:"
    printf 'export PATH=%q:"$PATH"\n' "$(dirname "$COMMAND")" >&2
  fi
  exit 0
fi

# Import names; "wheelbuild" is a setuptools that builds wheels (>= 70.1, or >= 64 with wheel).
RUNTIME_MODULES=(torch click rich yaml psutil pynvml paramiko docker plotly junitparser prometheus_client)
TEST_MODULES=(pytest ruff mypy wheelbuild torchao)
pip_spec() {    # the pip requirement that provides an import name (as in pyproject.toml)
  case $1 in
    yaml) echo "pyyaml>=5.4" ;;
    pynvml) echo "nvidia-ml-py>=11.0" ;;
    click) echo "click>=8.0" ;;
    rich) echo "rich>=12" ;;
    psutil) echo "psutil>=5.8" ;;
    paramiko) echo "paramiko>=3.0" ;;
    docker) echo "docker>=6.0" ;;
    plotly) echo "plotly>=5.0" ;;
    junitparser) echo "junitparser>=3.1" ;;
    prometheus_client) echo "prometheus_client>=0.16" ;;
    pytest) echo "pytest>=7" ;;
    ruff) echo "ruff>=0.4" ;;
    mypy) echo "mypy>=1.8" ;;
    wheelbuild) echo "setuptools>=70.1" ;;
    torchao) echo "torchao==0.17.0" ;;   # the llm benchmark's fp8 path, emulated on the CPU in the tests
    *) echo "$1" ;;
  esac
}
need=("${RUNTIME_MODULES[@]}")
[ $want_test = 1 ] && need+=("${TEST_MODULES[@]}")

# missing PYTHON MODULE...: print the modules that PYTHON cannot import, space-separated.
missing() {
  local py=$1
  shift
  "$py" - "$@" 2>/dev/null <<'EOF' || echo "$*"
import importlib
import sys

def usable(name):
    if name == "wheelbuild":
        import setuptools
        version = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
        if version >= (70, 1):
            return True
        import wheel  # noqa: F401
        return version >= (64,)
    importlib.import_module(name)
    return True

missing = []
for name in sys.argv[1:]:
    try:
        ok = usable(name)
    except Exception:
        ok = False
    if not ok:
        missing.append(name)
print(" ".join(missing))
EOF
}

has() { [[ " $1 " == *" $2 "* ]]; }

gpu_present() {
  case ${FLAGPERF_ASSUME_GPU:-} in
    1|yes|true) return 0 ;;
    0|no|false) return 1 ;;
  esac
  [ -e /dev/nvidia0 ] && return 0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && return 0
  return 1
}

# The CUDA build of torch to suggest: the newest PyTorch wheel index not newer than the driver's CUDA version.
torch_index_hint() {
  local cuda="" idx="cu126" v
  if command -v nvidia-smi >/dev/null 2>&1; then
    cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\)\.\([0-9]*\).*/\1\2/p' | head -n 1)
  fi
  if [ -n "$cuda" ]; then
    idx=""
    for v in 118 121 124 126 128 129 130; do [ "$cuda" -ge "$v" ] && idx="cu$v"; done
    [ -n "$idx" ] || idx="cu118"
    say "  (the driver supports CUDA ${cuda:0:${#cuda}-1}.${cuda: -1})"
  fi
  echo "$idx"
}

# --- the active interpreter ---------------------------------------------------------------------------
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  PY=$(command -v python3) || die "no python3 on PATH: activate the environment to use, or set PYTHON=/path/to/python"
fi
command -v "$PY" >/dev/null 2>&1 || die "PYTHON=$PY: no such interpreter"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' 2>/dev/null ||
  die "$PY is $("$PY" --version 2>&1 || echo 'not runnable'); flagperf needs Python >= 3.9"
PY=$("$PY" -c 'import sys; print(sys.executable)')     # the interpreter itself, not a shim (pyenv)

miss=$(missing "$PY" "${need[@]}")
if [ -z "$miss" ]; then
  [ $print_only = 1 ] || say "using $PY as it is: it has torch and every dependency; nothing to install"
  use=$PY
elif [ $print_only = 1 ]; then
  [ -x "$VENV/bin/python" ] && [ -z "$(missing "$VENV/bin/python" "${need[@]}")" ] ||
    die "not set up yet ($PY lacks: $miss): run scripts/setup.sh$([ $want_test = 1 ] && echo ' --test')"
  use=$VENV/bin/python
else
  say "using $VENV ($PY lacks: $miss)"
  VPY=$VENV/bin/python
  if [ -x "$VPY" ]; then vmiss=$(missing "$VPY" "${need[@]}"); else vmiss=$miss; fi

  # --- the GPU guard: never a CPU build of torch where a GPU is ------------------------------------------
  if has "$vmiss" torch && [ -z "${FLAGPERF_TORCH_SPEC:-}" ] && gpu_present; then
    gpus=$(nvidia-smi -L 2>/dev/null | head -n 2 | sed 's/ (UUID.*//' | paste -sd ';' - || true)
    if ! has "$miss" torch; then
      die "a GPU is present and $PY has torch, but $VENV (made from another interpreter) does not see it;
setup: remove $VENV and run this again, so that it is made from $PY"
    fi
    say "a GPU is present${gpus:+ ($gpus)} but $PY cannot import torch."
    say "flagperf does not install torch on a GPU machine: a CPU build would leave the GPU unused."
    idx=$(torch_index_hint)
    say "install the CUDA build of torch that matches the driver into that environment, for example"
    say "  $PY -m pip install torch numpy --index-url https://download.pytorch.org/whl/$idx"
    say "(builds: https://pytorch.org/get-started/locally/), or run with FLAGPERF_TORCH_SPEC set to the pip"
    say "arguments of the build to install here, e.g. FLAGPERF_TORCH_SPEC='torch --index-url .../whl/$idx'."
    say "then run this again."
    exit 1
  fi

  # --- ./.venv, seeing the active interpreter's packages ------------------------------------------------
  if [ ! -x "$VPY" ]; then
    say "creating $VENV from $PY ($("$PY" --version 2>&1))"
    "$PY" -m venv "$VENV" >&2 ||
      die "could not create $VENV with $PY -m venv (on Debian/Ubuntu: apt-get install python3-venv)"
    site_dir=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$PY" - "$site_dir" > "$site_dir/_flagperf_parent_env.pth" <<'EOF'
import os
import site
import sys
import sysconfig

own = os.path.realpath(sys.argv[1])
dirs = list(site.getsitepackages())
dirs += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
# and those it sees through .pth files of its own (a venv that itself sits on another interpreter's packages)
dirs += [p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
if site.ENABLE_USER_SITE:
    dirs.append(site.getusersitepackages())
seen = set()
print("# The site-packages of the interpreter .venv was made from (scripts/setup.sh): its packages are seen here.")
for d in dirs:
    real = os.path.realpath(d)
    if os.path.isdir(real) and real != own and real not in seen:
        seen.add(real)
        print(real)
EOF
    say "$VENV sees the packages of $PY ($(grep -vc '^#' "$site_dir/_flagperf_parent_env.pth") site dir(s), listed in $site_dir/_flagperf_parent_env.pth)"
    vmiss=$(missing "$VPY" "${need[@]}")
  fi

  changed=0
  pip() { "$VPY" -m pip --disable-pip-version-check -q "$@" >&2; }

  stamp=$VENV/.flagperf-installed
  installed=0
  "$VPY" -c 'import importlib.metadata as m; m.distribution("flagperf")' 2>/dev/null && installed=1
  if [ $installed = 0 ] || [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ]; then
    say "installing flagperf (editable) and the dependencies $VPY lacks"
    changed=1
    if pip install -e .; then
      touch "$stamp"
    elif [ $installed = 1 ]; then
      say "warning: could not reinstall flagperf into $VENV (offline?); keeping the installed one"
    else
      die "could not install flagperf into $VENV (see the messages above)"
    fi
    vmiss=$(missing "$VPY" "${need[@]}")
  fi

  if has "$vmiss" torch; then
    read -r -a torch_args <<< "${FLAGPERF_TORCH_SPEC:-torch==2.13.0}"
    say "installing ${torch_args[*]} and numpy for the benchmarks"
    changed=1
    pip install "${torch_args[@]}" numpy || die "could not install ${torch_args[*]} (see the messages above)"
  fi
  specs=()
  for m in $vmiss; do
    [ "$m" = torch ] || specs+=("$(pip_spec "$m")")
  done
  if [ ${#specs[@]} -gt 0 ]; then
    say "installing ${specs[*]}"
    changed=1
    pip install "${specs[@]}" || die "could not install ${specs[*]} (see the messages above)"
  fi
  if [ $changed = 1 ]; then
    left=$(missing "$VPY" "${need[@]}")
    [ -z "$left" ] || die "$VENV still cannot import: $left (see the messages above)"
  else
    say "$VENV has everything; nothing to install"
  fi
  use=$VPY
fi

if [ $want_test = 1 ] && [ $print_only = 0 ] && [ ! -x /usr/sbin/sshd ]; then
  say "installing openssh-server (the SSH tests start their own sshd on 127.0.0.x)"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >&2 ||
    { $sudo apt-get update -q >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >&2; }
  } || die "could not install openssh-server"
fi

# flagperf itself runs from this checkout: `python -m flagperf` here (or with PYTHONPATH=$ROOT).
(cd "$ROOT" && "$use" -c 'import flagperf.cli') 2>/dev/null ||
  die "$use cannot import flagperf.cli from $ROOT; try: cd $ROOT && $use -c 'import flagperf.cli'"
[ $want_link = 1 ] && [ $print_only = 0 ] && write_command "$use"
echo "$use"
