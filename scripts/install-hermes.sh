#!/usr/bin/env bash
# Install a pinned Hermes Agent (hermes-agent 0.19.0) into its own venv, for yy's
# Hermes integration tests and for a Runner host. Idempotent; quiet unless it fails.
#
#   YY_HERMES_VENV  venv path (default /opt/yy/hermes-venv)
#   PYTHON          interpreter used to create the venv (default python3, needs 3.11+ and venv)
#
# Last line printed: the path of the `hermes` executable.
# Nothing else is needed for `hermes serve` headless and offline: fastapi, uvicorn and
# websockets (used by tests/fixtures/hermes_probe.py) are dependencies of hermes-agent.
# Every package is pinned through the constraints below (the set resolved for 0.19.0), with
# the `anthropic` extra so the Worker can speak the anthropic_messages API mode.
set -euo pipefail

HERMES_VERSION=0.19.0
VENV="${YY_HERMES_VENV:-/opt/yy/hermes-venv}"
PYTHON="${PYTHON:-python3}"
HERMES="$VENV/bin/hermes"

has_pinned_version() {
    [ -x "$HERMES" ] && [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" - "$HERMES_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata, sys
v = importlib.metadata.version
sys.exit(0 if v("hermes-agent") == sys.argv[1] and v("anthropic") == "0.87.0" else 1)
PY
}

if has_pinned_version; then
    echo "$HERMES"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log="$work/log"

run() {
    if ! "$@" >>"$log" 2>&1; then
        cat "$log" >&2
        echo "install-hermes.sh: failed: $*" >&2
        exit 1
    fi
}

cat >"$work/constraints.txt" <<'PINS'
annotated-doc==0.0.7
anthropic==0.87.0
annotated-types==0.8.0
anyio==4.16.0
certifi==2026.5.20
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
croniter==6.0.0
cryptography==46.0.7
distro==1.9.0
docstring-parser==0.18.0
fastapi==0.165.0
fire==0.7.1
h11==0.16.0
httpcore==1.0.9
httptools==0.9.0
httpx==0.28.1
idna==3.20
Jinja2==3.1.6
jiter==0.19.0
Markdown==3.10.2
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
openai==2.24.0
opentelemetry-api==1.45.2
packaging==26.0
pathspec==1.1.1
pillow==12.2.0
prompt_toolkit==3.0.52
psutil==7.2.2
ptyprocess==0.7.0
pycparser==3.12
pydantic==2.13.4
pydantic_core==2.46.4
Pygments==2.21.0
PyJWT==2.13.0
python-dateutil==4.0.0
python-dotenv==1.2.2
python-multipart==0.0.34
pytz==2026.6
PyYAML==6.0.3
requests==2.33.0
rich==14.3.3
ruamel.yaml==0.18.17
ruamel.yaml.clib==0.2.15
sniffio==1.3.1
socksio==1.0.0
starlette==1.10.0
tenacity==9.1.4
termcolor==3.3.0
tqdm==4.70.1
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
uvicorn==0.54.0
uvloop==0.23.0
watchfiles==1.3.0
wcwidth==0.9.4
websockets==15.0.1
PINS

mkdir -p "$(dirname "$VENV")"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    run "$PYTHON" -m venv --clear "$VENV"
fi
run "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -c "$work/constraints.txt" "hermes-agent[anthropic]==$HERMES_VERSION"

if ! has_pinned_version; then
    echo "install-hermes.sh: $HERMES missing or not hermes-agent $HERMES_VERSION after install" >&2
    exit 1
fi
echo "$HERMES"
